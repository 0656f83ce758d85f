// A primitive states its whole contract in one class (DESIGN §3.1): name and attributes,
// shape/dtype inference, its factor sharding rule, its VJP written with ops, and a naive
// reference kernel (the oracle). Fast kernels live in src/backend/<platform> and are looked
// up by (primitive, platform).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer.h"
#include "core/reduce_kind.h"
#include "ir/program.h"
#include "partix/array.h"

namespace partix::comm {
class Communicator;
}

namespace partix::prim {

using ir::Attrs;
using ir::Aval;
using Regions = std::vector<std::shared_ptr<const ir::Program>>;

// ---- factor sharding rules (DESIGN §3.2) ----

enum class FactorKind {
  kPassThrough,      // appears in the results; sharding it shards the results
  kReduction,        // absent from the results; sharding it leaves the results unreduced
  kNeedReplication,  // cannot be sharded (sort axis, unaligned reshape dims, ...)
};
using ReduceKind = detail::ReduceKind;

struct Factor {
  int64_t size = 1;
  FactorKind kind = FactorKind::kPassThrough;
  ReduceKind reduce = ReduceKind::kSum;  // for kReduction
  // The factor's values depend on the global position (iota, random bits): a sharded
  // kernel needs its block's offset.
  bool positional = false;
};

using DimFactors = std::vector<int>;  // factor ids of one dimension, major to minor

struct FactorRule {
  std::vector<Factor> factors;
  std::vector<std::vector<DimFactors>> operands;  // [operand][dim]
  std::vector<std::vector<DimFactors>> results;   // [result][dim]
  std::string to_string() const;                  // "([i,j],[j,k])->([i,k]) j=reduction(sum)"
};

// Builds factor rules: add factors, then attach them to dimensions.
class FactorRuleBuilder {
 public:
  int add(int64_t size, FactorKind kind = FactorKind::kPassThrough,
          ReduceKind reduce = ReduceKind::kSum);
  FactorRule& rule() { return rule_; }
  // The common rule of elementwise ops: one factor per result dimension, operands (already
  // broadcast to the result shape) share them.
  static FactorRule elementwise(const std::vector<Aval>& in, const Aval& out);
  // Window ops (slice, pad, dynamic_slice): a dimension kept whole passes through; a resized
  // one needs replication. `scalars` trailing rank-0 operands (start indices) have no dims.
  static FactorRule whole_dims(const Aval& in, const Aval& out, size_t scalars = 0);
  // Ops that create their result (constants, iota, random draws): operands (keys) stay
  // replicated; each result dimension is a free factor. `positional`: each element depends on
  // its global position, so a device computes its block from its offset (iota, random);
  // otherwise the block is sliced from replicated data (a literal).
  static FactorRule created(const std::vector<Aval>& in, const Aval& out, bool positional);

 private:
  FactorRule rule_;
};

// How an op may consume unreduced (partial-sum) operands (DESIGN §3.8).
enum class Linearity {
  kNone,         // every operand must be reduced first
  kLinear,       // jointly linear in all operands (add, sub, neg, reshape, slice, ...)
  kMultilinear,  // linear in each operand separately (mul, dot): at most one unreduced
};

// ---- kernels ----

// What a kernel knows about where it runs.
struct ExecContext {
  int device = 0;                    // device id
  std::vector<int64_t> mesh_coords;  // coordinates in the program's mesh (empty: none)
  const Mesh* mesh = nullptr;
  comm::Communicator* comm = nullptr;  // collectives
  int threads = 1;                     // threads this device may use
  const std::atomic<bool>* cancel = nullptr;  // set: stop with Cancelled (detail::CancelScope)
};

struct KernelCall {
  const Attrs& attrs;
  const std::vector<const Aval*>& in_avals;
  const std::vector<const Aval*>& out_avals;
  const std::vector<const void*>& in;
  const std::vector<void*>& out;
  const ExecContext& ctx;
  const Regions& regions;
  // For primitives that allocate their own results (allocates_outputs()): the kernel stores
  // them here; `out` then holds null pointers.
  std::vector<detail::Buffer>* results = nullptr;
  const Aval& in_aval(size_t i) const { return *in_avals[i]; }
  const Aval& out_aval(size_t i) const { return *out_avals[i]; }
  template <class T>
  const T* input(size_t i) const { return static_cast<const T*>(in[i]); }
  template <class T>
  T* output(size_t i) const { return static_cast<T*>(out[i]); }
};

// A fast kernel returns false when it does not handle this case (the reference runs).
using KernelFn = std::function<bool(const KernelCall&)>;

// Runs region `k` of the instruction on this device with `args` (moved in, so the region may
// reuse unique buffers in place) and returns its results: loops and branches run their bodies
// through it without leaving the device's worker.
using RegionRunner = std::function<std::vector<detail::Buffer>(size_t k, std::vector<detail::Buffer> args)>;

// ---- VJP ----

struct VjpArgs {
  const std::vector<Array>& primals;      // the instruction's inputs
  const std::vector<Array>& outputs;      // its results
  const std::vector<Array>& cotangents;   // one per result; an empty Array means zero
  const Attrs& attrs;
  const Regions& regions;
  // What the forward evaluation saved for this VJP (a scan's carries), or null.
  const std::vector<Array>* residuals = nullptr;
  // Per input: whether a gradient flows back through it (null: every input); a VJP may leave
  // the others' cotangents empty and need not differentiate what only they reach.
  const std::vector<bool>* active = nullptr;
};

class Primitive {
 public:
  virtual ~Primitive() = default;
  virtual std::string_view name() const = 0;

  // Result avals; throws partix::Error naming the op and the shapes on bad input.
  virtual std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                                  const Regions& regions) const = 0;
  // The factor rule; the default makes every dimension need replication.
  virtual FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                                 const Attrs& attrs) const;
  virtual Linearity linearity() const { return Linearity::kNone; }
  // Linearity of one instance (pad is linear only when it pads with zero).
  virtual Linearity linearity(const Attrs&) const { return linearity(); }
  // Input cotangents (empty Array: zero / not differentiable), written with ops.
  virtual std::vector<Array> vjp(const VjpArgs& args) const;
  // The naive reference kernel: the oracle for every fast kernel.
  virtual void reference(const KernelCall& call) const = 0;

  // Floating-point operations of one execution (cost analysis).
  virtual double flops(const std::vector<Aval>& in, const std::vector<Aval>& out,
                       const Attrs& attrs) const;
  virtual bool is_collective() const { return false; }
  // Kernels that hand back their own result buffers (e.g. a collective whose result all
  // devices of one process share) instead of filling preallocated ones.
  virtual bool allocates_outputs() const { return false; }
  // Bytes the kernel allocates for itself while it runs, beyond its results (staging buffers,
  // relayout copies): memory analysis adds them on top of what is live at the instruction.
  virtual int64_t scratch_bytes(const std::vector<Aval>& in, const std::vector<Aval>& out,
                                const Attrs& attrs) const {
    (void)in, (void)out, (void)attrs;
    return 0;
  }
  // Inside shard_map: the mesh axes each result varies over, given the operands' (DESIGN §1).
  // The default: the union of the operands' sets.
  virtual std::vector<std::set<std::string>> varying(
      const std::vector<std::set<std::string>>& in, const Attrs& attrs, const Regions& regions,
      size_t num_outputs) const;
  // Elementwise ops (same-shape operands and result) may be fused and run in place.
  virtual bool is_elementwise() const { return false; }
  // An operand whose buffer the result may take over when it dies here (the kernel is safe
  // with out == that input), or -1. Elementwise ops may reuse any operand.
  virtual int in_place_operand() const { return -1; }

  // ---- runtime: views and fusion ----
  // Whether the result is its one operand's bytes unchanged (the same elements in the same
  // order, or the same bytes retyped) for these avals and attrs: the runtime then aliases the
  // operand's buffer instead of running a kernel, and fusion passes the operand through.
  virtual bool is_view(const Aval& in, const Aval& out, const Attrs& attrs) const {
    (void)in, (void)out, (void)attrs;
    return false;
  }
  // Whether the result repeats its one operand along new or size-1 dimensions (a broadcast):
  // then, per result dimension, the operand's element stride (0 where it repeats). Fusion
  // reads the operand in place through them instead of materialising the broadcast.
  virtual std::optional<std::vector<int64_t>> broadcast_strides(const Aval& in, const Aval& out,
                                                                const Attrs& attrs) const {
    (void)in, (void)out, (void)attrs;
    return std::nullopt;
  }
  // The value of an instruction that makes a compile-time constant, else null: fusion folds
  // rank-0 ones into its loop as literals.
  virtual const ir::Literal* constant_value(const Attrs& attrs) const {
    (void)attrs;
    return nullptr;
  }

  // Control flow (loops, branches): the interpreter calls execute() instead of a kernel. It
  // owns the operand buffers (an operand that dies here is unique) and returns the results.
  virtual bool runs_regions() const { return false; }
  virtual std::vector<detail::Buffer> execute(const KernelCall& call, std::vector<detail::Buffer> args,
                                              const RegionRunner& run) const;
  // How many times region `k` runs per execution, where static (cost analysis); scan and
  // fori_loop: the trip count; a while_loop body counts once.
  virtual double trip_count(const Attrs& attrs, size_t k) const {
    (void)attrs, (void)k;
    return 1;
  }
  // Bytes execute() holds while its regions run, beyond the operands and what the regions
  // allocate (a scan's stacked outputs): memory analysis puts the regions' peak on top of them.
  virtual int64_t bytes_held_around_regions(const std::vector<Aval>& in,
                                            const std::vector<Aval>& out,
                                            const Attrs& attrs) const {
    (void)in, (void)out, (void)attrs;
    return 0;
  }
  // Which parameters of region k execute() makes afresh for each run and hands over (a slice of
  // each scanned input, a loop index): they count from the run's start to their last use. The
  // others (carries, captured values) are counted where they live.
  virtual std::vector<bool> region_params_made_per_run(const Attrs& attrs, size_t k) const {
    (void)attrs, (void)k;
    return {};
  }
};

// Registry of primitives by name (for the parser) and of fast kernels by platform.
void register_primitive(const Primitive* p);
const Primitive* find_primitive(std::string_view name);  // nullptr if unknown
const Primitive& get_primitive(std::string_view name);   // internal error if unknown
std::vector<std::string> primitive_names();

void register_kernel(std::string_view prim, std::string_view platform, KernelFn fn);
const KernelFn* find_kernel(std::string_view prim, std::string_view platform);

// Registers a primitive object at load time: `static Register<ExpPrim> reg;`.
template <class P>
struct Register {
  Register() {
    static P instance;
    register_primitive(&instance);
  }
};

}  // namespace partix::prim

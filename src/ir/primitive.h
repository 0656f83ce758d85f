// A primitive states its whole contract in one class: name and attributes,
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
#include "partix/transforms.h"

namespace partix::comm {
class Communicator;
}

namespace partix::prim {

using ir::Attrs;
using ir::Aval;
using Regions = std::vector<std::shared_ptr<const ir::Program>>;

// ---- factor sharding rules ----

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

// How an op may consume unreduced (partial-sum) operands.
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
  int64_t mesh_position = -1;        // the device's index in the mesh's devices (-1: none)
  const Mesh* mesh = nullptr;
  comm::Communicator* comm = nullptr;  // collectives
  int threads = 1;                     // threads this device may use
  const std::atomic<bool>* cancel = nullptr;  // set: stop with Cancelled (detail::CancelScope)
  // This device's group over some mesh axes (prim::group_of), memoised for the run: a decode
  // step's collectives all ask for the same few groups, dozens of times per step.
  struct Group {
    std::vector<std::string> axes;
    std::vector<int> devices;  // device ids in rank order
    int rank = 0;
  };
  mutable std::vector<Group> groups;
  // Whether an instruction's operand block is all padding on this device
  // (prim::some_operand_block_is_all_padding), by the instruction's attributes, for the run.
  mutable std::vector<std::pair<const Attrs*, bool>> all_padding;
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
  // What the kernel's prepare function (register_kernel_prepare) made for this instruction
  // when its program was planned; null when it has none or the kernel runs unplanned.
  const void* prepared = nullptr;
  const Aval& in_aval(size_t i) const { return *in_avals[i]; }
  const Aval& out_aval(size_t i) const { return *out_avals[i]; }
  template <class T>
  const T* input(size_t i) const { return static_cast<const T*>(in[i]); }
  template <class T>
  T* output(size_t i) const { return static_cast<T*>(out[i]); }
};

// A fast kernel returns false when it does not handle this case (the reference runs).
using KernelFn = std::function<bool(const KernelCall&)>;
// Work a kernel does once per instruction instead of on every run (a product's layout plan,
// which allocates): called when the program is planned, with the instruction's attrs and
// avals; what it returns reaches every run of the instruction as KernelCall::prepared (null
// is allowed: the kernel then works it out itself).
using KernelPrepareFn = std::function<std::shared_ptr<const void>(
    const Attrs& attrs, const std::vector<const Aval*>& in, const std::vector<const Aval*>& out)>;

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

// ---- batching (vmap) ----

// A value under vmap: the array and its batch dimension (partix/transforms.h).
using Batched = detail::Batched;

struct BatchArgs {
  const std::vector<Batched>& operands;  // at least one batched
  const Attrs& attrs;
  const Regions& regions;
  int64_t size;                   // the batch size (axis.size)
  const detail::BatchAxis& axis;  // the examples' count, vmap's axis_name and spmd_axis_name
};

// The batching facet of a primitive: how its instruction computes on operands that carry a
// batch dimension, with ops (the results say where their batch dimensions are). The engine
// (autodiff/batch.cpp) asks for it only when some operand is batched; a primitive without one
// is refused by name, never unrolled.
class Batching {
 public:
  virtual ~Batching() = default;
  virtual std::vector<Batched> batch(const BatchArgs& args) const = 0;
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
  // The batching facet (vmap), or null: the primitive cannot be batched.
  virtual const Batching* batching() const { return nullptr; }
  // The naive reference kernel: the oracle for every fast kernel.
  virtual void reference(const KernelCall& call) const = 0;

  // Floating-point operations of one execution (cost analysis).
  virtual double flops(const std::vector<Aval>& in, const std::vector<Aval>& out,
                       const Attrs& attrs) const;
  virtual bool is_collective() const { return false; }
  // Quantized arrays are storage for weights: only ops that keep blocks whole
  // take them (their infer checks which operand and which dimensions), and ops that hand them
  // to regions whose own ops are checked as they are traced. The tracer refuses the rest.
  virtual bool accepts_quantized() const { return false; }
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
  // Inside shard_map: the mesh axes each result varies over, given the operands'.
  // The default: the union of the operands' sets.
  virtual std::vector<std::set<std::string>> varying(
      const std::vector<std::set<std::string>>& in, const Attrs& attrs, const Regions& regions,
      size_t num_outputs) const;

  // ---- partitioning ----
  // Facts the SPMD partitioner (src/spmd) asks of an op instead of switching on its name.

  // A device's block of the op, as the partitioner emits it: attributes that name global sizes
  // (a target shape, slice bounds, the extent of a positional draw) become the block's.
  // The default keeps them: most ops infer their block's shape from their operands' blocks.
  struct LocalizeArgs {
    const std::vector<Aval>& in;                      // global operands
    const std::vector<Aval>& out;                     // global results
    const std::vector<Aval>& local_in;                // this device's operand blocks
    const std::vector<NamedSharding>& out_shardings;  // how the results are split
    const std::vector<NamedSharding>* in_shardings = nullptr;  // how the operands are split
    Shape local_out(size_t k) const { return out_shardings[k].shard_shape(out[k].shape); }
  };
  virtual Attrs localize_attrs(const Attrs& attrs, const LocalizeArgs& args) const {
    (void)args;
    return attrs;
  }
  // Shardings the op fixes for its operands and results instead of its factor rule (shard_map's
  // specs, a constraint's spec, a literal's replication): propagation starts from them and
  // never overrides them. Ops with neither flag below run on those blocks like any other.
  struct PinnedShardings {
    std::vector<PartitionSpec> operands;
    std::vector<PartitionSpec> results;
    // The op is the identity on its operand and exists to state its sharding: it partitions to
    // a reshard, and propagation also starts the operand in that sharding (as GSPMD does).
    bool constrains_operand = false;
    // Region 0 is the program every device runs on its blocks: the partitioner inlines it.
    bool per_device_body = false;
  };
  virtual std::optional<PinnedShardings> pinned_shardings(const Attrs& attrs) const {
    (void)attrs;
    return std::nullopt;
  }
  // The result repeats the operand's elements into a bigger shape: propagation lets the users'
  // shardings reach the result before the operand's does, so that a mismatch is fixed on the
  // small operand rather than by moving the big result (XLA gives broadcasts low priority too).
  virtual bool is_broadcast() const { return false; }
  // Gathers and scatters that index operand 0 along one axis with integer operand 1. When that
  // axis is split, each device looks up (or adds into) its own block with masked local indices
  // instead of gathering the table: a plan a factor rule cannot state.
  struct AxisIndexing {
    int axis = 0;              // the indexed axis of operand 0, normalised
    bool scatter = false;      // adds operand 2 at the indices (else reads operand 0 there)
    bool elementwise = false;  // one index per element, operand 0's rank (else whole slices)
  };
  virtual std::optional<AxisIndexing> axis_indexing(const std::vector<Aval>& in,
                                                    const Attrs& attrs) const {
    (void)in, (void)attrs;
    return std::nullopt;
  }
  // Collectives: the kind cost analysis files the op's traffic under (XLA's names, so
  // "collective_permute" for ppermute; empty for ops that communicate nothing), and the bytes
  // one device sends for it.
  virtual std::string_view comm_kind() const { return {}; }
  virtual double comm_bytes(const std::vector<Aval>& in, const std::vector<Aval>& out,
                            const Attrs& attrs) const {
    (void)in, (void)out, (void)attrs;
    return 0;
  }
  // Over a group of one device the op returns its operand's values (perhaps reshaped): the
  // partitioner drops it from the per-device program.
  virtual bool identity_on_one_device(const Attrs& attrs) const {
    (void)attrs;
    return false;
  }
  // Explicit sharding: the factors that need replication and reach no result are
  // consumed by the op (argmax's axis), so a split there types the result unsplit (the
  // partitioner gathers), as a reduction's does; otherwise (a sliced or padded dimension, whose
  // resized result dimension is another factor) such a split cannot be kept and is an error.
  virtual bool consumes_replicated_factors() const { return false; }
  // The name the user wrote for this instruction (psum for all_reduce{kind=sum}): messages
  // about a traced program speak it.
  virtual std::string user_name(const Attrs& attrs) const {
    (void)attrs;
    return std::string(name());
  }
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
  // Decided on each device when it runs, for one-result ops: whether the result needs no
  // kernel here because existing bytes are it (an operand's buffer unchanged, or a cached
  // constant), stored in *result; shared buffers are never written in place. A pad_mask on a
  // device whose block holds no padding forwards its operand this way.
  // Whether shares_result may answer true for these attrs (asked once per instruction, when
  // the program is planned).
  virtual bool may_share_result(const Attrs& attrs) const {
    (void)attrs;
    return false;
  }
  virtual bool shares_result(const KernelCall& call, const std::vector<const detail::Buffer*>& operands,
                             detail::Buffer* result) const {
    (void)call, (void)operands, (void)result;
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

  // ---- control flow ----
  // Where the operands and results of an op that runs_regions() meet its regions' parameters
  // and results: sharding propagation, partitioning and cost analysis see through control flow
  // with it alone. Operands are [leading..., carries..., scanned..., the rest]; every region
  // takes [param_offset parameters made per run..., one per operand from first_operand on].
  struct RegionLayout {
    size_t first_operand = 0;  // operands before it feed no region (cond's predicate): replicated
    size_t param_offset = 0;   // region parameters before the operands' (fori_loop's index)
    size_t num_carry = 0;      // carries: operand, region parameter, body result and op result k
                               // are one value across runs, so they share a sharding
    size_t num_xs = 0;         // scanned operands after the carries: each run takes an axis-0 slice
    size_t body = 0;           // the region whose results are the op's results (any branch: cond)
    int predicate_region = -1;     // a region whose bool scalar decides whether to run again
    bool stacks_results = false;   // results after the carries stack one slice per run (scan ys)
    bool one_region_runs = false;  // each execution runs one of the regions (cond's branches)
  };
  virtual RegionLayout region_layout(const Attrs& attrs) const {
    (void)attrs;
    return {};
  }
  // The compiler replaces the instruction by its one region's instructions before propagation,
  // its results becoming copies of the region's: remat marks what autodiff recomputes, and
  // partitioning has nothing to keep of the boundary.
  virtual bool inlined_when_compiled() const { return false; }
  // Inside shard_map, whether operands that vary over fewer mesh axes than the others first get
  // an explicit pvary, so that all vary alike (its transpose, psum, brings an invariant operand's
  // gradient back). Not for collectives, whose rules are per axis, nor for loops, whose operands
  // each feed their own region parameter under a per-carry rule, nor for cond, whose operands
  // are widened by its predicate's axes before its branches are traced.
  virtual bool joins_operand_varying() const { return !is_collective(); }
  // Reverse mode: which operands a gradient can reach the results from. A while_loop's operands
  // that only its condition reads decide the trip count, never the results' values.
  virtual std::vector<bool> operands_with_gradient_path(const Attrs& attrs, const Regions& regions,
                                                        size_t num_operands) const {
    (void)attrs, (void)regions;
    return std::vector<bool>(num_operands, true);
  }
  // Reverse mode: evaluates the op on `operands` in the current context, setting `results` and
  // keeping in `residuals` what its VJP reads (VjpArgs::residuals) for the same `active`
  // operands (null: all), where saving beats recomputing (a loop's carries entering each
  // iteration). Returns false, touching nothing, for ops that save nothing: the caller binds them.
  virtual bool evaluate_saving(const std::vector<Array>& operands, const Attrs& attrs,
                               const Regions& regions, const std::vector<bool>* active,
                               std::vector<Array>* results, std::vector<Array>* residuals) const {
    (void)operands, (void)attrs, (void)regions, (void)active, (void)results, (void)residuals;
    return false;
  }
};

// Registry of primitives by name (for the parser) and of fast kernels by platform.
void register_primitive(const Primitive* p);
const Primitive* find_primitive(std::string_view name);  // nullptr if unknown
const Primitive& get_primitive(std::string_view name);   // internal error if unknown
std::vector<std::string> primitive_names();

void register_kernel(std::string_view prim, std::string_view platform, KernelFn fn);
const KernelFn* find_kernel(std::string_view prim, std::string_view platform);
void register_kernel_prepare(std::string_view prim, std::string_view platform, KernelPrepareFn fn);
const KernelPrepareFn* find_kernel_prepare(std::string_view prim, std::string_view platform);

// Registers a primitive object at load time: `static Register<ExpPrim> reg;`.
template <class P>
struct Register {
  Register() {
    static P instance;
    register_primitive(&instance);
  }
};

}  // namespace partix::prim

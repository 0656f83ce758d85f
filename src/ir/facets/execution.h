// The execution and memory facet of a primitive (ir/primitive.h): its naive reference kernel
// (the oracle for every fast kernel), how it runs regions, and what the runtime may do instead
// of running a kernel (views, shared results, fusion, running in place), with the bytes it
// holds beyond its results. Asked by the interpreter and fusion (runtime/) and the backends.
// Fast kernels live in src/backend/<platform> and are looked up by (primitive, platform).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "ir/facets/base.h"
#include "partix/array.h"

namespace partix::comm {
class Communicator;
}

namespace partix::prim {

// What a kernel knows about where it runs.
struct ExecContext {
  int device = 0;                    // device id
  std::vector<int64_t> mesh_coords;  // coordinates in the program's mesh (empty: none)
  int64_t mesh_position = -1;        // the device's index in the mesh's devices (-1: none)
  const Mesh* mesh = nullptr;
  comm::Communicator* comm = nullptr;         // collectives
  int threads = 1;                            // threads this device may use
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
  const T* input(size_t i) const {
    return static_cast<const T*>(in[i]);
  }
  template <class T>
  T* output(size_t i) const {
    return static_cast<T*>(out[i]);
  }
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
using RegionRunner =
    std::function<std::vector<detail::Buffer>(size_t k, std::vector<detail::Buffer> args)>;
class Execution {
 public:
  virtual ~Execution() = default;
  // The primitive's name, for the message of an op asked to run regions it does not have.
  virtual std::string_view name() const = 0;
  // The naive reference kernel: the oracle for every fast kernel.
  virtual void reference(const KernelCall& call) const = 0;
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
  // Elementwise ops (same-shape operands and result) may be fused and run in place.
  virtual bool is_elementwise() const { return false; }
  // An operand whose buffer the result may take over when it dies here (the kernel is safe
  // with out == that input), or -1. Elementwise ops may reuse any operand.
  virtual int in_place_operand() const { return -1; }

  // ---- views and fusion ----
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
  virtual bool shares_result(const KernelCall& call,
                             const std::vector<const detail::Buffer*>& operands,
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

  // ---- control flow ----
  // Loops and branches: the interpreter calls execute() instead of a kernel. It
  // owns the operand buffers (an operand that dies here is unique) and returns the results.
  virtual bool runs_regions() const { return false; }
  virtual std::vector<detail::Buffer> execute(const KernelCall& call,
                                              std::vector<detail::Buffer> args,
                                              const RegionRunner& run) const;
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

}  // namespace partix::prim

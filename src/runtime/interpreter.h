// Executes a per-device Program on one device: allocates each result from the device's
// allocator, runs the fast kernel where one handles the case (else the reference), and frees
// every buffer after its last use.
#pragma once

#include <memory>
#include <vector>

#include "core/buffer.h"
#include "ir/program.h"
#include "prim/fusion.h"
#include "ir/primitive.h"

namespace partix::runtime {

struct Plan {
  std::vector<std::vector<int>> release_after;      // values dead after instruction i
  std::vector<const prim::KernelFn*> fast;          // per instruction, nullptr if none
  // Per instruction: what its fast kernel prepared once (prim::KernelPrepareFn), or null.
  std::vector<std::shared_ptr<const void>> prepared;
  std::vector<std::vector<const ir::Aval*>> in_avals, out_avals;
  // Per instruction: each result's size in bytes (counted once here, not per device and run).
  std::vector<std::vector<int64_t>> out_bytes;
  // Per instruction: the input whose buffer the result may take over when that input dies
  // there and nobody else holds it (elementwise ops of equal size), or -1.
  std::vector<int> reuse_input;
  // Per instruction: whether its result is its input's bytes under another shape (a reshape, a
  // transpose or broadcast that moves only size-1 dims, stop_gradient, pvary). No kernel runs:
  // the result holds the input's buffer, whether or not the input dies there.
  std::vector<bool> view;
  // Per instruction: whether to ask the primitive, on each device, for a shared result
  // (Primitive::shares_result) before running its kernel.
  std::vector<bool> may_share;
  // Loop fusion (runtime/fusion.h): per instruction, the root of its fused group (the root
  // itself included) or -1, and at roots the group. Other members do not run on their own:
  // their results are never allocated, and what dies at them dies at the root.
  std::vector<int> fused_root;
  std::vector<std::shared_ptr<const prim::FusedLoop>> fused;
  // At fused roots: a group input of the result's size that dies there, whose buffer the
  // result may take over (each block is read before its result is written), or -1.
  std::vector<int> fused_reuse;
  const prim::FusedKernel* fused_kernel = nullptr;
  bool member(size_t i) const { return fused_root[i] >= 0 && fused_root[i] != static_cast<int>(i); }
  // Per instruction: the mesh positions (ExecContext::mesh_position) on which every result's
  // block is all padding (ir::ValueInfo::global_shape), or empty. There nothing observable
  // depends on its bytes: the instruction (a fused root: its group) runs no kernel and its
  // results are blocks of zeros.
  std::vector<std::vector<bool>> padding_on;
  // Per instruction with padding_on: the positions among those where some result is still
  // read (by an instruction that runs there, or as a result of the program), so that the
  // skipped instruction must leave blocks of zeros. Elsewhere it leaves nothing: a chain of
  // padding (a padded head's whole attention) then costs nothing per instruction.
  std::vector<std::vector<bool>> padding_read;
  // The most operands and results of one kernel call (a fused group counts its inputs): the
  // interpreter's pointer lists are reserved once per run instead of growing.
  size_t max_inputs = 0, max_outputs = 0;
  // Per instruction that runs regions (loops, branches): one plan per region, made once.
  std::vector<std::vector<std::shared_ptr<const Plan>>> region_plans;
};

Plan make_plan(const ir::Program& p, const char* platform = "cpu");

// The most bytes of results and intermediates live at once on a device while `p` runs (the
// interpreter's allocation order replayed: results allocate, values die after last use,
// in-place reuse allocates nothing). Arguments are not counted.
int64_t peak_live_bytes(const ir::Program& p, const Plan& plan);
// The most bytes live at once on a device during one run, arguments included: every argument
// is live at the start; a donated one (donated[i] for parameter i) dies after its last use and
// may be reused in place, the others stay with their callers.
int64_t peak_bytes_with_arguments(const ir::Program& p, const Plan& plan,
                                  const std::vector<bool>& donated);
// The same replay's bytes live (arguments included) after each instruction of `p`.
std::vector<int64_t> live_bytes_after(const ir::Program& p, const Plan& plan,
                                      const std::vector<bool>& donated);

// Kernels to use: fast (registered per platform, the default) or only the naive references.
enum class KernelMode { kFast, kReference };
void set_kernel_mode(KernelMode mode);  // for tests that compare the two
KernelMode kernel_mode();

std::vector<detail::Buffer> interpret(const ir::Program& p, const Plan& plan,
                                      const prim::ExecContext& ctx,
                                      std::vector<detail::Buffer> args);

}  // namespace partix::runtime

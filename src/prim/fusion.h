// Loop fusion of f32 elementwise chains (runtime): a group of instructions whose
// results all have the same element count, evaluated block by block in one pass so that
// intermediates never reach memory. The runtime decides the groups (runtime/fusion.cpp); a
// backend evaluates them (backend/cpu/fused_kernels.cpp) with the very loops of the
// unfused kernels, so a fused result has the bits of the unfused one.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "ir/primitive.h"

namespace partix::prim {

// The most nodes a group holds (a longer chain becomes several groups).
inline constexpr size_t kMaxFusedNodes = 48;

struct FusedLoop {
  enum class Kind {
    kInput,      // a value from outside the group with the group's element count
    kScalar,     // a rank-0 value: a literal or an input
    kBroadcast,  // broadcast_in_dim of an outside value to the group's index space
    kUnary,      // op(a)
    kBinary,     // op(a, b): operands of the group's count, or scalars
  };
  struct Node {
    Kind kind = Kind::kInput;
    std::string_view op;      // the primitive's name (kUnary, kBinary)
    const void* fn = nullptr; // the backend's loop for it (FusedKernel::resolve)
    int a = -1, b = -1;    // operand nodes
    int input = -1;        // kInput, kBroadcast, and kScalar from an input: index in `inputs`
    float literal = 0;     // kScalar from a literal
    // kBroadcast: the result's shape and, per result dimension, the operand's element stride
    // (0 where the dimension is broadcast).
    std::vector<int64_t> shape, strides;
  };
  std::vector<Node> nodes;  // in evaluation order; the last is the group's result
  std::vector<int> inputs;  // program values read from outside, in `in` order
  std::vector<int> members; // the program's instructions the group stands for, in order
  int64_t size = 0;         // elements of the result
  std::string name;         // for timelines: "fusion(mul,add,...)"
};

// A backend's evaluator: in[k] is inputs[k]'s buffer, out the result's. Returns false when it
// cannot run the group (the interpreter then runs the members one by one).
using FusedFn = std::function<bool(const FusedLoop&, const std::vector<const void*>& in,
                                   void* out, const ExecContext&)>;
struct FusedKernel {
  // The backend's loop of an f32 unary or binary op, or nullptr where it has none.
  std::function<const void*(std::string_view op)> resolve;
  FusedFn run;
};
void register_fused_kernel(std::string_view platform, FusedKernel k);
const FusedKernel* find_fused_kernel(std::string_view platform);

}  // namespace partix::prim

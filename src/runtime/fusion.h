// Which instructions of a per-device program run fused (prim/fusion.h): groups of f32
// elementwise ops, broadcasts, views and scalar literals whose results have one element count,
// each computed in one pass at its last instruction (the root), where only the root's result
// is allocated.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/program.h"
#include "prim/fusion.h"

namespace partix::runtime {

struct Fusion {
  // Per instruction: the root of its group (the root itself included), or -1.
  std::vector<int> root_of;
  // Per instruction: the group, at roots only.
  std::vector<std::shared_ptr<const prim::FusedLoop>> group;
};

// Groups chosen greedily from the last instruction back: a root (an f32 unary or binary op the
// backend evaluates) takes in the producers of its operands while every use of their results
// lies inside the group and none is a program result. A group holds at least two ops.
Fusion plan_fusion(const ir::Program& p, const prim::FusedKernel& backend);

// On unless PARTIX_FUSION=0 or a test turned it off; read when a plan is made.
bool fusion_enabled();
void set_fusion_enabled(bool on);  // for tests that compare fused and unfused runs

// One line per group, in program order:
//   "%6 = fusion(broadcast_in_dim,sub,exp)(%0, %3) : f32[3,5] {%4 %5 %6}"
// (the result, the ops, the values read from outside, the instructions' results it stands for).
std::vector<std::string> describe_fusion(
    const ir::Program& p, const std::vector<std::shared_ptr<const prim::FusedLoop>>& groups);

}  // namespace partix::runtime

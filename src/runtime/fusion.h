// Which instructions of a per-device program run fused (prim/fusion.h): groups of f32
// elementwise ops, broadcasts, views and scalar literals whose results have one element count,
// each computed in one pass at its last instruction (the root), where only the root's result
// is allocated.
#pragma once

#include <memory>
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

// Off when PARTIX_FUSION=0 (for comparisons).
bool fusion_enabled();

}  // namespace partix::runtime

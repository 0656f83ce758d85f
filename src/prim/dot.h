// The dimension numbers of dot_general, shared by the primitive and its fast kernels.
#pragma once

#include <vector>

#include "ir/attrs.h"

namespace partix::prim {

struct DotDims {
  std::vector<int> lhs_contract, rhs_contract, lhs_batch, rhs_batch;
  std::vector<int> lhs_free, rhs_free;  // ascending
};

DotDims dot_dims(const ir::Attrs& attrs, int lhs_rank, int rhs_rank);

}  // namespace partix::prim

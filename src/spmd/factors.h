// Factor assignments: which mesh axes shard each factor of an
// instruction's factor rule, derived from the shardings of its operands and results.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/program.h"
#include "ir/primitive.h"

namespace partix::spmd {

using AxisList = std::vector<std::string>;

struct Assignment {
  std::vector<AxisList> factor_axes;  // per factor, major to minor
  // Axes over which the op consumes and produces unreduced values as they are (linear ops).
  std::set<std::string> pass_unreduced;
  // Per operand: the unreduced axes it keeps (subset of pass_unreduced).
  std::vector<std::set<std::string>> operand_unreduced;
};

// One tensor's view of the factors: factor -> axes, from its sharding.
std::map<int, AxisList> project(const NamedSharding& s, const std::vector<prim::DimFactors>& dims,
                                const prim::FactorRule& rule);

// The sharding of a tensor (operand or result) under an assignment.
NamedSharding back_project(const Mesh& mesh, const Assignment& a,
                           const std::vector<prim::DimFactors>& dims, const prim::FactorRule& rule,
                           std::set<std::string> unreduced);

struct TensorView {
  const std::vector<prim::DimFactors>* dims;
  std::optional<NamedSharding> sharding;  // nullopt: unknown yet
  double priority;                        // larger wins conflicts (fixed tensors, big tensors)
  int64_t block = 1;  // a quantized tensor's elements per block: its last dimension's chunks
                      // must hold whole blocks
};

// Greedy assignment: proposals in priority order; a factor takes the first proposal, later
// ones may only extend it; a mesh axis shards at most one factor; replicated factors stay
// unsharded; then layouts that cannot be expressed, or that would split a quantized tensor's
// blocks, are trimmed (legalised).
Assignment assign_factors(const Mesh& mesh, const prim::FactorRule& rule,
                          const std::vector<TensorView>& tensors);

// Whether `b` refines `a` (same or more axes per dimension, a's lists are prefixes of b's).
bool refines(const NamedSharding& a, const NamedSharding& b, int rank);

int64_t axes_product(const Mesh& mesh, const AxisList& axes);

}  // namespace partix::spmd

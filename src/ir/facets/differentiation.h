// The differentiation facet of a primitive (ir/primitive.h): its VJP written with ops, which
// operands a gradient can reach, and what a forward evaluation saves for the VJP. Asked by
// reverse mode (autodiff/vjp.cpp); forward mode is derived from it (ARCHITECTURE.md,
// "Transformations").
#pragma once

#include <string_view>
#include <vector>

#include "ir/facets/base.h"
#include "partix/array.h"

namespace partix::prim {

struct VjpArgs {
  const std::vector<Array>& primals;     // the instruction's inputs
  const std::vector<Array>& outputs;     // its results
  const std::vector<Array>& cotangents;  // one per result; an empty Array means zero
  const Attrs& attrs;
  const Regions& regions;
  // What the forward evaluation saved for this VJP (a scan's carries), or null.
  const std::vector<Array>* residuals = nullptr;
  // Per input: whether a gradient flows back through it (null: every input); a VJP may leave
  // the others' cotangents empty and need not differentiate what only they reach.
  const std::vector<bool>* active = nullptr;
};
class Differentiation {
 public:
  virtual ~Differentiation() = default;
  // The primitive's name, for the message of a primitive that is not differentiable.
  virtual std::string_view name() const = 0;
  // Input cotangents (empty Array: zero / not differentiable), written with ops.
  virtual std::vector<Array> vjp(const VjpArgs& args) const;
  // Which operands a gradient can reach the results from. A while_loop's operands
  // that only its condition reads decide the trip count, never the results' values.
  virtual std::vector<bool> operands_with_gradient_path(const Attrs& attrs, const Regions& regions,
                                                        size_t num_operands) const {
    (void)attrs, (void)regions;
    return std::vector<bool>(num_operands, true);
  }
  // Evaluates the op on `operands` in the current context, setting `results` and
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

}  // namespace partix::prim

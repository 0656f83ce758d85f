// Reverse mode over Programs: a traced program is evaluated again by binding its
// instructions in the current context (eagerly, or into an enclosing trace), then each
// primitive's VJP, written with ops, runs in reverse. The gradient program is therefore an
// ordinary program that jit propagates and partitions like any other.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "ir/program.h"
#include "partix/array.h"
#include "ir/primitive.h"

namespace partix::detail {
class TraceState;
// The trace of a function of `leaves` that grad, checkpoint and the custom derivatives record,
// and its parameters (`tracers`, one per leaf, typed and varying as the leaves are where the
// call is made). Defined in autodiff/grad.cpp.
std::shared_ptr<TraceState> nested_trace(const char* name, const std::vector<Array>& leaves,
                                         std::vector<Array>& tracers);
}  // namespace partix::detail

namespace partix::autodiff {

// What the forward evaluation of an instruction saved for its VJP (a scan's carries entering
// each iteration), by instruction.
using Residuals = std::map<const ir::Instr*, std::vector<Array>>;

// The value of every program value after evaluating `p` on `args` (indexed by value id). With
// `saved`, ops that save residuals (Primitive::evaluate_saving: loops) are evaluated so and their
// residuals kept there, for a backward pass given the same `active` parameters (null: all).
// `known`: values already computed (a checkpoint's saved intermediates, by value id); an
// instruction whose results are all known is not evaluated again.
std::vector<Array> evaluate(const ir::Program& p, const std::vector<Array>& args,
                            Residuals* saved = nullptr, const std::vector<bool>* active = nullptr,
                            const std::map<int, Array>* known = nullptr);

// Cotangents of p's parameters given its evaluated values and its results' cotangents (an
// empty Array means zero); `saved`: what evaluate saved, if anything. `active`: the parameters
// whose cotangents are wanted (null: all); instructions that none of them reaches are not
// differentiated (a while_loop on values independent of them needs no VJP), and the other
// parameters' cotangents may be empty.
std::vector<Array> backward(const ir::Program& p, const std::vector<Array>& env,
                            const std::vector<Array>& result_cotangents,
                            const Residuals* saved = nullptr,
                            const std::vector<bool>* active = nullptr);

// Which values of p a gradient flows through: floating values computed from an active parameter
// (`active` per parameter; null: all), along each op's operands_with_gradient_path (a
// while_loop's condition passes none on: its predicate is a bool).
std::vector<bool> active_values(const ir::Program& p, const std::vector<bool>* active);

// The inputs of `in` whose values `active` (per value of its program) marks.
std::vector<bool> active_inputs(const ir::Instr& in, const std::vector<bool>& active);

// shard_map's VJP: a shard_map of the body's VJP.
std::vector<Array> shard_map_vjp(const prim::VjpArgs& a);

// Zeros of x's shape and dtype, built from a scalar (traceable, never materialised on the host).
Array zeros_like(const Array& x);
Array ones_like(const Array& x);

}  // namespace partix::autodiff

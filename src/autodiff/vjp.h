// Reverse mode over Programs (DESIGN §3.7): a traced program is evaluated again by binding its
// instructions in the current context (eagerly, or into an enclosing trace), then each
// primitive's VJP, written with ops, runs in reverse. The gradient program is therefore an
// ordinary program that jit propagates and partitions like any other.
#pragma once

#include <vector>

#include "ir/program.h"
#include "partix/array.h"
#include "prim/primitive.h"

namespace partix::autodiff {

// The value of every program value after evaluating `p` on `args` (indexed by value id).
std::vector<Array> evaluate(const ir::Program& p, const std::vector<Array>& args);

// Cotangents of p's parameters given its evaluated values and its results' cotangents (an
// empty Array means zero).
std::vector<Array> backward(const ir::Program& p, const std::vector<Array>& env,
                            const std::vector<Array>& result_cotangents);

// VJPs of the primitives with regions.
std::vector<Array> remat_vjp(const prim::VjpArgs& a);      // recomputes the region
std::vector<Array> shard_map_vjp(const prim::VjpArgs& a);  // a shard_map of the body's VJP

// Zeros of x's shape and dtype, built from a scalar (traceable, never materialised on the host).
Array zeros_like(const Array& x);
Array ones_like(const Array& x);

}  // namespace partix::autodiff

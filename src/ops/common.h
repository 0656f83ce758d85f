// Helpers of the op library: dtype promotion, broadcasting, binding primitives by name.
#pragma once

#include <string_view>
#include <vector>

#include "ir/attrs.h"
#include "partix/ops.h"
#include "trace/trace.h"

namespace partix::ops {

inline Array bind(std::string_view prim, const std::vector<Array>& in, ir::Attrs attrs = {}) {
  return detail::bind1(prim, in, std::move(attrs));
}

// numpy broadcasting of two shapes; throws naming the op.
Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b);
// The dtype a plain number takes next to an array of dtype d (JAX weak typing).
DType weak_dtype(DType d, double value);
// Throws partix::Error from `op` for a quantized dtype: ops other than matmul and astype
// never convert weight storage implicitly.
void refuse_quantized(std::string_view op, DType dt);
// Throws partix::Error from `api` for a quantized dtype: creation ops (zeros, full, arange,
// iota, ...) make values, and quantized arrays only come as blocks (from_blocks, GGUF files).
void refuse_created_quantized(std::string_view api, DType dt, const Shape& shape);

ir::Ints to_ints(const std::vector<int>& v);
// Normalises possibly negative axes of an operand of `shape`; errors name the op and shape.
int norm_axis(std::string_view op, int axis, const Shape& shape);
std::vector<int> norm_axes(std::string_view op, std::vector<int> axes, const Shape& shape);
std::vector<int> all_axes(int rank);

}  // namespace partix::ops

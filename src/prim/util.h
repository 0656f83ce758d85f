// Helpers shared by primitive definitions: argument checks and axis normalisation.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "core/errors.h"
#include "ir/program.h"

namespace partix::prim {

// Shapes for messages: "f32[8,32], f32[16]".
std::string avals_to_string(const std::vector<ir::Aval>& avals);

void check_arity(std::string_view op, const std::vector<ir::Aval>& in, size_t n);
// Normalises a possibly negative axis; throws naming the op and the shape.
int norm_axis(std::string_view op, int64_t axis, int rank);
std::vector<int> norm_axes(std::string_view op, const std::vector<int64_t>& axes, int rank);

// The shape a copy kernel walks: a quantized [..., K] value is [..., K / block] elements of
// dtype_size bytes (whole blocks); any other shape is itself.
inline Shape storage_shape(const ir::Aval& a) {
  Shape s = a.shape;
  if (is_quantized(a.dtype) && !s.empty()) s.back() /= dtype_block_elems(a.dtype);
  return s;
}

// Dtype categories.
inline bool is_float_like(DType d) { return is_floating(d); }

// Inside shard_map, the varying axes of a region's results (remat's and the custom
// derivatives' results vary as their region 0's do).
inline std::vector<std::set<std::string>> results_varying(const ir::Program& region) {
  std::vector<std::set<std::string>> out;
  for (int v : region.results) out.push_back(region.info(v).varying);
  return out;
}

}  // namespace partix::prim

// Helpers shared by the explicit-sharding tests.
#pragma once

#include <string>

#include "test_util.h"

namespace explicit_test {

// Small distinct values (i % 7 - 3) in a host array of `shape`.
inline partix::Array iota_f32(partix::Shape shape) {
  std::vector<float> v(static_cast<size_t>(partix::shape_size(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7) - 3.0f;
  return partix::from_vector<float>(v, shape);
}

// The type in JAX's notation: float32[8@X,4].
inline std::string ty(const partix::Array& a) { return partix::type_of(a).to_string(); }

}  // namespace explicit_test

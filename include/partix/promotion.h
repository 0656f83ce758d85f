// JAX's weak typing of a Python number beside an array: the rule jax.numpy applies to `x + 1`,
// `x * 0.5` or `x == True`. The number takes the array's dtype, except that a float beside an
// integer or bool array makes the result float32, and an int beside a bool array int32; an int
// the array's integer dtype cannot hold is refused. The bindings (Python) ask this; they do
// not restate it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "partix/array.h"

namespace partix {

struct WeakScalar {
  enum class Kind { kBool, kInt, kFloat };
  Kind kind = Kind::kFloat;
  double value = 0;            // the number (an int's nearest double; +-inf past the doubles)
  int64_t int_value = 0;       // an int's exact value, when it fits int64
  bool int_fits_int64 = true;  // false: beyond int64 (no integer dtype holds it)
  std::string text;            // as the user wrote it, for messages
};

// The array (converted where the number widens it) and the number as a 0-d array of the same
// dtype. Errors name `api`.
std::pair<Array, Array> promote_weak(const Array& a, const WeakScalar& s, std::string_view api);

}  // namespace partix

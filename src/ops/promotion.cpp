// JAX's weak typing of a Python number beside an array (partix/promotion.h).
#include "partix/promotion.h"

#include <cmath>

#include "core/errors.h"
#include "core/scalar.h"
#include "ops/common.h"

namespace partix {

namespace {

// The number as a 0-d array of dtype `dt`; integers exactly (not through a double).
Array weak_literal(const WeakScalar& s, DType dt) {
  if (is_integral(dt) && s.kind != WeakScalar::Kind::kFloat) {
    ir::Literal lit;
    lit.dtype = dt;
    lit.bytes.resize(static_cast<size_t>(dtype_size(dt)));
    detail::store_int(
        lit.bytes.data(), dt,
        s.kind == WeakScalar::Kind::kBool ? static_cast<int64_t>(s.value != 0) : s.int_value);
    return detail::literal(lit);
  }
  return detail::literal(s.value, dt);
}

}  // namespace

std::pair<Array, Array> promote_weak(const Array& a, const WeakScalar& s, std::string_view api) {
  ops::refuse_quantized(api, a.dtype());
  Array arr = a;
  DType dt = a.dtype();
  if (s.kind == WeakScalar::Kind::kInt) {
    if (dt == DType::Bool) {
      arr = astype(a, DType::I32);
      dt = DType::I32;
    }
    if (is_integral(dt)) {
      detail::check(s.int_fits_int64 && s.int_value >= detail::int_lowest(dt) &&
                        s.int_value <= detail::int_highest(dt),
                    api, "Python int {} does not fit the array's {}", s.text, dtype_name(dt));
    } else {
      detail::check(std::isfinite(s.value), api, "Python int {} is too large for a float", s.text);
    }
  } else if (s.kind == WeakScalar::Kind::kFloat && !is_floating(dt)) {
    arr = astype(a, DType::F32);
    dt = DType::F32;
  }
  return {arr, weak_literal(s, dt)};
}

}  // namespace partix

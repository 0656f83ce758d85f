// Sampling functions over the random primitives (src/prim/random.cpp).
#include <cmath>
#include <cstring>
#include <limits>

#include "core/errors.h"
#include "core/scalar.h"
#include "ops/common.h"
#include "partix/random.h"

namespace partix::random {

namespace {

void check_key(const Array& k, const char* api) {
  if (!(k.dtype() == DType::I32 && k.shape() == Shape{2})) {
    detail::fail(api, "a key is i32[2] (from random::key), got {}{}", dtype_name(k.dtype()),
                 shape_to_string(k.shape()));
  }
}

// A draw's shape: no negative dimension, no overflowing element count.
void check_draw_shape(const Shape& shape, DType dtype, const char* api) {
  detail::checked_size(api, shape, dtype);
}

void check_floating(DType dtype, const char* api) {
  detail::check(is_floating(dtype), api, "needs a floating dtype, got {}", dtype_name(dtype));
}

// Float math of half-precision draws happens in f32.
DType compute_dtype(DType d) { return d == DType::BF16 || d == DType::F16 ? DType::F32 : d; }

}  // namespace

Array key(uint64_t seed) {
  std::vector<int32_t> v{static_cast<int32_t>(seed >> 32),
                         static_cast<int32_t>(seed & 0xffffffffu)};
  ir::Literal lit{{2}, DType::I32, std::vector<char>(8)};
  std::memcpy(lit.bytes.data(), v.data(), 8);
  return detail::literal(lit);
}

Array split(const Array& k, int64_t n) {
  check_key(k, "random.split");
  detail::check(n >= 0, "random.split", "n must be non-negative, got {}", n);
  return ops::bind("random_bits", {k}, {{"shape", ir::Ints{n, 2}}, {"domain", int64_t{1}}});
}

Array bits(const Array& k, Shape shape, DType dtype) {
  check_key(k, "random.bits");
  detail::check(is_integral(dtype) && int_bits(dtype) <= 32, "random.bits",
                "dtype must be an integer type of at most 32 bits, got {}", dtype_name(dtype));
  check_draw_shape(shape, dtype, "random.bits");
  // Domain 2: draws no split (domain 1) or other sampler makes from the same key.
  Array raw = ops::bind("random_bits", {k}, {{"shape", ir::Ints(shape)}, {"domain", int64_t{2}}});
  return dtype == DType::I32 ? raw : astype(raw, dtype);  // integer converts keep the low bits
}

Array key_at(const Array& keys, int64_t i) {
  if (!(keys.dtype() == DType::I32 && keys.ndim() == 2 && keys.shape()[1] == 2)) {
    detail::fail("random.key_at", "keys must be an i32[n, 2] array (from random.split), got {}{}",
                 dtype_name(keys.dtype()), shape_to_string(keys.shape()));
  }
  if (!(i >= 0 && i < keys.shape()[0])) {
    detail::fail("random.key_at", "row {} is out of range for keys {}{}", i,
                 dtype_name(keys.dtype()), shape_to_string(keys.shape()));
  }
  return reshape(slice(keys, {i, 0}, {i + 1, 2}), {2});
}

std::pair<Array, Array> split2(const Array& k) {
  Array ks = split(k, 2);
  return {key_at(ks, 0), key_at(ks, 1)};
}

Array fold_in(const Array& k, const Array& data) {
  check_key(k, "random.fold_in");
  if (!(data.ndim() == 0 && is_integral(data.dtype()))) {
    detail::fail("random.fold_in", "data must be an integer scalar, got {}{}",
                 dtype_name(data.dtype()), shape_to_string(data.shape()));
  }
  return ops::bind("random_fold_in", {k, data});
}

Array fold_in(const Array& k, int64_t data) {
  return fold_in(k, detail::literal(static_cast<double>(data), DType::I64));
}

Array uniform(const Array& k, Shape shape, DType dtype, double minval, double maxval) {
  check_key(k, "random.uniform");
  check_floating(dtype, "random.uniform");
  check_draw_shape(shape, dtype, "random.uniform");
  detail::check(std::isfinite(minval) && std::isfinite(maxval) && minval <= maxval,
                "random.uniform", "needs finite minval <= maxval, got [{}, {})", minval, maxval);
  Array u = ops::bind("random_uniform", {k}, {{"shape", ir::Ints(shape)}, {"dtype", dtype}});
  if (minval == 0.0 && maxval == 1.0) return u;
  DType cd = compute_dtype(dtype);
  Array r = astype(u, cd) * (maxval - minval) + minval;
  // Rounding may reach maxval; keep the interval half-open.
  r = minimum(r, std::nextafter(static_cast<float>(maxval), static_cast<float>(minval)));
  return astype(maximum(r, minval), dtype);
}

Array normal(const Array& k, Shape shape, DType dtype) {
  check_key(k, "random.normal");
  check_floating(dtype, "random.normal");
  check_draw_shape(shape, dtype, "random.normal");
  DType cd = compute_dtype(dtype);
  Array u = astype(uniform(k, shape, dtype), cd) * 2.0 - 1.0;
  u = maximum(u, std::nextafter(-1.0f, 0.0f));  // erf_inv(-1) = -inf
  return astype(std::sqrt(2.0) * erf_inv(u), dtype);
}

Array truncated_normal(const Array& k, double lower, double upper, Shape shape, DType dtype) {
  check_key(k, "random.truncated_normal");
  check_floating(dtype, "random.truncated_normal");
  check_draw_shape(shape, dtype, "random.truncated_normal");
  detail::check(lower < upper, "random.truncated_normal", "lower {} must be below upper {}", lower,
                upper);
  DType cd = compute_dtype(dtype);
  double a = std::erf(lower / std::sqrt(2.0)), b = std::erf(upper / std::sqrt(2.0));
  Array u = astype(uniform(k, shape, dtype), cd) * (b - a) + a;
  Array z = std::sqrt(2.0) * erf_inv(u);
  double lo = std::nextafter(lower, upper), hi = std::nextafter(upper, lower);
  return astype(clip(z, lo, hi), dtype);
}

Array bernoulli(const Array& k, double p, Shape shape) {
  check_key(k, "random.bernoulli");
  detail::check(p >= 0.0 && p <= 1.0, "random.bernoulli", "p must be in [0, 1], got {}", p);
  check_draw_shape(shape, DType::Bool, "random.bernoulli");
  return uniform(k, shape) < p;
}

Array randint(const Array& k, Shape shape, int64_t minval, int64_t maxval, DType dtype) {
  check_key(k, "random.randint");
  detail::check(minval < maxval && is_integral(dtype), "random.randint",
                "needs minval < maxval and an integer dtype, got [{}, {}) {}", minval, maxval,
                dtype_name(dtype));
  check_draw_shape(shape, dtype, "random.randint");
  detail::check(minval >= detail::int_lowest(dtype) && maxval - 1 <= detail::int_highest(dtype),
                "random.randint", "[{}, {}) does not fit in {}", minval, maxval, dtype_name(dtype));
  // The width as a double: maxval - minval may overflow int64.
  const double width = static_cast<double>(maxval) - static_cast<double>(minval);
  Array u = uniform(k, shape, DType::F64);
  Array r = floor(u * width) + static_cast<double>(minval);
  return astype(minimum(r, static_cast<double>(maxval - 1)), dtype);
}

Array categorical(const Array& k, const Array& logits, int axis) {
  check_key(k, "random.categorical");
  axis = ops::norm_axis("random.categorical", axis, logits.shape());
  DType cd = compute_dtype(is_floating(logits.dtype()) ? logits.dtype() : DType::F32);
  Array u = uniform(k, logits.shape(), cd);
  u = maximum(u, 1e-30);
  Array gumbel = -log(-log(u));
  return argmax(astype(logits, cd) + gumbel, axis);
}

Array uniform(const Array& key, Shape shape, DType dtype, double minval, double maxval,
              const NamedSharding& sharding) {
  return detail::execute_created("uniform", sharding,
                                 [&] { return uniform(key, shape, dtype, minval, maxval); });
}
Array normal(const Array& key, Shape shape, DType dtype, const NamedSharding& sharding) {
  return detail::execute_created("normal", sharding, [&] { return normal(key, shape, dtype); });
}
Array randint(const Array& key, Shape shape, int64_t minval, int64_t maxval, DType dtype,
              const NamedSharding& sharding) {
  return detail::execute_created("randint", sharding,
                                 [&] { return randint(key, shape, minval, maxval, dtype); });
}

}  // namespace partix::random

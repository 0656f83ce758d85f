// Neural-network functions written with primitives: activations, softmax, norms, losses.
#include <cmath>

#include "core/errors.h"
#include "ops/common.h"

namespace partix {

Array relu(const Array& x) { return maximum(x, 0.0); }
Array silu(const Array& x) { return x * logistic(x); }

Array gelu(const Array& x, bool approximate) {
  if (approximate) {
    constexpr double kC = 0.7978845608028654;  // sqrt(2/pi)
    return 0.5 * x * (1.0 + tanh(kC * (x + 0.044715 * x * x * x)));
  }
  return 0.5 * x * (1.0 + erf(x * 0.7071067811865476));
}

Array softmax(const Array& x, int axis) {
  axis = ops::norm_axis("softmax", axis, x.shape());
  if (x.shape()[static_cast<size_t>(axis)] == 0) return x;  // nothing to normalise, as JAX
  Array m = stop_gradient(max(x, {axis}, true));
  Array e = exp(x - m);
  return e / sum(e, {axis}, true);
}

Array log_softmax(const Array& x, int axis) {
  axis = ops::norm_axis("log_softmax", axis, x.shape());
  if (x.shape()[static_cast<size_t>(axis)] == 0) return x;  // nothing to normalise, as JAX
  Array shifted = x - stop_gradient(max(x, {axis}, true));
  return shifted - log(sum(exp(shifted), {axis}, true));
}

namespace {
// Normalisation statistics in f32 for half-precision inputs (mixed precision).
Array upcast(const Array& x) {
  return x.dtype() == DType::BF16 || x.dtype() == DType::F16 ? astype(x, DType::F32) : x;
}
}  // namespace

namespace {
// A scale or shift must broadcast to x without growing it.
void check_broadcasts_to(const Array& p, const char* what, const Array& x, const char* api) {
  bool ok = p.ndim() <= x.ndim();
  for (int i = 1; ok && i <= p.ndim(); ++i) {
    const int64_t d = p.shape()[static_cast<size_t>(p.ndim() - i)];
    ok = d == 1 || d == x.shape()[static_cast<size_t>(x.ndim() - i)];
  }
  if (!(ok)) {
    detail::fail(api, "{} {}{} does not broadcast to x {}{}", what, dtype_name(p.dtype()),
                 shape_to_string(p.shape()), dtype_name(x.dtype()), shape_to_string(x.shape()));
  }
}
}  // namespace

Array layer_norm(const Array& x, const Array& gamma, const Array& beta, double eps) {
  detail::check(x.ndim() >= 1, "layer_norm", "needs rank >= 1");
  check_broadcasts_to(gamma, "gamma", x, "layer_norm");
  check_broadcasts_to(beta, "beta", x, "layer_norm");
  Array xf = upcast(x);
  Array mu = mean(xf, {-1}, true);
  Array d = xf - mu;
  Array v = mean(d * d, {-1}, true);
  Array y = astype(d * rsqrt(v + eps), x.dtype());
  return y * gamma + beta;
}

Array rms_norm(const Array& x, const Array& weight, double eps) {
  detail::check(x.ndim() >= 1, "rms_norm", "needs rank >= 1");
  check_broadcasts_to(weight, "weight", x, "rms_norm");
  Array xf = upcast(x);
  Array y = astype(xf * rsqrt(mean(xf * xf, {-1}, true) + eps), x.dtype());
  return y * weight;
}

Array cross_entropy(const Array& logits, const Array& labels) {
  Shape batch(logits.shape().begin(), logits.shape().end() - (logits.ndim() > 0 ? 1 : 0));
  if (!(logits.ndim() >= 1 && labels.shape() == batch)) {
    detail::fail("cross_entropy", "logits {} need labels of shape {}, got {}",
                 shape_to_string(logits.shape()), shape_to_string(batch),
                 shape_to_string(labels.shape()));
  }
  if (!(is_integral(labels.dtype()))) {
    detail::fail("cross_entropy", "labels must be integers, got {}{}", dtype_name(labels.dtype()),
                 shape_to_string(labels.shape()));
  }
  Array lp = log_softmax(upcast(logits), -1);
  Array idx = expand_dims(labels, -1);
  Array picked;
  if (lp.impl()->sharding && detail::explicit_type(lp.impl()->sharding)) {
    // Explicit sharding: a gather along a split vocabulary has no unique result sharding; the
    // picked log-probabilities are split as the labels are.
    const std::optional<NamedSharding> lt = detail::explicit_type(idx.impl()->sharding);
    picked = detail::with_out_sharding("cross_entropy", {lp, idx}, OutSharding{lt ? lt->spec() : P()},
                                       [&] { return take_along_axis(lp, idx, -1); });
  } else {
    picked = take_along_axis(lp, idx, -1);
  }
  return -squeeze(picked, {-1});
}

Array causal_mask(int64_t t, int64_t s, int64_t offset) {
  detail::check(t >= 0 && s >= 0, "causal_mask", "sizes must be non-negative, got t={}, s={}", t, s);
  Array q = iota({t, s}, 0, DType::I32);
  Array k = iota({t, s}, 1, DType::I32);
  return (q + static_cast<double>(offset)) >= k;
}

}  // namespace partix

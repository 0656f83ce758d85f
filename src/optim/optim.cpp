// SGD, AdamW, global-norm clipping, warmup + cosine schedules.
#include <cmath>

#include "autodiff/vjp.h"
#include "core/errors.h"
#include "partix/ops.h"
#include "partix/optim.h"
#include "partix/transforms.h"
#include "trace/trace.h"

namespace partix::optim {

namespace {

// Zeros shaped and sharded like p (built locally on each device under jit).
Array zeros_sharded(const Array& p, DType dtype) {
  Array z = broadcast_in_dim(detail::literal(0.0, dtype), p.shape(), {});
  if (const auto& s = p.impl()->sharding; s) {
    z = detail::is_tracing() ? with_sharding_constraint(z, *s) : device_put(z, *s);
  }
  return z;
}

// Keeps x in p's sharding (the update of a parameter stays where the parameter is).
Array like(const Array& x, const Array& p) {
  const auto& s = p.impl()->sharding;
  if (!s) return x;
  return detail::is_tracing() ? with_sharding_constraint(x, *s) : device_put(x, *s);
}

bool half(DType d) { return d == DType::BF16 || d == DType::F16; }

void check_same_keys(const Params& a, const Params& b, const char* api) {
  detail::check(a.size() == b.size(), api, "{} parameters but {} gradients", a.size(), b.size());
  for (const auto& [k, v] : a) {
    detail::check(b.count(k) != 0, api, "no gradient for parameter '{}'", k);
    if (b.at(k).shape() != v.shape()) {
      detail::fail(api, "gradient of '{}' is {} but the parameter is {}", k,
                   shape_to_string(b.at(k).shape()), shape_to_string(v.shape()));
    }
  }
}

// The optimizer state `state` (named `what`) holds one array per parameter, shaped like it.
void check_state(const Params& params, const Params& state, const char* what, const char* api) {
  for (const auto& [k, v] : params) {
    auto it = state.find(k);
    detail::check(it != state.end(), api, "the optimizer state's {} has no entry for parameter '{}'",
                  what, k);
    if (it->second.shape() != v.shape()) {
      detail::fail(api, "the optimizer state's {} of '{}' is {} but the parameter is {}", what, k,
                   shape_to_string(it->second.shape()), shape_to_string(v.shape()));
    }
  }
  for (const auto& [k, v] : state) {
    detail::check(params.count(k) != 0, api,
                  "the optimizer state's {} has an entry '{}' that is not a parameter", what, k);
  }
}

void check_lr(const Array& lr, const char* api) {
  if (!(lr.ndim() == 0 && is_floating(lr.dtype()))) {
    detail::fail(api, "lr must be a floating scalar, got {}{}", dtype_name(lr.dtype()),
                 shape_to_string(lr.shape()));
  }
}

template <class F>
auto jit_if_eager(F f) {
  // Optimizer steps run as one program: jitted when called eagerly, inlined under a trace.
  return [f](const auto&... args) {
    if (detail::is_tracing()) return f(args...);
    return jit(f)(args...);
  };
}

}  // namespace

double warmup_cosine(int64_t step, double peak, int64_t warmup, int64_t total,
                     double final_fraction) {
  detail::check(step >= 0 && warmup >= 0 && total >= 0, "warmup_cosine",
                "needs step, warmup and total >= 0, got step {}, warmup {}, total {}", step, warmup,
                total);
  if (warmup > 0 && step < warmup) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return peak * final_fraction;
  double t = static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, total - warmup));
  double cosine = 0.5 * (1.0 + std::cos(M_PI * t));
  return peak * (final_fraction + (1.0 - final_fraction) * cosine);
}

Array global_norm(const Params& tree) {
  Array total = detail::literal(0.0, DType::F32);
  for (const auto& [k, g] : tree) total = total + sum(square(astype(g, DType::F32)));
  return sqrt(total);
}

std::pair<Params, Array> clip_by_global_norm(const Params& grads, double max_norm) {
  detail::check(max_norm > 0, "clip_by_global_norm", "max_norm must be positive, got {}", max_norm);
  Array norm = global_norm(grads);
  // scale = min(1, max_norm / norm), with norm 0 left alone.
  Array scale = minimum(max_norm / maximum(norm, 1e-30), 1.0);
  Params out;
  for (const auto& [k, g] : grads) out[k] = astype(astype(g, DType::F32) * scale, g.dtype());
  return {out, norm};
}

SgdState sgd_init(const Params& params) {
  return jit_if_eager([](const Params& p) {
    SgdState s;
    for (const auto& [k, v] : p) s.momentum[k] = zeros_sharded(v, DType::F32);
    return s;
  })(params);
}

std::pair<Params, SgdState> sgd_update(const Params& params, const Params& grads,
                                       const SgdState& state, const Array& lr,
                                       const SgdConfig& c) {
  check_same_keys(params, grads, "sgd_update");
  check_state(params, state.momentum, "momentum", "sgd_update");
  check_lr(lr, "sgd_update");
  return jit_if_eager([c](const Params& p, const Params& g, const SgdState& st, const Array& lr_) {
    Params np;
    SgdState ns;
    for (const auto& [k, v] : p) {
      Array gk = astype(g.at(k), DType::F32);
      Array m = like(st.momentum.at(k) * c.momentum + gk, v);
      Array step = c.nesterov ? gk + m * c.momentum : m;
      np[k] = like(astype(astype(v, DType::F32) - step * lr_, v.dtype()), v);
      ns.momentum[k] = m;
    }
    return std::pair<Params, SgdState>{np, ns};
  })(params, grads, state, lr);
}

AdamWState adamw_init(const Params& params) {
  return jit_if_eager([](const Params& p) {
    AdamWState s;
    for (const auto& [k, v] : p) {
      s.mu[k] = zeros_sharded(v, DType::F32);
      s.nu[k] = zeros_sharded(v, DType::F32);
      if (half(v.dtype())) s.master[k] = like(astype(v, DType::F32), v);
    }
    s.count = astype(detail::literal(0.0, DType::I32), DType::I32);
    return s;
  })(params);
}

std::pair<Params, AdamWState> adamw_update(const Params& params, const Params& grads,
                                           const AdamWState& state, const Array& lr,
                                           const AdamWConfig& c) {
  constexpr const char* kApi = "adamw_update";
  check_same_keys(params, grads, kApi);
  check_state(params, state.mu, "mu", kApi);
  check_state(params, state.nu, "nu", kApi);
  for (const auto& [k, v] : state.master) {
    if (!(params.count(k) != 0 && v.shape() == params.at(k).shape())) {
      detail::fail(kApi, "the optimizer state's master copy '{}' ({}) matches no parameter", k,
                   shape_to_string(v.shape()));
    }
  }
  if (!(state.count.valid() && state.count.ndim() == 0)) {
    detail::fail(kApi, "the optimizer state's count must be a scalar (from adamw_init), got {}",
                 state.count.valid() ? shape_to_string(state.count.shape()) : "an empty Array");
  }
  check_lr(lr, kApi);
  detail::check(c.b1 >= 0 && c.b1 < 1 && c.b2 >= 0 && c.b2 < 1 && c.eps >= 0, kApi,
                "needs 0 <= b1, b2 < 1 and eps >= 0, got b1 {}, b2 {}, eps {}", c.b1, c.b2, c.eps);
  return jit_if_eager([c](const Params& p, const Params& g, const AdamWState& st, const Array& lr_) {
    AdamWState ns;
    ns.count = st.count + 1.0;
    Array t = astype(ns.count, DType::F32);
    // Bias corrections 1 - b^t.
    Array bc1 = 1.0 - exp(t * std::log(c.b1));
    Array bc2 = 1.0 - exp(t * std::log(c.b2));
    Params np;
    for (const auto& [k, v] : p) {
      Array w = st.master.count(k) ? st.master.at(k) : astype(v, DType::F32);
      Array gk = astype(g.at(k), DType::F32);
      Array m = like(st.mu.at(k) * c.b1 + gk * (1.0 - c.b1), v);
      Array s = like(st.nu.at(k) * c.b2 + gk * gk * (1.0 - c.b2), v);
      Array update = (m / bc1) / (sqrt(s / bc2) + c.eps) + w * c.weight_decay;
      Array nw = like(w - update * lr_, v);
      ns.mu[k] = m;
      ns.nu[k] = s;
      if (st.master.count(k)) ns.master[k] = nw;
      np[k] = like(astype(nw, v.dtype()), v);
    }
    return std::pair<Params, AdamWState>{np, ns};
  })(params, grads, state, lr);
}

}  // namespace partix::optim

// Optimizers against independent reference arithmetic, sharded state, mixed precision, and the
// memory of an FSDP AdamW step.
#include <cmath>

#include "test_util.h"

using namespace partix;

namespace {
std::vector<double> vals(const Array& a) { return astype(a, DType::F64).to_vector<double>(); }
}  // namespace

TEST(Optim, AdamWMatchesReferenceArithmetic) {
  Params p{{"w", from_vector<float>({0.5f, -1.0f, 2.0f}, {3})}};
  optim::AdamWConfig c{0.9, 0.99, 1e-8, 0.1};
  optim::AdamWState s = optim::adamw_init(p);
  std::vector<double> w{0.5, -1.0, 2.0}, m(3, 0), v(3, 0);
  const double lr = 0.05;
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> g{0.1f * t, -0.2f, 0.3f / t};
    Params grads{{"w", from_vector(g, {3})}};
    auto [np, ns] = optim::adamw_update(p, grads, s, scalar<float>(static_cast<float>(lr)), c);
    p = np;
    s = ns;
    for (int i = 0; i < 3; ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.99 * v[i] + 0.01 * g[i] * g[i];
      double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.99, t));
      w[i] -= lr * (mh / (std::sqrt(vh) + 1e-8) + 0.1 * w[i]);
    }
    EXPECT_EQ(s.count.item<int32_t>(), t);
  }
  auto got = vals(p.at("w"));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], w[i], 1e-5);
}

TEST(Optim, SgdMomentumAndNesterov) {
  for (bool nesterov : {false, true}) {
    Params p{{"w", from_vector<float>({1.0f, 2.0f}, {2})}};
    optim::SgdState s = optim::sgd_init(p);
    std::vector<double> w{1, 2}, mom{0, 0};
    for (int t = 0; t < 3; ++t) {
      std::vector<float> g{0.5f, -0.25f * (t + 1)};
      auto [np, ns] = optim::sgd_update(p, {{"w", from_vector(g, {2})}}, s, scalar(0.1f), {0.9, nesterov});
      p = np;
      s = ns;
      for (int i = 0; i < 2; ++i) {
        mom[i] = 0.9 * mom[i] + g[i];
        w[i] -= 0.1 * (nesterov ? g[i] + 0.9 * mom[i] : mom[i]);
      }
    }
    auto got = vals(p.at("w"));
    EXPECT_NEAR(got[0], w[0], 1e-6);
    EXPECT_NEAR(got[1], w[1], 1e-6);
  }
}

TEST(Optim, ClipByGlobalNormAndSchedule) {
  Params g{{"a", from_vector<float>({3, 0}, {2})}, {"b", from_vector<float>({4}, {1})}};
  auto [clipped, norm] = optim::clip_by_global_norm(g, 1.0);
  EXPECT_NEAR(norm.item<float>(), 5.0f, 1e-6);
  EXPECT_NEAR(vals(clipped.at("a"))[0], 0.6, 1e-6);
  EXPECT_NEAR(vals(clipped.at("b"))[0], 0.8, 1e-6);
  auto [same, n2] = optim::clip_by_global_norm(g, 10.0);
  EXPECT_NEAR(vals(same.at("b"))[0], 4.0, 1e-6);
  EXPECT_DOUBLE_EQ(optim::warmup_cosine(0, 1.0, 10, 110), 0.1);
  EXPECT_DOUBLE_EQ(optim::warmup_cosine(9, 1.0, 10, 110), 1.0);
  EXPECT_NEAR(optim::warmup_cosine(10, 1.0, 10, 110), 1.0, 1e-12);
  EXPECT_NEAR(optim::warmup_cosine(60, 1.0, 10, 110), 0.55, 1e-12);  // halfway: 0.1 + 0.9 * 0.5
  EXPECT_NEAR(optim::warmup_cosine(110, 1.0, 10, 110), 0.1, 1e-12);
  EXPECT_PARTIX_ERROR(optim::clip_by_global_norm(g, 0.0), "[clip_by_global_norm]");
}

TEST(Optim, HalfPrecisionParametersKeepF32MasterWeights) {
  // Updates of 1e-4 vanish against 1.0 in bf16 (spacing 2^-7) but accumulate in the master.
  Params p{{"w", astype(ones({4}), DType::BF16)}};
  optim::AdamWState s = optim::adamw_init(p);
  ASSERT_EQ(s.master.at("w").dtype(), DType::F32);
  optim::AdamWConfig c{0.0, 0.0, 1e-8, 0.0};  // plain sign-like steps of size lr
  for (int t = 0; t < 100; ++t) {
    auto [np, ns] = optim::adamw_update(p, {{"w", astype(ones({4}), DType::BF16)}}, s, scalar(1e-4f), c);
    p = np;
    s = ns;
  }
  EXPECT_EQ(p.at("w").dtype(), DType::BF16);
  EXPECT_NEAR(vals(s.master.at("w"))[0], 0.99, 1e-4);
  EXPECT_NEAR(vals(p.at("w"))[0], 0.99, 4e-3);  // the bf16 copy follows the master
}

TEST(Optim, StateIsShardedLikeTheParameters) {
  Mesh mesh({8}, {"data"});
  Params p{{"w", device_put(zeros({64, 16}), NamedSharding(mesh, P("data")))},
           {"b", device_put(zeros({16}), NamedSharding(mesh, P()))}};
  optim::AdamWState s = optim::adamw_init(p);
  EXPECT_EQ(s.mu.at("w").sharding(), NamedSharding(mesh, P("data")));
  EXPECT_EQ(s.nu.at("w").sharding(), NamedSharding(mesh, P("data")));
  EXPECT_EQ(s.mu.at("b").sharding(), NamedSharding(mesh, P()));
  auto [np, ns] = optim::adamw_update(p, {{"w", ones({64, 16})}, {"b", ones({16})}}, s, scalar(0.1f));
  EXPECT_EQ(np.at("w").sharding(), NamedSharding(mesh, P("data")));
  EXPECT_EQ(ns.mu.at("w").sharding(), NamedSharding(mesh, P("data")));
}

TEST(Optim, FsdpAdamWStepHoldsAnEighthOfTheState) {
  // memory_analysis of a jitted training step: parameters + optimizer state per device.
  Mesh mesh({8}, {"data"});
  auto step = jit([](const Params& p, const optim::AdamWState& s, const Array& x) {
    auto [loss, g] = value_and_grad([](const Params& pp, const Array& xx) {
      return mean(square(matmul(tanh(matmul(xx, pp.at("w1"))), pp.at("w2"))));
    })(p, x);
    return optim::adamw_update(p, Params(g), s, scalar(1e-3f));
  });
  auto bytes_of_state = [&](bool fsdp) {
    PartitionSpec ps = fsdp ? P("data") : P();
    Params p{{"w1", device_put(random::normal(random::key(1), {256, 512}), NamedSharding(mesh, ps))},
             {"w2", device_put(random::normal(random::key(2), {512, 256}), NamedSharding(mesh, ps))}};
    optim::AdamWState s = optim::adamw_init(p);
    Array x = device_put(random::normal(random::key(3), {64, 256}), NamedSharding(mesh, P("data")));
    MemoryAnalysis m = step.lower(p, s, x).memory_analysis();
    // Arguments minus the batch block, the step counter and the captured learning rate.
    return m.argument_bytes[3] - 8 * 256 * 4 - 4 - 4;
  };
  int64_t replicated = bytes_of_state(false), fsdp = bytes_of_state(true);
  EXPECT_EQ(replicated, 3 * 2 * 256 * 512 * 4);  // params, mu, nu
  EXPECT_NEAR(static_cast<double>(fsdp) / static_cast<double>(replicated), 1.0 / 8, 0.05 / 8);
}

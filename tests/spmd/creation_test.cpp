// Created arrays inside traced programs (zeros, ones, full, arange, and the zeros of the VJPs
// of take, take_along_axis, scatter_add and cross_entropy) are program ops that propagation
// shards: a program's arguments are exactly its real arguments' shards, never a captured
// whole array replicated on every device.
#include "test_util.h"

using namespace partix;

namespace {

int64_t shard_bytes(const Array& a) {
  int64_t n = dtype_size(a.dtype());
  for (int64_t d : a.sharding().shard_shape(a.shape())) n *= d;
  return n;
}

// Every device's argument bytes are its shards of `args` and nothing more.
void expect_only_real_arguments(const Lowered& l, const std::vector<Array>& args) {
  int64_t want = 0;
  for (const Array& a : args) want += shard_bytes(a);
  const MemoryAnalysis m = l.memory_analysis();
  for (size_t d = 0; d < m.argument_bytes.size(); ++d) {
    EXPECT_EQ(m.argument_bytes[d], want) << "device " << d << "\n" << l.as_text();
  }
}

struct Mesh42 {
  Mesh mesh = make_mesh({4, 2}, {"data", "model"});
  NamedSharding s(PartitionSpec spec) const { return NamedSharding(mesh, std::move(spec)); }
};

}  // namespace

TEST(Creation, ZerosOnesFullArangeInsideJitAreShardedProgramOps) {
  Mesh42 m;
  Array a = device_put(random::normal(random::key(0), {64, 8, 1024}), m.s(P(Axes{"data", "model"})));
  auto f = jit([](const Array& x) {
    return x + zeros({64, 8, 1024}) + ones({64, 8, 1024}) * 2.0f + full({64, 8, 1024}, 0.5) +
           astype(reshape(arange(64 * 8 * 1024), {64, 8, 1024}), DType::F32);
  });
  Lowered l = f.lower(a);
  expect_only_real_arguments(l, {a});
  // The created values are computed blockwise: the temporaries are a few shards, not the
  // global [64, 8, 1024] (2 MiB) array.
  for (int64_t t : l.memory_analysis().peak_temp_bytes) EXPECT_LE(t, 4 * shard_bytes(a));
  // Values: the same as the unsharded computation.
  std::vector<float> x = a.to_vector<float>(), got = f(a).to_vector<float>();
  for (size_t i = 0; i < x.size(); i += 997) {
    EXPECT_FLOAT_EQ(got[i], x[i] + 0 + 2 + 0.5f + static_cast<float>(i)) << i;
  }
}

TEST(Creation, EmbeddingGradientCarriesNoWholeTable) {
  Mesh42 m;
  // A vocab-parallel table [16384, 64] (4 MiB; 2 MiB per device over 'model').
  Array table = device_put(random::normal(random::key(1), {16384, 64}), m.s(P("model")));
  Array ids = device_put(random::randint(random::key(2), {32, 16}, 0, 16384), m.s(P("data")));
  auto g = jit([](const Array& t, const Array& i) -> Array {
    return grad([&](const Array& tt) { return sum(square(take(tt, i, 0))); })(t);
  });
  Lowered l = g.lower(table, ids);
  expect_only_real_arguments(l, {table, ids});
  for (int64_t t : l.memory_analysis().peak_temp_bytes) EXPECT_LE(t, 2 * shard_bytes(table));
  for (const std::string& w : l.warnings()) {
    EXPECT_EQ(w.find("scatter"), std::string::npos) << "duplicated scatter: " << w;
  }
  // Against the gradient computed on one device.
  Array ids0 = device_put(ids, devices()[0]);
  Array want = grad([&](const Array& tt) { return sum(square(take(tt, ids0, 0))); })(
      device_put(table, devices()[0]));
  EXPECT_EQ(g(table, ids).to_vector<float>(), want.to_vector<float>());
}

TEST(Creation, CrossEntropyAndTakeAlongAxisGradientsCarryNoWholeLogits) {
  Mesh42 m;
  Array logits = device_put(random::normal(random::key(3), {64, 512}), m.s(P("data", "model")));
  Array labels = device_put(random::randint(random::key(4), {64}, 0, 512), m.s(P("data")));
  auto loss = [](const Array& lg, const Array& lb) { return mean(cross_entropy(lg, lb)); };
  auto g = jit([&](const Array& lg, const Array& lb) -> Array { return grad(loss)(lg, lb); });
  Lowered l = g.lower(logits, labels);
  expect_only_real_arguments(l, {logits, labels});
  Array want = grad(loss)(device_put(logits, devices()[0]), device_put(labels, devices()[0]));
  std::vector<float> got = g(logits, labels).to_vector<float>(), w = want.to_vector<float>();
  ASSERT_EQ(got.size(), w.size());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(got[i], w[i], 1e-6f) << i;
}

TEST(Creation, ScatterAddGradientCarriesNoWholeOperand) {
  Mesh42 m;
  Array x = device_put(random::normal(random::key(5), {1024, 32}), m.s(P("data")));
  Array idx = device_put(random::randint(random::key(6), {64}, 0, 1024), m.s(P()));
  Array upd = device_put(random::normal(random::key(7), {64, 32}), m.s(P()));
  auto f = [](const Array& a, const Array& i, const Array& u) {
    return sum(square(scatter_add(a, i, u, 0)));
  };
  auto g = jit([&](const Array& a, const Array& i, const Array& u) {
    return grad(f, std::vector<int>{0, 2})(a, i, u);
  });
  expect_only_real_arguments(g.lower(x, idx, upd), {x, idx, upd});
}

TEST(Creation, ShardedCreationFillsOnlyEachDevicesBlock) {
  Mesh42 m;
  reset_peak_memory_stats();
  std::vector<int64_t> before;
  for (int d = 0; d < 8; ++d) before.push_back(memory_stats(d).bytes_in_use);
  // 1000 x 256 f32 (1000 KiB) split 8 ways, uneven: 125 rows each.
  Array z = zeros({1000, 256}, DType::F32, m.s(P(Axes{"data", "model"})));
  Array o = full({1000, 256}, 3.0, DType::F32, m.s(P(Axes{"data", "model"})));
  Array r = arange(1003, DType::I32, m.s(P("data")));
  EXPECT_EQ(z.sharding(), m.s(P(Axes{"data", "model"})));
  for (int d = 0; d < 8; ++d) {
    // Each device holds its blocks; no device ever held a whole array.
    EXPECT_LE(memory_stats(d).peak_bytes_in_use - before[static_cast<size_t>(d)],
              2 * 125 * 256 * 4 + 251 * 4 + 4096)
        << "device " << d;
  }
  std::vector<float> zv = z.to_vector<float>(), ov = o.to_vector<float>();
  EXPECT_EQ(zv, std::vector<float>(1000 * 256, 0.0f));
  EXPECT_EQ(ov, std::vector<float>(1000 * 256, 3.0f));
  std::vector<int32_t> rv = r.to_vector<int32_t>();
  for (int32_t i = 0; i < 1003; ++i) ASSERT_EQ(rv[static_cast<size_t>(i)], i);
  EXPECT_PARTIX_ERROR(zeros({10, 3}, DType::F32, m.s(P(None, None, "data"))), "[NamedSharding]");
}

#include <cmath>
#include <numeric>

#include "prim/random_core.h"
#include "test_util.h"

using namespace partix;

TEST(Threefry, KnownAnswerVectors) {
  // Threefry-2x32 with 20 rounds: the known-answer vectors of Salmon et al. (Random123).
  auto r = prim::threefry2x32(0, 0, 0, 0);
  EXPECT_EQ(r.first, 0x6b200159u);
  EXPECT_EQ(r.second, 0x99ba4efeu);
  r = prim::threefry2x32(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(r.first, 0x1cb996fcu);
  EXPECT_EQ(r.second, 0xbb002be7u);
  r = prim::threefry2x32(0x13198a2eu, 0x03707344u, 0x243f6a88u, 0x85a308d3u);
  EXPECT_EQ(r.first, 0xc4923a9cu);
  EXPECT_EQ(r.second, 0x483df7a0u);
}

TEST(Random, ValueAtIndexDependsOnlyOnKeyAndIndex) {
  Array k = random::key(42);
  std::vector<float> a = random::uniform(k, {16}).to_vector<float>();
  std::vector<float> b = random::uniform(k, {4, 4}).to_vector<float>();
  std::vector<float> c = random::uniform(k, {8}).to_vector<float>();
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::vector<float>(a.begin(), a.begin() + 8), c);
  // Same key, same values; another key, other values.
  EXPECT_EQ(random::uniform(random::key(42), {16}).to_vector<float>(), a);
  EXPECT_NE(random::uniform(random::key(43), {16}).to_vector<float>(), a);
}

// The kernel draws 16 counters at a time along each row; every element, sharded or not, rows
// of any length, equals the scalar threefry of its global index.
TEST(Random, UniformEqualsScalarThreefryOfEachGlobalIndex) {
  Array k = random::key(7);
  const std::vector<int32_t> kw = k.to_vector<int32_t>();
  auto oracle = [&](int64_t g) {
    const uint32_t x0 = prim::threefry2x32(static_cast<uint32_t>(kw[0]), static_cast<uint32_t>(kw[1]),
                                           static_cast<uint32_t>(static_cast<uint64_t>(g) >> 32),
                                           static_cast<uint32_t>(g)).first;
    return static_cast<float>(x0 >> 8) * 0x1.0p-24f;
  };
  for (const Shape& shape : {Shape{}, Shape{1}, Shape{15}, Shape{17}, Shape{5, 37}, Shape{3, 2, 33}}) {
    std::vector<float> got = random::uniform(k, shape).to_vector<float>();
    ASSERT_EQ(static_cast<int64_t>(got.size()), shape_size(shape));
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], oracle(static_cast<int64_t>(i))) << i;
  }
  Mesh mesh({8}, {"x"});
  for (const PartitionSpec& spec : {P("x"), P(None, "x")}) {
    // Rows of 5 per device along the split dimension: runs shorter than the lanes.
    Array a = random::uniform(k, {8, 40}, DType::F32, 0.0, 1.0, NamedSharding(mesh, spec));
    std::vector<float> got = a.to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], oracle(static_cast<int64_t>(i))) << i;
  }
}

TEST(Random, SplitAndFoldInGiveDistinctKeys) {
  Array k = random::key(0);
  Array ks = random::split(k, 4);
  EXPECT_EQ(ks.shape(), (Shape{4, 2}));
  std::vector<std::vector<float>> draws;
  for (int i = 0; i < 4; ++i) draws.push_back(random::uniform(random::key_at(ks, i), {8}).to_vector<float>());
  draws.push_back(random::uniform(random::fold_in(k, 1), {8}).to_vector<float>());
  draws.push_back(random::uniform(random::fold_in(k, 2), {8}).to_vector<float>());
  draws.push_back(random::uniform(k, {8}).to_vector<float>());
  for (size_t i = 0; i < draws.size(); ++i) {
    for (size_t j = i + 1; j < draws.size(); ++j) EXPECT_NE(draws[i], draws[j]) << i << " " << j;
  }
  auto [a, b] = random::split2(k);
  Array two = random::split(k, 2);
  EXPECT_EQ(a.to_vector<int32_t>(), random::key_at(two, 0).to_vector<int32_t>());
  EXPECT_NE(a.to_vector<int32_t>(), b.to_vector<int32_t>());
  // fold_in is deterministic.
  EXPECT_EQ(random::fold_in(k, 7).to_vector<int32_t>(), random::fold_in(k, 7).to_vector<int32_t>());
}

namespace {
void moments(const std::vector<float>& v, double& mean, double& var) {
  mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  var = 0;
  for (float x : v) var += (x - mean) * (x - mean);
  var /= static_cast<double>(v.size());
}
}  // namespace

TEST(Random, DistributionsHaveTheirMoments) {
  const int64_t n = 200000;
  double m, v;
  auto u = random::uniform(random::key(1), {n}).to_vector<float>();
  for (float x : u) ASSERT_TRUE(x >= 0.0f && x < 1.0f);
  moments(u, m, v);
  EXPECT_NEAR(m, 0.5, 0.005);
  EXPECT_NEAR(v, 1.0 / 12, 0.002);
  auto u2 = random::uniform(random::key(1), {n}, DType::F32, -3.0, 5.0).to_vector<float>();
  for (float x : u2) ASSERT_TRUE(x >= -3.0f && x < 5.0f);
  auto z = random::normal(random::key(2), {n}).to_vector<float>();
  moments(z, m, v);
  EXPECT_NEAR(m, 0.0, 0.01);
  EXPECT_NEAR(v, 1.0, 0.02);
  for (float x : z) ASSERT_TRUE(std::isfinite(x));
  auto t = random::truncated_normal(random::key(3), -2.0, 2.0, {n}).to_vector<float>();
  for (float x : t) ASSERT_TRUE(x > -2.0f && x < 2.0f);
  moments(t, m, v);
  EXPECT_NEAR(m, 0.0, 0.01);
  EXPECT_NEAR(v, 0.7737, 0.02);  // variance of N(0,1) truncated to (-2, 2)
  auto b = random::bernoulli(random::key(4), 0.3, {n}).to_vector<bool>();
  double ones = static_cast<double>(std::count(b.begin(), b.end(), true)) / static_cast<double>(n);
  EXPECT_NEAR(ones, 0.3, 0.005);
  auto r = random::randint(random::key(5), {n}, -3, 4).to_vector<int32_t>();
  std::vector<int> hist(7, 0);
  for (int32_t x : r) {
    ASSERT_TRUE(x >= -3 && x < 4);
    hist[static_cast<size_t>(x + 3)]++;
  }
  for (int h : hist) EXPECT_NEAR(h / static_cast<double>(n), 1.0 / 7, 0.005);
}

TEST(Random, HalfPrecisionDrawsStayInRange) {
  auto u = random::uniform(random::key(6), {4096}, DType::BF16).to_vector<bfloat16>();
  for (bfloat16 x : u) ASSERT_TRUE(static_cast<float>(x) >= 0.0f && static_cast<float>(x) < 1.0f);
  auto z = random::normal(random::key(6), {4096}, DType::F16).to_vector<float16>();
  for (float16 x : z) ASSERT_TRUE(std::isfinite(static_cast<float>(x)));
}

TEST(Random, CategoricalFollowsTheLogits) {
  // Logits log(0.1), log(0.6), log(0.3): sample frequencies follow the softmax.
  const int64_t n = 60000;
  Array logits = broadcast_to(log(from_vector<float>({0.1f, 0.6f, 0.3f}, {3})), {n, 3});
  auto s = random::categorical(random::key(7), logits).to_vector<int32_t>();
  std::vector<double> f(3, 0);
  for (int32_t x : s) f[static_cast<size_t>(x)] += 1.0 / n;
  EXPECT_NEAR(f[0], 0.1, 0.01);
  EXPECT_NEAR(f[1], 0.6, 0.01);
  EXPECT_NEAR(f[2], 0.3, 0.01);
}

TEST(Random, BadInput) {
  EXPECT_PARTIX_ERROR(random::uniform(zeros({3}), {2}), "[random.uniform]", "i32[2]");
  EXPECT_PARTIX_ERROR(random::uniform(random::key(0), {2}, DType::I32), "[random.uniform]", "i32");
  EXPECT_PARTIX_ERROR(random::truncated_normal(random::key(0), 1.0, -1.0, {2}), "[random.truncated_normal]");
  EXPECT_PARTIX_ERROR(random::randint(random::key(0), {2}, 3, 3), "[random.randint]");
}

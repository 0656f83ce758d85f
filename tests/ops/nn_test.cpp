// Neural-network composites (src/ops/nn.cpp): activations, softmax, norms, losses, masks;
// against numpy goldens, and bad input.
#include "prim/golden.h"
#include "test_util.h"

namespace partix {
namespace {

using golden::attr;
using golden::Json;
using In = std::vector<Array>;
using Out = std::vector<Array>;

golden::OpEntry op(std::function<Array(const In&, const Json&)> f) {
  return {[f](const In& x, const Json& a) { return Out{f(x, a)}; }, ""};
}

golden::OpTable nn_ops() {
  return {
      {"relu", op([](const In& x, const Json&) { return relu(x[0]); })},
      {"silu", op([](const In& x, const Json&) { return silu(x[0]); })},
      {"gelu",
       op([](const In& x, const Json& a) { return gelu(x[0], attr<bool>(a, "approximate")); })},
      {"softmax",
       op([](const In& x, const Json& a) { return softmax(x[0], attr<int>(a, "axis")); })},
      {"log_softmax",
       op([](const In& x, const Json& a) { return log_softmax(x[0], attr<int>(a, "axis")); })},
      {"logsumexp", op([](const In& x, const Json& a) {
         return logsumexp(x[0], attr<std::vector<int>>(a, "axes"), attr<bool>(a, "keepdims"));
       })},
      {"layer_norm", op([](const In& x, const Json& a) {
         return layer_norm(x[0], x[1], x[2], attr<double>(a, "eps"));
       })},
      {"rms_norm",
       op([](const In& x, const Json& a) { return rms_norm(x[0], x[1], attr<double>(a, "eps")); })},
      {"cross_entropy", op([](const In& x, const Json&) { return cross_entropy(x[0], x[1]); })},
      {"causal_mask", op([](const In&, const Json& a) {
         return causal_mask(attr<int64_t>(a, "t"), attr<int64_t>(a, "s"),
                            attr<int64_t>(a, "offset"));
       })},
      {"clip", op([](const In& x, const Json& a) {
         return clip(x[0], attr<double>(a, "lo"), attr<double>(a, "hi"));
       })},
  };
}

const int kRegistered = golden::register_family("nn", nn_ops);

PARTIX_GOLDEN_SUITE(NnGolden, "nn");

TEST(NnErrors, NamesOpAndShapes) {
  Array x = zeros({2, 5});
  EXPECT_PARTIX_ERROR(softmax(x, 2), "[softmax]", "axis 2", "[2,5]");
  EXPECT_PARTIX_ERROR(log_softmax(x, -3), "[log_softmax]", "axis -3", "[2,5]");
  EXPECT_PARTIX_ERROR(layer_norm(scalar(1.0f), scalar(1.0f), scalar(0.0f)), "[layer_norm]", "rank");
  EXPECT_PARTIX_ERROR(rms_norm(scalar(1.0f), scalar(1.0f)), "[rms_norm]", "rank");
  Array labels = from_vector<int32_t>({0, 1}, {2});
  EXPECT_PARTIX_ERROR(cross_entropy(x, zeros({2, 5}, DType::I32)), "[cross_entropy]", "[2,5]");
  EXPECT_PARTIX_ERROR(cross_entropy(x, from_vector<int32_t>({0, 1, 2}, {3})), "[cross_entropy]",
                      "[2,5]", "[3]");
  EXPECT_PARTIX_ERROR(cross_entropy(x, zeros({2})), "[cross_entropy]", "f32[2]");
  EXPECT_NO_THROW(cross_entropy(x, labels));
}

// An empty axis: softmax and log_softmax of nothing are nothing, logsumexp of nothing is -inf.
TEST(NnEmptyAxis, SoftmaxFamilyAsJax) {
  Array e = zeros({3, 0});
  EXPECT_EQ(softmax(e, 1).shape(), (Shape{3, 0}));
  EXPECT_EQ(log_softmax(e, 1).shape(), (Shape{3, 0}));
  std::vector<float> got = logsumexp(e, {1}).to_vector<float>();
  ASSERT_EQ(got.size(), 3u);
  for (float v : got) EXPECT_EQ(v, -INFINITY);
  EXPECT_EQ(logsumexp(e, {0}).shape(), (Shape{0}));
}

}  // namespace
}  // namespace partix

// checkpoint's save policies (JAX's checkpoint_policies): the gradient is the same under every
// policy, and the traced gradient program recomputes exactly what the policy does not save
// (counted in make_jaxpr's text: each recomputation is one more instruction of its kind).
#include <string>

#include "test_util.h"

using namespace partix;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

SavePolicy policy(SavePolicy::Kind k, std::vector<std::string> names = {}) {
  return SavePolicy{k, std::move(names)};
}

}  // namespace

TEST(RematPolicy, EveryPolicyGivesTheSameGradientAndRecomputesOnlyWhatItDoesNotSave) {
  using Kind = SavePolicy::Kind;
  Array w = random::normal(random::key(1), {4, 3}, DType::F64);
  Array x = random::normal(random::key(2), {2, 4}, DType::F64);
  auto block = [](const Array& a, const Array& b) {
    return sum(sin(checkpoint_name(matmul(a, b), "proj")));
  };
  const Array want = grad([&](const Array& v) { return block(x, v); })(w);
  struct Case {
    SavePolicy p;
    size_t dots, sins;  // in the gradient program
  };
  // Forward: one dot and one sin; backward: two dots (for both operands) and a cos. Without a
  // saved value the remat region holds the forward and the backward recomputes it.
  const std::vector<Case> cases{
      {policy(Kind::kNothing), 4, 2},
      {policy(Kind::kDots), 3, 2},
      {policy(Kind::kDotsWithNoBatchDims), 3, 2},
      {policy(Kind::kNames, {"proj"}), 3, 2},
      {policy(Kind::kNames, {"other"}), 4, 2},
      {policy(Kind::kEverything), 3, 1},
      {policy(Kind::kNamesExcept, {"other"}), 3, 2},
      {policy(Kind::kNamesExcept, {"proj"}), 4, 2},
      {policy(Kind::kPrimitives, {"dot_general"}), 3, 2},
      {policy(Kind::kPrimitives, {"name=proj"}), 3, 2},
      {policy(Kind::kPrimitives, {"sin", "exp"}), 4, 1},
  };
  for (const Case& c : cases) {
    auto g = [&](const Array& v) {
      return Array(grad([&](const Array& u) { return checkpoint(block, c.p)(x, u); })(v));
    };
    SCOPED_TRACE(static_cast<int>(c.p.kind));
    const Array got = g(w);
    const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
    const std::vector<double> j = jit(g)(w).to_vector<double>();
    for (size_t i = 0; i < j.size(); ++i) EXPECT_NEAR(j[i], b[i], 1e-12);
    const std::string text = detail::trace_text({w}, [&](const std::vector<Array>& l) {
      return std::vector<Array>{g(l[0])};
    });
    EXPECT_EQ(count(text, "dot_general"), c.dots) << text;
    EXPECT_EQ(count(text, " sin("), c.sins) << text;
  }
}

TEST(RematPolicy, SavedValuesUnderVmapAndInsideLoops) {
  Array w = random::normal(random::key(3), {3, 3}, DType::F64);
  Array xs = random::normal(random::key(4), {5, 2, 3}, DType::F64);
  auto step = [](const Array& a, const Array& b) { return tanh(matmul(a, b)); };
  auto loss = [&](const Array& v, const SavePolicy& p) {
    auto [h, ys] = scan([&](const Array& c, const Array& xt) {
      Array n = checkpoint(step, p)(c + xt, v);
      return std::pair{n, sum(n)};
    }, zeros({2, 3}, DType::F64), xs);
    return sum(ys);
  };
  const Array want = grad([&](const Array& v) { return loss(v, {}); })(w);
  const Array got = grad([&](const Array& v) {
    return loss(v, SavePolicy{SavePolicy::Kind::kDots, {}});
  })(w);
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
  // Per-example gradients of a checkpointed block with a save policy.
  ArraysFn per = [&](const std::vector<Array>& e) {
    return std::vector<Array>{Array(grad([&](const Array& v) {
      return sum(checkpoint(step, SavePolicy{SavePolicy::Kind::kDots, {}})(e[0], v));
    })(w))};
  };
  Array batch = random::normal(random::key(5), {4, 2, 3}, DType::F64);
  Array pg = vmap(per, {0})({batch})[0];
  for (int i = 0; i < 4; ++i) {
    Array ei = squeeze(slice_axis(batch, 0, i, i + 1), {0});
    Array gi = grad([&](const Array& v) { return sum(step(ei, v)); })(w);
    const std::vector<double> p = squeeze(slice_axis(pg, 0, i, i + 1), {0}).to_vector<double>();
    const std::vector<double> q = gi.to_vector<double>();
    for (size_t k = 0; k < p.size(); ++k) EXPECT_NEAR(p[k], q[k], 1e-12);
  }
  EXPECT_PARTIX_ERROR(checkpoint_name(w, ""), "[checkpoint_name] the name must not be empty");
}

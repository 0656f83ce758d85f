// Explicit sharding rules: result types computed per op at trace time, eagerly and
// under jit, and the errors where a rule has no unique answer. Expected types and errors follow
// JAX's explicit-sharding tutorial (docs.jax.dev, "Explicit sharding") and its sharding rules
// (broadcasting ops: zipped dimensions agree or are None; dot_general: batch and contracting
// dimensions agree, a contraction split in both operands needs out_sharding).
#include "explicit_util.h"

using namespace partix;
using explicit_test::iota_f32;
using explicit_test::ty;

namespace {
const AxisType kE = AxisType::Explicit;

Mesh xy() { return make_mesh({2, 4}, {"X", "Y"}, {kE, kE}); }

}  // namespace

TEST(ExplicitRules, TutorialBroadcastAdd) {
  Mesh m = xy();
  Array arg0 = reshard(iota_f32({4, 1}), NamedSharding(m, P("X", None)));
  Array arg1 = reshard(iota_f32({1, 8}), NamedSharding(m, P(None, "Y")));
  EXPECT_EQ(ty(arg0), "float32[4@X,1]");
  EXPECT_EQ(ty(arg1), "float32[1,8@Y]");
  Array r = arg0 + arg1;
  EXPECT_EQ(ty(r), "float32[4@X,8@Y]");
  EXPECT_EQ(r.sharding().spec(), P("X", "Y"));
  std::vector<std::string> seen;
  auto f = jit([&](const Array& x, const Array& y) {
    Array ans = x + y;
    seen = {ty(x), ty(y), ty(ans)};
    return ans;
  });
  Array j = f(arg0, arg1);
  EXPECT_EQ(seen,
            (std::vector<std::string>{"float32[4@X,1]", "float32[1,8@Y]", "float32[4@X,8@Y]"}));
  EXPECT_EQ(j.sharding().spec(), P("X", "Y"));
  EXPECT_EQ(j.to_vector<float>(), (iota_f32({4, 1}) + iota_f32({1, 8})).to_vector<float>());
}

TEST(ExplicitRules, AxisUsedTwiceIsAnError) {
  Mesh m = xy();
  Array x = reshard(iota_f32({4, 4}), NamedSharding(m, P("X", None)));
  Array y = reshard(iota_f32({4, 4}), NamedSharding(m, P(None, "X")));
  try {
    (void)(x + y);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("[add]"), std::string::npos) << w;
    EXPECT_NE(w.find("float32[4@X,4]"), std::string::npos) << w;
    EXPECT_NE(w.find("float32[4,4@X]"), std::string::npos) << w;
    EXPECT_NE(w.find("'X' twice"), std::string::npos) << w;
  }
  auto f = jit([](const Array& a, const Array& b) { return a + b; });
  EXPECT_THROW(f(x, y), Error);
}

TEST(ExplicitRules, UnaryKeepsAndReductionReplicates) {
  Mesh m = xy();
  Array x = reshard(iota_f32({8, 4}), NamedSharding(m, P("X", "Y")));
  EXPECT_EQ(ty(sin(x)), "float32[8@X,4@Y]");
  Array s = sum(x, {0});
  EXPECT_EQ(ty(s), "float32[4@Y]");
  EXPECT_EQ(s.to_vector<float>(), sum(iota_f32({8, 4}), {0}).to_vector<float>());
}

TEST(ExplicitRules, MatmulRules) {
  Mesh m = xy();
  Array a = reshard(iota_f32({8, 4}), NamedSharding(m, P("X", None)));
  Array b = reshard(iota_f32({4, 16}), NamedSharding(m, P(None, "Y")));
  Array c = matmul(a, b);
  EXPECT_EQ(ty(c), "float32[8@X,16@Y]");
  EXPECT_EQ(c.to_vector<float>(), matmul(iota_f32({8, 4}), iota_f32({4, 16})).to_vector<float>());
  // A contraction split in one operand: reduced, the result replicated over that axis.
  Array a2 = reshard(iota_f32({8, 4}), NamedSharding(m, P(None, "Y")));
  Array r = matmul(a2, reshard(iota_f32({4, 16}), NamedSharding(m, P())));
  EXPECT_EQ(ty(r), "float32[8,16]");
  EXPECT_EQ(r.to_vector<float>(), matmul(iota_f32({8, 4}), iota_f32({4, 16})).to_vector<float>());
  // Split in both: ambiguous.
  Array b2 = reshard(iota_f32({4, 16}), NamedSharding(m, P("Y", None)));
  try {
    (void)matmul(a2, b2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("out_sharding"), std::string::npos) << w;
    EXPECT_NE(w.find("float32[8,4@Y]"), std::string::npos) << w;
    EXPECT_NE(w.find("float32[4@Y,16]"), std::string::npos) << w;
  }
}

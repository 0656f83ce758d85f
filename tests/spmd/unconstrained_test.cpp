// with_sharding_constraint with unconstrained dimensions (JAX's P.UNCONSTRAINED): propagation
// splits the free dimensions as the values around the constraint are split, keeps the others
// as the constraint says, and moves nothing a fully constrained spec would not; vmap leaves the
// batch dimension free; eagerly the free dimensions keep the operand's split.
#include "spmd_test_util.h"
#include "test_util.h"

namespace partix {
namespace {

using testing_util::count_op;

class Unconstrained : public ::testing::Test {
 protected:
  Mesh mesh = make_mesh({4, 2}, {"x", "y"});
  NamedSharding on(PartitionSpec s) const { return NamedSharding(mesh, std::move(s)); }
  Array input() const {
    return device_put(reshape(arange(128, DType::F32), {16, 8}), on(P("x", None)));
  }
};

TEST_F(Unconstrained, AFreeDimensionKeepsTheOperandsSplit) {
  auto f = jit([&](const Array& a) {
    return with_sharding_constraint(a * 2.0, on(P(None, "y")), {0}) + 1.0;
  });
  Array x = input();
  Array y = f(x);
  EXPECT_EQ(y.sharding(), on(P("x", "y")));
  EXPECT_EQ(y.to_vector<float>(), (x * 2.0 + 1.0).to_vector<float>());
  const std::string text = f.lower(x).as_text();
  EXPECT_EQ(count_op(text, "all_gather"), 0) << text;
  EXPECT_NE(f.lower(x).global_text().find("unconstrained=[0]"), std::string::npos);
  // Fully constrained, the same spec gathers the rows.
  auto g = jit([&](const Array& a) { return with_sharding_constraint(a * 2.0, on(P(None, "y"))); });
  EXPECT_EQ(g(x).sharding(), on(P(None, "y")));
  EXPECT_EQ(count_op(g.lower(x).as_text(), "all_gather"), 1);
}

TEST_F(Unconstrained, AFreeDimensionNeverTakesAnAxisTheConstraintNames) {
  Array x = device_put(reshape(arange(128, DType::F32), {16, 8}), on(P("y", None)));
  auto f = jit([&](const Array& a) { return with_sharding_constraint(a, on(P(None, "y")), {0}); });
  Array y = f(x);
  EXPECT_EQ(y.sharding(), on(P(None, "y")));
  EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
}

TEST_F(Unconstrained, UsersDecideAFreeDimension) {
  // The constraint's result feeds a value constrained over 'x' on dim 0: the free dimension
  // takes it from there, so the constraint itself moves nothing.
  auto f = jit([&](const Array& a) {
    Array c = with_sharding_constraint(a, on(P(None, "y")), {0});
    return with_sharding_constraint(c * 3.0, on(P("x", "y")));
  });
  Array x = device_put(reshape(arange(128, DType::F32), {16, 8}), on(P()));
  Array y = f(x);
  EXPECT_EQ(y.sharding(), on(P("x", "y")));
  EXPECT_EQ(y.to_vector<float>(), (x * 3.0).to_vector<float>());
  EXPECT_EQ(count_op(f.lower(x).as_text(), "all_gather"), 0);
}

TEST_F(Unconstrained, EagerlyAFreeDimensionKeepsItsSplit) {
  Array x = input();
  Array y = with_sharding_constraint(x, on(P(None, "y")), {0});
  EXPECT_EQ(y.sharding(), on(P("x", "y")));
  EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
}

TEST_F(Unconstrained, VmapLeavesTheBatchDimensionFree) {
  ArraysFn per_example = [&](const std::vector<Array>& a) {
    return std::vector<Array>{with_sharding_constraint(a[0] * 2.0, on(P("y")))};
  };
  auto f = jit([&](const Array& a) { return vmap(per_example, {0})({a})[0]; });
  Array x = input();
  Array y = f(x);
  EXPECT_EQ(y.sharding(), on(P("x", "y")));
  EXPECT_EQ(count_op(f.lower(x).as_text(), "all_gather"), 0);
  EXPECT_EQ(y.to_vector<float>(), (x * 2.0).to_vector<float>());
}

TEST_F(Unconstrained, GradientsFlowThroughAFreeConstraint) {
  auto loss = [&](const Array& a) {
    return sum(with_sharding_constraint(a * a, on(P(None, "y")), {0}));
  };
  Array x = input();
  Array g = jit(grad(loss))(x);
  EXPECT_EQ(g.to_vector<float>(), (x * 2.0).to_vector<float>());
}

TEST_F(Unconstrained, BadDimensionsAreRefused) {
  Array x = input();
  EXPECT_PARTIX_ERROR(
      jit([&](const Array& a) { return with_sharding_constraint(a, on(P(None, "y")), {1}); })(x),
      "unconstrained dimension 1");
  EXPECT_PARTIX_ERROR(
      jit([&](const Array& a) { return with_sharding_constraint(a, on(P(None, "y")), {2}); })(x),
      "unconstrained dimension 2");
}

}  // namespace
}  // namespace partix

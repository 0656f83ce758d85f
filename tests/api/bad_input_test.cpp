// Bad input to the public API: every case raises partix::Error whose message names the API
// (in brackets) and the offending value. Cases already covered by the per-module tests are
// not repeated here; these are the gaps (overflowing shapes, out-of-range indices, mismatched
// trees, collectives outside shard_map, malformed files, ...).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "io/io_test_util.h"
#include "partix/partix.h"
#include "test_util.h"

namespace partix {
namespace {

using test::TempDir;

constexpr int64_t kBig = int64_t{1} << 40;

Mesh mesh8() { return Mesh({8}, {"x"}); }
Mesh mesh4x2() { return Mesh({4, 2}, {"x", "y"}); }

// Runs f under shard_map over mesh8 with one block of an f32[8] per device.
template <class F>
void on_blocks(F f) {
  Array x = device_put(arange(16, DType::F32), NamedSharding(mesh8(), P("x")));
  (void)shard_map(f, mesh8(), {P("x")}, {P("x")})(x);
}

// ---------------------------------------------------------------------------------------
// Array creation: shapes whose element count overflows, or whose bytes do not fit.

TEST(BadInput, CreationRejectsOverflowingShapes) {
  EXPECT_PARTIX_ERROR(zeros({kBig, kBig}), "[zeros]", "[1099511627776,1099511627776]");
  EXPECT_PARTIX_ERROR(ones({kBig, kBig, 4}), "[ones]", "[1099511627776,1099511627776,4]");
  EXPECT_PARTIX_ERROR(full({int64_t{1} << 62}, 1.0), "[full]", "[4611686018427387904]");
  EXPECT_PARTIX_ERROR(zeros({-2, 3}), "[zeros]", "[-2,3]");
  EXPECT_PARTIX_ERROR(arange(int64_t{1} << 62), "[arange]", "4611686018427387904");
  EXPECT_PARTIX_ERROR(from_vector<float>({}, {int64_t{1} << 32, int64_t{1} << 32}),
                      "[from_vector]", "[4294967296,4294967296]");
  EXPECT_PARTIX_ERROR(iota({kBig, kBig}, 0), "[iota]", "[1099511627776,1099511627776]");
}

TEST(BadInput, HugeButRepresentableShapesFailCleanly) {
  // 2^40 f32 elements: 4 TiB. Never a std::bad_alloc.
  EXPECT_PARTIX_ERROR(zeros({kBig}), "[zeros]", "[1099511627776]");
  EXPECT_PARTIX_ERROR(arange(kBig), "[arange]", "1099511627776");
}

TEST(BadInput, EmptyArrayHandles) {
  Array none;
  EXPECT_PARTIX_ERROR(exp(none), "[Array]", "empty Array");
  EXPECT_PARTIX_ERROR(none + none, "[Array]", "empty Array");
  EXPECT_PARTIX_ERROR(device_put(none, NamedSharding(mesh8(), P())), "[Array]", "empty Array");
  EXPECT_PARTIX_ERROR(visualize_sharding(none), "[Array]", "empty Array");
  EXPECT_PARTIX_ERROR(none.to_vector<float>(), "[Array]", "empty Array");
}

TEST(BadInput, DevicePutAndHostCopies) {
  EXPECT_PARTIX_ERROR(device_put(zeros({2}), Device{-1}), "[device_put]", "device -1");
  EXPECT_PARTIX_ERROR(device_put(zeros({2, 2}), NamedSharding(mesh4x2(), P(None, None, "x"))),
                      "[NamedSharding]", "rank 2");
  EXPECT_PARTIX_ERROR(jit([](const Array& a) {
                        (void)a.to_vector<float>();
                        return a;
                      })(zeros({2})),
                      "[Array.to_vector]", "traced f32[2]");
  EXPECT_PARTIX_ERROR(jit([](const Array& a) {
                        (void)a.addressable_shards();
                        return a;
                      })(zeros({2})),
                      "[Array.addressable_shards]", "traced f32[2]");
  EXPECT_PARTIX_ERROR(scalar(1.0f).item<int32_t>(), "[Array.to_vector]", "i32", "f32");
}

// ---------------------------------------------------------------------------------------
// Mesh, PartitionSpec, NamedSharding

TEST(BadInput, MeshRejectsOverflowAndOutOfRangeCoords) {
  EXPECT_PARTIX_ERROR(Mesh({int64_t{1} << 32, int64_t{1} << 32}, {"x", "y"}), "[Mesh]",
                      "[4294967296,4294967296]");
  EXPECT_PARTIX_ERROR(make_mesh({3, 3}, {"x", "y"}), "[Mesh]", "9 devices", "8");
  EXPECT_PARTIX_ERROR(Mesh({2}, {"x"}, {Device{0}, Device{1}, Device{2}}), "[Mesh]",
                      "2 devices", "3 were given");
  Mesh m = mesh4x2();
  EXPECT_PARTIX_ERROR(m.coords(8), "[Mesh.coords]", "8", "Mesh('x': 4, 'y': 2)");
  EXPECT_PARTIX_ERROR(m.coords(-1), "[Mesh.coords]", "-1");
  EXPECT_PARTIX_ERROR(m.axis_size(""), "[Mesh.axis_size]", "''");
}

TEST(BadInput, NamedShardingIndexQueries) {
  Mesh m = mesh4x2();
  NamedSharding s(m, P("x"));
  EXPECT_PARTIX_ERROR(s.device_index({8}, 8), "[NamedSharding]", "device 8", "8 devices");
  EXPECT_PARTIX_ERROR(s.device_index({8}, -1), "[NamedSharding]", "device -1");
  EXPECT_PARTIX_ERROR(s.device_index({}, 0), "[NamedSharding]", "scalar");
  EXPECT_PARTIX_ERROR(s.replica_id(9), "[NamedSharding]", "device 9");
  EXPECT_PARTIX_ERROR(s.shard_shape({-4}), "[NamedSharding]", "[-4]");
  EXPECT_PARTIX_ERROR(s.devices_indices_map({3, -1}), "[NamedSharding]", "[3,-1]");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P(), {"q"}), "[NamedSharding]", "unreduced axis 'q'");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P("x"), {"x"}), "[NamedSharding]", "'x'",
                      "both unreduced and used");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P(Axes{"y", "q"})), "[NamedSharding]", "'q'");
  EXPECT_PARTIX_ERROR(NamedSharding(m, P(None, "x", Axes{"x", "y"})), "[NamedSharding]",
                      "'x' is used twice");
}

// ---------------------------------------------------------------------------------------
// Shape operations

// Reshapes of arrays with no elements: the factor rule once looped forever looking for a
// segment whose products agree (0 never matches), and the process crashed.
TEST(BadInput, ReshapeOfEmptyArrays) {
  EXPECT_EQ(reshape(zeros({0, 16}), {16, 0}).shape(), (Shape{16, 0}));
  EXPECT_EQ(reshape(zeros({0, 16}), {0, 4, 4}).shape(), (Shape{0, 4, 4}));
  Array split = device_put(zeros({16, 0}), NamedSharding(mesh8(), P("x")));
  EXPECT_EQ(reshape(split, {0, 16}).shape(), (Shape{0, 16}));
  auto f = jit([](const Array& a) { return reshape(a, {4, 0, 4}) * 2.0f; });
  Array y = f(split);
  EXPECT_EQ(y.shape(), (Shape{4, 0, 4}));
  EXPECT_TRUE(y.to_vector<float>().empty());
  EXPECT_PARTIX_ERROR(reshape(zeros({0, 16}), {16, 1}), "[reshape]", "f32[0,16]", "[16,1]");
}

TEST(BadInput, ShapeOps) {
  Array x = zeros({2, 3});
  EXPECT_PARTIX_ERROR(reshape(zeros({0}), {-1, 0}), "[reshape]", "[-1,0]");
  EXPECT_PARTIX_ERROR(reshape(x, {kBig, kBig, 0, -1}), "[reshape]", "f32[2,3]");
  EXPECT_PARTIX_ERROR(transpose(scalar(1.0f), {0}), "[transpose]", "[0]", "f32[]");
  EXPECT_PARTIX_ERROR(transpose(x, {-3, 0}), "[transpose]", "[-3,0]");
  // 3 * 0x5555555555555556 wraps to 2 * 3 = 6 in 64 bits.
  EXPECT_PARTIX_ERROR(reshape(zeros({6}), {3, 0x5555555555555556}), "[reshape]",
                      "[3,6148914691236517206]");
  EXPECT_PARTIX_ERROR(expand_dims(x, -4), "[expand_dims]", "axis -4", "[2,3]");
  EXPECT_PARTIX_ERROR(squeeze(zeros({1, 3}), {0, 0}), "[squeeze]", "axis 0");
  EXPECT_PARTIX_ERROR(moveaxis(x, 0, 2), "[moveaxis]", "axis 2", "[2,3]");
  EXPECT_PARTIX_ERROR(broadcast_in_dim(x, {2, 3}, {0, 5}), "[broadcast_in_dim]", "[0,5]");
  EXPECT_PARTIX_ERROR(broadcast_to(x, {-1, 3}), "[broadcast_to]", "[-1,3]");
  EXPECT_PARTIX_ERROR(broadcast_to(x, {kBig, kBig, 2, 3}), "[broadcast_to]",
                      "[1099511627776,1099511627776,2,3]");
  EXPECT_PARTIX_ERROR(stack({}, 0), "[stack]", "at least one");
  EXPECT_PARTIX_ERROR(stack({x, zeros({3, 2})}, 0), "[stack]", "f32[2,3]", "f32[3,2]");
  EXPECT_PARTIX_ERROR(stack({x, x}, 3), "[stack]", "axis 3");
  EXPECT_PARTIX_ERROR(split(x, -1, 0), "[split]", "-1");
  EXPECT_PARTIX_ERROR(split(x, 2, 2), "[split]", "axis 2", "[2,3]");
  EXPECT_PARTIX_ERROR(slice(x, {0, 0}, {2, 3}, {1, -1}), "[slice]", "stride -1", "f32[2,3]");
  EXPECT_PARTIX_ERROR(pad(scalar(1.0f), {1}, {1}), "[pad]", "f32[]");
  EXPECT_PARTIX_ERROR(pad(x, {int64_t{1} << 62, 0}, {int64_t{1} << 62, 0}), "[pad]", "f32[2,3]",
                      "overflows");
}

TEST(BadInput, ReductionsAndElementwise) {
  Array x = zeros({2, 3});
  EXPECT_PARTIX_ERROR(cumsum(scalar(1.0f), 0), "[cumsum]", "axis 0");
  EXPECT_PARTIX_ERROR(softmax(scalar(1.0f)), "[softmax]", "axis -1");
  EXPECT_PARTIX_ERROR(where(from_vector<bool>({true, false}, {2}), x, x), "[select]", "[2]",
                      "[2,3]");
  EXPECT_PARTIX_ERROR(layer_norm(x, zeros({2}), zeros({3})), "[layer_norm]", "f32[2]", "[2,3]");
  EXPECT_PARTIX_ERROR(layer_norm(x, zeros({3}), zeros({4})), "[layer_norm]", "f32[4]", "[2,3]");
  EXPECT_PARTIX_ERROR(rms_norm(x, zeros({4})), "[rms_norm]", "f32[4]", "[2,3]");
}

TEST(BadInput, ContractionsAndIndexing) {
  Array x = zeros({2, 3});
  Array idx = from_vector<int32_t>({0, 1}, {2});
  EXPECT_PARTIX_ERROR(matmul(zeros({2, 3}), zeros({4})), "[matmul]", "[2,3]", "[4]");
  EXPECT_PARTIX_ERROR(matmul(zeros({5}), zeros({2, 3, 4})), "[matmul]", "[5]", "[2,3,4]");
  EXPECT_PARTIX_ERROR(dot_general(x, zeros({3, 2}), {1}, {0}, {5}, {0}), "[dot_general]",
                      "dimension 5");
  EXPECT_PARTIX_ERROR(einsum("ij", {}), "[einsum]", "'ij'", "1 operands", "0");
  EXPECT_PARTIX_ERROR(einsum("", {x}), "[einsum]", "''");
  EXPECT_PARTIX_ERROR(take(scalar(1.0f), idx, 0), "[take]", "axis 0");
  EXPECT_PARTIX_ERROR(take_along_axis(x, zeros({2, 3}, DType::I32), 2), "[take_along_axis]",
                      "axis 2");
  EXPECT_PARTIX_ERROR(scatter_add(x, idx, zeros({2, 3}), 5), "[scatter_add]", "axis 5");
  EXPECT_PARTIX_ERROR(dynamic_slice(x, {scalar(0), scalar(0)}, {-1, 1}), "[dynamic_slice]", "-1");
  EXPECT_PARTIX_ERROR(one_hot(from_vector<bool>({true}, {1}), 2), "[one_hot]", "bool[1]");
  EXPECT_PARTIX_ERROR(one_hot(idx, -3), "[one_hot]", "-3");
  // Float indices are allowed (JAX compares them with the class numbers).
  EXPECT_EQ(one_hot(from_vector<float>({2.0f, 0.5f}, {2}), 3).to_vector<float>(),
            (std::vector<float>{0, 0, 1, 0, 0, 0}));
  EXPECT_PARTIX_ERROR(causal_mask(-1, 2), "[causal_mask]", "-1");
  EXPECT_PARTIX_ERROR(causal_mask(2, -5), "[causal_mask]", "-5");
  EXPECT_PARTIX_ERROR(top_k(zeros({2, 0}), 1), "[top_k]", "k=1", "f32[2,0]");
}

// ---------------------------------------------------------------------------------------
// jit, with_sharding_constraint, trees

TEST(BadInput, JitOptions) {
  auto id = [](const Array& a) { return a * 2.0; };
  Array x = zeros({8});
  NamedSharding s(mesh8(), P("x"));
  {
    JitOptions o;
    o.in_shardings = {s, s, s};
    EXPECT_PARTIX_ERROR(jit(id, o)(x), "[jit]", "in_shardings has 3 entries", "(1)");
  }
  {
    JitOptions o;
    o.out_shardings = {s, s};
    EXPECT_PARTIX_ERROR(jit(id, o)(x), "[jit]", "out_shardings has 2 entries for 1 results");
  }
  {
    JitOptions o;
    o.donate_argnums = {3};
    EXPECT_PARTIX_ERROR(jit(id, o)(x), "[jit]", "donate_argnums", "3");
  }
  {
    JitOptions o;
    o.donate_argnums = {-1};
    EXPECT_PARTIX_ERROR(jit(id, o)(x), "[jit]", "donate_argnums", "-1");
  }
  {
    JitOptions o;
    o.in_shardings = {NamedSharding(mesh4x2(), P("x", "y"))};
    EXPECT_PARTIX_ERROR(jit(id, o)(x), "[NamedSharding]", "P('x', 'y')", "rank 1");
  }
  {
    JitOptions o;
    o.name = "step";
    Array a = device_put(x, s);
    Array b = device_put(zeros({8}), NamedSharding(mesh4x2(), P("x")));
    // Names both arguments with their shardings, and the fix.
    EXPECT_PARTIX_ERROR(jit([](const Array& p, const Array& q) { return p + q; }, o)(a, b),
                        "[step]", "different meshes", "argument args[0]", "argument args[1]",
                        "P('x')", "device_put one of them");
  }
  {
    JitOptions o;
    o.name = "f";
    Array a = device_put(from_vector<int32_t>({1, 2, 3}, {3}), Device{0});
    Array b = device_put(from_vector<int32_t>({4, 5, 6}, {3}), Device{1});
    // On other devices: JAX's words, each argument with its shape and device ids.
    EXPECT_PARTIX_ERROR(jit([](const Array& p, const Array& q) { return p + q; }, o)(a, b),
                        "[f] Received incompatible devices for jitted computation",
                        "argument args[0] of f with shape int32[3] and device ids [0] on platform "
                        "CPU",
                        "argument args[1] of f with shape int32[3] and device ids [1]");
  }
}

TEST(BadInput, WithShardingConstraint) {
  NamedSharding s(mesh4x2(), P("x", "y"));
  EXPECT_PARTIX_ERROR(with_sharding_constraint(zeros({8}), s), "[NamedSharding]", "rank 1");
  EXPECT_PARTIX_ERROR(with_sharding_constraint(scalar(1.0f), NamedSharding(mesh8(), P("x"))),
                      "[NamedSharding]", "scalar");
  EXPECT_PARTIX_ERROR(with_sharding_constraint(Array(), s), "[Array]", "empty Array");
}

TEST(BadInput, TreeUnflattenChecksLeafCount) {
  Params proto{{"a", zeros({1})}, {"b", zeros({1})}};
  EXPECT_PARTIX_ERROR(tree_unflatten(proto, {zeros({1})}), "[tree_unflatten]", "1 leaves",
                      "2");
  EXPECT_PARTIX_ERROR(tree_unflatten(proto, {zeros({1}), zeros({1}), zeros({1})}),
                      "[tree_unflatten]", "3 leaves", "2");
  std::vector<Array> vproto{zeros({1})};
  EXPECT_PARTIX_ERROR(tree_unflatten(vproto, {}), "[tree_unflatten]", "0 leaves", "1");
  EXPECT_PARTIX_ERROR(Tree().params(), "[grad]", "Array");
}

// ---------------------------------------------------------------------------------------
// shard_map and collectives

TEST(BadInput, ShardMapSpecs) {
  Mesh m = mesh8();
  Array x = device_put(zeros({8}), NamedSharding(m, P("x")));
  auto id = [](const Array& b) { return b; };
  EXPECT_PARTIX_ERROR(shard_map(id, m, {P("x")}, {P("x"), P("x")})(x), "[shard_map]",
                      "2 out_specs for 1 results");
  EXPECT_PARTIX_ERROR(shard_map(id, m, {}, {P("x")})(x), "[shard_map]", "0 in_specs for 1");
  EXPECT_PARTIX_ERROR(shard_map(id, m, {P("x")}, {P("x", None)})(x), "[NamedSharding]",
                      "rank 1");
  auto nested = [m](const Array& b) {
    return shard_map([](const Array& c) { return c; }, m, {P()}, {P()})(b);
  };
  EXPECT_PARTIX_ERROR(shard_map(nested, m, {P("x")}, {P("x")})(x), "[shard_map]",
                      "inside a shard_map");
}

TEST(BadInput, CollectivesOutsideShardMap) {
  Array x = zeros({8});
  EXPECT_PARTIX_ERROR(pmean(x, "x"), "[pmean]", "outside shard_map", "'x'");
  EXPECT_PARTIX_ERROR(pmax(x, "x"), "[pmax]", "outside shard_map");
  EXPECT_PARTIX_ERROR(pmin(x, "x"), "[pmin]", "outside shard_map");
  EXPECT_PARTIX_ERROR(all_gather(x, "x"), "[all_gather]", "outside shard_map");
  EXPECT_PARTIX_ERROR(psum_scatter(x, "x"), "[psum_scatter]", "outside shard_map");
  EXPECT_PARTIX_ERROR(ppermute(x, "x", {{0, 1}}), "[ppermute]", "outside shard_map");
  EXPECT_PARTIX_ERROR(all_to_all(x, "x", 0, 0), "[all_to_all]", "outside shard_map");
  EXPECT_PARTIX_ERROR(axis_index("x"), "[axis_index]", "outside shard_map");
  EXPECT_PARTIX_ERROR(axis_size("x"), "[axis_size]", "outside shard_map");
  EXPECT_PARTIX_ERROR(pvary(x, "x"), "[pvary]", "outside shard_map");
  EXPECT_PARTIX_ERROR(valid_size(8, "x"), "[valid_size]", "outside shard_map");
}

TEST(BadInput, CollectiveArgumentsInsideShardMap) {
  EXPECT_PARTIX_ERROR(on_blocks([](const Array& b) { return ppermute(b, "x", {{0, 9}}); }),
                      "[ppermute]", "9");
  EXPECT_PARTIX_ERROR(on_blocks([](const Array& b) { return ppermute(b, "x", {{-1, 0}}); }),
                      "[ppermute]", "-1");
  EXPECT_PARTIX_ERROR(on_blocks([](const Array& b) { return psum(b, Axes{"x", "x"}); }),
                      "[psum]", "'x'", "twice");
  EXPECT_PARTIX_ERROR(on_blocks([](const Array& b) { return psum(b, Axes(std::vector<std::string>{})); }),
                      "[psum]", "at least one axis");
  EXPECT_PARTIX_ERROR(on_blocks([](const Array& b) { return all_gather(b, "x", 3); }),
                      "[all_gather]", "axis 3");
  EXPECT_PARTIX_ERROR(on_blocks([](const Array& b) { return psum_scatter(b, "x", 0, true); }),
                      "[psum_scatter]", "f32[2]", "8");
  EXPECT_PARTIX_ERROR(on_blocks([](const Array& b) { return psum_scatter(b, "x", 4); }),
                      "[psum_scatter]", "4");
  EXPECT_PARTIX_ERROR(on_blocks([](const Array& b) { return all_to_all(b, "x", 2, 0); }),
                      "[all_to_all]", "2");
  EXPECT_PARTIX_ERROR(on_blocks([](const Array& b) { return valid_size(-1, "x") + b; }),
                      "[valid_size]", "-1");
}

// ---------------------------------------------------------------------------------------
// grad

TEST(BadInput, GradArguments) {
  auto f = [](const Array& a, const Array& b) { return sum(a * b); };
  Array x = ones({3});
  EXPECT_PARTIX_ERROR(grad(f, -1)(x, x), "[grad]", "argnum -1");
  EXPECT_PARTIX_ERROR(grad(f, std::vector<int>{0, 5})(x, x), "[grad]", "argnum 5");
  EXPECT_PARTIX_ERROR(value_and_grad(f, 2)(x, x), "[grad]", "argnum 2");
  auto g = [](const std::vector<Array>& xs) { return sum(xs[0]); };
  EXPECT_PARTIX_ERROR(grad(g)(std::vector<Array>{x}), "[grad]", "argument 0");
  EXPECT_PARTIX_ERROR(grad([](const Array& a) { return sum(a) > 0.0; })(x), "[grad]", "bool");
}

// ---------------------------------------------------------------------------------------
// random

TEST(BadInput, Random) {
  Array k = random::key(0);
  EXPECT_PARTIX_ERROR(random::split(k, -1), "[random.split]", "-1");
  EXPECT_PARTIX_ERROR(random::split(zeros({2}), 2), "[random.split]", "f32[2]");
  Array ks = random::split(k, 4);
  EXPECT_PARTIX_ERROR(random::key_at(ks, 4), "[random.key_at]", "row 4", "i32[4,2]");
  EXPECT_PARTIX_ERROR(random::key_at(ks, -1), "[random.key_at]", "row -1");
  EXPECT_PARTIX_ERROR(random::key_at(k, 0), "[random.key_at]", "i32[2]");
  EXPECT_PARTIX_ERROR(random::key_at(zeros({4, 2}), 0), "[random.key_at]", "f32[4,2]");
  EXPECT_PARTIX_ERROR(random::fold_in(k, scalar(1.5f)), "[random.fold_in]", "f32[]");
  EXPECT_PARTIX_ERROR(random::fold_in(k, zeros({2}, DType::I32)), "[random.fold_in]", "i32[2]");
  EXPECT_PARTIX_ERROR(random::normal(k, {-1, 2}), "[random.normal]", "[-1,2]");
  EXPECT_PARTIX_ERROR(random::uniform(k, {kBig, kBig}), "[random.uniform]",
                      "[1099511627776,1099511627776]");
  EXPECT_PARTIX_ERROR(random::normal(k, {2}, DType::I32), "[random.normal]", "i32");
  EXPECT_PARTIX_ERROR(random::truncated_normal(k, -1, 1, {2}, DType::Bool),
                      "[random.truncated_normal]", "bool");
  EXPECT_PARTIX_ERROR(random::bernoulli(k, std::nan(""), {2}), "[random.bernoulli]", "nan");
  EXPECT_PARTIX_ERROR(random::bernoulli(k, 1.5, {2}), "[random.bernoulli]", "1.5");
  EXPECT_PARTIX_ERROR(random::uniform(k, {2}, DType::F32, 0.0, std::nan("")),
                      "[random.uniform]", "nan");
  EXPECT_PARTIX_ERROR(random::randint(k, {2}, 0, int64_t{1} << 40), "[random.randint]",
                      "1099511627776", "i32");
  EXPECT_PARTIX_ERROR(random::randint(k, {2}, 0, 5, DType::F32), "[random.randint]", "f32");
  EXPECT_PARTIX_ERROR(random::categorical(k, zeros({2, 3}), 2), "[random.categorical]", "axis 2");
}

// ---------------------------------------------------------------------------------------
// optimizers

TEST(BadInput, OptimizerTreesMustMatch) {
  Params p{{"w", zeros({2})}, {"b", zeros({3})}};
  Params g = p;
  Array lr = scalar(0.1f);
  optim::SgdState s = optim::sgd_init(p);
  optim::SgdState missing = s;
  missing.momentum.erase("b");
  EXPECT_PARTIX_ERROR(optim::sgd_update(p, g, missing, lr), "[sgd_update]", "'b'", "state");
  optim::SgdState wrong = s;
  wrong.momentum["b"] = zeros({4});
  EXPECT_PARTIX_ERROR(optim::sgd_update(p, g, wrong, lr), "[sgd_update]", "'b'", "[4]", "[3]");
  EXPECT_PARTIX_ERROR(optim::sgd_update(p, Params{{"w", zeros({2})}, {"c", zeros({3})}}, s, lr),
                      "[sgd_update]", "'b'");
  EXPECT_PARTIX_ERROR(optim::sgd_update(p, g, s, zeros({2})), "[sgd_update]", "lr", "f32[2]");

  optim::AdamWState a = optim::adamw_init(p);
  optim::AdamWState no_mu = a;
  no_mu.mu.erase("w");
  EXPECT_PARTIX_ERROR(optim::adamw_update(p, g, no_mu, lr), "[adamw_update]", "'w'", "state");
  optim::AdamWState no_count = a;
  no_count.count = Array();
  EXPECT_PARTIX_ERROR(optim::adamw_update(p, g, no_count, lr), "[adamw_update]", "count");
  EXPECT_PARTIX_ERROR(optim::adamw_update(p, Params{{"w", zeros({2})}, {"b", zeros({2})}}, a, lr),
                      "[adamw_update]", "'b'", "[2]", "[3]");
  EXPECT_PARTIX_ERROR(optim::adamw_update(p, g, a, lr, {.b1 = 1.0}), "[adamw_update]", "b1");
  EXPECT_PARTIX_ERROR(optim::adamw_update(p, g, a, lr, {.b2 = -0.5}), "[adamw_update]", "b2");
  EXPECT_PARTIX_ERROR(optim::clip_by_global_norm(g, std::nan("")), "[clip_by_global_norm]", "nan");
}

TEST(BadInput, Schedules) {
  EXPECT_PARTIX_ERROR(optim::warmup_cosine(-1, 1.0, 10, 100), "[warmup_cosine]", "step -1");
  EXPECT_PARTIX_ERROR(optim::warmup_cosine(0, 1.0, -5, 100), "[warmup_cosine]", "warmup -5");
  EXPECT_PARTIX_ERROR(optim::warmup_cosine(0, 1.0, 0, -1), "[warmup_cosine]", "total -1");
}

// ---------------------------------------------------------------------------------------
// nn

TEST(BadInput, ParamInit) {
  Mesh m = mesh4x2();
  nn::LogicalRules rules{{{"mlp", Axes{"y"}}}};
  Array k = random::key(0);
  EXPECT_PARTIX_ERROR(nn::logical_constraint(zeros({4, 2}), {"mlp"}, rules, m),
                      "[logical_constraint]", "1 logical names", "rank 2");
  EXPECT_PARTIX_ERROR(nn::init_params({{"w", {{-2, 4}, {"", "mlp"}}}}, k, m, rules),
                      "[init_params]", "'w'", "[-2,4]");
  EXPECT_PARTIX_ERROR(
      nn::init_params({{"w", {{2, 4}, {"", "mlp"}, nn::Init::kNormal, 0.02, DType::I32}}}, k, m,
                      rules),
      "[init_params]", "'w'", "i32");
  EXPECT_PARTIX_ERROR(nn::init_params({{"w", {{2, 4}, {"", "mlp"}}}}, zeros({2}), m, rules),
                      "[init_params]", "f32[2]");
}

// ---------------------------------------------------------------------------------------
// Files: safetensors, GGUF, tokenizer.json

std::string st_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

TEST(BadInput, SafetensorsFuzz) {
  TempDir dir;
  const std::string path = dir.file("f.safetensors");
  auto expect_bad = [&](const std::string& bytes, const std::string& fragment) {
    SCOPED_TRACE(fragment);
    test::write_bytes(path, bytes);
    EXPECT_PARTIX_ERROR(Safetensors::open(path), "[safetensors]", "f.safetensors", fragment);
  };
  {  // header length 2^64 - 1: header end overflows
    std::string b(8, '\xff');
    expect_bad(b + "{}", "exceeds the limit");
  }
  // Element counts whose product wraps to 0 in 64 bits.
  expect_bad(st_file(R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}})", ""),
             "too many elements");
  expect_bad(st_file(R"({"t": {"dtype": "F32", "shape": [0, 18446744073709551615], "data_offsets": [0, 0]}})", ""),
             "shape");
  // Offsets near 2^64.
  expect_bad(st_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [18446744073709551608, 18446744073709551615]}})",
                     std::string(8, '\0')),
             "data_offsets");
  expect_bad(st_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})", std::string(8, '\0')),
             "data_offsets");
  expect_bad(st_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8.5]}})", std::string(8, '\0')),
             "data_offsets");
  test::write_bytes(path, "");
  EXPECT_PARTIX_ERROR(Safetensors::open(path), "[safetensors]", "f.safetensors", "truncated");
  EXPECT_PARTIX_ERROR(Safetensors::open(dir.file("none/x.safetensors")), "[safetensors]",
                      "cannot open");
}

TEST(BadInput, SafetensorsQueries) {
  TempDir dir;
  const std::string path = dir.file("ok.safetensors");
  save_safetensors(path, {{"a", arange(8, DType::F32)}});
  Safetensors st = Safetensors::open(path);
  EXPECT_PARTIX_ERROR(st.shape("b"), "[safetensors]", "'b'");
  EXPECT_PARTIX_ERROR(st.stored_dtype("b"), "[safetensors]", "'b'");
  EXPECT_PARTIX_ERROR(st.load("a", NamedSharding(mesh4x2(), P("x", "y"))), "[safetensors]", "'a'",
                      "P('x', 'y')");
  EXPECT_PARTIX_ERROR(st.load_all([](const std::string&, const Shape&) {
                        return NamedSharding(Mesh({8}, {"x"}), P(None, "x"));
                      }),
                      "'a'");
  EXPECT_PARTIX_ERROR(save_safetensors(dir.path().string(), {{"a", zeros({1})}}),
                      "[save_safetensors]", dir.path().string());
}

test::GgufBuilder gguf_base() {
  test::GgufBuilder b;
  b.kv_str("general.architecture", "llama");
  b.tensor("w", {4, 2}, 0, 0);
  for (int i = 0; i < 8; ++i) test::GgufBuilder::put<float>(b.data, static_cast<float>(i));
  return b;
}

TEST(BadInput, GgufFuzz) {
  TempDir dir;
  const std::string path = dir.file("g.gguf");
  auto expect_bad = [&](const std::string& bytes, const std::string& fragment) {
    SCOPED_TRACE(fragment);
    test::write_bytes(path, bytes);
    EXPECT_PARTIX_ERROR(GgufFile::open(path), "[gguf]", "g.gguf", fragment);
  };
  // Offsets whose end wraps past 2^64.
  expect_bad(gguf_base().tensor("v", {8}, 0, ~uint64_t{31}).build(), "past the end");
  // Dims whose product wraps to 0.
  expect_bad(gguf_base().tensor("v", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0).build(),
             "too many elements");
  expect_bad(gguf_base().tensor("v", {~uint64_t{0}}, 0, 0).build(), "too many elements");
  {  // a key whose length is 2^63
    test::GgufBuilder b = gguf_base();
    std::string v;
    test::GgufBuilder::put<uint64_t>(v, uint64_t{1} << 63);
    expect_bad(b.kv("k", 8, v).build(), "truncated");
  }
  {
    test::GgufBuilder b = gguf_base();
    b.n_tensors = ~uint64_t{0};
    expect_bad(b.build(), "tensors");
  }
  {
    test::GgufBuilder b = gguf_base();
    b.n_kv = ~uint64_t{0};
    expect_bad(b.build(), "metadata entries");
  }
  expect_bad(std::string("GGUF") + std::string(4, '\0'), "version 0");
  test::write_bytes(path, "");
  EXPECT_PARTIX_ERROR(GgufFile::open(path), "[gguf]", "g.gguf", "truncated");
}

TEST(BadInput, GgufQueries) {
  TempDir dir;
  const std::string path = dir.file("ok.gguf");
  test::write_bytes(path, gguf_base().build());
  GgufFile f = GgufFile::open(path);
  EXPECT_PARTIX_ERROR(f.load("w", NamedSharding(mesh4x2(), P("x", "y", "x"))), "[", "P(");
  EXPECT_PARTIX_ERROR(f.load("w", NamedSharding(mesh4x2(), P(None, None, "x"))), "[gguf]",
                      "tensor 'w' of shape [2,4]", "P(None, None, 'x')");
  EXPECT_PARTIX_ERROR(f.load("nope"), "[gguf]", "'nope'");
  EXPECT_PARTIX_ERROR(f.get_ints("nope"), "[gguf]", "'nope'");
  EXPECT_PARTIX_ERROR(f.tensor_type("nope"), "[gguf]", "'nope'");
}

TEST(BadInput, Tokenizer) {
  TempDir dir;
  test::write_bytes(dir.file("empty.json"), "");
  EXPECT_PARTIX_ERROR(Tokenizer::from_json_file(dir.file("empty.json")), "[Tokenizer]",
                      "empty.json");
  EXPECT_PARTIX_ERROR(Tokenizer::from_json_file(dir.path().string()), "[Tokenizer]");
  EXPECT_PARTIX_ERROR(Tokenizer::from_json("[]", "t.json"), "[Tokenizer]", "t.json");
  EXPECT_PARTIX_ERROR(Tokenizer::from_json("{}", "t.json"), "[Tokenizer]", "t.json", "model");
  EXPECT_PARTIX_ERROR(Tokenizer::from_json("", "t.json"), "[Tokenizer]", "t.json");
  Tokenizer t = Tokenizer::bytes();
  EXPECT_PARTIX_ERROR(t.id_to_token(-1), "[Tokenizer.id_to_token]", "-1");
  EXPECT_PARTIX_ERROR(t.id_to_token(256), "[Tokenizer.id_to_token]", "256");
  EXPECT_PARTIX_ERROR(t.decode({-7}), "[Tokenizer.decode]", "-7");
  EXPECT_PARTIX_ERROR(t.is_special(1000), "[Tokenizer.is_special]", "1000");
}

}  // namespace
}  // namespace partix

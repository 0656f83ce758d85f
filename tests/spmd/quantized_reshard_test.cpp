// Quantized arrays wherever a compiled program moves them: constraints, layout
// changes, out_shardings, take and reshape of sharded weights, a tensor-parallel matmul whose
// weight must be resharded, and device_put on one mesh. Each result is compared with the
// dequantized single-device values (moving blocks is exact), on 2 and on 8 devices.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/quant_blocks.h"
#include "test_util.h"

namespace partix {
namespace {

using testing_quant::random_blocks;
using testing_quant::random_floats;

using testing_quant::quantized;

std::vector<float> values(const Array& a) { return astype(a, DType::F32).to_vector<float>(); }

// Rows `ids` of a row-major [rows, k] matrix.
std::vector<float> rows_of(const std::vector<float>& m, int64_t k,
                           const std::vector<int32_t>& ids) {
  std::vector<float> out;
  for (int32_t r : ids) out.insert(out.end(), m.begin() + r * k, m.begin() + (r + 1) * k);
  return out;
}

struct Case {
  DType dtype;
  int devices;
};

class QuantizedReshard : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    dt_ = GetParam().dtype;
    n_ = GetParam().devices;
    mesh_ = make_mesh({n_}, {"x"});
    b_ = dtype_block_elems(dt_);
    rows_ = 2 * n_;
    k_ = n_ * b_;  // one block column per device when the columns are split
    w_ = quantized(dt_, rows_, k_, 7 + static_cast<uint64_t>(n_));
    want_ = values(w_);
  }
  NamedSharding on(const PartitionSpec& p) const { return NamedSharding(mesh_, p); }
  // The array's blocks on every device are those of its sharding's slice of the global array.
  void expect_placed(const Array& a, const NamedSharding& s) const {
    EXPECT_EQ(a.dtype(), dt_);
    EXPECT_EQ(a.sharding(), s);
    EXPECT_EQ(values(a), want_);
    for (const Shard& sh : a.addressable_shards()) {
      std::vector<float> local = values(sh.data);
      const int64_t r0 = sh.index[0].start, c0 = sh.index[1].start;
      const int64_t nr = sh.data.shape()[0], nc = sh.data.shape()[1];
      for (int64_t r = 0; r < nr && r0 + r < rows_; ++r) {
        for (int64_t c = 0; c < nc && c0 + c < k_; ++c) {
          ASSERT_EQ(local[static_cast<size_t>(r * nc + c)],
                    want_[static_cast<size_t>((r0 + r) * k_ + c0 + c)])
              << "device " << sh.device.id << " at (" << r << ", " << c << ")";
        }
      }
    }
  }

  DType dt_ = DType::Q8_0;
  int n_ = 2;
  Mesh mesh_ = make_mesh({1}, {"x"});
  int64_t b_ = 32, rows_ = 4, k_ = 64;
  Array w_;
  std::vector<float> want_;
};

TEST_P(QuantizedReshard, ConstraintGathersWholeBlocks) {
  Array wc = device_put(w_, on(P(None, "x")));
  auto f = jit([this](const Array& w) { return with_sharding_constraint(w, on(P())); });
  expect_placed(f(wc), on(P()));
}

TEST_P(QuantizedReshard, RowsToColumnsAndBack) {
  Array wc = device_put(w_, on(P(None, "x")));
  auto to_rows =
      jit([this](const Array& w) { return with_sharding_constraint(w, on(P("x", None))); });
  auto to_cols =
      jit([this](const Array& w) { return with_sharding_constraint(w, on(P(None, "x"))); });
  Array wr = to_rows(wc);
  expect_placed(wr, on(P("x", None)));
  expect_placed(to_cols(wr), on(P(None, "x")));
}

TEST_P(QuantizedReshard, OutShardingsReshardTheResult) {
  Array wc = device_put(w_, on(P(None, "x")));
  for (const PartitionSpec& p : {P("x", None), P(), P(None, "x")}) {
    SCOPED_TRACE(p.to_string());
    auto f = jit([](const Array& w) { return w; }, {.out_shardings = {on(p)}});
    expect_placed(f(wc), on(p));
  }
}

TEST_P(QuantizedReshard, TakeRowsOfASplitTable) {
  Array wr = device_put(w_, on(P("x", None)));
  const std::vector<int32_t> ids = {static_cast<int32_t>(rows_ - 1), 0, 3, 1};
  Array idx = from_vector(ids, {4});
  auto f = jit([](const Array& w, const Array& i) { return take(w, i, 0); });
  Array got = f(wr, idx);
  EXPECT_EQ(got.dtype(), dt_);
  EXPECT_EQ(values(got), rows_of(want_, k_, ids));
}

TEST_P(QuantizedReshard, ReshapeOfSplitColumns) {
  Array wc = device_put(w_, on(P(None, "x")));
  auto f = jit([this](const Array& w) { return reshape(w, {2 * rows_, k_ / 2}); });
  Array got = f(wc);
  EXPECT_EQ(got.shape(), (Shape{2 * rows_, k_ / 2}));
  EXPECT_EQ(values(got), want_);
}

TEST_P(QuantizedReshard, TensorParallelMatmulWithAMisplacedWeight) {
  // x split on the contraction, w on its rows: the plan reshards one of them every call.
  const int64_t M = 3;
  Array x = from_vector(random_floats(M * k_, 5), {M, k_});
  std::vector<float> want = einsum("mk,nk->mn", {x, w_}).to_vector<float>();
  auto f = jit([](const Array& a, const Array& c) { return einsum("mk,nk->mn", {a, c}); });
  std::vector<float> got =
      f(device_put(x, on(P(None, "x"))), device_put(w_, on(P("x", None)))).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  double top = 0;
  for (float v : want) top = std::max(top, std::fabs(double(v)));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + top));
}

TEST_P(QuantizedReshard, DevicePutBetweenShardingsOfOneMesh) {
  Array a = device_put(w_, on(P(None, "x")));
  for (const PartitionSpec& p : {P("x", None), P(None, "x"), P(), P("x", None)}) {
    SCOPED_TRACE(p.to_string());
    a = device_put(a, on(p));
    expect_placed(a, on(p));
  }
  // Uneven rows (rows_ + 1 on n devices) to columns and back.
  Array u = quantized(dt_, rows_ + 1, k_, 99);
  const std::vector<float> uw = values(u);
  Array ur = device_put(u, on(P("x", None)));
  Array uc = device_put(ur, on(P(None, "x")));
  EXPECT_EQ(values(uc), uw);
  EXPECT_EQ(values(device_put(uc, on(P("x", None)))), uw);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(dtype_name(info.param.dtype)) + "_" + std::to_string(info.param.devices);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedReshard,
                         ::testing::Values(Case{DType::Q8_0, 2}, Case{DType::Q8_0, 8},
                                           Case{DType::Q4_1, 2}, Case{DType::Q4_1, 8},
                                           Case{DType::Q4_K, 2}, Case{DType::Q4_K, 8}),
                         case_name);

// Two mesh axes: the weight's axes swap dimensions (an all_to_all of whole blocks).
TEST(QuantizedReshard2D, AxesSwapDimensions) {
  Mesh mesh = make_mesh({2, 4}, {"a", "b"});
  Array w = quantized(DType::Q4_1, 8, 8 * 32, 3);
  const std::vector<float> want = values(w);
  Array ab = device_put(w, NamedSharding(mesh, P("a", "b")));
  auto f = jit([&](const Array& x) {
    return with_sharding_constraint(x, NamedSharding(mesh, P("b", "a")));
  });
  Array ba = f(ab);
  EXPECT_EQ(ba.sharding(), NamedSharding(mesh, P("b", "a")));
  EXPECT_EQ(values(ba), want);
  EXPECT_EQ(values(device_put(ba, NamedSharding(mesh, P(None, Axes{"a", "b"})))), want);
}

// A sharding that would split blocks is an error wherever it is asked for, with device_put's
// rule; propagation never picks one on its own.
TEST(QuantizedReshard, ShardingsThatSplitBlocksAreErrors) {
  Mesh mesh = make_mesh({8}, {"x"});
  Array w = quantized(DType::Q8_0, 4, 64, 1);
  const NamedSharding split(mesh, P(None, "x"));
  EXPECT_PARTIX_ERROR(with_sharding_constraint(w, split), "[device_put]", "q8_0[4,64]",
                      "32-element quantization blocks");
  auto constrained = jit([&](const Array& x) { return with_sharding_constraint(x, split); });
  EXPECT_PARTIX_ERROR(constrained(w), "[with_sharding_constraint]", "q8_0[4,64]",
                      "chunks of 8 elements", "32-element quantization blocks");
  auto out = jit([](const Array& x) { return x; }, {.out_shardings = {split}});
  EXPECT_PARTIX_ERROR(out(w), "[jit]", "q8_0[4,64]", "32-element quantization blocks");
  auto in = jit([](const Array& x) { return x; }, {.in_shardings = {split}});
  EXPECT_PARTIX_ERROR(in(w), "[jit]", "q8_0[4,64]", "32-element quantization blocks");
  // x split 8 ways on the contraction of 64: the weight cannot follow, so it stays whole.
  Array x = from_vector(random_floats(2 * 64, 2), {2, 64});
  std::vector<float> want = einsum("mk,nk->mn", {x, w}).to_vector<float>();
  auto mm = jit([](const Array& a, const Array& c) { return einsum("mk,nk->mn", {a, c}); });
  std::vector<float> got = mm(device_put(x, split), w).to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4);
  EXPECT_EQ(mm.lower(device_put(x, split), w).as_text().find("q8_0[4,8]"), std::string::npos);
}

}  // namespace
}  // namespace partix

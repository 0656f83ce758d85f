// Index primitives (src/prim/index.cpp) and their ops: take, take_along_axis, scatter_add,
// dynamic slices, iota, top_k, sort, one_hot; against numpy goldens, and bad input.
#include "prim/golden.h"
#include "test_util.h"
#include "trace/trace.h"

namespace partix {
namespace {

using golden::attr;
using golden::Json;
using In = std::vector<Array>;
using Out = std::vector<Array>;

golden::OpEntry op(std::function<Out(const In&, const Json&)> f) { return {std::move(f), ""}; }

golden::OpTable index_ops() {
  return {
      {"take",
       op([](const In& x, const Json& a) { return Out{take(x[0], x[1], attr<int>(a, "axis"))}; })},
      {"take_along_axis", op([](const In& x, const Json& a) {
         return Out{take_along_axis(x[0], x[1], attr<int>(a, "axis"))};
       })},
      {"scatter_add", op([](const In& x, const Json& a) {
         return Out{scatter_add(x[0], x[1], x[2], attr<int>(a, "axis"))};
       })},
      {"dynamic_slice", op([](const In& x, const Json& a) {
         return Out{dynamic_slice(x[0], In(x.begin() + 1, x.end()), attr<Shape>(a, "sizes"))};
       })},
      {"dynamic_update_slice", op([](const In& x, const Json&) {
         return Out{dynamic_update_slice(x[0], x[1], In(x.begin() + 2, x.end()))};
       })},
      {"iota", op([](const In&, const Json& a) {
         return Out{iota(attr<Shape>(a, "shape"), attr<int>(a, "dimension"),
                         dtype_from_name(attr<std::string>(a, "dtype")))};
       })},
      {"top_k", op([](const In& x, const Json& a) {
         auto [v, i] = top_k(x[0], attr<int64_t>(a, "k"));
         return Out{v, i};
       })},
      {"sort", op([](const In& x, const Json& a) {
         auto [v, i] = sort(x[0], attr<bool>(a, "descending"));
         return Out{v, i};
       })},
      {"one_hot", op([](const In& x, const Json& a) {
         DType dt = dtype_from_name(golden::attr_or<std::string>(a, "dtype", "f32"));
         return Out{one_hot(x[0], attr<int64_t>(a, "n"), dt)};
       })},
  };
}

const int kRegistered = golden::register_family("index", index_ops);

PARTIX_GOLDEN_SUITE(IndexGolden, "index");

Array x45() { return zeros({4, 5}); }
Array i32(std::vector<int32_t> v, Shape s) { return from_vector<int32_t>(v, std::move(s)); }

TEST(IndexErrors, BadIndexDtypes) {
  Array x = x45();
  Array fi = from_vector<float>({0, 1}, {2});
  EXPECT_PARTIX_ERROR(take(x, fi), "[take]", "integers", "f32[2]");
  EXPECT_PARTIX_ERROR(take(x, from_vector<bool>({true}, {1})), "[take]", "integers", "bool[1]");
  EXPECT_PARTIX_ERROR(take_along_axis(x, zeros({4, 1}), 1), "[take_along_axis]", "integers",
                      "f32[4,1]");
  EXPECT_PARTIX_ERROR(scatter_add(x, fi, zeros({2, 5})), "[scatter_add]", "integers", "f32[2]");
  EXPECT_PARTIX_ERROR(dynamic_slice(x, {scalar(1.0f), scalar(0)}, {1, 1}), "[dynamic_slice]",
                      "integers", "f32[]");
  EXPECT_PARTIX_ERROR(dynamic_update_slice(x, zeros({1, 1}), {scalar(0), scalar(0.5)}),
                      "[dynamic_update_slice]", "integers", "f64[]");
  EXPECT_PARTIX_ERROR(detail::bind1("take", {x, fi}, {{"axis", int64_t{0}}}), "[take]",
                      "i32 or i64", "f32[2]");
}

TEST(IndexErrors, ShapesThatDoNotFit) {
  Array x = x45();
  EXPECT_PARTIX_ERROR(take(x, i32({0}, {1}), 2), "[take]", "axis 2", "[4,5]");
  EXPECT_PARTIX_ERROR(take(zeros({0, 3}), i32({0}, {1}), 0), "[take]", "empty axis", "f32[0,3]");
  EXPECT_PARTIX_ERROR(take_along_axis(x, i32({0, 0, 0}, {3, 1}), 1), "[take_along", "i32[3,1]",
                      "f32[4,5]");
  EXPECT_PARTIX_ERROR(take_along_axis(x, i32({0, 0, 0, 0}, {4}), 1), "[take_along", "i32[4]",
                      "f32[4,5]");
  EXPECT_PARTIX_ERROR(scatter_add(x, i32({0, 1}, {2}), zeros({3, 5})), "[scatter_add]", "f32[2,5]",
                      "f32[4,5]", "i32[2]", "f32[3,5]");
  EXPECT_PARTIX_ERROR(dynamic_slice(x, {scalar(0)}, {1, 1}), "[dynamic_slice]", "f32[4,5]",
                      "got 1");
  EXPECT_PARTIX_ERROR(dynamic_slice(x, {scalar(0), scalar(0)}, {5, 1}), "[dynamic_slice]", "size 5",
                      "f32[4,5]");
  EXPECT_PARTIX_ERROR(dynamic_slice(x, {scalar(0), scalar(0)}, {1}), "[dynamic_slice]", "[1]",
                      "f32[4,5]");
  EXPECT_PARTIX_ERROR(dynamic_slice(x, {i32({0, 0}, {2}), scalar(0)}, {1, 1}), "[dynamic_slice]",
                      "scalars", "i32[2]");
  EXPECT_PARTIX_ERROR(dynamic_update_slice(x, zeros({5, 5}), {scalar(0), scalar(0)}),
                      "[dynamic_update_slice]", "f32[5,5]", "f32[4,5]");
  EXPECT_PARTIX_ERROR(dynamic_update_slice(x, zeros({5}), {scalar(0), scalar(0)}),
                      "[dynamic_update_slice]", "f32[5]", "f32[4,5]");
  EXPECT_PARTIX_ERROR(dynamic_update_slice(x, zeros({1, 1}), {scalar(0)}), "[dynamic_update_slice]",
                      "f32[4,5]", "got 1");
  EXPECT_PARTIX_ERROR(iota({-1, 3}, 0), "[iota]", "[-1,3]");
  EXPECT_PARTIX_ERROR(iota({2, 3}, 2), "[iota]", "dimension 2", "[2,3]");
  EXPECT_PARTIX_ERROR(iota({2}, 0, DType::Bool), "[iota]", "numeric", "bool");
  EXPECT_PARTIX_ERROR(top_k(x, 6), "[top_k]", "k=6", "f32[4,5]");
  EXPECT_PARTIX_ERROR(top_k(x, -1), "[top_k]", "k=-1", "f32[4,5]");
  EXPECT_PARTIX_ERROR(top_k(scalar(1.0f), 1), "[top_k]", "rank", "f32[]");
  EXPECT_PARTIX_ERROR(sort(scalar(1.0f)), "[sort]", "scalar");
}

}  // namespace
}  // namespace partix

namespace partix {
namespace {

// A dynamic slice that is one aligned contiguous run of its operand (a layer of a stacked KV
// cache) is a view: its values are right, it is never written in place, and its operand, once
// the view is dead, is still updated in place. A misaligned or strided block is copied.
TEST(DynamicSliceViews, AreExactAndNeverWrittenThrough) {
  for (int64_t row : {int64_t{16}, int64_t{3}}) {  // 64-byte rows: views; 12-byte rows: copies
    SCOPED_TRACE(row);
    std::vector<float> v(static_cast<size_t>(4 * row));
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(k);
    auto body = [row](const Array& x, const Array& i) {
          Array zero = astype(zeros({}), DType::I32);
          Array y = dynamic_slice(x, {i, zero}, {1, row});  // row i
          Array z = y * 2.0;  // may not take y's buffer over: it is x's
          Array w = dynamic_update_slice(x, z + 1.0, {i + 1, zero});  // row i+1 = 2 x[i] + 1
          Array after = dynamic_slice(w, {i + 1, zero}, {1, row});
          Array column = dynamic_slice(w, {zero, zero}, {4, 1});  // strided: copied
          return std::make_tuple(z, w, after, column);
        };
    auto f = jit(body, {.donate_argnums = {0}});
    auto keep = jit(body);
    Array x = from_vector(v, {4, row});
    Array i = scalar<int32_t>(1);
    Array kept = from_vector(v, {4, row});
    auto [z, w, after, column] = f(x, i);
    std::vector<float> want_z, want_w = v, want_col;
    for (int64_t k = 0; k < row; ++k) {
      const float xi = v[static_cast<size_t>(row + k)];
      want_z.push_back(2 * xi);
      want_w[static_cast<size_t>(2 * row + k)] = 2 * xi + 1;
    }
    for (int64_t r = 0; r < 4; ++r) want_col.push_back(want_w[static_cast<size_t>(r * row)]);
    EXPECT_EQ(z.to_vector<float>(), want_z);
    EXPECT_EQ(w.to_vector<float>(), want_w);
    EXPECT_EQ(after.to_vector<float>(),
              std::vector<float>(want_w.begin() + 2 * row, want_w.begin() + 3 * row));
    EXPECT_EQ(column.to_vector<float>(), want_col);
    // Not donated: the argument keeps its values.
    auto [z2, w2, a2, c2] = keep(kept, i);
    EXPECT_EQ(kept.to_vector<float>(), v);
    EXPECT_EQ(w2.to_vector<float>(), want_w);
  }
}

}  // namespace
}  // namespace partix

namespace partix {
namespace {

// The same views on 8 devices: inside shard_map (each device's block of rows of a cache split
// over its columns) and under jit with the operand split over its columns, against one
// device's copy; the operand keeps its values.
TEST(DynamicSliceViews, OnEightDevicesInShardMapAndJitEqualOneDevice) {
  Mesh mesh({8}, {"x"});
  const int64_t rows = 6, cols = 8 * 16;  // each device's block row: 16 floats, 64 bytes
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<float>(k % 97) - 40.0f;
  Array host = from_vector(v, {rows, cols});
  Array x = device_put(host, NamedSharding(mesh, P(None, "x")));
  auto pick = [](const Array& a, const Array& i) {
    Array zero = astype(zeros({}), DType::I32);
    return dynamic_slice(a, {i, zero}, {2, a.shape()[1]}) * 3.0;
  };
  Array i = scalar<int32_t>(3);
  const std::vector<float> want = pick(host, i).to_vector<float>();
  auto in_shard_map = shard_map(pick, mesh, {P(None, "x"), P()}, {P(None, "x")});
  EXPECT_EQ(in_shard_map(x, device_put(i, NamedSharding(mesh, P()))).to_vector<float>(), want);
  EXPECT_EQ(jit(pick)(x, i).to_vector<float>(), want);
  EXPECT_EQ(x.to_vector<float>(), v);
}

}  // namespace
}  // namespace partix

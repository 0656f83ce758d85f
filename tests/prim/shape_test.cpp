// Shape primitives (src/prim/shape.cpp) and their ops: reshape, transpose, broadcast, slice,
// concatenate, pad, rev; against numpy goldens, and bad input.
#include "prim/golden.h"
#include "test_util.h"
#include "trace/trace.h"

namespace partix {
namespace {

using golden::attr;
using golden::Json;
using In = std::vector<Array>;
using Out = std::vector<Array>;
using Ints = std::vector<int>;

golden::OpEntry op(std::function<Array(const In&, const Json&)> f) {
  return {[f](const In& x, const Json& a) { return Out{f(x, a)}; }, ""};
}

golden::OpTable shape_ops() {
  return {
      {"reshape",
       op([](const In& x, const Json& a) { return reshape(x[0], attr<Shape>(a, "shape")); })},
      {"transpose",
       op([](const In& x, const Json& a) { return transpose(x[0], attr<Ints>(a, "perm")); })},
      {"transpose_all", op([](const In& x, const Json&) { return transpose(x[0]); })},
      {"swapaxes", op([](const In& x, const Json& a) {
         return swapaxes(x[0], attr<int>(a, "a"), attr<int>(a, "b"));
       })},
      {"moveaxis", op([](const In& x, const Json& a) {
         return moveaxis(x[0], attr<int>(a, "source"), attr<int>(a, "destination"));
       })},
      {"broadcast_to",
       op([](const In& x, const Json& a) { return broadcast_to(x[0], attr<Shape>(a, "shape")); })},
      {"expand_dims",
       op([](const In& x, const Json& a) { return expand_dims(x[0], attr<int>(a, "axis")); })},
      {"squeeze",
       op([](const In& x, const Json& a) { return squeeze(x[0], attr<Ints>(a, "axes")); })},
      {"flatten", op([](const In& x, const Json&) { return flatten(x[0]); })},
      {"slice", op([](const In& x, const Json& a) {
         if (!a.contains("strides"))
           return slice(x[0], attr<Shape>(a, "start"), attr<Shape>(a, "stop"));
         return slice(x[0], attr<Shape>(a, "start"), attr<Shape>(a, "stop"),
                      attr<Shape>(a, "strides"));
       })},
      {"slice_axis", op([](const In& x, const Json& a) {
         return slice_axis(x[0], attr<int>(a, "axis"), attr<int64_t>(a, "start"),
                           attr<int64_t>(a, "stop"));
       })},
      {"concatenate",
       op([](const In& x, const Json& a) { return concatenate(x, attr<int>(a, "axis")); })},
      {"stack", op([](const In& x, const Json& a) { return stack(x, attr<int>(a, "axis")); })},
      {"split",
       {[](const In& x, const Json& a) {
          return split(x[0], attr<int>(a, "sections"), attr<int>(a, "axis"));
        },
        ""}},
      {"pad", op([](const In& x, const Json& a) {
         return pad(x[0], attr<Shape>(a, "low"), attr<Shape>(a, "high"), attr<double>(a, "value"));
       })},
      {"flip", op([](const In& x, const Json& a) { return flip(x[0], attr<Ints>(a, "axes")); })},
  };
}

const int kRegistered = golden::register_family("shape", shape_ops);

PARTIX_GOLDEN_SUITE(ShapeGolden, "shape");

Array x23() { return from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}); }

TEST(ShapeErrors, InvalidReshapeSizes) {
  Array x = x23();
  EXPECT_PARTIX_ERROR(reshape(x, {4}), "[reshape]", "f32[2,3]", "6 elements", "[4]");
  EXPECT_PARTIX_ERROR(reshape(x, {4, -1}), "[reshape]", "f32[2,3]", "[4,-1]");
  EXPECT_PARTIX_ERROR(reshape(x, {0, -1}), "[reshape]", "f32[2,3]", "[0,-1]");
  EXPECT_PARTIX_ERROR(reshape(x, {-1, -1}), "[reshape]", "f32[2,3]", "[-1,-1]");
  EXPECT_PARTIX_ERROR(reshape(x, {-2, -3}), "[reshape]", "f32[2,3]", "[-2,-3]");
  EXPECT_PARTIX_ERROR(detail::bind1("reshape", {x}, {{"shape", ir::Ints{7}}}), "[reshape]",
                      "f32[2,3]", "[7]");
}

TEST(ShapeErrors, AxesAndPermutations) {
  Array x = x23();
  EXPECT_PARTIX_ERROR(transpose(x, {0, 0}), "[transpose]", "[0,0]", "f32[2,3]");
  EXPECT_PARTIX_ERROR(transpose(x, {0}), "[transpose]", "[0]", "f32[2,3]");
  EXPECT_PARTIX_ERROR(transpose(x, {0, 2}), "[transpose]", "[0,2]", "f32[2,3]");
  EXPECT_PARTIX_ERROR(swapaxes(x, 0, 5), "[swapaxes]", "axis 5", "[2,3]");
  EXPECT_PARTIX_ERROR(moveaxis(x, -3, 0), "[moveaxis]", "axis -3", "[2,3]");
  EXPECT_PARTIX_ERROR(expand_dims(x, 3), "[expand_dims]", "axis 3", "[2,3]");
  EXPECT_PARTIX_ERROR(squeeze(x, {0}), "[squeeze]", "dimension 0", "[2,3]", "size 2");
  EXPECT_PARTIX_ERROR(squeeze(x, {2}), "[squeeze]", "axis 2", "[2,3]");
  EXPECT_PARTIX_ERROR(flip(x, {2}), "[flip]", "axis 2", "[2,3]");
  EXPECT_PARTIX_ERROR(flip(x, {1, -1}), "[flip]", "appears twice");
  EXPECT_PARTIX_ERROR(broadcast_in_dim(x, {2, 3, 4}, {0}), "[broadcast_in_dim]", "f32[2,3]", "[0]");
  EXPECT_PARTIX_ERROR(broadcast_in_dim(x, {3, 2}, {1, 0}), "[broadcast_in_dim]", "[1,0]");
  EXPECT_PARTIX_ERROR(broadcast_in_dim(x, {2, 4}, {0, 1}), "[broadcast_in_dim]", "f32[2,3]",
                      "[2,4]");
}

TEST(ShapeErrors, OutOfRangeStaticSlices) {
  Array x = x23();
  EXPECT_PARTIX_ERROR(slice(x, {0, 0}, {3, 3}), "[slice]", "[0, 3)", "dimension 0", "f32[2,3]");
  EXPECT_PARTIX_ERROR(slice(x, {1, 2}, {0, 3}), "[slice]", "[1, 0)", "f32[2,3]");
  EXPECT_PARTIX_ERROR(slice(x, {-1, 0}, {1, 3}), "[slice]", "[-1, 1)", "f32[2,3]");
  EXPECT_PARTIX_ERROR(slice(x, {0}, {1}), "[slice]", "one entry per dimension", "f32[2,3]");
  EXPECT_PARTIX_ERROR(slice(x, {0, 0}, {2, 3}, {1}), "[slice]", "[1]", "f32[2,3]");
  EXPECT_PARTIX_ERROR(slice(x, {0, 0}, {2, 3}, {1, 0}), "[slice]", "stride 0", "f32[2,3]");
  EXPECT_PARTIX_ERROR(slice_axis(x, 1, 2, 5), "[slice]", "[2, 5)", "f32[2,3]");
  EXPECT_PARTIX_ERROR(slice_axis(x, 2, 0, 1), "[slice]", "axis 2", "[2,3]");
}

TEST(ShapeErrors, ConcatenatePadSplit) {
  Array x = x23();
  Array y = from_vector<float>({1, 2, 3, 4}, {2, 2});
  EXPECT_PARTIX_ERROR(concatenate({x, y}, 0), "[concatenate]", "f32[2,3]", "f32[2,2]", "axis 0");
  EXPECT_PARTIX_ERROR(concatenate({x, zeros({6})}, 0), "[concatenate]", "f32[2,3]", "f32[6]");
  EXPECT_PARTIX_ERROR(concatenate({x, x}, 2), "[concatenate]", "axis 2", "[2,3]");
  EXPECT_PARTIX_ERROR(concatenate({}, 0), "[concatenate]", "at least one");
  EXPECT_PARTIX_ERROR(concatenate({scalar(1.0f), scalar(2.0f)}, 0), "[concatenate]", "scalar");
  EXPECT_PARTIX_ERROR(pad(x, {1}, {1, 1}), "[pad]", "[1]", "[1,1]", "f32[2,3]");
  EXPECT_PARTIX_ERROR(pad(x, {-1, 0}, {0, 0}), "[pad]", "negative", "f32[2,3]");
  EXPECT_PARTIX_ERROR(split(x, 4, 1), "[split]", "[2,3]", "4");
  EXPECT_PARTIX_ERROR(split(x, 0, 0), "[split]", "[2,3]", "0");
}

}  // namespace
}  // namespace partix

// Reduction primitives (src/prim/reduce.cpp) and their ops: sum/mean/var/max/min over axes,
// argmax/argmin, cumsum; against numpy goldens, and bad input.
#include "prim/golden.h"
#include "test_util.h"
#include "trace/trace.h"

namespace partix {
namespace {

using golden::Json;
using golden::OpEntry;
using In = std::vector<Array>;
using Out = std::vector<Array>;

using AxesFn = Array (*)(const Array&, std::vector<int>, bool);

OpEntry over_axes(AxesFn f) {
  return {[f](const In& x, const Json& a) {
            return Out{f(x[0], golden::attr<std::vector<int>>(a, "axes"),
                         golden::attr_or<bool>(a, "keepdims", false))};
          },
          ""};
}

OpEntry along_axis(Array (*f)(const Array&, int, bool), const char* flag) {
  return {
      [f, flag](const In& x, const Json& a) {
        return Out{f(x[0], golden::attr<int>(a, "axis"), golden::attr_or<bool>(a, flag, false))};
      },
      ""};
}

golden::OpTable reduce_ops() {
  return {
      {"sum", over_axes(static_cast<AxesFn>(&sum))},
      {"sum_all", {[](const In& x, const Json&) { return Out{sum(x[0])}; }, ""}},
      {"mean", over_axes(static_cast<AxesFn>(&mean))},
      {"var", over_axes(&var)},
      {"max", over_axes(static_cast<AxesFn>(&max))},
      {"min", over_axes(&min)},
      {"argmax", along_axis(&argmax, "keepdims")},
      {"argmin", along_axis(&argmin, "keepdims")},
      {"cumsum", along_axis(&cumsum, "reverse")},
  };
}

const int kRegistered = golden::register_family("reduce", reduce_ops);

PARTIX_GOLDEN_SUITE(ReduceGolden, "reduce");

Array x23() { return from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}); }

TEST(ReduceErrors, AxesOutOfRangeNameOpAndShape) {
  Array x = x23();
  EXPECT_PARTIX_ERROR(sum(x, {2}), "[sum]", "axis 2", "[2,3]");
  EXPECT_PARTIX_ERROR(sum(x, {-3}), "[sum]", "axis -3", "[2,3]");
  EXPECT_PARTIX_ERROR(sum(x, {0, -2}), "[sum]", "axis -2 appears twice");
  EXPECT_PARTIX_ERROR(mean(x, {7}), "[mean]", "axis 7", "[2,3]");
  EXPECT_PARTIX_ERROR(var(x, {2}), "[var]", "axis 2", "[2,3]");
  EXPECT_PARTIX_ERROR(max(x, {5}, true), "[max]", "axis 5", "[2,3]");
  EXPECT_PARTIX_ERROR(min(x, {-9}), "[min]", "axis -9", "[2,3]");
  EXPECT_PARTIX_ERROR(argmax(x, 2), "[argmax]", "axis 2", "[2,3]");
  EXPECT_PARTIX_ERROR(argmin(x, -3), "[argmin]", "axis -3", "[2,3]");
  EXPECT_PARTIX_ERROR(cumsum(x, 4), "[cumsum]", "axis 4", "[2,3]");
  EXPECT_PARTIX_ERROR(logsumexp(x, {3}), "[logsumexp]", "axis 3", "[2,3]");
  EXPECT_PARTIX_ERROR(argmax(scalar(1.0f), 0), "[argmax]", "axis 0", "scalar");
}

TEST(ReduceErrors, EmptyArgReductionAndBadDtypes) {
  Array empty = zeros({2, 0});
  EXPECT_PARTIX_ERROR(argmax(empty, 1), "[argmax]", "empty axis", "f32[2,0]");
  EXPECT_PARTIX_ERROR(argmin(empty, 1), "[argmin]", "empty axis", "f32[2,0]");
  Array b = from_vector<bool>({true, false}, {2});
  EXPECT_PARTIX_ERROR(detail::bind1("reduce_sum", {b}, {{"axes", ir::Ints{0}}}), "[reduce_sum]",
                      "numeric", "bool[2]");
  EXPECT_PARTIX_ERROR(detail::bind1("cumsum", {b}, {{"axis", int64_t{0}}}), "[cumsum]", "numeric",
                      "bool[2]");
  EXPECT_PARTIX_ERROR(
      detail::bind1("argmax", {x23()}, {{"axis", int64_t{0}}, {"index_dtype", DType::F32}}),
      "[argmax]", "index_dtype");
  EXPECT_PARTIX_ERROR(detail::bind1("reduce_max", {x23()}, {{"axes", ir::Ints{1, 1}}}),
                      "[reduce_max]", "appears twice");
}

}  // namespace
}  // namespace partix

// Elementwise primitives (src/prim/elementwise.cpp) and their ops: unary math, binary
// arithmetic and comparisons, select, convert; against numpy goldens, and bad input.
#include "prim/golden.h"
#include "test_util.h"
#include "trace/trace.h"

namespace partix {
namespace {

using golden::Json;
using golden::OpEntry;
using In = std::vector<Array>;
using Out = std::vector<Array>;

OpEntry unary(Array (*f)(const Array&), const char* prim) {
  return {[f](const In& x, const Json&) { return Out{f(x[0])}; }, prim};
}

template <class F>
OpEntry binary(F f, const char* prim) {
  return {[f](const In& x, const Json&) { return Out{f(x[0], x[1])}; }, prim};
}

// `x op value` or `value op x` with a plain number.
template <class F>
OpEntry with_scalar(F f) {
  return {[f](const In& x, const Json& a) {
            double v = golden::attr<double>(a, "value");
            return Out{golden::attr_or<bool>(a, "left", false) ? f(v, x[0]) : f(x[0], v)};
          },
          ""};
}

golden::OpTable elementwise_ops() {
  return {
      {"neg", {[](const In& x, const Json&) { return Out{-x[0]}; }, "neg"}},
      {"exp", unary(&exp, "exp")},
      {"log", unary(&log, "log")},
      {"sin", unary(&sin, "sin")},
      {"cos", unary(&cos, "cos")},
      {"tanh", unary(&tanh, "tanh")},
      {"sqrt", unary(&sqrt, "sqrt")},
      {"rsqrt", unary(&rsqrt, "rsqrt")},
      {"abs", unary(&abs, "abs")},
      {"sign", unary(&sign, "sign")},
      {"floor", unary(&floor, "floor")},
      {"ceil", unary(&ceil, "ceil")},
      {"round", unary(&round, "round")},
      {"logistic", unary(&logistic, "logistic")},
      {"erf", unary(&erf, "erf")},
      {"erfc", unary(&erfc, "erfc")},
      {"erf_inv", unary(&erf_inv, "erf_inv")},
      {"log1p", unary(&log1p, "log1p")},
      {"expm1", unary(&expm1, "expm1")},
      {"square", unary(&square, "")},
      {"logical_not", unary(&logical_not, "not")},
      {"add", binary([](const Array& a, const Array& b) { return a + b; }, "add")},
      {"sub", binary([](const Array& a, const Array& b) { return a - b; }, "sub")},
      {"mul", binary([](const Array& a, const Array& b) { return a * b; }, "mul")},
      {"div", binary([](const Array& a, const Array& b) { return a / b; }, "div")},
      {"pow", binary([](const Array& a, const Array& b) { return pow(a, b); }, "pow")},
      {"maximum", binary([](const Array& a, const Array& b) { return maximum(a, b); }, "max")},
      {"minimum", binary([](const Array& a, const Array& b) { return minimum(a, b); }, "min")},
      {"equal", binary([](const Array& a, const Array& b) { return equal(a, b); }, "eq")},
      {"not_equal", binary([](const Array& a, const Array& b) { return not_equal(a, b); }, "ne")},
      {"less", binary([](const Array& a, const Array& b) { return a < b; }, "lt")},
      {"less_equal", binary([](const Array& a, const Array& b) { return a <= b; }, "le")},
      {"greater", binary([](const Array& a, const Array& b) { return a > b; }, "gt")},
      {"greater_equal", binary([](const Array& a, const Array& b) { return a >= b; }, "ge")},
      {"logical_and",
       binary([](const Array& a, const Array& b) { return logical_and(a, b); }, "and")},
      {"logical_or", binary([](const Array& a, const Array& b) { return logical_or(a, b); }, "or")},
      {"where", {[](const In& x, const Json&) { return Out{where(x[0], x[1], x[2])}; }, "select"}},
      {"where_scalar_rhs",
       {[](const In& x, const Json& a) {
          return Out{where(x[0], x[1], golden::attr<double>(a, "value"))};
        },
        ""}},
      {"astype",
       {[](const In& x, const Json& a) {
          return Out{astype(x[0], dtype_from_name(golden::attr<std::string>(a, "dtype")))};
        },
        ""}},
      {"scalar_add", with_scalar([](auto p, auto q) { return p + q; })},
      {"scalar_sub", with_scalar([](auto p, auto q) { return p - q; })},
      {"scalar_mul", with_scalar([](auto p, auto q) { return p * q; })},
      {"scalar_div", with_scalar([](auto p, auto q) { return p / q; })},
      {"scalar_less",
       {[](const In& x, const Json& a) { return Out{x[0] < golden::attr<double>(a, "value")}; },
        ""}},
  };
}

const int kRegistered = golden::register_family("elementwise", elementwise_ops);

PARTIX_GOLDEN_SUITE(ElementwiseGolden, "elementwise");

Array f32(std::vector<float> v, Shape s) { return from_vector<float>(v, std::move(s)); }
Array i32(std::vector<int32_t> v, Shape s) { return from_vector<int32_t>(v, std::move(s)); }

TEST(ElementwiseErrors, BroadcastMismatchNamesOpAndShapes) {
  Array a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_PARTIX_ERROR(a + f32({1, 2}, {2}), "[add]", "cannot broadcast", "[2,3]", "[2]");
  EXPECT_PARTIX_ERROR(maximum(a, f32({1, 2, 3, 4, 5, 6}, {3, 2})), "[max]", "[2,3]", "[3,2]");
  EXPECT_PARTIX_ERROR(a < f32({1, 2, 3, 4}, {4}), "[lt]", "[2,3]", "[4]");
  EXPECT_PARTIX_ERROR(where(from_vector<bool>({true, false, true, true}, {4}), a, a), "[select]",
                      "[4]", "[2,3]");
  EXPECT_PARTIX_ERROR(broadcast_to(a, {3, 3}), "[broadcast_to]", "[2,3]", "[3,3]");
  EXPECT_PARTIX_ERROR(broadcast_to(a, {3}), "[broadcast_to]", "[2,3]", "[3]");
}

TEST(ElementwiseErrors, PrimitivesCheckDtypesAndShapes) {
  Array a = f32({1, 2, 3}, {3});
  Array i = i32({1, 2, 3}, {3});
  EXPECT_PARTIX_ERROR(detail::bind1("add", {a, i}), "[add]", "dtypes differ", "f32[3]", "i32[3]");
  EXPECT_PARTIX_ERROR(detail::bind1("mul", {a, f32({1, 2}, {2})}), "[mul]", "shapes differ",
                      "f32[3]", "f32[2]");
  EXPECT_PARTIX_ERROR(detail::bind1("exp", {i}), "[exp]", "floating", "i32[3]");
  EXPECT_PARTIX_ERROR(detail::bind1("pow", {i, i}), "[pow]", "floating", "i32[3]");
  EXPECT_PARTIX_ERROR(detail::bind1("not", {a}), "[not]", "bool", "f32[3]");
  EXPECT_PARTIX_ERROR(detail::bind1("and", {a, a}), "[and]", "integer or bool", "f32[3]");
  EXPECT_PARTIX_ERROR(detail::bind1("neg", {from_vector<bool>({true}, {1})}), "[neg]", "numeric",
                      "bool[1]");
  EXPECT_PARTIX_ERROR(detail::bind1("add", {a}), "[add]", "2 operand", "f32[3]");
  EXPECT_PARTIX_ERROR(detail::bind1("select", {a, a, a}), "[select]", "predicate must be bool",
                      "f32[3]");
  Array p = from_vector<bool>({true, false, true}, {3});
  EXPECT_PARTIX_ERROR(detail::bind1("select", {p, a, i}), "[select]", "dtypes differ", "f32[3]",
                      "i32[3]");
  EXPECT_PARTIX_ERROR(detail::bind1("select", {p, a, f32({1, 2}, {2})}), "[select]",
                      "shapes differ", "f32[2]");
}

}  // namespace
}  // namespace partix

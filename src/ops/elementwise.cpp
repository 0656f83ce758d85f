// Elementwise ops: operators, math functions, where, astype, promotion.
#include <cmath>

#include "core/errors.h"
#include "ops/common.h"

namespace partix {

namespace ops {

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    detail::check(da == db || da == 1 || db == 1, op, "cannot broadcast shapes {} and {}",
                  shape_to_string(a), shape_to_string(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

DType weak_dtype(DType d, double v) {
  bool integral = std::isfinite(v) && v == std::floor(v);
  if (is_floating(d)) return d;
  if (!integral) return DType::F32;
  return d == DType::Bool ? DType::I32 : d;
}

namespace {
Array fit_to(const Array& x, const Shape& s) {
  return (x.ndim() == 0 || x.shape() == s) ? x : broadcast_to(x, s);
}

// On bools, + and max are `or`, * and min are `and`, as in numpy and JAX.
std::string_view bool_prim(std::string_view prim, DType dt) {
  if (dt != DType::Bool) return prim;
  if (prim == "add" || prim == "max") return "or";
  if (prim == "mul" || prim == "min") return "and";
  return prim;
}
}  // namespace

void refuse_quantized(std::string_view op, DType dt) {
  if (!is_quantized(dt)) return;
  detail::fail(op,
               "got a quantized array ({}); quantized dtypes are weight storage for matmul: "
               "astype it to a float dtype first",
               dtype_name(dt));
}

void refuse_created_quantized(std::string_view api, DType dt, const Shape& shape) {
  if (!is_quantized(dt)) return;
  detail::fail(api,
               "cannot create {}{}: quantized arrays are weight storage that comes as blocks "
               "(from_blocks, a GGUF file), not values made in place; create it in a float dtype",
               dtype_name(dt), shape_to_string(shape));
}

Array binary(std::string_view prim, const Array& a, const Array& b) {
  refuse_quantized(prim, a.dtype());
  refuse_quantized(prim, b.dtype());
  DType dt = promote_types(a.dtype(), b.dtype());
  Shape s = broadcast_shapes(prim, a.shape(), b.shape());
  Array x = fit_to(astype(a, dt), s), y = fit_to(astype(b, dt), s);
  return bind(bool_prim(prim, dt), {x, y});
}

Array binary(std::string_view prim, const Array& a, double b) {
  refuse_quantized(prim, a.dtype());
  DType dt = weak_dtype(a.dtype(), b);
  return bind(prim, {astype(a, dt), detail::literal(b, dt)});
}

Array binary(std::string_view prim, double a, const Array& b) {
  refuse_quantized(prim, b.dtype());
  DType dt = weak_dtype(b.dtype(), a);
  return bind(prim, {detail::literal(a, dt), astype(b, dt)});
}

ir::Ints to_ints(const std::vector<int>& v) { return ir::Ints(v.begin(), v.end()); }

int norm_axis(std::string_view op, int axis, const Shape& shape) {
  const int rank = static_cast<int>(shape.size());
  detail::check(rank > 0, op, "axis {} given for a scalar", axis);
  detail::check(axis >= -rank && axis < rank, op, "axis {} is out of range for shape {} (rank {})",
                axis, shape_to_string(shape), rank);
  return axis < 0 ? axis + rank : axis;
}

std::vector<int> norm_axes(std::string_view op, std::vector<int> axes, const Shape& shape) {
  std::vector<int> out;
  for (int a : axes) {
    int n = norm_axis(op, a, shape);
    detail::check(std::find(out.begin(), out.end(), n) == out.end(), op,
                  "axis {} appears twice in [{}]", a, fmt::join(axes, ", "));
    out.push_back(n);
  }
  return out;
}

std::vector<int> all_axes(int rank) {
  std::vector<int> v(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

}  // namespace ops

using ops::binary;
using ops::bind;
using ops::refuse_quantized;

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // Weight storage converts only when asked to: an implicit dequantization would hide a
  // full f32 copy (DESIGN §6.4).
  refuse_quantized("promote_types", a);
  refuse_quantized("promote_types", b);
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  if (is_integral(a) && is_integral(b)) return DType::I64;
  if (is_integral(a)) return b;
  if (is_integral(b)) return a;
  auto rank = [](DType d) { return d == DType::F64 ? 3 : d == DType::F32 ? 2 : 1; };
  if (rank(a) == 1 && rank(b) == 1) return DType::F32;  // f16 with bf16
  return rank(a) >= rank(b) ? a : b;
}

Array operator-(const Array& x) { return bind("neg", {x}); }
Array operator+(const Array& a, const Array& b) { return binary("add", a, b); }
Array operator-(const Array& a, const Array& b) { return binary("sub", a, b); }
Array operator*(const Array& a, const Array& b) { return binary("mul", a, b); }
Array operator/(const Array& a, const Array& b) { return binary("div", a, b); }
Array operator+(const Array& a, double b) { return binary("add", a, b); }
Array operator-(const Array& a, double b) { return binary("sub", a, b); }
Array operator*(const Array& a, double b) { return binary("mul", a, b); }
Array operator/(const Array& a, double b) { return binary("div", a, b); }
Array operator+(double a, const Array& b) { return binary("add", a, b); }
Array operator-(double a, const Array& b) { return binary("sub", a, b); }
Array operator*(double a, const Array& b) { return binary("mul", a, b); }
Array operator/(double a, const Array& b) { return binary("div", a, b); }

namespace {
// Where a truncating remainder r of a / b must move to the divisor's sign (numpy's rule).
Array needs_floor(const Array& r, const Array& b) {
  return logical_and(logical_not(equal(r, 0.0)), not_equal(r < 0.0, b < 0.0));
}
Array scalar_like(const Array& a, double v) { return detail::literal(v, ops::weak_dtype(a.dtype(), v)); }
}  // namespace

Array remainder(const Array& a, const Array& b) {
  Array r = binary("rem", a, b);
  return where(needs_floor(r, b), r + b, r);
}
Array operator%(const Array& a, const Array& b) { return remainder(a, b); }
Array operator%(const Array& a, double b) { return remainder(a, scalar_like(a, b)); }
Array operator%(double a, const Array& b) { return remainder(scalar_like(b, a), b); }

Array floor_divide(const Array& a, const Array& b) {
  Array q = binary("div", a, b);
  if (is_floating(q.dtype())) return floor(q);
  return where(needs_floor(binary("rem", a, b), b), q - 1.0, q);
}
Array floor_divide(const Array& a, double b) { return floor_divide(a, scalar_like(a, b)); }
Array operator<(const Array& a, const Array& b) { return binary("lt", a, b); }
Array operator<=(const Array& a, const Array& b) { return binary("le", a, b); }
Array operator>(const Array& a, const Array& b) { return binary("gt", a, b); }
Array operator>=(const Array& a, const Array& b) { return binary("ge", a, b); }
Array operator<(const Array& a, double b) { return binary("lt", a, b); }
Array operator<=(const Array& a, double b) { return binary("le", a, b); }
Array operator>(const Array& a, double b) { return binary("gt", a, b); }
Array operator>=(const Array& a, double b) { return binary("ge", a, b); }
Array equal(const Array& a, const Array& b) { return binary("eq", a, b); }
Array not_equal(const Array& a, const Array& b) { return binary("ne", a, b); }
Array equal(const Array& a, double b) { return binary("eq", a, b); }
Array logical_and(const Array& a, const Array& b) {
  return binary("and", astype(a, DType::Bool), astype(b, DType::Bool));
}
Array logical_or(const Array& a, const Array& b) {
  return binary("or", astype(a, DType::Bool), astype(b, DType::Bool));
}
Array logical_not(const Array& x) { return bind("not", {astype(x, DType::Bool)}); }
Array& operator+=(Array& a, const Array& b) { return a = a + b; }
Array& operator-=(Array& a, const Array& b) { return a = a - b; }
Array& operator*=(Array& a, const Array& b) { return a = a * b; }

namespace {
// Integer and bool operands of float functions become f32, as in jax.numpy.
Array as_float(std::string_view op, const Array& x) {
  refuse_quantized(op, x.dtype());
  return is_floating(x.dtype()) ? x : astype(x, DType::F32);
}
}  // namespace

Array exp(const Array& x) { return bind("exp", {as_float("exp", x)}); }
Array log(const Array& x) { return bind("log", {as_float("log", x)}); }
Array sin(const Array& x) { return bind("sin", {as_float("sin", x)}); }
Array cos(const Array& x) { return bind("cos", {as_float("cos", x)}); }
Array tanh(const Array& x) { return bind("tanh", {as_float("tanh", x)}); }
Array sqrt(const Array& x) { return bind("sqrt", {as_float("sqrt", x)}); }
Array rsqrt(const Array& x) { return bind("rsqrt", {as_float("rsqrt", x)}); }
Array abs(const Array& x) { return bind("abs", {x}); }
Array sign(const Array& x) { return bind("sign", {x}); }
Array floor(const Array& x) { return is_floating(x.dtype()) ? bind("floor", {x}) : x; }
Array ceil(const Array& x) { return is_floating(x.dtype()) ? bind("ceil", {x}) : x; }
Array round(const Array& x) { return is_floating(x.dtype()) ? bind("round", {x}) : x; }
Array logistic(const Array& x) { return bind("logistic", {as_float("logistic", x)}); }
Array erf(const Array& x) { return bind("erf", {as_float("erf", x)}); }
Array erf_inv(const Array& x) { return bind("erf_inv", {as_float("erf_inv", x)}); }
Array log1p(const Array& x) { return bind("log1p", {as_float("log1p", x)}); }
Array expm1(const Array& x) { return bind("expm1", {as_float("expm1", x)}); }
Array square(const Array& x) { return x * x; }
Array pow(const Array& a, const Array& b) { return binary("pow", as_float("pow", a), b); }
Array pow(const Array& a, double b) { return binary("pow", as_float("pow", a), b); }
Array maximum(const Array& a, const Array& b) { return binary("max", a, b); }
Array minimum(const Array& a, const Array& b) { return binary("min", a, b); }
Array maximum(const Array& a, double b) { return binary("max", a, b); }
Array minimum(const Array& a, double b) { return binary("min", a, b); }

Array where(const Array& cond, const Array& a, const Array& b) {
  DType dt = promote_types(a.dtype(), b.dtype());
  Shape s = ops::broadcast_shapes("select", cond.shape(),
                                  ops::broadcast_shapes("select", a.shape(), b.shape()));
  auto fit = [&](Array x, DType d) {
    x = astype(x, d);
    return (x.ndim() == 0 || x.shape() == s) ? x : broadcast_to(x, s);
  };
  return bind("select", {fit(cond, DType::Bool), fit(a, dt), fit(b, dt)});
}
Array where(const Array& cond, const Array& a, double b) {
  return where(cond, a, detail::literal(b, ops::weak_dtype(a.dtype(), b)));
}
Array where(const Array& cond, double a, const Array& b) {
  return where(cond, detail::literal(a, ops::weak_dtype(b.dtype(), a)), b);
}
Array clip(const Array& x, double lo, double hi) { return minimum(maximum(x, lo), hi); }

Array astype(const Array& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return bind("convert", {x}, {{"dtype", dtype}});
}

Array stop_gradient(const Array& x) { return bind("stop_gradient", {x}); }

NamedScope::NamedScope(std::string name) { detail::push_scope(std::move(name)); }
NamedScope::~NamedScope() { detail::pop_scope(); }

}  // namespace partix

// Reductions: sum, mean, max, min, var, argmax, cumsum, logsumexp.
#include <cmath>

#include "core/errors.h"
#include "ops/common.h"

namespace partix {

using ops::bind;
using ops::to_ints;

namespace {

Shape kept_shape(const Array& x, const std::vector<int>& axes) {
  Shape s = x.shape();
  for (int a : axes) s[static_cast<size_t>(a)] = 1;
  return s;
}

Array reduce(const char* prim, const char* op, const Array& x, std::vector<int> axes,
             bool keepdims) {
  axes = ops::norm_axes(op, axes, x.shape());
  Array in = x.dtype() == DType::Bool ? astype(x, DType::I32) : x;
  Array r = axes.empty() ? in : bind(prim, {in}, {{"axes", to_ints(axes)}});
  return keepdims ? reshape(r, kept_shape(x, axes)) : r;
}

double count(const Array& x, const std::vector<int>& axes) {
  double n = 1;
  for (int a : axes) n *= static_cast<double>(x.shape()[static_cast<size_t>(a)]);
  return n;
}

}  // namespace

Array sum(const Array& x) { return sum(x, ops::all_axes(x.ndim())); }
Array sum(const Array& x, std::vector<int> axes, bool keepdims) {
  return reduce("reduce_sum", "sum", x, std::move(axes), keepdims);
}

Array mean(const Array& x) { return mean(x, ops::all_axes(x.ndim())); }
namespace {
// The dtype a mean or variance accumulates in: f32 for integers and the 16-bit floats (as
// JAX: an f16 sum passes 65504 long before its mean would), the dtype itself otherwise.
DType accumulation_dtype(DType dt) {
  return dt == DType::F32 || dt == DType::F64 ? dt : DType::F32;
}
// The dtype of a mean or variance of x: x's for floats, f32 for integers and bool.
DType mean_dtype(DType dt) { return is_floating(dt) ? dt : DType::F32; }
}  // namespace

Array mean(const Array& x, std::vector<int> axes, bool keepdims) {
  axes = ops::norm_axes("mean", axes, x.shape());
  const DType acc = accumulation_dtype(x.dtype());
  Array xf = x.dtype() == acc ? x : astype(x, acc);
  Array m = sum(xf, axes, keepdims) / count(x, axes);
  return m.dtype() == mean_dtype(x.dtype()) ? m : astype(m, mean_dtype(x.dtype()));
}

namespace {
// numpy's max and min of no elements have no value (numpy and JAX raise); the primitives, as
// lax's, give the reduction's identity.
void check_not_empty(const char* op, const char* what, const Array& x,
                     const std::vector<int>& axes) {
  for (int a : axes) {
    if (x.shape()[static_cast<size_t>(a)] == 0) {
      detail::fail(op, "cannot reduce the empty axis {} of {}{}: it has no {}", a,
                   dtype_name(x.dtype()), shape_to_string(x.shape()), what);
    }
  }
}
}  // namespace

Array max(const Array& x) { return max(x, ops::all_axes(x.ndim())); }
Array max(const Array& x, std::vector<int> axes, bool keepdims) {
  axes = ops::norm_axes("max", axes, x.shape());
  check_not_empty("max", "maximum", x, axes);
  return reduce("reduce_max", "max", x, std::move(axes), keepdims);
}
Array sum(const Array& x, KeepDims) { return sum(x, ops::all_axes(x.ndim()), true); }
Array mean(const Array& x, KeepDims) { return mean(x, ops::all_axes(x.ndim()), true); }
Array max(const Array& x, KeepDims) { return max(x, ops::all_axes(x.ndim()), true); }
Array min(const Array& x) { return min(x, ops::all_axes(x.ndim())); }
Array min(const Array& x, KeepDims) { return min(x, ops::all_axes(x.ndim()), true); }
Array min(const Array& x, std::vector<int> axes, bool keepdims) {
  axes = ops::norm_axes("min", axes, x.shape());
  check_not_empty("min", "minimum", x, axes);
  return reduce("reduce_min", "min", x, std::move(axes), keepdims);
}

Array var(const Array& x, std::vector<int> axes, bool keepdims) {
  axes = ops::norm_axes("var", axes, x.shape());
  const DType acc = accumulation_dtype(x.dtype());
  Array xf = x.dtype() == acc ? x : astype(x, acc);
  Array d = xf - mean(xf, axes, true);
  Array v = mean(d * d, axes, keepdims);
  return v.dtype() == mean_dtype(x.dtype()) ? v : astype(v, mean_dtype(x.dtype()));
}

namespace {
Array arg_reduce(const char* prim, const Array& x, int axis, bool keepdims) {
  axis = ops::norm_axis(prim, axis, x.shape());
  Array in = x.dtype() == DType::Bool ? astype(x, DType::I32) : x;
  Array r = bind(prim, {in}, {{"axis", static_cast<int64_t>(axis)}});
  return keepdims ? expand_dims(r, axis) : r;
}
}  // namespace

Array argmax(const Array& x, int axis, bool keepdims) { return arg_reduce("argmax", x, axis, keepdims); }
Array argmin(const Array& x, int axis, bool keepdims) { return arg_reduce("argmin", x, axis, keepdims); }

Array cumsum(const Array& x, int axis, bool reverse) {
  axis = ops::norm_axis("cumsum", axis, x.shape());
  Array in = x.dtype() == DType::Bool ? astype(x, DType::I32) : x;
  ir::Attrs attrs{{"axis", static_cast<int64_t>(axis)}};
  if (reverse) attrs.set("reverse", true);
  return bind("cumsum", {in}, attrs);
}

Array logsumexp(const Array& x, std::vector<int> axes, bool keepdims) {
  axes = ops::norm_axes("logsumexp", axes, x.shape());
  Array xf = is_floating(x.dtype()) ? x : astype(x, DType::F32);
  // Shift by the (gradient-free) max; an all -inf row shifts by 0 instead, and so does an
  // empty axis, whose sum of no terms is 0 and whose logsumexp is -inf (as JAX).
  bool empty = false;
  Shape kept = x.shape();
  for (int a : axes) {
    empty = empty || kept[static_cast<size_t>(a)] == 0;
    kept[static_cast<size_t>(a)] = 1;
  }
  Array m = empty ? zeros(kept, xf.dtype()) : stop_gradient(max(xf, axes, true));
  if (!empty) m = where(equal(abs(m), INFINITY), 0.0, m);
  Array s = log(sum(exp(xf - m), axes, true)) + m;
  return keepdims ? s : reshape(s, [&] {
    Shape out;
    for (int d = 0; d < x.ndim(); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) out.push_back(x.shape()[static_cast<size_t>(d)]);
    }
    return out;
  }());
}

}  // namespace partix

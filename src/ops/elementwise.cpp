// Elementwise ops: operators, math functions, where, astype, promotion. The functions of the
// elementwise table's rows (ir/elementwise_table.inc) are generated here from it; the
// operators and composites are written with its functors.
#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "ops/common.h"
#include "ir/elementwise_ops.h"

namespace partix {

namespace ops {

Shape broadcast_shapes(std::string_view op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (!(da == db || da == 1 || db == 1)) {
      detail::fail(op, "cannot broadcast shapes {} and {}", shape_to_string(a), shape_to_string(b));
    }
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

ir::Ints to_ints(const std::vector<int>& v) { return ir::Ints(v.begin(), v.end()); }

int norm_axis(std::string_view op, int axis, const Shape& shape) {
  const int rank = static_cast<int>(shape.size());
  detail::check(rank > 0, op, "axis {} given for a scalar", axis);
  if (!(axis >= -rank && axis < rank)) {
    detail::fail(op, "axis {} is out of range for shape {} (rank {})", axis, shape_to_string(shape),
                 rank);
  }
  return axis < 0 ? axis + rank : axis;
}

std::vector<int> norm_axes(std::string_view op, std::vector<int> axes, const Shape& shape) {
  std::vector<int> out;
  for (int a : axes) {
    int n = norm_axis(op, a, shape);
    if (std::find(out.begin(), out.end(), n) != out.end()) {
      detail::fail(op, "axis {} appears twice in [{}]", a, fmt::join(axes, ", "));
    }
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

using ops::bind;
using ops::refuse_quantized;
namespace ew = prim::ew;

namespace {

Array fit_to(const Array& x, const Shape& s) {
  return (x.ndim() == 0 || x.shape() == s) ? x : broadcast_to(x, s);
}

// A binary row's primitive after promotion and broadcasting (scalars stay rank 0). On bool
// operands the row's on_bools primitive runs (+ and max are `or`, * and min `and`, as numpy).
template <class Op>
Array binary(const Array& a, const Array& b) {
  refuse_quantized(Op::kName, a.dtype());
  refuse_quantized(Op::kName, b.dtype());
  DType dt = promote_types(a.dtype(), b.dtype());
  Shape s = ops::broadcast_shapes(Op::kName, a.shape(), b.shape());
  Array x = fit_to(astype(a, dt), s), y = fit_to(astype(b, dt), s);
  return bind(dt == DType::Bool ? Op::OnBools::kName : Op::kName, {x, y});
}

template <class Op>
Array binary(const Array& a, double b) {
  refuse_quantized(Op::kName, a.dtype());
  DType dt = ops::weak_dtype(a.dtype(), b);
  return bind(Op::kName, {astype(a, dt), detail::literal(b, dt)});
}

template <class Op>
Array binary(double a, const Array& b) {
  refuse_quantized(Op::kName, b.dtype());
  DType dt = ops::weak_dtype(b.dtype(), a);
  return bind(Op::kName, {detail::literal(a, dt), astype(b, dt)});
}

// Integer and bool operands of float functions become f32, as in jax.numpy.
Array as_float(std::string_view op, const Array& x) {
  refuse_quantized(op, x.dtype());
  return is_floating(x.dtype()) ? x : astype(x, DType::F32);
}

// The public function of a row: a float-only op's (first) operand becomes f32 first.
template <class Op>
Array unary_fn(const Array& x) {
  if constexpr (Op::kAllowed == ew::Allowed::kFloat) {
    return bind(Op::kName, {as_float(Op::kName, x)});
  } else {
    return bind(Op::kName, {x});
  }
}
template <class Op>
Array binary_fn(const Array& a, const Array& b) {
  if constexpr (Op::kAllowed == ew::Allowed::kFloat) {
    return binary<Op>(as_float(Op::kName, a), b);
  } else {
    return binary<Op>(a, b);
  }
}

}  // namespace

// The rows' public functions (the table's `public` column).
#define PARTIX_EW_CALL(m, ...) m(__VA_ARGS__)
#define PARTIX_EW_API_NONE NONE, _
#define PARTIX_EW_API_FN(f) FN, f
#define PARTIX_EW_API_FN_INT_IDENTITY(f) FN_INT_IDENTITY, f
#define PARTIX_EW_API_FN_BOOL_IDENTITY(f) FN_BOOL_IDENTITY, f
#define PARTIX_EW_UNARY(Op, kind, f) PARTIX_EW_UNARY_##kind(Op, f)
#define PARTIX_EW_UNARY_NONE(Op, f)
#define PARTIX_EW_UNARY_FN(Op, f) \
  Array f(const Array& x) { return unary_fn<Op>(x); }
#define PARTIX_EW_UNARY_FN_INT_IDENTITY(Op, f) \
  Array f(const Array& x) { return is_floating(x.dtype()) ? bind(Op::kName, {x}) : x; }
#define PARTIX_EW_UNARY_FN_BOOL_IDENTITY(Op, f) \
  Array f(const Array& x) { return x.dtype() == DType::Bool ? x : unary_fn<Op>(x); }
#define PARTIX_EW_BINARY(Op, kind, f) PARTIX_EW_BINARY_##kind(Op, f)
#define PARTIX_EW_BINARY_NONE(Op, f)
#define PARTIX_EW_BINARY_FN(Op, f) \
  Array f(const Array& a, const Array& b) { return binary_fn<Op>(a, b); }
#define PARTIX_UNARY(Type, str, api, ...) \
  PARTIX_EW_CALL(PARTIX_EW_UNARY, ew::Type, PARTIX_EW_API_##api)
#define PARTIX_BINARY(Type, str, api, ...) \
  PARTIX_EW_CALL(PARTIX_EW_BINARY, ew::Type, PARTIX_EW_API_##api)
#include "ir/elementwise_table.inc"
#undef PARTIX_UNARY
#undef PARTIX_BINARY

namespace {
DType signed_of_bits(int bits) {
  return bits <= 8 ? DType::I8 : bits <= 16 ? DType::I16 : bits <= 32 ? DType::I32 : DType::I64;
}
// JAX's integer lattice: the wider of two signed or of two unsigned; an unsigned with a signed
// gives the signed type that holds both (u8 with i8 is i16, u16 with i16 is i32). u32 with a
// narrower signed type would be i64, which JAX without x64 holds as i32: so is it here, unless
// an operand is already 64-bit.
DType promote_ints(DType a, DType b) {
  const int ba = int_bits(a), bb = int_bits(b);
  if (is_unsigned(a) == is_unsigned(b)) return ba >= bb ? a : b;
  const int bu = is_unsigned(a) ? ba : bb, bs = is_unsigned(a) ? bb : ba;
  if (bs == 64) return DType::I64;
  return signed_of_bits(std::min(bs > bu ? bs : 2 * bu, 32));
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // Weight storage converts only when asked to: an implicit dequantization would hide a
  // full f32 copy.
  refuse_quantized("promote_types", a);
  refuse_quantized("promote_types", b);
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  if (is_integral(a) && is_integral(b)) return promote_ints(a, b);
  if (is_integral(a)) return b;
  if (is_integral(b)) return a;
  auto rank = [](DType d) { return d == DType::F64 ? 3 : d == DType::F32 ? 2 : 1; };
  if (rank(a) == 1 && rank(b) == 1) return DType::F32;  // f16 with bf16
  return rank(a) >= rank(b) ? a : b;
}

Array operator-(const Array& x) { return bind(ew::Neg::kName, {x}); }
Array operator+(const Array& a, const Array& b) { return binary<ew::Add>(a, b); }
Array operator-(const Array& a, const Array& b) { return binary<ew::Sub>(a, b); }
Array operator*(const Array& a, const Array& b) { return binary<ew::Mul>(a, b); }
Array operator/(const Array& a, const Array& b) { return binary<ew::Div>(a, b); }
Array operator+(const Array& a, double b) { return binary<ew::Add>(a, b); }
Array operator-(const Array& a, double b) { return binary<ew::Sub>(a, b); }
Array operator*(const Array& a, double b) { return binary<ew::Mul>(a, b); }
Array operator/(const Array& a, double b) { return binary<ew::Div>(a, b); }
Array operator+(double a, const Array& b) { return binary<ew::Add>(a, b); }
Array operator-(double a, const Array& b) { return binary<ew::Sub>(a, b); }
Array operator*(double a, const Array& b) { return binary<ew::Mul>(a, b); }
Array operator/(double a, const Array& b) { return binary<ew::Div>(a, b); }

namespace {
// Where a truncating remainder r of a / b must move to the divisor's sign (numpy's rule).
Array needs_floor(const Array& r, const Array& b) {
  return logical_and(logical_not(equal(r, 0.0)), not_equal(r < 0.0, b < 0.0));
}
Array scalar_like(const Array& a, double v) {
  return detail::literal(v, ops::weak_dtype(a.dtype(), v));
}
}  // namespace

// numpy's remainder (the divisor's sign). Of integers, x % 0 is 0, as JAX's jnp.remainder
// (which divides by 1 where the divisor is 0); lax's rem keeps XLA's x.
Array remainder(const Array& a, const Array& b) {
  const Array d = is_floating(b.dtype()) ? b : where(equal(b, 0.0), b + 1.0, b);
  Array r = binary<ew::Rem>(a, d);
  return where(needs_floor(r, d), r + d, r);
}
Array operator%(const Array& a, const Array& b) { return remainder(a, b); }
Array operator%(const Array& a, double b) { return remainder(a, scalar_like(a, b)); }
Array operator%(double a, const Array& b) { return remainder(scalar_like(b, a), b); }

// Floor division; of integers as JAX's jnp.floor_divide: XLA's truncating quotient (x / 0 is
// -1, all ones unsigned) moved down by one where the signs differ and the XLA remainder is
// not 0, so a signed x // 0 is -2 for x != 0.
Array floor_divide(const Array& a, const Array& b) {
  Array q = binary<ew::Div>(a, b);
  if (is_floating(q.dtype())) return floor(q);
  if (is_unsigned(q.dtype())) return q;
  const Array fix =
      logical_and(not_equal(sign(a), sign(b)), logical_not(equal(binary<ew::Rem>(a, b), 0.0)));
  return where(fix, q - 1.0, q);
}
Array floor_divide(const Array& a, double b) { return floor_divide(a, scalar_like(a, b)); }
Array operator<(const Array& a, const Array& b) { return binary<ew::Lt>(a, b); }
Array operator<=(const Array& a, const Array& b) { return binary<ew::Le>(a, b); }
Array operator>(const Array& a, const Array& b) { return binary<ew::Gt>(a, b); }
Array operator>=(const Array& a, const Array& b) { return binary<ew::Ge>(a, b); }
Array operator<(const Array& a, double b) { return binary<ew::Lt>(a, b); }
Array operator<=(const Array& a, double b) { return binary<ew::Le>(a, b); }
Array operator>(const Array& a, double b) { return binary<ew::Gt>(a, b); }
Array operator>=(const Array& a, double b) { return binary<ew::Ge>(a, b); }
Array equal(const Array& a, const Array& b) { return binary<ew::Eq>(a, b); }
Array not_equal(const Array& a, const Array& b) { return binary<ew::Ne>(a, b); }
Array equal(const Array& a, double b) { return binary<ew::Eq>(a, b); }
Array logical_and(const Array& a, const Array& b) {
  return binary<ew::And>(astype(a, DType::Bool), astype(b, DType::Bool));
}
Array logical_or(const Array& a, const Array& b) {
  return binary<ew::Or>(astype(a, DType::Bool), astype(b, DType::Bool));
}
Array logical_not(const Array& x) { return bind(ew::Not::kName, {astype(x, DType::Bool)}); }

namespace {
DType unsigned_of(DType d) {
  switch (int_bits(d)) {
    case 8:
      return DType::U8;
    case 16:
      return DType::U16;
    default:
      return DType::U32;
  }
}
}  // namespace

// An unsigned type's arithmetic shift is logical; a signed one shifts its bits as the unsigned
// type of its width (the integer converts keep the bits). i64 has no u64: its sign-filled
// bits are masked off, and shifts by 64 or more give 0.
Array shift_right_logical(const Array& a, const Array& b) {
  const DType dt = promote_types(a.dtype(), b.dtype());
  detail::check(is_integral(dt), "shift_right_logical", "needs integer operands, got {} and {}",
                dtype_name(a.dtype()), dtype_name(b.dtype()));
  if (is_unsigned(dt)) return shift_right_arithmetic(astype(a, dt), astype(b, dt));
  if (dt != DType::I64) {
    const DType u = unsigned_of(dt);
    return astype(shift_right_arithmetic(astype(a, u), astype(b, u)), dt);
  }
  Array x = astype(a, dt), s = astype(b, dt);
  Array kept = shift_left(full({}, 1.0, dt), 64.0 - s) - 1.0;  // the low 64 - s bits
  Array out = bitwise_and(shift_right_arithmetic(x, s), where(s > 0.0, kept, -1.0));
  return where(logical_or(s < 0.0, s >= 64.0), 0.0, out);
}
Array& operator+=(Array& a, const Array& b) { return a = a + b; }
Array& operator-=(Array& a, const Array& b) { return a = a - b; }
Array& operator*=(Array& a, const Array& b) { return a = a * b; }

// Of bools as JAX's: an int32 square (True * True is 1).
Array square(const Array& x) {
  const Array v = x.dtype() == DType::Bool ? astype(x, DType::I32) : x;
  return v * v;
}
Array pow(const Array& a, double b) { return binary<ew::Pow>(as_float(ew::Pow::kName, a), b); }
Array maximum(const Array& a, double b) { return binary<ew::Max>(a, b); }
Array minimum(const Array& a, double b) { return binary<ew::Min>(a, b); }

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

// Elementwise primitives: unary math, binary arithmetic and comparisons (one class template
// each, instantiated and registered for every row of ir/elementwise_table.inc, whose VJPs
// they take from it), select, convert. Operands have the result's shape or are scalars
// (rank 0); the op library broadcasts.
#include <cstring>
#include <limits>
#include <map>

#include "core/quants.h"
#include "core/scalar.h"
#include "ir/hlo.h"
#include "ir/primitive.h"
#include "partix/ops.h"
#include "prim/batching.h"
#include "ir/elementwise_ops.h"
#include "prim/util.h"
#include "trace/trace.h"

namespace partix::prim {

namespace {

// XLA's instruction for an elementwise row of the table (a comparison's with its direction),
// or no opcode where XLA has none (erfc, erf_inv).
struct HloForm {
  std::string_view opcode, direction;
};
HloForm hlo_form(std::string_view name) {
  static const std::map<std::string_view, HloForm> forms = {
      {"neg", {"negate", {}}},
      {"exp", {"exponential", {}}},
      {"log", {"log", {}}},
      {"sin", {"sine", {}}},
      {"cos", {"cosine", {}}},
      {"tanh", {"tanh", {}}},
      {"sqrt", {"sqrt", {}}},
      {"rsqrt", {"rsqrt", {}}},
      {"abs", {"abs", {}}},
      {"sign", {"sign", {}}},
      {"floor", {"floor", {}}},
      {"ceil", {"ceil", {}}},
      {"round", {"round-nearest-even", {}}},
      {"logistic", {"logistic", {}}},
      {"erf", {"erf", {}}},
      {"log1p", {"log-plus-one", {}}},
      {"expm1", {"exponential-minus-one", {}}},
      {"not", {"not", {}}},
      {"add", {"add", {}}},
      {"sub", {"subtract", {}}},
      {"mul", {"multiply", {}}},
      {"div", {"divide", {}}},
      {"rem", {"remainder", {}}},
      {"pow", {"power", {}}},
      {"max", {"maximum", {}}},
      {"min", {"minimum", {}}},
      {"and", {"and", {}}},
      {"or", {"or", {}}},
      {"xor", {"xor", {}}},
      {"shift_left", {"shift-left", {}}},
      {"shift_right_arithmetic", {"shift-right-arithmetic", {}}},
      {"eq", {"compare", "EQ"}},
      {"ne", {"compare", "NE"}},
      {"lt", {"compare", "LT"}},
      {"le", {"compare", "LE"}},
      {"gt", {"compare", "GT"}},
      {"ge", {"compare", "GE"}}};
  auto it = forms.find(name);
  return it == forms.end() ? HloForm{} : it->second;
}

// An elementwise op in HLO: scalar operands broadcast to the result's shape first.
bool elementwise_to_hlo(ir::HloEmitter& e, std::string_view opcode, std::string_view extra) {
  std::vector<std::string> args;
  for (size_t k = 0; k < e.num_operands(); ++k) {
    args.push_back(e.broadcast(e.operand(k), e.in(k), Aval{e.out(0).shape, e.in(k).dtype}));
  }
  e.result(0, e.emit(e.out(0), opcode, args, extra));
  return true;
}
bool table_row_to_hlo(ir::HloEmitter& e, std::string_view name) {
  const HloForm f = hlo_form(name);
  if (f.opcode.empty()) return false;
  const std::string dir = f.direction.empty() ? "" : fmt::format("direction={}", f.direction);
  return elementwise_to_hlo(e, f.opcode, dir);
}

using ew::Allowed;

bool allows(Allowed a, DType d) {
  switch (a) {
    case Allowed::kFloat:
      return is_floating(d);
    case Allowed::kNumeric:
      return d != DType::Bool;
    case Allowed::kBool:
      return d == DType::Bool;
    case Allowed::kInt:
      return is_integral(d);
    case Allowed::kIntOrBool:
      return !is_floating(d);
    case Allowed::kAny:
      return true;
  }
  return false;
}

const char* allowed_text(Allowed a) {
  switch (a) {
    case Allowed::kFloat:
      return "a floating dtype";
    case Allowed::kNumeric:
      return "a numeric dtype";
    case Allowed::kBool:
      return "bool";
    case Allowed::kInt:
      return "an integer dtype";
    case Allowed::kIntOrBool:
      return "an integer or bool dtype";
    case Allowed::kAny:
      return "any dtype";
  }
  return "";
}

// Sums a cotangent down to a scalar operand's shape (operands may be rank 0).
Array fit(const Array& g, const Array& primal) {
  if (!g.valid()) return g;
  Array out = primal.ndim() == 0 && g.ndim() > 0 ? sum(g) : g;
  return out.dtype() == primal.dtype() ? out : astype(out, primal.dtype());
}

// ---- unary ----

template <class Op>
std::vector<Array> unary_vjp(const Array& x, const Array& y, const Array& g);

template <class Op>
class Unary final : public Primitive {
 public:
  std::string_view name() const override { return Op::kName; }
  bool to_hlo(ir::HloEmitter& e) const override { return table_row_to_hlo(e, Op::kName); }
  bool is_elementwise() const override { return true; }
  // vmap: the operands at the front (one instance per class: a registered singleton).
  const Batching* batching() const override {
    static const SameShapeBatching b(*this);
    return &b;
  }
  Linearity linearity() const override { return Op::kLinearity; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs&,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    if (!(allows(Op::kAllowed, in[0].dtype))) {
      detail::fail(name(), "needs {}, got {}", allowed_text(Op::kAllowed), in[0].to_string());
    }
    return {in[0]};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    return FactorRuleBuilder::elementwise(in, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    if (!a.cotangents[0].valid()) return {Array()};
    return unary_vjp<Op>(a.primals[0], a.outputs[0], a.cotangents[0]);
  }
  void reference(const KernelCall& c) const override {
    const DType dt = c.in_aval(0).dtype;
    const int es = dtype_size(dt);
    const int64_t n = c.out_aval(0).size();
    const char* in = static_cast<const char*>(c.in[0]);
    char* out = static_cast<char*>(c.out[0]);
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (ew::allows_float(Op::kAllowed)) {
        if (is_floating(dt)) {
          detail::store_scalar(out + i * es, dt,
                               Op::template f<double>(detail::load_scalar(in + i * es, dt)));
          continue;
        }
      }
      if constexpr (ew::allows_int(Op::kAllowed)) {
        if (is_integral(dt)) {
          detail::store_int(out + i * es, dt,
                            Op::template f<int64_t>(detail::load_int(in + i * es, dt)));
          continue;
        }
      }
      if constexpr (ew::allows_bool(Op::kAllowed)) {
        if (dt == DType::Bool) {
          out[i] = Op::template f<bool>(in[i] != 0) ? 1 : 0;
          continue;
        }
      }
    }
  }
};

// ---- binary ----

template <class Op>
std::vector<Array> binary_vjp(const Array& a, const Array& b, const Array& y, const Array& g);

template <class Op>
class Binary final : public Primitive {
 public:
  std::string_view name() const override { return Op::kName; }
  bool to_hlo(ir::HloEmitter& e) const override { return table_row_to_hlo(e, Op::kName); }
  bool is_elementwise() const override { return true; }
  // vmap: the operands at the front (one instance per class: a registered singleton).
  const Batching* batching() const override {
    static const SameShapeBatching b(*this);
    return &b;
  }
  Linearity linearity() const override { return Op::kLinearity; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs&,
                          const Regions&) const override {
    check_arity(name(), in, 2);
    if (in[0].dtype != in[1].dtype) {
      detail::fail(name(), "operand dtypes differ: {}", avals_to_string(in));
    }
    if (!(allows(Op::kAllowed, in[0].dtype))) {
      detail::fail(name(), "needs {}, got {}", allowed_text(Op::kAllowed), avals_to_string(in));
    }
    if (!(in[0].shape == in[1].shape || in[0].shape.empty() || in[1].shape.empty())) {
      detail::fail(name(), "operand shapes differ: {}", avals_to_string(in));
    }
    Shape shape = in[0].shape.empty() ? in[1].shape : in[0].shape;
    return {Aval{shape, Op::kCompare ? DType::Bool : in[0].dtype}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    return FactorRuleBuilder::elementwise(in, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    if (!a.cotangents[0].valid()) return {Array(), Array()};
    auto gs = binary_vjp<Op>(a.primals[0], a.primals[1], a.outputs[0], a.cotangents[0]);
    return {fit(gs[0], a.primals[0]), fit(gs[1], a.primals[1])};
  }
  void reference(const KernelCall& c) const override {
    const DType dt = c.in_aval(0).dtype;
    const DType odt = c.out_aval(0).dtype;
    const int es = dtype_size(dt), oes = dtype_size(odt);
    const int64_t n = c.out_aval(0).size();
    const int64_t sa = c.in_aval(0).shape.empty() ? 0 : 1;  // scalar operands repeat
    const int64_t sb = c.in_aval(1).shape.empty() ? 0 : 1;
    const char* a = static_cast<const char*>(c.in[0]);
    const char* b = static_cast<const char*>(c.in[1]);
    char* out = static_cast<char*>(c.out[0]);
    for (int64_t i = 0; i < n; ++i) {
      const char* pa = a + i * sa * es;
      const char* pb = b + i * sb * es;
      if constexpr (ew::allows_float(Op::kAllowed)) {
        if (is_floating(dt)) {
          auto r = Op::template f<double>(detail::load_scalar(pa, dt), detail::load_scalar(pb, dt));
          detail::store_scalar(out + i * oes, odt, static_cast<double>(r));
          continue;
        }
      }
      if constexpr (ew::allows_int(Op::kAllowed)) {
        if (is_integral(dt)) {
          auto r = Op::template f<int64_t>(detail::load_int(pa, dt), detail::load_int(pb, dt));
          detail::store_int(out + i * oes, odt, static_cast<int64_t>(r));
          continue;
        }
      }
      if constexpr (ew::allows_bool(Op::kAllowed)) {
        if (dt == DType::Bool) {
          auto r = Op::template f<bool>(*pa != 0, *pb != 0);
          out[i * oes] = r ? 1 : 0;
          continue;
        }
      }
    }
  }
};

// The VJPs of the table's rows.
#define PARTIX_UNARY(Type, str, api, dtypes, lin, math, f32, ...)                          \
  template <>                                                                              \
  std::vector<Array> unary_vjp<ew::Type>(const Array& x, const Array& y, const Array& g) { \
    (void)x, (void)y, (void)g;                                                             \
    __VA_ARGS__                                                                            \
  }
#define PARTIX_BINARY(Type, str, api, dtypes, lin, result, bools, math, f32, ...)         \
  template <>                                                                             \
  std::vector<Array> binary_vjp<ew::Type>(const Array& a, const Array& b, const Array& y, \
                                          const Array& g) {                               \
    (void)a, (void)b, (void)y, (void)g;                                                   \
    __VA_ARGS__                                                                           \
  }
#include "ir/elementwise_table.inc"
#undef PARTIX_UNARY
#undef PARTIX_BINARY

// ---- select(pred, on_true, on_false) ----
class Select final : public Primitive {
 public:
  std::string_view name() const override { return "select"; }
  bool to_hlo(ir::HloEmitter& e) const override { return elementwise_to_hlo(e, "select", {}); }
  bool is_elementwise() const override { return true; }
  // vmap: the operands at the front (one instance per class: a registered singleton).
  const Batching* batching() const override {
    static const SameShapeBatching b(*this);
    return &b;
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs&,
                          const Regions&) const override {
    check_arity(name(), in, 3);
    if (in[0].dtype != DType::Bool) {
      detail::fail(name(), "the predicate must be bool, got {}", avals_to_string(in));
    }
    if (in[1].dtype != in[2].dtype) {
      detail::fail(name(), "branch dtypes differ: {}", avals_to_string(in));
    }
    Shape shape;
    for (const Aval& a : in) {
      if (!a.shape.empty()) shape = a.shape;
    }
    for (const Aval& a : in) {
      if (!(a.shape.empty() || a.shape == shape)) {
        detail::fail(name(), "operand shapes differ: {}", avals_to_string(in));
      }
    }
    return {Aval{shape, in[1].dtype}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    return FactorRuleBuilder::elementwise(in, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array& g = a.cotangents[0];
    if (!g.valid()) return {Array(), Array(), Array()};
    Array zero = detail::literal(0.0, g.dtype());
    return {Array(), fit(where(a.primals[0], g, zero), a.primals[1]),
            fit(where(a.primals[0], zero, g), a.primals[2])};
  }
  void reference(const KernelCall& c) const override {
    const int es = dtype_size(c.out_aval(0).dtype);
    const int64_t n = c.out_aval(0).size();
    int64_t s[3];
    for (size_t k = 0; k < 3; ++k) s[k] = c.in_aval(k).shape.empty() ? 0 : 1;
    const char* p = static_cast<const char*>(c.in[0]);
    const char* t = static_cast<const char*>(c.in[1]);
    const char* f = static_cast<const char*>(c.in[2]);
    char* out = static_cast<char*>(c.out[0]);
    for (int64_t i = 0; i < n; ++i) {
      const char* src = p[i * s[0]] ? t + i * s[1] * es : f + i * s[2] * es;
      std::memcpy(out + i * es, src, static_cast<size_t>(es));
    }
  }
};

// ---- convert{dtype} ----
class Convert final : public Primitive {
 public:
  std::string_view name() const override { return "convert"; }
  bool to_hlo(ir::HloEmitter& e) const override { return elementwise_to_hlo(e, "convert", {}); }
  bool accepts_quantized() const override { return true; }
  bool is_elementwise() const override { return true; }
  // vmap: the operands at the front (one instance per class: a registered singleton).
  const Batching* batching() const override {
    static const SameShapeBatching b(*this);
    return &b;
  }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    const DType to = attrs.dtype("dtype");
    if (!(!is_quantized(to) || to == in[0].dtype)) {
      detail::fail(name(),
                   "cannot astype {} to {}: quantized arrays come from their blocks (a GGUF "
                   "file or from_blocks), not from a conversion",
                   in[0].to_string(), dtype_name(to));
    }
    if (!(!is_quantized(in[0].dtype) || is_floating(to) || to == in[0].dtype)) {
      detail::fail(name(), "a quantized {} converts only to a float dtype, not {}",
                   in[0].to_string(), dtype_name(to));
    }
    return {Aval{in[0].shape, to}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    return FactorRuleBuilder::elementwise(in, out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array& g = a.cotangents[0];
    if (!g.valid() || !is_floating(a.primals[0].dtype()) || !is_floating(g.dtype())) {
      return {Array()};
    }
    return {astype(g, a.primals[0].dtype())};
  }
  void reference(const KernelCall& c) const override {
    const DType from = c.in_aval(0).dtype, to = c.out_aval(0).dtype;
    const int fes = dtype_size(from), tes = dtype_size(to);
    const int64_t n = c.out_aval(0).size();
    if (from == to) {
      std::memcpy(c.out[0], c.in[0], static_cast<size_t>(c.out_aval(0).nbytes()));
      return;
    }
    if (is_quantized(from)) {  // blocks to f32, then as any f32
      std::vector<float> f(static_cast<size_t>(n));
      detail::dequantize(from, c.in[0], n, f.data());
      for (int64_t i = 0; i < n; ++i) {
        convert_one(reinterpret_cast<const char*>(f.data() + i), DType::F32,
                    static_cast<char*>(c.out[0]) + i * tes, to);
      }
      return;
    }
    const char* in = static_cast<const char*>(c.in[0]);
    char* out = static_cast<char*>(c.out[0]);
    for (int64_t i = 0; i < n; ++i) {
      convert_one(in + i * fes, from, out + i * tes, to);
    }
  }

  // Float -> int saturates and maps NaN to 0 (no undefined behaviour); -> bool is x != 0.
  static void convert_one(const char* src, DType from, char* dst, DType to) {
    if (!is_floating(from)) {
      int64_t v = detail::load_int(src, from);
      if (to == DType::F32) {
        // One rounding, int -> float: going through double rounds twice beyond 2^53.
        float f = static_cast<float>(v);
        std::memcpy(dst, &f, sizeof f);
      } else if (is_floating(to)) {
        detail::store_scalar(dst, to, static_cast<double>(v));
      } else {
        detail::store_int(dst, to, to == DType::Bool ? (v != 0) : v);
      }
      return;
    }
    double v = detail::load_scalar(src, from);
    if (is_floating(to)) {
      detail::store_scalar(dst, to, v);
    } else if (to == DType::Bool) {
      detail::store_int(dst, to, v != 0.0 ? 1 : 0);
    } else {
      // Saturate at the integer limits: the lowest value and the highest plus one are exact
      // doubles (2^63 is, 2^63 - 1 is not), so v in [lo, hi) truncates exactly.
      const double lo = static_cast<double>(detail::int_lowest(to));
      const double hi = std::ldexp(1.0, int_bits(to) - (is_unsigned(to) ? 0 : 1));
      int64_t r = v != v    ? 0
                  : v <= lo ? detail::int_lowest(to)
                  : v >= hi ? detail::int_highest(to)
                            : static_cast<int64_t>(v);
      detail::store_int(dst, to, r);
    }
  }
};

#define PARTIX_UNARY(Type, ...) Register<Unary<ew::Type>> r_##Type;
#define PARTIX_BINARY(Type, ...) Register<Binary<ew::Type>> r_##Type;
#include "ir/elementwise_table.inc"
#undef PARTIX_UNARY
#undef PARTIX_BINARY
Register<Select> r_select;
Register<Convert> r_convert;

}  // namespace
}  // namespace partix::prim

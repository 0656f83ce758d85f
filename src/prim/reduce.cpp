// Reductions: reduce_sum / reduce_max / reduce_min over axes, argmax / argmin along one
// axis, cumsum along one axis.
#include <cmath>
#include <limits>

#include "core/layout.h"
#include "core/scalar.h"
#include "ir/hlo.h"
#include "ir/primitive.h"
#include "partix/ops.h"
#include "prim/batching.h"
#include "ir/elementwise_ops.h"
#include "prim/util.h"

namespace partix::prim {

namespace {

// For each input element, the flat index of the output element it reduces into.
std::vector<int64_t> reduce_map(const Shape& in, const std::vector<bool>& reduced) {
  Shape out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!reduced[d]) out.push_back(in[d]);
  }
  std::vector<int64_t> ostr = detail::strides_of(out);
  // Output stride of each input dim (0 for reduced dims).
  std::vector<int64_t> s(in.size(), 0);
  for (size_t d = 0, k = 0; d < in.size(); ++d) {
    if (!reduced[d]) s[d] = ostr[k++];
  }
  int64_t n = shape_size(in);
  std::vector<int64_t> map(static_cast<size_t>(n));
  std::vector<int64_t> idx(in.size(), 0);
  int64_t o = 0;
  for (int64_t i = 0; i < n; ++i) {
    map[static_cast<size_t>(i)] = o;
    for (size_t d = in.size(); d-- > 0;) {
      idx[d]++;
      o += s[d];
      if (idx[d] < in[d]) break;
      o -= s[d] * in[d];
      idx[d] = 0;
    }
  }
  return map;
}

std::vector<bool> reduced_mask(int rank, const std::vector<int>& axes) {
  std::vector<bool> r(static_cast<size_t>(rank), false);
  for (int a : axes) r[static_cast<size_t>(a)] = true;
  return r;
}

class Reduce : public Primitive {
 public:
  Reduce(const char* name, ReduceKind kind) : name_(name), kind_(kind) {}
  std::string_view name() const override { return name_; }
  bool to_hlo(ir::HloEmitter& e) const override {
    const DType dt = e.in(0).dtype;
    double init = 0;
    if (kind_ != ReduceKind::kSum) {
      const bool max = kind_ == ReduceKind::kMax;
      init = is_integral(dt)
                 ? static_cast<double>(max ? detail::int_lowest(dt) : detail::int_highest(dt))
                 : (max ? -1.0 : 1.0) * std::numeric_limits<double>::infinity();
    }
    const char* op = kind_ == ReduceKind::kSum   ? "add"
                     : kind_ == ReduceKind::kMax ? "maximum"
                                                 : "minimum";
    const auto axes = norm_axes(name(), e.attrs().ints("axes"), e.in(0).ndim());
    const std::string zero = e.scalar(dt, init);
    e.result(0, e.emit(e.out(0), "reduce", {e.operand(0), zero},
                       fmt::format("dimensions={}, to_apply={}",
                                   ir::HloEmitter::dims({axes.begin(), axes.end()}),
                                   e.reducer(dt, op))));
    return true;
  }
  const Batching* batching() const override { return &batching_; }  // vmap: axes shifted
  Linearity linearity() const override {
    return kind_ == ReduceKind::kSum ? Linearity::kLinear : Linearity::kNone;
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    if (in[0].dtype == DType::Bool) {
      detail::fail(name(), "needs a numeric dtype, got {}", in[0].to_string());
    }
    auto axes = norm_axes(name(), attrs.ints("axes"), in[0].ndim());
    auto red = reduced_mask(in[0].ndim(), axes);
    Shape out;
    for (size_t d = 0; d < in[0].shape.size(); ++d) {
      if (!red[d]) out.push_back(in[0].shape[d]);
    }
    return {Aval{out, in[0].dtype}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>&,
                         const Attrs& attrs) const override {
    auto red = reduced_mask(in[0].ndim(), norm_axes(name(), attrs.ints("axes"), in[0].ndim()));
    FactorRuleBuilder b;
    std::vector<DimFactors> ops, res;
    for (size_t d = 0; d < in[0].shape.size(); ++d) {
      int f =
          b.add(in[0].shape[d], red[d] ? FactorKind::kReduction : FactorKind::kPassThrough, kind_);
      ops.push_back({f});
      if (!red[d]) res.push_back({f});
    }
    b.rule().operands.push_back(ops);
    b.rule().results.push_back(res);
    return b.rule();
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array& g = a.cotangents[0];
    if (!g.valid()) return {Array()};
    const Array& x = a.primals[0];
    auto axes = norm_axes(name(), a.attrs.ints("axes"), x.ndim());
    auto red = reduced_mask(x.ndim(), axes);
    std::vector<int> kept;
    for (int d = 0; d < x.ndim(); ++d) {
      if (!red[static_cast<size_t>(d)]) kept.push_back(d);
    }
    Array gb = broadcast_in_dim(g, x.shape(), kept);
    if (kind_ == ReduceKind::kSum) return {gb};
    // max/min: the gradient goes to the extremal elements, split evenly among ties.
    Array yb = broadcast_in_dim(a.outputs[0], x.shape(), kept);
    Array mask = astype(equal(x, yb), g.dtype());
    std::vector<int> ax(axes.begin(), axes.end());
    Array count = broadcast_in_dim(sum(mask, ax), x.shape(), kept);
    return {gb * mask / count};
  }
  double flops(const std::vector<Aval>& in, const std::vector<Aval>&, const Attrs&) const override {
    return static_cast<double>(in[0].size());
  }
  void reference(const KernelCall& c) const override {
    const Aval& in = c.in_aval(0);
    const DType dt = in.dtype;
    const int es = dtype_size(dt);
    auto red = reduced_mask(in.ndim(), norm_axes(name(), c.attrs.ints("axes"), in.ndim()));
    std::vector<int64_t> map = reduce_map(in.shape, red);
    const int64_t on = c.out_aval(0).size();
    const char* src = static_cast<const char*>(c.in[0]);
    char* dst = static_cast<char*>(c.out[0]);
    if (is_floating(dt)) {
      double init = kind_ == ReduceKind::kSum   ? 0.0
                    : kind_ == ReduceKind::kMax ? -std::numeric_limits<double>::infinity()
                                                : std::numeric_limits<double>::infinity();
      std::vector<double> acc(static_cast<size_t>(on), init);
      for (size_t i = 0; i < map.size(); ++i) {
        double v = detail::load_scalar(src + static_cast<int64_t>(i) * es, dt);
        double& r = acc[static_cast<size_t>(map[i])];
        if (kind_ == ReduceKind::kSum)
          r += v;
        else if (v != v || r != r)
          r = std::numeric_limits<double>::quiet_NaN();
        else
          r = kind_ == ReduceKind::kMax ? std::max(r, v) : std::min(r, v);
      }
      for (int64_t o = 0; o < on; ++o)
        detail::store_scalar(dst + o * es, dt, acc[static_cast<size_t>(o)]);
    } else {
      const int64_t lo = detail::int_lowest(dt), hi = detail::int_highest(dt);
      int64_t init = kind_ == ReduceKind::kSum ? 0 : kind_ == ReduceKind::kMax ? lo : hi;
      std::vector<int64_t> acc(static_cast<size_t>(on), init);
      for (size_t i = 0; i < map.size(); ++i) {
        int64_t v = detail::load_int(src + static_cast<int64_t>(i) * es, dt);
        int64_t& r = acc[static_cast<size_t>(map[i])];
        if (kind_ == ReduceKind::kSum)
          r = static_cast<int64_t>(static_cast<uint64_t>(r) + static_cast<uint64_t>(v));
        else
          r = kind_ == ReduceKind::kMax ? std::max(r, v) : std::min(r, v);
      }
      for (int64_t o = 0; o < on; ++o)
        detail::store_int(dst + o * es, dt, acc[static_cast<size_t>(o)]);
    }
  }

 private:
  const char* name_;
  ReduceKind kind_;
  AxesBatching batching_{*this, {"axes"}};
};

// argmax / argmin{axis, index_dtype}: the first extremal index; NaN counts as extremal.
class ArgReduce : public Primitive {
 public:
  ArgReduce(const char* name, bool is_max) : name_(name), max_(is_max) {}
  std::string_view name() const override { return name_; }
  const Batching* batching() const override { return &batching_; }  // vmap: axis shifted
  // The searched axis needs replication (partial arg-extrema do not combine by a reduction)
  // but is reduced away.
  bool consumes_replicated_factors() const override { return true; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    int axis = norm_axis(name(), attrs.i("axis"), in[0].ndim());
    if (!(in[0].shape[static_cast<size_t>(axis)] > 0)) {
      detail::fail(name(), "cannot reduce an empty axis of {}", in[0].to_string());
    }
    DType idx = attrs.has("index_dtype") ? attrs.dtype("index_dtype") : DType::I32;
    detail::check(is_integral(idx), name(), "index_dtype must be i32 or i64");
    Shape out = in[0].shape;
    out.erase(out.begin() + axis);
    return {Aval{out, idx}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>&,
                         const Attrs& attrs) const override {
    int axis = norm_axis(name(), attrs.i("axis"), in[0].ndim());
    FactorRuleBuilder b;
    std::vector<DimFactors> ops, res;
    for (int d = 0; d < in[0].ndim(); ++d) {
      int f = b.add(in[0].shape[static_cast<size_t>(d)],
                    d == axis ? FactorKind::kNeedReplication : FactorKind::kPassThrough);
      ops.push_back({f});
      if (d != axis) res.push_back({f});
    }
    b.rule().operands.push_back(ops);
    b.rule().results.push_back(res);
    return b.rule();
  }
  std::vector<Array> vjp(const VjpArgs&) const override { return {Array()}; }
  // The first extremal index of n elements `stride` bytes apart; NaN wins.
  int64_t arg_extreme_float(const char* p, int64_t stride, int64_t n, DType dt) const {
    int64_t best = 0;
    double bv = detail::load_scalar(p, dt);
    for (int64_t k = 1; k < n && bv == bv; ++k) {
      double v = detail::load_scalar(p + k * stride, dt);
      if (v != v || (max_ ? v > bv : v < bv)) {
        best = k;
        bv = v;
      }
    }
    return best;
  }
  // Integers compare exactly (i64 beyond 2^53 does not fit a double).
  int64_t arg_extreme_int(const char* p, int64_t stride, int64_t n, DType dt) const {
    int64_t best = 0;
    int64_t bv = detail::load_int(p, dt);
    for (int64_t k = 1; k < n; ++k) {
      int64_t v = detail::load_int(p + k * stride, dt);
      if (max_ ? v > bv : v < bv) {
        best = k;
        bv = v;
      }
    }
    return best;
  }
  void reference(const KernelCall& c) const override {
    const Aval& in = c.in_aval(0);
    int axis = norm_axis(name(), c.attrs.i("axis"), in.ndim());
    int64_t outer = 1, inner = 1, n = in.shape[static_cast<size_t>(axis)];
    for (int d = 0; d < axis; ++d) outer *= in.shape[static_cast<size_t>(d)];
    for (int d = axis + 1; d < in.ndim(); ++d) inner *= in.shape[static_cast<size_t>(d)];
    const int es = dtype_size(in.dtype);
    const DType odt = c.out_aval(0).dtype;
    const char* src = static_cast<const char*>(c.in[0]);
    char* dst = static_cast<char*>(c.out[0]);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const char* row = src + (o * n * inner + i) * es;
        int64_t best = is_floating(in.dtype) ? arg_extreme_float(row, inner * es, n, in.dtype)
                                             : arg_extreme_int(row, inner * es, n, in.dtype);
        detail::store_int(dst + (o * inner + i) * dtype_size(odt), odt, best);
      }
    }
  }

 private:
  const char* name_;
  bool max_;
  AxesBatching batching_{*this, {"axis"}};
};

// cumsum{axis, reverse}
class Cumsum final : public Primitive {
 public:
  std::string_view name() const override { return "cumsum"; }
  const Batching* batching() const override {  // vmap: axis shifted
    static const AxesBatching b(*this, {"axis"});
    return &b;
  }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    norm_axis(name(), attrs.i("axis"), in[0].ndim());
    if (in[0].dtype == DType::Bool) {
      detail::fail(name(), "needs a numeric dtype, got {}", in[0].to_string());
    }
    return {in[0]};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>&,
                         const Attrs& attrs) const override {
    int axis = norm_axis(name(), attrs.i("axis"), in[0].ndim());
    FactorRuleBuilder b;
    std::vector<DimFactors> dims;
    for (int d = 0; d < in[0].ndim(); ++d) {
      dims.push_back({b.add(in[0].shape[static_cast<size_t>(d)],
                            d == axis ? FactorKind::kNeedReplication : FactorKind::kPassThrough)});
    }
    b.rule().operands.push_back(dims);
    b.rule().results.push_back(dims);
    return b.rule();
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    if (!a.cotangents[0].valid()) return {Array()};
    return {cumsum(a.cotangents[0], static_cast<int>(a.attrs.i("axis")),
                   !a.attrs.b_or("reverse", false))};
  }
  void reference(const KernelCall& c) const override {
    const Aval& in = c.in_aval(0);
    int axis = norm_axis(name(), c.attrs.i("axis"), in.ndim());
    bool rev = c.attrs.b_or("reverse", false);
    int64_t outer = 1, inner = 1, n = in.shape[static_cast<size_t>(axis)];
    for (int d = 0; d < axis; ++d) outer *= in.shape[static_cast<size_t>(d)];
    for (int d = axis + 1; d < in.ndim(); ++d) inner *= in.shape[static_cast<size_t>(d)];
    const int es = dtype_size(in.dtype);
    const char* src = static_cast<const char*>(c.in[0]);
    char* dst = static_cast<char*>(c.out[0]);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        double acc = 0;
        int64_t iacc = 0;
        for (int64_t j = 0; j < n; ++j) {
          int64_t k = rev ? n - 1 - j : j;
          int64_t off = ((o * n + k) * inner + i) * es;
          if (is_floating(in.dtype)) {
            acc += detail::load_scalar(src + off, in.dtype);
            detail::store_scalar(dst + off, in.dtype, acc);
          } else {
            iacc = ew::wrap_add(iacc, detail::load_int(src + off, in.dtype));
            detail::store_int(dst + off, in.dtype, iacc);
          }
        }
      }
    }
  }
};

struct ReduceSum : Reduce {
  ReduceSum() : Reduce("reduce_sum", ReduceKind::kSum) {}
};
struct ReduceMax : Reduce {
  ReduceMax() : Reduce("reduce_max", ReduceKind::kMax) {}
};
struct ReduceMin : Reduce {
  ReduceMin() : Reduce("reduce_min", ReduceKind::kMin) {}
};
struct Argmax : ArgReduce {
  Argmax() : ArgReduce("argmax", true) {}
};
struct Argmin : ArgReduce {
  Argmin() : ArgReduce("argmin", false) {}
};

Register<ReduceSum> r_sum;
Register<ReduceMax> r_max;
Register<ReduceMin> r_min;
Register<Argmax> r_argmax;
Register<Argmin> r_argmin;
Register<Cumsum> r_cumsum;

}  // namespace
}  // namespace partix::prim

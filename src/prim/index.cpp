// Index primitives: dynamic_slice, dynamic_update_slice, take / scatter_add (along an axis
// with an index array of any shape), take_along / scatter_add_along (per-position indices),
// iota, top_k. Out-of-range indices are clamped.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/buffer.h"
#include "core/layout.h"
#include "core/scalar.h"
#include "ir/hlo.h"
#include "ir/primitive.h"
#include "partix/ops.h"
#include "prim/batching.h"
#include "ir/elementwise_ops.h"
#include "prim/positional.h"
#include "prim/util.h"
#include "trace/trace.h"

namespace partix::prim {

namespace {

int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return std::max(lo, std::min(hi, v)); }

void check_index_dtype(std::string_view op, const Aval& a, const char* what) {
  if (!(is_integral(a.dtype))) {
    detail::fail(op, "{} must be i32 or i64, got {}", what, a.to_string());
  }
}

// Clamped start indices of a dynamic slice of `size` within `shape`.
Shape dynamic_starts(const KernelCall& c, size_t first, const Shape& shape, const Shape& size) {
  Shape start(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t s = detail::load_int(c.in[first + d], c.in_aval(first + d).dtype);
    start[d] = clamp(s, 0, shape[d] - size[d]);
  }
  return start;
}

// ---- dynamic_slice(x, starts...){sizes} ----
class DynamicSlice final : public Primitive {
 public:
  std::string_view name() const override { return "dynamic_slice"; }
  bool to_hlo(ir::HloEmitter& e) const override {
    std::vector<std::string> args;
    for (size_t k = 0; k < e.num_operands(); ++k) args.push_back(e.operand(k));
    e.result(0, e.emit(e.out(0), "dynamic-slice", args,
                       "dynamic_slice_sizes=" + ir::HloEmitter::dims(e.attrs().ints("sizes"))));
    return true;
  }
  const Batching* batching() const override {
    static const DynamicSliceBatching b(*this, false);
    return &b;
  }
  // Dimensions taken whole are split like the operand: the block takes its whole local extent.
  Attrs localize_attrs(const Attrs& attrs, const LocalizeArgs& a) const override {
    const Shape& gin = a.in[0].shape;
    const Shape& lin = a.local_in[0].shape;
    ir::Ints sizes = attrs.ints("sizes");
    for (size_t d = 0; d < gin.size(); ++d) {
      if (sizes[d] == gin[d]) sizes[d] = lin[d];
    }
    Attrs local = attrs;
    local.set("sizes", sizes);
    return local;
  }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    detail::check(!in.empty(), name(), "needs an operand");
    const Aval& x = in[0];
    Shape sizes = attrs.ints("sizes");
    if (in.size() != x.shape.size() + 1) {
      detail::fail(name(), "needs one start index per dimension of {}, got {}", x.to_string(),
                   in.size() - 1);
    }
    if (sizes.size() != x.shape.size()) {
      detail::fail(name(), "sizes {} do not match {}", shape_to_string(sizes), x.to_string());
    }
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (!(sizes[d] >= 0 && sizes[d] <= x.shape[d])) {
        detail::fail(name(), "size {} of dimension {} exceeds {}", sizes[d], d, x.to_string());
      }
      if (!(in[d + 1].shape.empty())) {
        detail::fail(name(), "start indices must be scalars, got {}", in[d + 1].to_string());
      }
      check_index_dtype(name(), in[d + 1], "start indices");
    }
    return {Aval{sizes, x.dtype}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    return FactorRuleBuilder::whole_dims(in[0], out[0], in.size() - 1);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    std::vector<Array> out(a.primals.size());
    const Array& g = a.cotangents[0];
    if (!g.valid()) return out;
    std::vector<Array> starts(a.primals.begin() + 1, a.primals.end());
    Array z = zeros(a.primals[0].shape(), g.dtype());
    out[0] = dynamic_update_slice(z, g, starts);
    return out;
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  // A block that is one contiguous run of the operand's bytes, starting on the allocator's
  // alignment, is a view of the operand (one layer of a stacked KV cache read in a scanned
  // model): no copy. A view is never written in place, and the operand is not while it lives.
  bool may_share_result(const Attrs&) const override { return true; }
  bool shares_result(const KernelCall& c, const std::vector<const detail::Buffer*>& operands,
                     detail::Buffer* result) const override {
    const Aval& x = c.in_aval(0);
    const auto& sizes = c.attrs.ints("sizes");
    if (is_quantized(x.dtype) || x.shape.empty()) return false;
    // Contiguous: size 1 up to some dimension k, then the whole extent of every later one.
    size_t k = 0;
    while (k < sizes.size() && sizes[k] == 1) ++k;
    for (size_t d = k + 1; d < sizes.size(); ++d) {
      if (sizes[d] != x.shape[d]) return false;
    }
    // The block's first element, from the clamped starts (as dynamic_starts clamps them), in
    // row-major strides: no allocation, this runs on every step of a scanned model.
    int64_t offset = 0, stride = 1;
    for (size_t d = sizes.size(); d-- > 0;) {
      const int64_t at = detail::load_int(c.in[1 + d], c.in_aval(1 + d).dtype);
      offset += clamp(at, 0, x.shape[d] - sizes[d]) * stride;
      stride *= x.shape[d];
    }
    offset *= dtype_size(x.dtype);
    const int64_t nbytes = c.out_aval(0).nbytes();
    if (offset % 64 != 0 || nbytes == 0) return false;
    *result = operands[0]->view(offset, nbytes);
    return true;
  }
  void reference(const KernelCall& c) const override {
    const Aval& x = c.in_aval(0);
    Shape sizes = c.attrs.ints("sizes");
    Shape start = dynamic_starts(c, 1, x.shape, sizes);
    Shape zero(sizes.size(), 0);
    detail::copy_box(c.in[0], x.shape, start, c.out[0], sizes, zero, sizes, dtype_size(x.dtype));
  }
};

// ---- dynamic_update_slice(x, update, starts...) ----
class DynamicUpdateSlice final : public Primitive {
 public:
  std::string_view name() const override { return "dynamic_update_slice"; }
  bool to_hlo(ir::HloEmitter& e) const override {
    std::vector<std::string> args;
    for (size_t k = 0; k < e.num_operands(); ++k) args.push_back(e.operand(k));
    e.result(0, e.emit(e.out(0), "dynamic-update-slice", args));
    return true;
  }
  const Batching* batching() const override {
    static const DynamicSliceBatching b(*this, true);
    return &b;
  }
  // A KV cache updated every decode step is written in place when its buffer is donated.
  int in_place_operand() const override { return 0; }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs&,
                          const Regions&) const override {
    detail::check(in.size() >= 2, name(), "needs an operand and an update");
    const Aval& x = in[0];
    const Aval& u = in[1];
    if (in.size() != x.shape.size() + 2) {
      detail::fail(name(), "needs one start index per dimension of {}, got {}", x.to_string(),
                   in.size() - 2);
    }
    if (!(u.dtype == x.dtype && u.shape.size() == x.shape.size())) {
      detail::fail(name(), "update {} does not fit operand {}", u.to_string(), x.to_string());
    }
    for (size_t d = 0; d < x.shape.size(); ++d) {
      if (u.shape[d] > x.shape[d]) {
        detail::fail(name(), "update {} does not fit operand {}", u.to_string(), x.to_string());
      }
      if (!(in[d + 2].shape.empty())) {
        detail::fail(name(), "start indices must be scalars, got {}", in[d + 2].to_string());
      }
      check_index_dtype(name(), in[d + 2], "start indices");
    }
    return {x};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>&,
                         const Attrs&) const override {
    FactorRuleBuilder b;
    std::vector<DimFactors> op, up;
    for (size_t d = 0; d < in[0].shape.size(); ++d) {
      if (in[0].shape[d] == in[1].shape[d]) {
        int f = b.add(in[0].shape[d]);
        op.push_back({f});
        up.push_back({f});
      } else {
        op.push_back({b.add(in[0].shape[d], FactorKind::kNeedReplication)});
        up.push_back({b.add(in[1].shape[d], FactorKind::kNeedReplication)});
      }
    }
    b.rule().operands = {op, up};
    for (size_t d = 2; d < in.size(); ++d) b.rule().operands.push_back({});
    b.rule().results = {op};
    return b.rule();
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    std::vector<Array> out(a.primals.size());
    const Array& g = a.cotangents[0];
    if (!g.valid()) return out;
    std::vector<Array> starts(a.primals.begin() + 2, a.primals.end());
    Array zu = zeros(a.primals[1].shape(), g.dtype());
    out[0] = dynamic_update_slice(g, zu, starts);
    out[1] = dynamic_slice(g, starts, a.primals[1].shape());
    return out;
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    const Aval& x = c.in_aval(0);
    const Aval& u = c.in_aval(1);
    if (c.out[0] != c.in[0]) std::memcpy(c.out[0], c.in[0], static_cast<size_t>(x.nbytes()));
    Shape start = dynamic_starts(c, 2, x.shape, u.shape);
    Shape zero(u.shape.size(), 0);
    detail::copy_box(c.in[1], u.shape, zero, c.out[0], x.shape, start, u.shape,
                     dtype_size(x.dtype));
  }
};

// Geometry of take / scatter_add along `axis`: x = [outer, n, inner], idx has m elements,
// the gathered array is [outer, m, inner].
struct TakeGeom {
  int64_t outer = 1, n = 1, inner = 1, m = 1;
};
TakeGeom take_geom(const Shape& x, int axis, int64_t m) {
  TakeGeom g;
  for (int d = 0; d < axis; ++d) g.outer *= x[static_cast<size_t>(d)];
  g.n = x[static_cast<size_t>(axis)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < x.size(); ++d) g.inner *= x[d];
  g.m = m;
  return g;
}
Shape taken_shape(const Shape& x, int axis, const Shape& idx) {
  Shape out(x.begin(), x.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), x.begin() + axis + 1, x.end());
  return out;
}

// *d += *u for one element of `dtype` (integers wrap).
void add_into(char* d, const char* u, DType dtype) {
  if (is_floating(dtype)) {
    detail::store_scalar(d, dtype, detail::load_scalar(d, dtype) + detail::load_scalar(u, dtype));
  } else {
    detail::store_int(d, dtype,
                      ew::wrap_add(detail::load_int(d, dtype), detail::load_int(u, dtype)));
  }
}

// Factors shared by take and scatter_add: x's other dims pass through to the gathered
// array; index dims map to the gathered array's middle dims.
void take_factors(FactorRuleBuilder& b, const Aval& x, const Aval& idx, int axis,
                  FactorKind idx_kind, std::vector<DimFactors>& fx, std::vector<DimFactors>& fi,
                  std::vector<DimFactors>& fg) {
  fx.assign(x.shape.size(), {});
  for (int d = 0; d < x.ndim(); ++d) {
    fx[static_cast<size_t>(d)] = {
        b.add(x.shape[static_cast<size_t>(d)],
              d == axis ? FactorKind::kNeedReplication : FactorKind::kPassThrough)};
  }
  fi.clear();
  for (int64_t s : idx.shape) fi.push_back({b.add(s, idx_kind)});
  fg.assign(fx.begin(), fx.begin() + axis);
  fg.insert(fg.end(), fi.begin(), fi.end());
  fg.insert(fg.end(), fx.begin() + axis + 1, fx.end());
}

// How take, take_along and their scatters index operand 0 (the partitioner's view).
Partitioning::AxisIndexing indexing_of(const std::vector<Aval>& in, const Attrs& attrs,
                                       bool scatter, bool elementwise) {
  int axis = static_cast<int>(attrs.i("axis"));
  if (axis < 0) axis += in[0].ndim();
  return {axis, scatter, elementwise};
}

// ---- vmap of the indexing primitives ----
// With both the table and the indices batched, example b's indices address its own table: the
// taken axis of the table is merged with the batch dimension ([B * n, ...]) and example b's
// indices, clamped into [0, n) as take clamps them, are offset by b * n.

// x (batched at 0) with its axis `axis + 1` merged into the batch dimension: [B * n, rest...],
// where rest is x's other dimensions in order.
Array merge_batch_axis(const Array& x, int axis) {
  Array m = moveaxis(x, axis + 1, 1);
  Shape s{m.shape()[0] * m.shape()[1]};
  s.insert(s.end(), m.shape().begin() + 2, m.shape().end());
  return reshape(m, s);
}

// Indices (batched at 0) of rows of length n, clamped and offset by b * n for example b.
Array offset_indices(const Array& idx, int64_t n) {
  const DType dt = idx.dtype();
  Array b = iota(idx.shape(), 0, dt);
  Array clamped = minimum(maximum(idx, full({}, 0, dt)), full({}, static_cast<double>(n - 1), dt));
  return clamped + b * full({}, static_cast<double>(n), dt);
}

// Dimensions of [B, idx..., before..., after...] reordered to [B, before..., idx..., after...].
std::vector<int> taken_order(int ni, int axis, int rank) {
  std::vector<int> perm{0};
  for (int d = 0; d < axis; ++d) perm.push_back(1 + ni + d);
  for (int d = 0; d < ni; ++d) perm.push_back(1 + d);
  for (int d = axis; d < rank - 1; ++d) perm.push_back(1 + ni + d);
  return perm;
}

std::vector<int> inverse(const std::vector<int>& perm) {
  std::vector<int> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int>(i);
  return inv;
}

// take(x, idx){axis}.
class TakeBatching final : public Batching {
 public:
  explicit TakeBatching(const Primitive& p) : p_(p) {}
  std::vector<Batched> batch(const BatchArgs& a) const override {
    const Batched& x = a.operands[0];
    const Batched& i = a.operands[1];
    const int rank = x.value.ndim() - (x.bdim >= 0 ? 1 : 0);  // an example's
    const int axis =
        static_cast<int>(a.attrs.i("axis") < 0 ? a.attrs.i("axis") + rank : a.attrs.i("axis"));
    if (i.bdim < 0) {
      Attrs at = a.attrs;
      at.set("axis", static_cast<int64_t>(axis + 1));
      return {{detail::bind(p_, {at_front(x, a.size), i.value}, at)[0], 0}};
    }
    Array idx = at_front(i, a.size);
    if (x.bdim < 0) {  // the indices' batch dimension lands where the taken axis was
      Attrs at = a.attrs;
      at.set("axis", static_cast<int64_t>(axis));
      return {{detail::bind(p_, {x.value, idx}, at)[0], axis}};
    }
    const Array xf = at_front(x, a.size);
    const int64_t n = xf.shape()[static_cast<size_t>(axis + 1)];
    Attrs at = a.attrs;
    at.set("axis", int64_t{0});
    Array r = detail::bind(p_, {merge_batch_axis(xf, axis), offset_indices(idx, n)}, at)[0];
    return {{transpose(r, taken_order(idx.ndim() - 1, axis, rank)), 0}};
  }

 private:
  const Primitive& p_;
};

// scatter_add(x, idx, updates){axis}: updates are shaped as take(x, idx) is.
class ScatterAddBatching final : public Batching {
 public:
  explicit ScatterAddBatching(const Primitive& p) : p_(p) {}
  std::vector<Batched> batch(const BatchArgs& a) const override {
    const Batched& i = a.operands[1];
    const int rank = a.operands[0].value.ndim() - (a.operands[0].bdim >= 0 ? 1 : 0);
    const int axis =
        static_cast<int>(a.attrs.i("axis") < 0 ? a.attrs.i("axis") + rank : a.attrs.i("axis"));
    Array x = at_front(a.operands[0], a.size);
    Array u = at_front(a.operands[2], a.size);
    Attrs at = a.attrs;
    if (i.bdim < 0) {
      at.set("axis", static_cast<int64_t>(axis + 1));
      return {{detail::bind(p_, {x, i.value, u}, at)[0], 0}};
    }
    Array idx = at_front(i, a.size);
    const int ni = idx.ndim() - 1;
    const int64_t n = x.shape()[static_cast<size_t>(axis + 1)];
    // updates to [B, idx..., before..., after...], scattered into the merged table.
    Array ut = transpose(u, inverse(taken_order(ni, axis, rank)));
    at.set("axis", int64_t{0});
    Array r = detail::bind(p_, {merge_batch_axis(x, axis), offset_indices(idx, n), ut}, at)[0];
    Shape moved{x.shape()[0], n};
    for (int d = 0; d < rank; ++d) {
      if (d != axis) moved.push_back(x.shape()[static_cast<size_t>(d + 1)]);
    }
    return {{moveaxis(reshape(r, moved), 1, axis + 1), 0}};
  }

 private:
  const Primitive& p_;
};

// Per-position indexing along `axis`: idx has x's shape except along axis (size m).
void check_along(std::string_view op, const Aval& x, const Aval& idx, int axis) {
  check_index_dtype(op, idx, "indices");
  bool ok = idx.shape.size() == x.shape.size();
  for (size_t d = 0; ok && d < x.shape.size(); ++d) {
    ok = static_cast<int>(d) == axis || idx.shape[d] == x.shape[d];
  }
  if (!(ok)) {
    detail::fail(op, "indices {} must match operand {} except along axis {}", idx.to_string(),
                 x.to_string(), axis);
  }
}

// Factors shared by take_along and scatter_add_along: dims other than `axis` are one factor
// in x and the indices; along `axis` x needs replication and the indices' positions have
// `idx_kind`.
void along_factors(FactorRuleBuilder& b, const Aval& x, const Aval& idx, int axis,
                   FactorKind idx_kind, std::vector<DimFactors>& fx, std::vector<DimFactors>& fi) {
  for (int d = 0; d < x.ndim(); ++d) {
    if (d == axis) {
      fx.push_back({b.add(x.shape[static_cast<size_t>(d)], FactorKind::kNeedReplication)});
      fi.push_back({b.add(idx.shape[static_cast<size_t>(d)], idx_kind)});
    } else {
      int f = b.add(x.shape[static_cast<size_t>(d)]);
      fx.push_back({f});
      fi.push_back({f});
    }
  }
}

// ---- the four indexing primitives along one axis ----
// take(x, indices){axis}               out = x with axis replaced by the indices' dims: whole
//                                      slices of x at each index
// take_along(x, indices){axis}         out[..., j, ...] = x[..., idx[..., j, ...], ...]: one
//                                      element per index position (indices shaped as x but
//                                      along axis)
// scatter_add(x, indices, updates)     x plus updates (shaped as take's result) added at the
// scatter_add_along(x, indices, upd.)  indices: the transposes of take and take_along
// Indices are clamped into the axis, as XLA clamps gathers. kScatter: adds updates instead of
// reading; kAlong: one index per element instead of per slice.
template <bool kScatter, bool kAlong>
class AxisIndexOp final : public Primitive {
 public:
  std::string_view name() const override {
    if constexpr (kScatter) return kAlong ? "scatter_add_along" : "scatter_add";
    return kAlong ? "take_along" : "take";
  }
  const Batching* batching() const override {
    if constexpr (kAlong) {  // same-rank operands: the axis shifts past the batch dimension
      static const AxesBatching b(*this, {"axis"});
      return &b;
    } else if constexpr (kScatter) {
      static const ScatterAddBatching b(*this);
      return &b;
    } else {
      static const TakeBatching b(*this);
      return &b;
    }
  }
  // Quantized rows are whole blocks: take copies them as they are.
  bool accepts_quantized() const override { return !kScatter && !kAlong; }
  std::optional<AxisIndexing> axis_indexing(const std::vector<Aval>& in,
                                            const Attrs& attrs) const override {
    return indexing_of(in, attrs, kScatter, kAlong);
  }
  Linearity linearity() const override { return Linearity::kLinear; }

  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, kScatter ? 3 : 2);
    const int axis = norm_axis(name(), attrs.i("axis"), in[0].ndim());
    if (kAlong) {
      check_along(name(), in[0], in[1], axis);
    } else {
      check_index_dtype(name(), in[1], "indices");
    }
    const Shape gathered = kAlong ? in[1].shape : taken_shape(in[0].shape, axis, in[1].shape);
    if constexpr (kScatter) {
      if (!(in[2].shape == gathered && in[2].dtype == in[0].dtype && in[0].dtype != DType::Bool)) {
        detail::fail(name(), "updates must be {}{} for operand {} and indices {}, got {}",
                     dtype_name(in[0].dtype), shape_to_string(gathered), in[0].to_string(),
                     in[1].to_string(), in[2].to_string());
      }
      return {in[0]};
    }
    if (!(in[0].shape[static_cast<size_t>(axis)] > 0)) {
      detail::fail(name(), "cannot take from an empty axis of {}", in[0].to_string());
    }
    if (!(!is_quantized(in[0].dtype) || axis < in[0].ndim() - 1)) {
      detail::fail(name(),
                   "cannot take along the last (block) dimension of a quantized {}; astype it to a "
                   "float dtype first",
                   in[0].to_string());
    }
    return {Aval{gathered, in[0].dtype}};
  }

  // x's dims other than axis pass through; the index positions are the gathered array's:
  // replicated (take_along), passed through (take), or, in a scatter, absent from the result,
  // so sharding them leaves partial sums.
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>&,
                         const Attrs& attrs) const override {
    const int axis = norm_axis(name(), attrs.i("axis"), in[0].ndim());
    const FactorKind idx_kind = kScatter ? FactorKind::kReduction
                                : kAlong ? FactorKind::kNeedReplication
                                         : FactorKind::kPassThrough;
    FactorRuleBuilder b;
    std::vector<DimFactors> fx, fi, fg;
    if (kAlong) {
      along_factors(b, in[0], in[1], axis, idx_kind, fx, fi);
      fg = fi;
    } else {
      take_factors(b, in[0], in[1], axis, idx_kind, fx, fi, fg);
    }
    b.rule().operands = kScatter ? std::vector<std::vector<DimFactors>>{fx, fi, fg}
                                 : std::vector<std::vector<DimFactors>>{fx, fi};
    b.rule().results = {kScatter ? fx : fg};
    return b.rule();
  }

  // Each is the other's transpose: take's cotangent is a scatter of g into zeros, a scatter's
  // updates' cotangent is a take of g.
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array& g = a.cotangents[0];
    const ir::Attrs attrs{{"axis", a.attrs.i("axis")}};
    if constexpr (kScatter) {
      if (!g.valid()) return {Array(), Array(), Array()};
      return {g, Array(), detail::bind1(kAlong ? "take_along" : "take", {g, a.primals[1]}, attrs)};
    }
    if (!g.valid()) return {Array(), Array()};
    Array z = zeros(a.primals[0].shape(), g.dtype());
    return {
        detail::bind1(kAlong ? "scatter_add_along" : "scatter_add", {z, a.primals[1], g}, attrs),
        Array()};
  }
  double flops(const std::vector<Aval>& in, const std::vector<Aval>& out,
               const Attrs& attrs) const override {
    return kScatter ? Cost::flops(in, out, attrs) : 0;  // a take only moves bytes
  }

  void reference(const KernelCall& c) const override {
    const Aval& xa = c.in_aval(0);
    const Aval& ia = c.in_aval(1);
    const int axis = norm_axis(name(), c.attrs.i("axis"), xa.ndim());
    TakeGeom g =
        take_geom(xa.shape, axis, kAlong ? ia.shape[static_cast<size_t>(axis)] : ia.size());
    g.inner /= dtype_block_elems(xa.dtype);  // a quantized row counts in blocks
    const int64_t es = dtype_size(xa.dtype), ies = dtype_size(ia.dtype);
    const char* idx = static_cast<const char*>(c.in[1]);
    const char* src = static_cast<const char*>(c.in[kScatter ? 2 : 0]);
    char* out = static_cast<char*>(c.out[0]);
    if (kScatter) std::memcpy(out, c.in[0], static_cast<size_t>(xa.nbytes()));
    auto index = [&](int64_t pos) {
      return clamp(detail::load_int(idx + pos * ies, ia.dtype), 0, g.n - 1);
    };
    // Element i of the gathered array's run (o, j) and of the table's run (o, k).
    auto gathered = [&](int64_t o, int64_t j, int64_t i) {
      return ((o * g.m + j) * g.inner + i) * es;
    };
    auto table = [&](int64_t o, int64_t k, int64_t i) {
      return ((o * g.n + k) * g.inner + i) * es;
    };
    for (int64_t o = 0; o < g.outer; ++o) {
      for (int64_t j = 0; j < g.m; ++j) {
        if (!kAlong && !kScatter) {  // a whole run at once
          std::memcpy(out + gathered(o, j, 0), src + table(o, index(j), 0),
                      static_cast<size_t>(g.inner * es));
          continue;
        }
        for (int64_t i = 0; i < g.inner; ++i) {
          const int64_t k = index(kAlong ? (o * g.m + j) * g.inner + i : j);
          if (kScatter) {
            add_into(out + table(o, k, i), src + gathered(o, j, i), xa.dtype);
          } else {
            std::memcpy(out + gathered(o, j, i), src + table(o, k, i), static_cast<size_t>(es));
          }
        }
      }
    }
  }
};

// ---- iota{shape, dimension, dtype} ----
class Iota final : public Primitive {
 public:
  std::string_view name() const override { return "iota"; }
  bool to_hlo(ir::HloEmitter& e) const override {
    e.result(0, e.emit(e.out(0), "iota", {},
                       fmt::format("iota_dimension={}", e.attrs().i("dimension"))));
    return true;
  }
  Attrs localize_attrs(const Attrs& attrs, const LocalizeArgs& a) const override {
    return localize_positional(attrs, a);
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 0);
    Shape s = attrs.ints("shape");
    for (int64_t d : s) detail::check(d >= 0, name(), "negative size in {}", shape_to_string(s));
    const int64_t dim = attrs.i("dimension"), rank = static_cast<int64_t>(s.size());
    if (!(dim >= -rank && dim < rank)) {
      detail::fail(name(), "dimension {} is out of range for shape {}", dim, shape_to_string(s));
    }
    DType dt = attrs.dtype("dtype");
    detail::check(dt != DType::Bool && !is_quantized(dt), name(), "needs a numeric dtype, got {}",
                  dtype_name(dt));
    return {Aval{s, dt}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    return FactorRuleBuilder::created(in, out[0], /*positional=*/true);
  }
  std::vector<Array> vjp(const VjpArgs&) const override { return {}; }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    const Aval& out = c.out_aval(0);
    int dim = norm_axis(name(), c.attrs.i("dimension"), out.ndim());
    Shape off = block_offset(c, out.shape);
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(dim) + 1; d < out.shape.size(); ++d) inner *= out.shape[d];
    int64_t n = out.shape[static_cast<size_t>(dim)];
    const int es = dtype_size(out.dtype);
    char* dst = static_cast<char*>(c.out[0]);
    for (int64_t i = 0; i < out.size(); ++i) {
      int64_t v = (i / inner) % n + off[static_cast<size_t>(dim)];
      if (is_floating(out.dtype))
        detail::store_scalar(dst + i * es, out.dtype, static_cast<double>(v));
      else
        detail::store_int(dst + i * es, out.dtype, v);
    }
  }
};

// ---- top_k(x){k}: the k largest along the last axis (descending, stable) and indices ----
class TopK final : public Primitive {
 public:
  std::string_view name() const override { return "top_k"; }
  const Batching* batching() const override {  // acts along the last axis: the batch in front
    static const AxesBatching b(*this, {});
    return &b;
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    if (in[0].ndim() < 1) {
      detail::fail(name(), "needs rank >= 1, got {}", in[0].to_string());
    }
    int64_t k = attrs.i("k");
    if (!(k >= 0 && k <= in[0].shape.back())) {
      detail::fail(name(), "k={} is out of range for {}", k, in[0].to_string());
    }
    detail::check(in[0].dtype != DType::Bool, name(), "needs a numeric dtype");
    Shape s = in[0].shape;
    s.back() = k;
    return {Aval{s, in[0].dtype}, Aval{s, DType::I32}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    FactorRuleBuilder b;
    std::vector<DimFactors> op, res;
    for (int d = 0; d + 1 < in[0].ndim(); ++d) {
      int f = b.add(in[0].shape[static_cast<size_t>(d)]);
      op.push_back({f});
      res.push_back({f});
    }
    op.push_back({b.add(in[0].shape.back(), FactorKind::kNeedReplication)});
    res.push_back({b.add(out[0].shape.back(), FactorKind::kNeedReplication)});
    b.rule().operands = {op};
    b.rule().results = {res, res};
    return b.rule();
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array& g = a.cotangents[0];
    if (!g.valid()) return {Array()};
    const Array& x = a.primals[0];
    Array z = zeros(x.shape(), g.dtype());
    ir::Attrs attrs{{"axis", static_cast<int64_t>(x.ndim() - 1)}};
    return {detail::bind1("scatter_add_along", {z, a.outputs[1], g}, attrs)};
  }
  void reference(const KernelCall& c) const override {
    const Aval& x = c.in_aval(0);
    int64_t n = x.shape.back(), k = c.attrs.i("k");
    int64_t rows = n == 0 ? 0 : x.size() / n;
    const int es = dtype_size(x.dtype);
    const char* src = static_cast<const char*>(c.in[0]);
    char* vals = static_cast<char*>(c.out[0]);
    int32_t* idx = static_cast<int32_t*>(c.out[1]);
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::vector<double> v(static_cast<size_t>(n));
    std::vector<int64_t> iv(static_cast<size_t>(n));  // integers compare exactly
    const bool fl = is_floating(x.dtype);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        const char* p = src + (r * n + i) * es;
        if (fl)
          v[static_cast<size_t>(i)] = detail::load_scalar(p, x.dtype);
        else
          iv[static_cast<size_t>(i)] = detail::load_int(p, x.dtype);
      }
      std::iota(order.begin(), order.end(), 0);
      // NaN sorts first (largest), ties keep the lower index.
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        if (!fl) return iv[static_cast<size_t>(a)] > iv[static_cast<size_t>(b)];
        double va = v[static_cast<size_t>(a)], vb = v[static_cast<size_t>(b)];
        if (va != va) return vb == vb;
        return va > vb;
      });
      for (int64_t j = 0; j < k; ++j) {
        int64_t i = order[static_cast<size_t>(j)];
        std::memcpy(vals + (r * k + j) * es, src + (r * n + i) * es, static_cast<size_t>(es));
        idx[r * k + j] = static_cast<int32_t>(i);
      }
    }
  }
};

Register<DynamicSlice> r_dslice;
Register<DynamicUpdateSlice> r_dus;
Register<AxisIndexOp</*kScatter=*/false, /*kAlong=*/false>> r_take;
Register<AxisIndexOp</*kScatter=*/true, /*kAlong=*/false>> r_scatter;
Register<AxisIndexOp</*kScatter=*/false, /*kAlong=*/true>> r_take_along;
Register<AxisIndexOp</*kScatter=*/true, /*kAlong=*/true>> r_scatter_along;
Register<Iota> r_iota;
Register<TopK> r_topk;

}  // namespace
}  // namespace partix::prim

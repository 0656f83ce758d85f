// Shape primitives: reshape, transpose, broadcast_in_dim, slice, concatenate, pad, rev.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/layout.h"
#include "core/scalar.h"
#include "ir/hlo.h"
#include "ir/primitive.h"
#include "partix/ops.h"
#include "prim/batching.h"
#include "prim/util.h"
#include "trace/trace.h"

namespace partix::prim {

namespace {

std::vector<int> to_int(const ir::Ints& v) { return std::vector<int>(v.begin(), v.end()); }

// Calls fn(out_flat, in_flat) for every element, where the input index of output multi-index
// o is computed by `map` (dimension-wise).
template <class Fn>
void for_each_index(const Shape& shape, Fn&& fn) {
  int64_t n = shape_size(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    fn(i, idx);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// Ops whose "shape" attribute is their result's: a device's block targets its result block.
Attrs with_block_shape(const Attrs& attrs, const Partitioning::LocalizeArgs& a) {
  Attrs local = attrs;
  local.set("shape", ir::Ints(a.local_out(0)));
  return local;
}

// Whether an operand of shape `in` whose dim d lands at result dim to[d] keeps its elements in
// memory order (its dims of size > 1 land in increasing positions): then the result, of the
// same bytes, is a view of it.
bool keeps_order(const Shape& in, const ir::Ints& to) {
  int64_t last = -1;
  for (size_t d = 0; d < to.size(); ++d) {
    if (in[d] == 1) continue;
    if (to[d] <= last) return false;
    last = to[d];
  }
  return true;
}

// ---- reshape{shape} ----
class Reshape final : public Primitive {
 public:
  std::string_view name() const override { return "reshape"; }
  bool to_hlo(ir::HloEmitter& e) const override {
    e.result(0, e.emit(e.out(0), "reshape", {e.operand(0)}));
    return true;
  }
  const Batching* batching() const override {  // vmap: [size] + shape
    static const AttrsBatching b(*this, [](const Attrs& at, int64_t n) {
      Attrs o = at;
      o.set("shape", prepended(n, at.ints("shape")));
      return o;
    });
    return &b;
  }
  bool accepts_quantized() const override { return true; }
  // A block is reshaped to (broadcast into) the result's block.
  Attrs localize_attrs(const Attrs& attrs, const LocalizeArgs& a) const override {
    return with_block_shape(attrs, a);
  }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    Shape s = attrs.ints("shape");
    for (int64_t d : s) detail::check(d >= 0, name(), "negative size in {}", shape_to_string(s));
    if (shape_size(s) != in[0].size()) {
      detail::fail(name(), "cannot reshape {} ({} elements) to {}", in[0].to_string(), in[0].size(),
                   shape_to_string(s));
    }
    // Blocks are consecutive runs of elements: any shape whose rows hold whole blocks keeps
    // the bytes as they are.
    check_quantized_shape(name(), in[0].dtype, s);
    return {Aval{s, in[0].dtype}};
  }
  // Factors from the common refinement of the two shapes.
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    const Shape& a = in[0].shape;
    const Shape& b = out[0].shape;
    FactorRuleBuilder fb;
    std::vector<DimFactors> fa(a.size()), fr(b.size());
    if (in[0].size() == 0) {
      // No elements: products never align, and there is nothing to keep split.
      for (size_t k = 0; k < a.size(); ++k) fa[k] = {fb.add(a[k], FactorKind::kNeedReplication)};
      for (size_t k = 0; k < b.size(); ++k) fr[k] = {fb.add(b[k], FactorKind::kNeedReplication)};
      fb.rule().operands = {fa};
      fb.rule().results = {fr};
      return fb.rule();
    }
    size_t i = 0, j = 0;
    while (i < a.size() || j < b.size()) {
      // Size-1 dims carry no factor.
      if (i < a.size() && a[i] == 1) {
        i++;
        continue;
      }
      if (j < b.size() && b[j] == 1) {
        j++;
        continue;
      }
      if (i >= a.size() || j >= b.size()) break;
      // Grow a segment [i, i2) x [j, j2) until the products agree.
      size_t i2 = i + 1, j2 = j + 1;
      int64_t pa = a[i], pb = b[j];
      while (pa != pb) {
        if (pa < pb)
          pa *= a[i2++];
        else
          pb *= b[j2++];
      }
      // Boundaries: cumulative products of both sides.
      std::vector<int64_t> bounds;
      int64_t c = 1;
      for (size_t k = i; k < i2; ++k) bounds.push_back(c *= a[k]);
      c = 1;
      for (size_t k = j; k < j2; ++k) bounds.push_back(c *= b[k]);
      std::sort(bounds.begin(), bounds.end());
      bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
      bool ok = true;
      int64_t prev = 1;
      for (int64_t x : bounds) {
        ok = ok && x % prev == 0;
        prev = x;
      }
      if (ok) {
        std::vector<int> factors;
        prev = 1;
        for (int64_t x : bounds) {
          factors.push_back(fb.add(x / prev));
          prev = x;
        }
        auto assign = [&](const Shape& s, size_t from, size_t to, std::vector<DimFactors>& dst) {
          size_t f = 0;
          int64_t cum = 1;
          for (size_t k = from; k < to; ++k) {
            cum *= s[k];
            while (f < bounds.size() && bounds[f] <= cum) dst[k].push_back(factors[f++]);
          }
        };
        assign(a, i, i2, fa);
        assign(b, j, j2, fr);
      } else {
        // No common refinement: every dimension of the segment needs replication.
        for (size_t k = i; k < i2; ++k) fa[k] = {fb.add(a[k], FactorKind::kNeedReplication)};
        for (size_t k = j; k < j2; ++k) fr[k] = {fb.add(b[k], FactorKind::kNeedReplication)};
      }
      i = i2;
      j = j2;
    }
    fb.rule().operands = {fa};
    fb.rule().results = {fr};
    return fb.rule();
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    if (!a.cotangents[0].valid()) return {Array()};
    return {reshape(a.cotangents[0], a.primals[0].shape())};
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    std::memcpy(c.out[0], c.in[0], static_cast<size_t>(c.out_aval(0).nbytes()));
  }
  bool is_view(const Aval& in, const Aval& out, const Attrs&) const override {
    return in.dtype == out.dtype && in.nbytes() == out.nbytes();
  }
};

// ---- storage_view{dtype}: a quantized [..., K] value as the bytes that store it, and back ----
// The partitioner moves quantized values as their storage: q[..., K] is exactly
// the byte array bool[..., K / block, block_bytes], whose block dimension carries the last
// dimension's sharding, so every collective and copy moves whole blocks. Local programs only.
class StorageView final : public Primitive {
 public:
  std::string_view name() const override { return "storage_view"; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    const DType to = attrs.dtype("dtype");
    Shape s = in[0].shape;
    if (is_quantized(in[0].dtype)) {
      if (!(to == DType::Bool && !s.empty())) {
        detail::fail(name(), "views {} as bytes (bool), not {}", in[0].to_string(), dtype_name(to));
      }
      const int64_t b = dtype_block_elems(in[0].dtype);
      if (s.back() % b != 0) {
        detail::fail(name(), "{} does not hold whole blocks", in[0].to_string());
      }
      s.back() /= b;
      s.push_back(dtype_size(in[0].dtype));
      return {Aval{s, DType::Bool}};
    }
    if (!(in[0].dtype == DType::Bool && is_quantized(to) && s.size() >= 2 &&
          s.back() == dtype_size(to))) {
      detail::fail(name(), "cannot view {} as {} blocks", in[0].to_string(), dtype_name(to));
    }
    s.pop_back();
    s.back() *= dtype_block_elems(to);
    return {Aval{s, to}};
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    if (c.out[0] != c.in[0]) {
      std::memcpy(c.out[0], c.in[0], static_cast<size_t>(c.out_aval(0).nbytes()));
    }
  }
  bool is_view(const Aval& in, const Aval& out, const Attrs&) const override {
    return in.nbytes() == out.nbytes();  // the same bytes retyped
  }
};

// ---- transpose{perm}: result dim i is operand dim perm[i] ----
class Transpose final : public Primitive {
 public:
  std::string_view name() const override { return "transpose"; }
  bool to_hlo(ir::HloEmitter& e) const override {
    e.result(0, e.emit(e.out(0), "transpose", {e.operand(0)},
                       "dimensions=" + ir::HloEmitter::dims(e.attrs().ints("perm"))));
    return true;
  }
  const Batching* batching() const override {  // vmap: the batch dimension stays first
    static const AttrsBatching b(*this, [](const Attrs& at, int64_t) {
      Attrs o = at;
      o.set("perm", prepended(0, shifted(at.ints("perm"))));
      return o;
    });
    return &b;
  }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    std::vector<int> perm = to_int(attrs.ints("perm"));
    std::vector<int> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> want(static_cast<size_t>(in[0].ndim()));
    std::iota(want.begin(), want.end(), 0);
    if (sorted != want) {
      detail::fail(name(), "[{}] is not a permutation of the axes of {}", fmt::join(perm, ","),
                   in[0].to_string());
    }
    Shape s;
    for (int p : perm) s.push_back(in[0].shape[static_cast<size_t>(p)]);
    return {Aval{s, in[0].dtype}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>&,
                         const Attrs& attrs) const override {
    std::vector<int> perm = to_int(attrs.ints("perm"));
    FactorRuleBuilder b;
    std::vector<DimFactors> op;
    for (int64_t d : in[0].shape) op.push_back({b.add(d)});
    std::vector<DimFactors> res;
    for (int p : perm) res.push_back(op[static_cast<size_t>(p)]);
    b.rule().operands = {op};
    b.rule().results = {res};
    return b.rule();
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    if (!a.cotangents[0].valid()) return {Array()};
    std::vector<int> perm = to_int(a.attrs.ints("perm"));
    std::vector<int> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inv[static_cast<size_t>(perm[i])] = static_cast<int>(i);
    return {transpose(a.cotangents[0], inv)};
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    std::vector<int> perm = to_int(c.attrs.ints("perm"));
    const Aval& in = c.in_aval(0);
    auto is = detail::strides_of(in.shape);
    const int es = dtype_size(in.dtype);
    const char* src = static_cast<const char*>(c.in[0]);
    char* dst = static_cast<char*>(c.out[0]);
    for_each_index(c.out_aval(0).shape, [&](int64_t o, const std::vector<int64_t>& idx) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * is[static_cast<size_t>(perm[d])];
      std::memcpy(dst + o * es, src + off * es, static_cast<size_t>(es));
    });
  }
  // A view when it moves only size-1 dims.
  bool is_view(const Aval& in, const Aval& out, const Attrs& attrs) const override {
    if (in.dtype != out.dtype || in.nbytes() != out.nbytes()) return false;
    const ir::Ints& perm = attrs.ints("perm");
    ir::Ints where(perm.size());  // the result position of each operand dim
    for (size_t i = 0; i < perm.size(); ++i) {
      where[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
    }
    return keeps_order(in.shape, where);
  }
};

// ---- broadcast_in_dim{shape, dims}: operand dim i becomes result dim dims[i] ----
class BroadcastInDim final : public Primitive {
 public:
  std::string_view name() const override { return "broadcast_in_dim"; }
  // HLO's broadcast keeps each operand dimension's size: stretched size-1 dimensions are
  // reshaped away first.
  bool to_hlo(ir::HloEmitter& e) const override {
    const ir::Ints& dims = e.attrs().ints("dims");
    const Aval& in = e.in(0);
    Shape kept;
    ir::Ints kept_dims;
    for (size_t i = 0; i < dims.size(); ++i) {
      if (in.shape[i] == e.out(0).shape[static_cast<size_t>(dims[i])]) {
        kept.push_back(in.shape[i]);
        kept_dims.push_back(dims[i]);
      }
    }
    std::string src = e.operand(0);
    if (kept.size() != in.shape.size()) src = e.emit(Aval{kept, in.dtype}, "reshape", {src});
    e.result(0,
             e.emit(e.out(0), "broadcast", {src}, "dimensions=" + ir::HloEmitter::dims(kept_dims)));
    return true;
  }
  const Batching* batching() const override {  // vmap: [size] + shape, dims shifted
    static const AttrsBatching b(*this, [](const Attrs& at, int64_t n) {
      Attrs o = at;
      o.set("shape", prepended(n, at.ints("shape")));
      o.set("dims", prepended(0, shifted(at.ints("dims"))));
      return o;
    });
    return &b;
  }
  // A block is reshaped to (broadcast into) the result's block.
  Attrs localize_attrs(const Attrs& attrs, const LocalizeArgs& a) const override {
    return with_block_shape(attrs, a);
  }
  bool is_broadcast() const override { return true; }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    Shape s = attrs.ints("shape");
    std::vector<int> dims = to_int(attrs.ints("dims"));
    if (dims.size() != in[0].shape.size()) {
      detail::fail(name(), "{} needs {} broadcast dimensions, got [{}]", in[0].to_string(),
                   in[0].shape.size(), fmt::join(dims, ","));
    }
    for (size_t i = 0; i < dims.size(); ++i) {
      if (!(dims[i] >= 0 && dims[i] < static_cast<int>(s.size()) &&
            (i == 0 || dims[i] > dims[i - 1]))) {
        detail::fail(name(), "dims [{}] must be increasing and within rank {}",
                     fmt::join(dims, ","), s.size());
      }
      int64_t od = in[0].shape[i], rd = s[static_cast<size_t>(dims[i])];
      if (!(od == rd || od == 1)) {
        detail::fail(name(), "cannot broadcast {} to {} (dim {}: {} vs {})", in[0].to_string(),
                     shape_to_string(s), i, od, rd);
      }
    }
    return {Aval{s, in[0].dtype}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs& attrs) const override {
    std::vector<int> dims = to_int(attrs.ints("dims"));
    FactorRuleBuilder b;
    std::vector<DimFactors> res;
    for (int64_t d : out[0].shape) res.push_back({b.add(d)});
    std::vector<DimFactors> op(in[0].shape.size());
    for (size_t i = 0; i < dims.size(); ++i) {
      // An expanded size-1 dim does not share the result's factor.
      if (in[0].shape[i] == out[0].shape[static_cast<size_t>(dims[i])]) {
        op[i] = res[static_cast<size_t>(dims[i])];
      }
    }
    b.rule().operands = {op};
    b.rule().results = {res};
    return b.rule();
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array& g = a.cotangents[0];
    if (!g.valid()) return {Array()};
    const Array& x = a.primals[0];
    std::vector<int> dims = to_int(a.attrs.ints("dims"));
    std::vector<int> summed;
    for (int d = 0; d < g.ndim(); ++d) {
      auto it = std::find(dims.begin(), dims.end(), d);
      if (it == dims.end()) {
        summed.push_back(d);
      } else if (x.shape()[static_cast<size_t>(it - dims.begin())] !=
                 g.shape()[static_cast<size_t>(d)]) {
        summed.push_back(d);
      }
    }
    Array r = summed.empty() ? g : sum(g, summed, true);
    // Drop the new dims (kept as size 1 by keepdims) to get back the operand's shape.
    return {reshape(r, x.shape())};
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    std::vector<int> dims = to_int(c.attrs.ints("dims"));
    const Aval& in = c.in_aval(0);
    auto is = detail::strides_of(in.shape);
    const int es = dtype_size(in.dtype);
    const char* src = static_cast<const char*>(c.in[0]);
    char* dst = static_cast<char*>(c.out[0]);
    for_each_index(c.out_aval(0).shape, [&](int64_t o, const std::vector<int64_t>& idx) {
      int64_t off = 0;
      for (size_t i = 0; i < dims.size(); ++i) {
        if (in.shape[i] != 1) off += idx[static_cast<size_t>(dims[i])] * is[i];
      }
      std::memcpy(dst + o * es, src + off * es, static_cast<size_t>(es));
    });
  }
  // A view when it only adds size-1 dims (or keeps every dim).
  bool is_view(const Aval& in, const Aval& out, const Attrs& attrs) const override {
    return in.dtype == out.dtype && in.nbytes() == out.nbytes() &&
           keeps_order(in.shape, attrs.ints("dims"));
  }
  std::optional<std::vector<int64_t>> broadcast_strides(const Aval& in, const Aval& out,
                                                        const Attrs& attrs) const override {
    const ir::Ints& dims = attrs.ints("dims");
    std::vector<int64_t> strides(out.shape.size(), 0);
    int64_t stride = 1;
    for (size_t k = in.shape.size(); k-- > 0;) {
      if (in.shape[k] != 1) strides[static_cast<size_t>(dims[k])] = stride;
      stride *= in.shape[k];
    }
    return strides;
  }
};

// ---- slice{start, stop, strides} ----
class SlicePrim final : public Primitive {
 public:
  std::string_view name() const override { return "slice"; }
  bool to_hlo(ir::HloEmitter& e) const override {
    const ir::Ints& start = e.attrs().ints("start");
    const ir::Ints& stop = e.attrs().ints("stop");
    std::vector<std::string> parts;
    for (size_t d = 0; d < start.size(); ++d) {
      const int64_t step = e.attrs().has("strides") ? e.attrs().ints("strides")[d] : 1;
      parts.push_back(step == 1 ? fmt::format("[{}:{}]", start[d], stop[d])
                                : fmt::format("[{}:{}:{}]", start[d], stop[d], step));
    }
    e.result(0, e.emit(e.out(0), "slice", {e.operand(0)},
                       fmt::format("slice={{{}}}", fmt::join(parts, ", "))));
    return true;
  }
  const Batching* batching() const override {  // vmap: the whole batch dimension
    static const AttrsBatching b(*this, [](const Attrs& at, int64_t n) {
      Attrs o = at;
      o.set("start", prepended(0, at.ints("start")));
      o.set("stop", prepended(n, at.ints("stop")));
      if (at.has("strides")) o.set("strides", prepended(1, at.ints("strides")));
      return o;
    });
    return &b;
  }
  // Quantized weights: any dimension but the last (blocks), which infer() keeps whole.
  bool accepts_quantized() const override { return true; }
  // Dimensions kept whole are split like the operand; their bounds are the local block's.
  Attrs localize_attrs(const Attrs& attrs, const LocalizeArgs& a) const override {
    const Shape& gin = a.in[0].shape;
    const Shape& gout = a.out[0].shape;
    const Shape& lin = a.local_in[0].shape;
    Attrs local = attrs;
    ir::Ints start = attrs.ints("start"), stop = attrs.ints("stop");
    ir::Ints strides = attrs.has("strides") ? attrs.ints("strides") : ir::Ints(gin.size(), 1);
    for (size_t d = 0; d < gin.size(); ++d) {
      if (gin[d] == gout[d] && lin[d] != gin[d]) {
        start[d] = 0;
        stop[d] = lin[d];
        strides[d] = 1;
      }
    }
    local.set("start", start);
    local.set("stop", stop);
    if (attrs.has("strides")) local.set("strides", strides);
    return local;
  }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    const Shape& s = in[0].shape;
    Shape start = attrs.ints("start"), stop = attrs.ints("stop");
    Shape strides = attrs.has("strides") ? attrs.ints("strides") : Shape(s.size(), 1);
    if (!(start.size() == s.size() && stop.size() == s.size() && strides.size() == s.size())) {
      detail::fail(name(),
                   "start {} / stop {} / strides {} must have one entry per dimension of {}",
                   shape_to_string(start), shape_to_string(stop), shape_to_string(strides),
                   in[0].to_string());
    }
    Shape out;
    for (size_t d = 0; d < s.size(); ++d) {
      if (!(0 <= start[d] && start[d] <= stop[d] && stop[d] <= s[d] && strides[d] >= 1)) {
        detail::fail(name(), "[{}, {}) with stride {} is out of range for dimension {} of {}",
                     start[d], stop[d], strides[d], d, in[0].to_string());
      }
      out.push_back((stop[d] - start[d] + strides[d] - 1) / strides[d]);
    }
    // A quantized value's last dimension is whole blocks: it is taken whole.
    if (!(!is_quantized(in[0].dtype) || s.empty() || out.back() == s.back())) {
      detail::fail(name(),
                   "cannot slice the last (block) dimension of a quantized {}; astype it to a "
                   "float dtype first",
                   in[0].to_string());
    }
    return {Aval{out, in[0].dtype}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    return FactorRuleBuilder::whole_dims(in[0], out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array& g = a.cotangents[0];
    if (!g.valid()) return {Array()};
    const Shape& s = a.primals[0].shape();
    Shape start = a.attrs.ints("start");
    Shape strides = a.attrs.has("strides") ? a.attrs.ints("strides") : Shape(s.size(), 1);
    Shape low = start, high(s.size()), interior(s.size());
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t n = g.shape()[d];
      int64_t last = n == 0 ? start[d] : start[d] + (n - 1) * strides[d] + 1;
      high[d] = s[d] - last;
      interior[d] = strides[d] - 1;
      if (n == 0) {  // nothing was taken from this dim
        low[d] = 0;
        high[d] = s[d];
        interior[d] = 0;
      }
    }
    ir::Attrs pa{{"low", low}, {"high", high}, {"interior", interior}, {"value", 0.0}};
    return {detail::bind1("pad", {g}, pa)};
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    const Aval& in = c.in_aval(0);
    Shape start = c.attrs.ints("start");
    Shape strides = c.attrs.has("strides") ? c.attrs.ints("strides") : Shape(in.shape.size(), 1);
    // Quantized: whole blocks of the last dimension, which infer() keeps whole.
    auto is = detail::strides_of(storage_shape(in));
    const int es = dtype_size(in.dtype);
    const char* src = static_cast<const char*>(c.in[0]);
    char* dst = static_cast<char*>(c.out[0]);
    for_each_index(storage_shape(c.out_aval(0)), [&](int64_t o, const std::vector<int64_t>& idx) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) off += (start[d] + idx[d] * strides[d]) * is[d];
      std::memcpy(dst + o * es, src + off * es, static_cast<size_t>(es));
    });
  }
};

// ---- concatenate{axis} ----
class Concatenate final : public Primitive {
 public:
  std::string_view name() const override { return "concatenate"; }
  bool to_hlo(ir::HloEmitter& e) const override {
    std::vector<std::string> args;
    for (size_t k = 0; k < e.num_operands(); ++k) args.push_back(e.operand(k));
    const int axis = norm_axis(name(), e.attrs().i("axis"), e.out(0).ndim());
    e.result(0, e.emit(e.out(0), "concatenate", args, fmt::format("dimensions={{{}}}", axis)));
    return true;
  }
  const Batching* batching() const override {  // vmap: axis shifted
    static const AxesBatching b(*this, {"axis"});
    return &b;
  }
  // Quantized weights (layers stacked at load): along any dimension but the last (blocks).
  bool accepts_quantized() const override { return true; }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    detail::check(!in.empty(), name(), "needs at least one operand");
    int axis = norm_axis(name(), attrs.i("axis"), in[0].ndim());
    Shape out = in[0].shape;
    out[static_cast<size_t>(axis)] = 0;
    for (const Aval& a : in) {
      bool same = a.dtype == in[0].dtype && a.shape.size() == out.size();
      for (size_t d = 0; same && d < out.size(); ++d) {
        same = static_cast<int>(d) == axis || a.shape[d] == in[0].shape[d];
      }
      if (!(same)) {
        detail::fail(name(), "operands {} do not agree except along axis {}", avals_to_string(in),
                     axis);
      }
      if (!(!is_quantized(a.dtype) || axis < a.ndim() - 1)) {
        detail::fail(name(),
                     "cannot join quantized {} along the last (block) dimension; astype them to a "
                     "float dtype first",
                     avals_to_string(in));
      }
      out[static_cast<size_t>(axis)] += a.shape[static_cast<size_t>(axis)];
    }
    return {Aval{out, in[0].dtype}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs& attrs) const override {
    int axis = norm_axis(name(), attrs.i("axis"), in[0].ndim());
    FactorRuleBuilder b;
    std::vector<DimFactors> shared;
    for (size_t d = 0; d < out[0].shape.size(); ++d) {
      shared.push_back(static_cast<int>(d) == axis ? DimFactors{}
                                                   : DimFactors{b.add(out[0].shape[d])});
    }
    for (const Aval& a : in) {
      auto dims = shared;
      dims[static_cast<size_t>(axis)] = {
          b.add(a.shape[static_cast<size_t>(axis)], FactorKind::kNeedReplication)};
      b.rule().operands.push_back(dims);
    }
    auto res = shared;
    res[static_cast<size_t>(axis)] = {
        b.add(out[0].shape[static_cast<size_t>(axis)], FactorKind::kNeedReplication)};
    b.rule().results = {res};
    return b.rule();
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array& g = a.cotangents[0];
    std::vector<Array> out;
    int axis = norm_axis(name(), a.attrs.i("axis"), g.valid() ? g.ndim() : a.primals[0].ndim());
    int64_t off = 0;
    for (const Array& x : a.primals) {
      int64_t n = x.shape()[static_cast<size_t>(axis)];
      out.push_back(g.valid() ? slice_axis(g, axis, off, off + n) : Array());
      off += n;
    }
    return out;
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    int axis = norm_axis(name(), c.attrs.i("axis"), c.out_aval(0).ndim());
    const Shape os = storage_shape(c.out_aval(0));  // quantized: whole blocks
    const int es = dtype_size(c.out_aval(0).dtype);
    int64_t off = 0;
    for (size_t k = 0; k < c.in.size(); ++k) {
      const Shape s = storage_shape(c.in_aval(k));
      Shape zero(s.size(), 0), dst_off(s.size(), 0);
      dst_off[static_cast<size_t>(axis)] = off;
      detail::copy_box(c.in[k], s, zero, c.out[0], os, dst_off, s, es);
      off += s[static_cast<size_t>(axis)];
    }
  }
};

// ---- pad{low, high, interior, value} ----
class Pad final : public Primitive {
 public:
  std::string_view name() const override { return "pad"; }
  bool to_hlo(ir::HloEmitter& e) const override {
    const ir::Ints& lo = e.attrs().ints("low");
    const ir::Ints& hi = e.attrs().ints("high");
    const ir::Ints interior =
        e.attrs().has("interior") ? e.attrs().ints("interior") : ir::Ints(lo.size(), 0);
    std::vector<std::string> dims;
    for (size_t d = 0; d < lo.size(); ++d) {
      dims.push_back(interior[d] ? fmt::format("{}_{}_{}", lo[d], hi[d], interior[d])
                                 : fmt::format("{}_{}", lo[d], hi[d]));
    }
    const std::string value = e.scalar(e.in(0).dtype, e.attrs().f("value"));
    e.result(0, e.emit(e.out(0), "pad", {e.operand(0), value},
                       "padding=" + (dims.empty() ? std::string("{}")
                                                  : fmt::format("{}", fmt::join(dims, "x")))));
    return true;
  }
  const Batching* batching() const override {  // vmap: no padding of the batch dimension
    static const AttrsBatching b(*this, [](const Attrs& at, int64_t) {
      Attrs o = at;
      for (const char* f : {"low", "high", "interior"}) {
        if (at.has(f)) o.set(f, prepended(0, at.ints(f)));
      }
      return o;
    });
    return &b;
  }
  Linearity linearity() const override { return Linearity::kLinear; }
  // Padding with c != 0 is affine: partial sums would add c once per device.
  Linearity linearity(const Attrs& attrs) const override {
    return attrs.has("value") && attrs.f("value") != 0.0 ? Linearity::kNone : Linearity::kLinear;
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    const Shape& s = in[0].shape;
    Shape low = attrs.ints("low"), high = attrs.ints("high");
    Shape interior = attrs.has("interior") ? attrs.ints("interior") : Shape(s.size(), 0);
    if (!(low.size() == s.size() && high.size() == s.size() && interior.size() == s.size())) {
      detail::fail(name(), "low {} / high {} must have one entry per dimension of {}",
                   shape_to_string(low), shape_to_string(high), in[0].to_string());
    }
    Shape out;
    for (size_t d = 0; d < s.size(); ++d) {
      if (!(low[d] >= 0 && high[d] >= 0 && interior[d] >= 0)) {
        detail::fail(name(), "negative padding {} / {} in dimension {} of {}", low[d], high[d], d,
                     in[0].to_string());
      }
      int64_t n = 0, inner = 0;
      bool overflow =
          __builtin_add_overflow(low[d], high[d], &n) || __builtin_add_overflow(n, s[d], &n);
      if (!overflow && s[d] > 0) {
        overflow = __builtin_mul_overflow(s[d] - 1, interior[d], &inner) ||
                   __builtin_add_overflow(n, inner, &n);
      }
      if (overflow) {
        detail::fail(name(), "padding {} / {} of dimension {} of {} overflows 64 bits", low[d],
                     high[d], d, in[0].to_string());
      }
      out.push_back(n);
    }
    return {Aval{out, in[0].dtype}};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    return FactorRuleBuilder::whole_dims(in[0], out[0]);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    const Array& g = a.cotangents[0];
    if (!g.valid()) return {Array()};
    const Shape& s = a.primals[0].shape();
    Shape low = a.attrs.ints("low");
    Shape interior = a.attrs.has("interior") ? a.attrs.ints("interior") : Shape(s.size(), 0);
    Shape start = low, stop(s.size()), strides(s.size());
    for (size_t d = 0; d < s.size(); ++d) {
      strides[d] = interior[d] + 1;
      stop[d] = s[d] == 0 ? low[d] : low[d] + (s[d] - 1) * strides[d] + 1;
    }
    return {slice(g, start, stop, strides)};
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    const Aval& in = c.in_aval(0);
    const Aval& out = c.out_aval(0);
    Shape low = c.attrs.ints("low");
    Shape interior = c.attrs.has("interior") ? c.attrs.ints("interior") : Shape(in.shape.size(), 0);
    const int es = dtype_size(in.dtype);
    char* dst = static_cast<char*>(c.out[0]);
    for (int64_t i = 0; i < out.size(); ++i)
      detail::store_scalar(dst + i * es, out.dtype, c.attrs.f("value"));
    auto os = detail::strides_of(out.shape);
    const char* src = static_cast<const char*>(c.in[0]);
    for_each_index(in.shape, [&](int64_t i, const std::vector<int64_t>& idx) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) off += (low[d] + idx[d] * (interior[d] + 1)) * os[d];
      std::memcpy(dst + off * es, src + i * es, static_cast<size_t>(es));
    });
  }
};

// ---- rev{axes} ----
class Rev final : public Primitive {
 public:
  std::string_view name() const override { return "rev"; }
  bool to_hlo(ir::HloEmitter& e) const override {
    const auto axes = norm_axes(name(), e.attrs().ints("axes"), e.in(0).ndim());
    e.result(0, e.emit(e.out(0), "reverse", {e.operand(0)},
                       "dimensions=" + ir::HloEmitter::dims({axes.begin(), axes.end()})));
    return true;
  }
  const Batching* batching() const override {  // vmap: axes shifted
    static const AxesBatching b(*this, {"axes"});
    return &b;
  }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    norm_axes(name(), attrs.ints("axes"), in[0].ndim());
    return {in[0]};
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>&,
                         const Attrs& attrs) const override {
    norm_axes(name(), attrs.ints("axes"), in[0].ndim());
    // A reversed dimension keeps its split: the partitioner exchanges the reversed blocks
    // (mirrored_dims).
    FactorRuleBuilder b;
    std::vector<DimFactors> dims;
    for (int d = 0; d < in[0].ndim(); ++d) {
      dims.push_back({b.add(in[0].shape[static_cast<size_t>(d)], FactorKind::kPassThrough)});
    }
    b.rule().operands = {dims};
    b.rule().results = {dims};
    return b.rule();
  }
  std::vector<int> mirrored_dims(const std::vector<Aval>& in, const Attrs& attrs) const override {
    auto axes = norm_axes(name(), attrs.ints("axes"), in[0].ndim());
    return {axes.begin(), axes.end()};
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    if (!a.cotangents[0].valid()) return {Array()};
    auto axes = a.attrs.ints("axes");
    return {flip(a.cotangents[0], std::vector<int>(axes.begin(), axes.end()))};
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    const Aval& in = c.in_aval(0);
    auto axes = norm_axes(name(), c.attrs.ints("axes"), in.ndim());
    auto is = detail::strides_of(in.shape);
    const int es = dtype_size(in.dtype);
    const char* src = static_cast<const char*>(c.in[0]);
    char* dst = static_cast<char*>(c.out[0]);
    for_each_index(in.shape, [&](int64_t o, const std::vector<int64_t>& idx) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) {
        bool r = std::find(axes.begin(), axes.end(), static_cast<int>(d)) != axes.end();
        off += (r ? in.shape[d] - 1 - idx[d] : idx[d]) * is[d];
      }
      std::memcpy(dst + o * es, src + off * es, static_cast<size_t>(es));
    });
  }
};

Register<Reshape> r_reshape;
Register<Transpose> r_transpose;
Register<BroadcastInDim> r_bcast;
Register<SlicePrim> r_slice;
Register<Concatenate> r_concat;
Register<Pad> r_pad;
Register<Rev> r_rev;
Register<StorageView> r_storage_view;

}  // namespace
}  // namespace partix::prim

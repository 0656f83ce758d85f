// dot_general{lhs_contract, rhs_contract, lhs_batch, rhs_batch[, out_dtype]}: result
// dimensions are batch, lhs free, rhs free (XLA's convention).
#include <algorithm>
#include <numeric>

#include "core/layout.h"
#include "core/quants.h"
#include "core/scalar.h"
#include "ir/hlo.h"
#include "ir/primitive.h"
#include "partix/ops.h"
#include "prim/batching.h"
#include "prim/collective.h"
#include "prim/dot.h"
#include "ir/elementwise_ops.h"
#include "prim/util.h"
#include "trace/trace.h"

namespace partix::prim {

DotDims dot_dims(const Attrs& attrs, int lhs_rank, int rhs_rank) {
  DotDims d;
  auto conv = [](const ir::Ints& v) { return std::vector<int>(v.begin(), v.end()); };
  d.lhs_contract = conv(attrs.ints("lhs_contract"));
  d.rhs_contract = conv(attrs.ints("rhs_contract"));
  d.lhs_batch = attrs.has("lhs_batch") ? conv(attrs.ints("lhs_batch")) : std::vector<int>{};
  d.rhs_batch = attrs.has("rhs_batch") ? conv(attrs.ints("rhs_batch")) : std::vector<int>{};
  auto free = [](int rank, const std::vector<int>& a, const std::vector<int>& b) {
    std::vector<int> out;
    for (int i = 0; i < rank; ++i) {
      if (std::find(a.begin(), a.end(), i) == a.end() &&
          std::find(b.begin(), b.end(), i) == b.end()) {
        out.push_back(i);
      }
    }
    return out;
  };
  d.lhs_free = free(lhs_rank, d.lhs_contract, d.lhs_batch);
  d.rhs_free = free(rhs_rank, d.rhs_contract, d.rhs_batch);
  return d;
}

namespace {

// All offsets (in elements) of the row-major index space of `dims` of a tensor with strides.
std::vector<int64_t> offsets(const Shape& shape, const std::vector<int64_t>& strides,
                             const std::vector<int>& dims) {
  std::vector<int64_t> out{0};
  for (int d : dims) {
    std::vector<int64_t> next;
    for (int64_t base : out) {
      for (int64_t i = 0; i < shape[static_cast<size_t>(d)]; ++i) {
        next.push_back(base + i * strides[static_cast<size_t>(d)]);
      }
    }
    out = std::move(next);
  }
  return out;
}

// vmap of dot_general: a batched operand's batch dimension becomes a batch dimension of the
// product when both are batched (result dimension 0), else a free dimension of its operand (the
// first of its free dimensions in the result: after the batch dimensions, and after lhs's free
// ones for rhs). An unbatched operand (a weight) is used as it is.
class DotBatching final : public Batching {
 public:
  explicit DotBatching(const Primitive& p) : p_(p) {}
  std::vector<Batched> batch(const BatchArgs& a) const override {
    const Batched& l = a.operands[0];
    const Batched& r = a.operands[1];
    const ir::Ints none;
    const ir::Ints& lb = a.attrs.has("lhs_batch") ? a.attrs.ints("lhs_batch") : none;
    const ir::Ints& rb = a.attrs.has("rhs_batch") ? a.attrs.ints("rhs_batch") : none;
    Attrs at = a.attrs;
    std::vector<Array> ops{l.value, r.value};
    int out_bdim = 0;
    if (l.bdim >= 0) {
      ops[0] = at_front(l, a.size);
      at.set("lhs_contract", shifted(a.attrs.ints("lhs_contract")));
      at.set("lhs_batch", shifted(lb));
    }
    if (r.bdim >= 0) {
      ops[1] = at_front(r, a.size);
      at.set("rhs_contract", shifted(a.attrs.ints("rhs_contract")));
      at.set("rhs_batch", shifted(rb));
    }
    if (l.bdim >= 0 && r.bdim >= 0) {
      at.set("lhs_batch", prepended(0, shifted(lb)));
      at.set("rhs_batch", prepended(0, shifted(rb)));
    } else if (l.bdim >= 0) {
      out_bdim = static_cast<int>(lb.size());
    } else {
      const int64_t lhs_free =
          l.value.ndim() - static_cast<int64_t>(a.attrs.ints("lhs_contract").size() + lb.size());
      out_bdim = static_cast<int>(static_cast<int64_t>(rb.size()) + lhs_free);
    }
    if (!at.has("lhs_batch") || at.ints("lhs_batch").empty()) {
      at.erase("lhs_batch");
      at.erase("rhs_batch");
    }
    return {{detail::bind(p_, ops, at)[0], out_bdim}};
  }

 private:
  const Primitive& p_;
};

class DotGeneral final : public Primitive {
 public:
  std::string_view name() const override { return "dot_general"; }
  bool to_hlo(ir::HloEmitter& e) const override {
    std::vector<std::string> parts;
    for (const char* side : {"lhs", "rhs"}) {
      const std::string batch = fmt::format("{}_batch", side);
      if (e.attrs().has(batch) && !e.attrs().ints(batch).empty()) {
        parts.push_back(
            fmt::format("{}_batch_dims={}", side, ir::HloEmitter::dims(e.attrs().ints(batch))));
      }
      parts.push_back(
          fmt::format("{}_contracting_dims={}", side,
                      ir::HloEmitter::dims(e.attrs().ints(fmt::format("{}_contract", side)))));
    }
    e.result(0, e.emit(e.out(0), "dot", {e.operand(0), e.operand(1)},
                       fmt::format("{}", fmt::join(parts, ", "))));
    return true;
  }
  const Batching* batching() const override {
    static const DotBatching b(*this);
    return &b;
  }
  bool accepts_quantized() const override { return true; }
  Linearity linearity() const override { return Linearity::kMultilinear; }

  // Operands split unevenly: on a device where some operand's block along a dimension is all
  // padding, the result needs no product. A contracting dimension of padding only contributes
  // nothing (its masked sum is zero); a batch or free one makes the whole result block padding,
  // whose values nothing reads. Either way the result is a shared block of zeros: Megatron
  // layouts of models with fewer heads than devices leave several devices' attention weights
  // all padding.
  Attrs localize_attrs(const Attrs& attrs, const LocalizeArgs& a) const override {
    if (a.in_shardings == nullptr) return attrs;
    return with_uneven_operands(attrs, a.in, a.local_in, *a.in_shardings);
  }
  bool may_share_result(const Attrs& attrs) const override { return attrs.has("uneven"); }
  bool shares_result(const KernelCall& c, const std::vector<const detail::Buffer*>&,
                     detail::Buffer* result) const override {
    if (!some_operand_block_is_all_padding(c)) return false;
    detail::Buffer zeros = filled_block(c.out_aval(0), 0.0);
    if (!zeros.valid()) return false;
    *result = zeros.alias_for(c.ctx.device);
    return true;
  }

  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 2);
    const Aval& a = in[0];
    const Aval& b = in[1];
    if (is_quantized(a.dtype) || is_quantized(b.dtype)) return infer_quantized(in, attrs);
    // An f32 lhs with a 16-bit float rhs (a weight kept in bf16 or f16) widens the rhs exactly,
    // inside the kernel: the f32 product of the widened weight.
    const bool half_weight =
        a.dtype == DType::F32 && (b.dtype == DType::BF16 || b.dtype == DType::F16);
    if (!(a.dtype == b.dtype || half_weight)) {
      detail::fail(name(), "operand dtypes differ: {}", avals_to_string(in));
    }
    if (a.dtype == DType::Bool) {
      detail::fail(name(), "needs numeric operands, got {}", avals_to_string(in));
    }
    DotDims d = dot_dims(attrs, a.ndim(), b.ndim());
    auto check_dims = [&](const std::vector<int>& dims, int rank, const char* what) {
      std::vector<int> s = dims;
      std::sort(s.begin(), s.end());
      if (std::adjacent_find(s.begin(), s.end()) != s.end()) {
        detail::fail(name(), "{} dimensions [{}] repeat", what, fmt::join(dims, ","));
      }
      for (int x : dims) {
        if (!(x >= 0 && x < rank)) {
          detail::fail(name(), "{} dimension {} is out of range for {}", what, x,
                       avals_to_string(in));
        }
      }
    };
    check_dims(d.lhs_contract, a.ndim(), "lhs contracting");
    check_dims(d.rhs_contract, b.ndim(), "rhs contracting");
    check_dims(d.lhs_batch, a.ndim(), "lhs batch");
    check_dims(d.rhs_batch, b.ndim(), "rhs batch");
    detail::check(d.lhs_contract.size() == d.rhs_contract.size(), name(),
                  "{} lhs but {} rhs contracting dimensions", d.lhs_contract.size(),
                  d.rhs_contract.size());
    detail::check(d.lhs_batch.size() == d.rhs_batch.size(), name(),
                  "{} lhs but {} rhs batch dimensions", d.lhs_batch.size(), d.rhs_batch.size());
    for (int x : d.lhs_contract) {
      detail::check(std::find(d.lhs_batch.begin(), d.lhs_batch.end(), x) == d.lhs_batch.end(),
                    name(), "lhs dimension {} is both batch and contracting", x);
    }
    for (int x : d.rhs_contract) {
      detail::check(std::find(d.rhs_batch.begin(), d.rhs_batch.end(), x) == d.rhs_batch.end(),
                    name(), "rhs dimension {} is both batch and contracting", x);
    }
    for (size_t i = 0; i < d.lhs_contract.size(); ++i) {
      if (!(a.shape[static_cast<size_t>(d.lhs_contract[i])] ==
            b.shape[static_cast<size_t>(d.rhs_contract[i])])) {
        detail::fail(name(), "contracting sizes differ: {} (lhs dim {}, rhs dim {})",
                     avals_to_string(in), d.lhs_contract[i], d.rhs_contract[i]);
      }
    }
    Shape out;
    for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
      int64_t sa = a.shape[static_cast<size_t>(d.lhs_batch[i])];
      if (!(sa == b.shape[static_cast<size_t>(d.rhs_batch[i])])) {
        detail::fail(name(), "batch sizes differ: {}", avals_to_string(in));
      }
      out.push_back(sa);
    }
    for (int x : d.lhs_free) out.push_back(a.shape[static_cast<size_t>(x)]);
    for (int x : d.rhs_free) out.push_back(b.shape[static_cast<size_t>(x)]);
    DType odt = attrs.has("out_dtype") ? attrs.dtype("out_dtype") : a.dtype;
    return {Aval{out, odt}};
  }

  // A quantized rhs is a weight [N..., K...] whose trailing dims contract, in
  // order, with the lhs's trailing dims: y[M, N] = x[M, K] w[N, K]^T, blocks along K.
  std::vector<Aval> infer_quantized(const std::vector<Aval>& in, const Attrs& attrs) const {
    const Aval& a = in[0];
    const Aval& b = in[1];
    if (!(!is_quantized(a.dtype) && a.dtype == DType::F32)) {
      detail::fail(name(),
                   "a quantized operand must be the rhs, with an f32 lhs; got {} (astype to a "
                   "float dtype first)",
                   avals_to_string(in));
    }
    check_quantized_shape(name(), b.dtype, b.shape);
    DotDims d = dot_dims(attrs, a.ndim(), b.ndim());
    const int nc = static_cast<int>(d.lhs_contract.size());
    bool ok = d.lhs_batch.empty() && d.rhs_batch.empty() &&
              static_cast<int>(d.rhs_contract.size()) == nc && nc > 0;
    for (int i = 0; ok && i < nc; ++i) {
      const int ld = a.ndim() - nc + i, rd = b.ndim() - nc + i;
      ok = d.lhs_contract[static_cast<size_t>(i)] == ld &&
           d.rhs_contract[static_cast<size_t>(i)] == rd &&
           a.shape[static_cast<size_t>(ld)] == b.shape[static_cast<size_t>(rd)];
    }
    if (!(ok)) {
      detail::fail(name(),
                   "with a quantized rhs, the contracting dimensions must be the trailing "
                   "dimensions of both operands, in order, with no batch dimensions (x[M, K] "
                   "w[N, K]^T); got {} contracting lhs [{}] with rhs [{}] (astype the weight to a "
                   "float dtype for other layouts)",
                   avals_to_string(in), fmt::join(d.lhs_contract, ","),
                   fmt::join(d.rhs_contract, ","));
    }
    if (attrs.has("out_dtype")) {
      detail::check(attrs.dtype("out_dtype") == DType::F32, name(),
                    "a quantized matmul produces f32, not {}",
                    dtype_name(attrs.dtype("out_dtype")));
    }
    Shape out;
    for (int x : d.lhs_free) out.push_back(a.shape[static_cast<size_t>(x)]);
    for (int x : d.rhs_free) out.push_back(b.shape[static_cast<size_t>(x)]);
    return {Aval{out, DType::F32}};
  }

  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>&,
                         const Attrs& attrs) const override {
    DotDims d = dot_dims(attrs, in[0].ndim(), in[1].ndim());
    FactorRuleBuilder b;
    std::vector<DimFactors> lhs(in[0].shape.size()), rhs(in[1].shape.size()), out;
    for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
      int f = b.add(in[0].shape[static_cast<size_t>(d.lhs_batch[i])]);
      lhs[static_cast<size_t>(d.lhs_batch[i])] = {f};
      rhs[static_cast<size_t>(d.rhs_batch[i])] = {f};
      out.push_back({f});
    }
    for (int x : d.lhs_free) {
      int f = b.add(in[0].shape[static_cast<size_t>(x)]);
      lhs[static_cast<size_t>(x)] = {f};
      out.push_back({f});
    }
    for (int x : d.rhs_free) {
      int f = b.add(in[1].shape[static_cast<size_t>(x)]);
      rhs[static_cast<size_t>(x)] = {f};
      out.push_back({f});
    }
    for (size_t i = 0; i < d.lhs_contract.size(); ++i) {
      int f = b.add(in[0].shape[static_cast<size_t>(d.lhs_contract[i])], FactorKind::kReduction);
      lhs[static_cast<size_t>(d.lhs_contract[i])] = {f};
      rhs[static_cast<size_t>(d.rhs_contract[i])] = {f};
    }
    b.rule().operands = {lhs, rhs};
    b.rule().results = {out};
    return b.rule();
  }

  std::vector<Array> vjp(const VjpArgs& args) const override {
    const Array& g0 = args.cotangents[0];
    if (!g0.valid()) return {Array(), Array()};
    const Array& A = args.primals[0];
    // A quantized weight is a constant (no gradient of its own); the lhs's cotangent contracts
    // with its dequantized values, which the quantized kernel cannot do (it contracts K only).
    // x[M..., K...] w[N..., K...]^T: dx = g[M..., N...] w contracted over N..., already in x's
    // dimension order.
    if (is_quantized(args.primals[1].dtype())) {
      const Array& W = args.primals[1];
      DotDims d = dot_dims(args.attrs, A.ndim(), W.ndim());
      std::vector<int> g_rf(d.rhs_free.size());
      std::iota(g_rf.begin(), g_rf.end(), static_cast<int>(d.lhs_free.size()));
      return {dot_general(g0, astype(W, DType::F32), g_rf, d.rhs_free, {}, {}), Array()};
    }
    const Array& B = args.primals[1];
    DotDims d = dot_dims(args.attrs, A.ndim(), B.ndim());
    const int nb = static_cast<int>(d.lhs_batch.size());
    const int nlf = static_cast<int>(d.lhs_free.size());
    const int nrf = static_cast<int>(d.rhs_free.size());
    // Low-precision operands: contract the cotangent in their dtype, accumulating in f32.
    DType in_dt = A.dtype();
    Array g = g0.dtype() == in_dt ? g0 : astype(g0, in_dt);
    std::optional<DType> acc;
    if (in_dt == DType::BF16 || in_dt == DType::F16) acc = DType::F32;
    std::vector<int> gb(static_cast<size_t>(nb));
    std::iota(gb.begin(), gb.end(), 0);
    auto rank_in = [](const std::vector<int>& v, int x) {
      std::vector<int> s = v;
      std::sort(s.begin(), s.end());
      return static_cast<int>(std::find(s.begin(), s.end(), x) - s.begin());
    };
    // dA: contract g's rhs-free dims with B's free dims -> [batch, lhs free, B contract (sorted)].
    std::vector<int> g_rf(static_cast<size_t>(nrf));
    std::iota(g_rf.begin(), g_rf.end(), nb + nlf);
    Array da_raw = dot_general(g, B, g_rf, d.rhs_free, gb, d.rhs_batch, acc);
    std::vector<int> perm_a(static_cast<size_t>(A.ndim()));
    for (int i = 0; i < nb; ++i)
      perm_a[static_cast<size_t>(d.lhs_batch[static_cast<size_t>(i)])] = i;
    for (int j = 0; j < nlf; ++j)
      perm_a[static_cast<size_t>(d.lhs_free[static_cast<size_t>(j)])] = nb + j;
    for (size_t k = 0; k < d.lhs_contract.size(); ++k) {
      perm_a[static_cast<size_t>(d.lhs_contract[k])] =
          nb + nlf + rank_in(d.rhs_contract, d.rhs_contract[k]);
    }
    // dB: contract A's free dims with g's lhs-free dims -> [batch, A contract (sorted), rhs
    // free]: A first, so that a [K, N] weight's gradient comes out [K, N] with no transpose.
    std::vector<int> g_lf(static_cast<size_t>(nlf));
    std::iota(g_lf.begin(), g_lf.end(), nb);
    Array db_raw = dot_general(A, g, d.lhs_free, g_lf, d.lhs_batch, gb, acc);
    const int nc = static_cast<int>(d.rhs_contract.size());
    std::vector<int> perm_b(static_cast<size_t>(B.ndim()));
    for (int i = 0; i < nb; ++i)
      perm_b[static_cast<size_t>(d.rhs_batch[static_cast<size_t>(i)])] = i;
    for (int j = 0; j < nrf; ++j)
      perm_b[static_cast<size_t>(d.rhs_free[static_cast<size_t>(j)])] = nb + nc + j;
    for (size_t k = 0; k < d.rhs_contract.size(); ++k) {
      perm_b[static_cast<size_t>(d.rhs_contract[k])] =
          nb + rank_in(d.lhs_contract, d.lhs_contract[k]);
    }
    Array da = transpose(da_raw, perm_a);
    Array db = transpose(db_raw, perm_b);
    if (da.dtype() != A.dtype()) da = astype(da, A.dtype());
    if (db.dtype() != B.dtype()) db = astype(db, B.dtype());
    return {da, db};
  }

  static void reference_quantized(const KernelCall& c);

  double flops(const std::vector<Aval>& in, const std::vector<Aval>& out,
               const Attrs& attrs) const override {
    DotDims d = dot_dims(attrs, in[0].ndim(), in[1].ndim());
    double k = 1;
    for (int x : d.lhs_contract) k *= static_cast<double>(in[0].shape[static_cast<size_t>(x)]);
    return 2.0 * k * static_cast<double>(out[0].size());
  }

  void reference(const KernelCall& c) const override {
    if (is_quantized(c.in_aval(1).dtype)) return reference_quantized(c);
    const Aval& a = c.in_aval(0);
    const Aval& b = c.in_aval(1);
    DotDims d = dot_dims(c.attrs, a.ndim(), b.ndim());
    auto sa = detail::strides_of(a.shape), sb = detail::strides_of(b.shape);
    auto ab = offsets(a.shape, sa, d.lhs_batch), bb = offsets(b.shape, sb, d.rhs_batch);
    auto af = offsets(a.shape, sa, d.lhs_free), bf = offsets(b.shape, sb, d.rhs_free);
    auto ak = offsets(a.shape, sa, d.lhs_contract), bk = offsets(b.shape, sb, d.rhs_contract);
    const int ea = dtype_size(a.dtype), eb = dtype_size(b.dtype);
    const DType odt = c.out_aval(0).dtype;
    const int eo = dtype_size(odt);
    const char* pa = static_cast<const char*>(c.in[0]);
    const char* pb = static_cast<const char*>(c.in[1]);
    char* po = static_cast<char*>(c.out[0]);
    const bool fl = is_floating(a.dtype);
    int64_t o = 0;
    for (size_t ib = 0; ib < ab.size(); ++ib) {
      for (int64_t fa : af) {
        for (int64_t fb : bf) {
          double acc = 0;
          int64_t iacc = 0;
          for (size_t k = 0; k < ak.size(); ++k) {
            const char* xa = pa + (ab[ib] + fa + ak[k]) * ea;
            const char* xb = pb + (bb[ib] + fb + bk[k]) * eb;
            if (fl) {
              acc += detail::load_scalar(xa, a.dtype) * detail::load_scalar(xb, b.dtype);
            } else {
              iacc = ew::wrap_add(
                  iacc, ew::wrap_mul(detail::load_int(xa, a.dtype), detail::load_int(xb, a.dtype)));
            }
          }
          if (fl)
            detail::store_scalar(po + o * eo, odt, acc);
          else
            detail::store_int(po + o * eo, odt, iacc);
          o++;
        }
      }
    }
  }
};

// The oracle for quantized weights: dequantize all of w, then sum in double.
void DotGeneral::reference_quantized(const KernelCall& c) {
  const Aval& a = c.in_aval(0);
  const Aval& b = c.in_aval(1);
  const int nc = static_cast<int>(dot_dims(c.attrs, a.ndim(), b.ndim()).lhs_contract.size());
  int64_t K = 1;
  for (int i = 0; i < nc; ++i) K *= a.shape[static_cast<size_t>(a.ndim() - nc + i)];
  const int64_t M = K == 0 ? 0 : a.size() / K, N = K == 0 ? 0 : b.size() / K;
  std::vector<float> w(static_cast<size_t>(N * K));
  if (!w.empty()) detail::dequantize(b.dtype, c.in[1], N * K, w.data());
  const float* x = c.input<float>(0);
  float* y = c.output<float>(0);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k)
        acc += double(x[m * K + k]) * w[static_cast<size_t>(n * K + k)];
      y[m * N + n] = static_cast<float>(acc);
    }
  }
  if (K == 0) std::fill(y, y + c.out_aval(0).size(), 0.0f);
}

Register<DotGeneral> r_dot;

}  // namespace
}  // namespace partix::prim

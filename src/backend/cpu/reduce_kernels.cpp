// Fast CPU kernels of reduce_sum / reduce_max / reduce_min and argmax / argmin.
//
// A reduction is first canonicalised: size-1 dimensions dropped, adjacent dimensions with
// the same role merged. What remains is a row reduction [kept, reduced] (contiguous inner
// runs), a column reduction [kept?, reduced, kept] (vectorised across the kept inner dim),
// or anything else, which is permuted into [kept, reduced] first.
//
// Accumulation: f32, bf16 and f16 in f32, f64 in f64, pairwise. Rows are summed in blocks of
// 1024 with 64 independent lanes, block sums combined pairwise; columns are summed over
// blocks of 32 rows combined pairwise. The error is then within ~(16 + 6 + log2(n / 1024))
// units of f32 rounding times sum |x|, instead of n units for a sequential sum; results do not
// depend on the thread count. Integer sums wrap (as the reference's, truncated). max / min
// return NaN when any element is NaN (the reference's canonical quiet NaN); which zero a
// max / min of +0 and -0 returns is unspecified.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/cpu/kernel_util.h"
#include "backend/cpu/permute.h"
#include "core/buffer.h"
#include "core/scratch.h"
#include "ir/primitive.h"
#include "prim/util.h"

namespace partix::backend::cpu {

namespace {

using prim::KernelCall;
using prim::ReduceKind;

constexpr int64_t kRowBlock = 1024;  // elements per row block (pairwise leaves)
constexpr int64_t kColRows = 32;     // rows per column block (pairwise leaves)
constexpr int64_t kColTile = 512;    // columns per tile of a column reduction
constexpr int64_t kStackBlocks = 64; // row blocks whose partials live on the stack

// ---- the combining operation per kind and accumulator type V ----

template <ReduceKind K, class V>
struct Combine {
  static constexpr V init() {
    if constexpr (K == ReduceKind::kSum) {
      return V(0);
    } else if constexpr (std::is_floating_point_v<V>) {
      return K == ReduceKind::kMax ? -std::numeric_limits<V>::infinity()
                                   : std::numeric_limits<V>::infinity();
    } else {
      return K == ReduceKind::kMax ? std::numeric_limits<V>::lowest()
                                   : std::numeric_limits<V>::max();
    }
  }
  // NaN never wins a comparison here: callers track NaN separately.
  static V apply(V a, V b) {
    if constexpr (K == ReduceKind::kSum) {
      if constexpr (std::is_integral_v<V>) {
        using U = std::make_unsigned_t<V>;  // integer sums wrap
        return static_cast<V>(static_cast<U>(a) + static_cast<U>(b));
      } else {
        return a + b;
      }
    } else if constexpr (K == ReduceKind::kMax) {
      return b > a ? b : a;
    } else {
      return b < a ? b : a;
    }
  }
};

template <class V>
constexpr bool kTrackNaN = std::is_floating_point_v<V>;

// The values of n elements of storage S as V: the storage itself, or converted into buf.
template <class S, class V>
const V* values(const S* x, int64_t n, DType dt, V* buf) {
  if constexpr (std::is_same_v<S, V>) {
    return x;
  } else {
    half_to_f32(dt, x, buf, n);
    return buf;
  }
}

// ---- rows: out[r] = reduce(x[r, 0:len]) ----

// One block, with 64 bytes x 4 of independent lanes so the adds pipeline.
template <ReduceKind K, class V>
V reduce_block(const V* v, int64_t m, bool& nan) {
  using C = Combine<K, V>;
  constexpr int kLanes = 256 / sizeof(V);
  V acc[kLanes];
  int flags[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    acc[j] = C::init();
    flags[j] = 0;
  }
  int64_t i = 0;
  for (; i + kLanes <= m; i += kLanes) {
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) {
      acc[j] = C::apply(acc[j], v[i + j]);
      if constexpr (kTrackNaN<V> && K != ReduceKind::kSum) flags[j] |= v[i + j] != v[i + j];
    }
  }
  for (int j = 0; i < m; ++i, ++j) {
    acc[j] = C::apply(acc[j], v[i]);
    if constexpr (kTrackNaN<V> && K != ReduceKind::kSum) flags[j] |= v[i] != v[i];
  }
  for (int w = kLanes / 2; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) {
      acc[j] = C::apply(acc[j], acc[j + w]);
      flags[j] |= flags[j + w];
    }
  }
  nan = nan || flags[0] != 0;
  return acc[0];
}

// Pairwise over an array of partial results (in place).
template <ReduceKind K, class V>
V combine_pairwise(V* p, int64_t n) {
  if (n == 0) return Combine<K, V>::init();
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t i = 0; i + w < n; i += 2 * w) p[i] = Combine<K, V>::apply(p[i], p[i + w]);
  }
  return p[0];
}

template <ReduceKind K, class V>
V finish(V acc, bool nan) {
  if constexpr (kTrackNaN<V>) {
    if (nan) return std::numeric_limits<V>::quiet_NaN();
  }
  return acc;
}

// out[r] for r in [0, rows) over rows of `len` contiguous elements.
template <ReduceKind K, class S, class V>
void reduce_rows(const S* x, int64_t rows, int64_t len, DType dt, V* out) {
  const int64_t blocks = (len + kRowBlock - 1) / kRowBlock;
  if (rows == 1 && blocks > 1) {
    // One long row: block partials in parallel, then a fixed pairwise tree (on the stack up to
    // kStackBlocks blocks: decode steps reduce many short rows).
    detail::Scratch<V, kStackBlocks> part(static_cast<size_t>(blocks));
    detail::Scratch<char, kStackBlocks> nan(static_cast<size_t>(blocks));
    parallel_for(blocks, std::max<int64_t>(1, kParallelGrain / kRowBlock),
                 [&](int64_t lo, int64_t hi) {
                   alignas(64) V buf[kRowBlock];
                   for (int64_t b = lo; b < hi; ++b) {
                     const int64_t m = std::min(kRowBlock, len - b * kRowBlock);
                     bool f = false;
                     part[b] = reduce_block<K>(values<S, V>(x + b * kRowBlock, m, dt, buf), m, f);
                     nan[b] = f;
                   }
                 });
    bool any = false;
    for (int64_t b = 0; b < blocks; ++b) any = any || nan[b];
    out[0] = finish<K>(combine_pairwise<K>(part.data(), blocks), any);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, len));
  parallel_for(rows, grain, [&](int64_t lo, int64_t hi) {
    alignas(64) V buf[kRowBlock];
    detail::Scratch<V, kStackBlocks> part(static_cast<size_t>(blocks));
    for (int64_t r = lo; r < hi; ++r) {
      bool nan = false;
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t m = std::min(kRowBlock, len - b * kRowBlock);
        part[b] = reduce_block<K>(values<S, V>(x + r * len + b * kRowBlock, m, dt, buf), m, nan);
      }
      out[r] = finish<K>(combine_pairwise<K>(part.data(), blocks), nan);
    }
  });
}

// ---- columns: out[o, j] = reduce_i(x[o, i, j]) ----

// acc[0:w) = reduce over rows [0, rows) of the tile starting at x (row stride ld).
template <ReduceKind K, class S, class V>
void reduce_column_tile(const S* x, int64_t rows, int64_t ld, int64_t w, DType dt, V* acc) {
  using C = Combine<K, V>;
  alignas(64) V buf[kColTile];
  alignas(64) V cur[kColTile];
  int flags[kColTile];
  for (int64_t j = 0; j < w; ++j) flags[j] = 0;
  // Pairwise over blocks of kColRows rows: levels[l] holds the sum of 2^l blocks.
  std::vector<V> levels;
  std::vector<bool> used;
  for (int64_t r0 = 0; r0 < rows; r0 += kColRows) {
    for (int64_t j = 0; j < w; ++j) cur[j] = C::init();
    const int64_t r1 = std::min(rows, r0 + kColRows);
    for (int64_t r = r0; r < r1; ++r) {
      const V* v = values<S, V>(x + r * ld, w, dt, buf);
#pragma omp simd
      for (int64_t j = 0; j < w; ++j) {
        cur[j] = C::apply(cur[j], v[j]);
        if constexpr (kTrackNaN<V> && K != ReduceKind::kSum) flags[j] |= v[j] != v[j];
      }
    }
    if constexpr (K != ReduceKind::kSum) {
      if (r0 == 0) {
        std::copy(cur, cur + w, acc);
      } else {
        for (int64_t j = 0; j < w; ++j) acc[j] = C::apply(acc[j], cur[j]);
      }
      continue;
    }
    size_t l = 0;  // binary carry: merge equal-sized partial sums
    for (; l < used.size() && used[l]; ++l) {
      const V* lv = levels.data() + l * static_cast<size_t>(w);
      for (int64_t j = 0; j < w; ++j) cur[j] = C::apply(lv[j], cur[j]);
      used[l] = false;
    }
    if (l == used.size()) {
      used.push_back(false);
      levels.resize(used.size() * static_cast<size_t>(w));
    }
    std::copy(cur, cur + w, levels.begin() + static_cast<ptrdiff_t>(l * static_cast<size_t>(w)));
    used[l] = true;
  }
  if constexpr (K == ReduceKind::kSum) {
    bool first = true;
    for (size_t l = 0; l < used.size(); ++l) {
      if (!used[l]) continue;
      const V* lv = levels.data() + l * static_cast<size_t>(w);
      for (int64_t j = 0; j < w; ++j) acc[j] = first ? lv[j] : C::apply(lv[j], acc[j]);
      first = false;
    }
    if (first) std::fill(acc, acc + w, V(0));
  } else {
    for (int64_t j = 0; j < w; ++j) acc[j] = finish<K>(acc[j], flags[j] != 0);
  }
}

template <ReduceKind K, class S, class V>
void reduce_columns(const S* x, int64_t outer, int64_t rows, int64_t cols, DType dt, V* out) {
  const int64_t tiles = (cols + kColTile - 1) / kColTile;
  const int64_t grain =
      std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, rows * kColTile));
  parallel_for(outer * tiles, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t o = u / tiles, j0 = (u % tiles) * kColTile;
      const int64_t w = std::min(kColTile, cols - j0);
      reduce_column_tile<K>(x + o * rows * cols + j0, rows, cols, w, dt, out + o * cols + j0);
    }
  });
}

// ---- canonical form ----

struct Groups {
  std::vector<int64_t> size;
  std::vector<bool> reduced;
};

Groups canonical(const Shape& shape, const std::vector<bool>& reduced) {
  Groups g;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!g.size.empty() && g.reduced.back() == reduced[d]) {
      g.size.back() *= shape[d];
    } else {
      g.size.push_back(shape[d]);
      g.reduced.push_back(reduced[d]);
    }
  }
  return g;
}

// What a reduction does with its operand's shape, worked out once per instruction (the
// kernel's prepare) or, without one, per call.
struct ReducePlan {
  std::vector<bool> red;  // per operand dim: reduced
  Groups g;               // canonical form
  std::vector<int> perm;  // reduced dims innermost (the general case)
  int64_t kept = 1;       // elements kept
};

ReducePlan reduce_plan(const ir::Attrs& attrs, const ir::Aval& in) {
  ReducePlan p;
  p.red.assign(in.shape.size(), false);
  for (int a : prim::norm_axes("reduce", attrs.ints("axes"), in.ndim())) p.red[static_cast<size_t>(a)] = true;
  p.g = canonical(in.shape, p.red);
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t d = 0; d < in.shape.size(); ++d) {
      if (p.red[d] == (pass == 1)) p.perm.push_back(static_cast<int>(d));
      if (pass == 0 && !p.red[d]) p.kept *= in.shape[d];
    }
  }
  return p;
}

template <class V, class S>
void store(const V* acc, S* out, int64_t n, DType dt) {
  if constexpr (std::is_same_v<S, uint16_t>) {
    f32_to_half(dt, acc, out, n);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<S>(acc[i]);
  }
}

template <ReduceKind K, class S, class V>
bool reduce_typed(const KernelCall& c) {
  const ir::Aval& in = c.in_aval(0);
  const DType dt = in.dtype;
  const int64_t on = c.out_aval(0).size();
  ReducePlan own;
  const auto* plan = static_cast<const ReducePlan*>(c.prepared);
  if (!plan) {
    own = reduce_plan(c.attrs, in);
    plan = &own;
  }
  const S* x = c.input<S>(0);
  S* out = c.output<S>(0);
  // Accumulators: the output itself where it has the accumulator's type (and is not the
  // operand's memory), else a vector converted at the end.
  std::vector<V> acc_own;
  V* acc = nullptr;
  if constexpr (std::is_same_v<S, V>) {
    if (static_cast<const void*>(out) != static_cast<const void*>(x)) acc = out;
  }
  if (!acc) {
    acc_own.resize(static_cast<size_t>(on));
    acc = acc_own.data();
  }
  const Groups& g = plan->g;
  const size_t r = g.size.size();
  if (in.size() == 0) {
    std::fill(acc, acc + on, Combine<K, V>::init());
  } else if (r == 0 || (r == 1 && !g.reduced[0])) {
    reduce_rows<K, S, V>(x, on, 1, dt, acc);  // nothing reduced: each element alone
  } else if (r == 1 || (r == 2 && !g.reduced[0])) {
    reduce_rows<K, S, V>(x, on, g.size[r - 1], dt, acc);
  } else if (r == 2 || (r == 3 && !g.reduced[0])) {
    const int64_t outer = r == 3 ? g.size[0] : 1;
    reduce_columns<K, S, V>(x, outer, g.size[r - 2], g.size[r - 1], dt, acc);
  } else {
    // Reduced dims in several places: move them innermost, then reduce rows.
    detail::Buffer tmp = detail::Buffer::allocate(c.ctx.device, in.nbytes());
    permute_copy(x, tmp.data(), in.shape, plan->perm, dtype_size(dt));
    reduce_rows<K, S, V>(static_cast<const S*>(tmp.data()), plan->kept, in.size() / plan->kept,
                         dt, acc);
  }
  if (acc != static_cast<void*>(out)) store(acc, out, on, dt);
  return true;
}

template <ReduceKind K>
bool reduce_kernel(const KernelCall& c) {
  switch (c.in_aval(0).dtype) {
    case DType::F32:
      return reduce_typed<K, float, float>(c);
    case DType::BF16:
    case DType::F16:
      return reduce_typed<K, uint16_t, float>(c);
    case DType::F64:
      return reduce_typed<K, double, double>(c);
    case DType::I32:
      return reduce_typed<K, int32_t, int32_t>(c);
    case DType::I64:
      return reduce_typed<K, int64_t, int64_t>(c);
    case DType::Bool:
      return false;
    default:  // quantized dtypes never reach a reduction (refused when traced)
      return false;
  }
  return false;
}

// ---- argmax / argmin{axis, index_dtype}: the first extremal index, NaN counting as extremal

// One contiguous row: find the extreme (or NaN) with vector passes, then its first index.
template <bool kMax, class V>
int64_t arg_row(const V* v, int64_t n) {
  bool nan = false;
  V best = reduce_block < kMax ? ReduceKind::kMax : ReduceKind::kMin > (v, n, nan);
  for (int64_t k = 0; k < n; ++k) {
    if (nan ? v[k] != v[k] : v[k] == best) return k;
  }
  return 0;
}

template <bool kMax, class S, class V>
void arg_typed(const KernelCall& c, int64_t outer, int64_t n, int64_t inner, int64_t* idx) {
  const DType dt = c.in_aval(0).dtype;
  const S* x = c.input<S>(0);
  if (inner == 1) {
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / n);
    parallel_for(outer, grain, [&](int64_t lo, int64_t hi) {
      std::vector<V> buf(std::is_same_v<S, V> ? 0 : static_cast<size_t>(n));
      for (int64_t o = lo; o < hi; ++o)
        idx[o] = arg_row<kMax>(values<S, V>(x + o * n, n, dt, buf.data()), n);
    });
    return;
  }
  // Along a strided axis: running best per inner position, vectorised across it.
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / (n * inner));
  parallel_for(outer, grain, [&](int64_t lo, int64_t hi) {
    std::vector<V> best(static_cast<size_t>(inner)), buf(static_cast<size_t>(inner));
    std::vector<int64_t> at(static_cast<size_t>(inner));
    for (int64_t o = lo; o < hi; ++o) {
      const V* first = values<S, V>(x + o * n * inner, inner, dt, buf.data());
      std::copy(first, first + inner, best.begin());
      std::fill(at.begin(), at.end(), 0);
      V* bv = best.data();
      int64_t* bi = at.data();
      for (int64_t k = 1; k < n; ++k) {
        const V* v = values<S, V>(x + (o * n + k) * inner, inner, dt, buf.data());
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) {
          bool better = bv[i] == bv[i] && (v[i] != v[i] || (kMax ? v[i] > bv[i] : v[i] < bv[i]));
          bv[i] = better ? v[i] : bv[i];
          bi[i] = better ? k : bi[i];
        }
      }
      std::copy(at.begin(), at.end(), idx + o * inner);
    }
  });
}

template <bool kMax>
bool arg_kernel(const KernelCall& c) {
  const ir::Aval& in = c.in_aval(0);
  const int axis = prim::norm_axis("argmax", c.attrs.i("axis"), in.ndim());
  int64_t outer = 1, inner = 1, n = in.shape[static_cast<size_t>(axis)];
  for (int d = 0; d < axis; ++d) outer *= in.shape[static_cast<size_t>(d)];
  for (int d = axis + 1; d < in.ndim(); ++d) inner *= in.shape[static_cast<size_t>(d)];
  const int64_t on = outer * inner;
  if (on == 0) return true;
  std::vector<int64_t> idx(static_cast<size_t>(on));
  switch (in.dtype) {
    case DType::F32:
      arg_typed<kMax, float, float>(c, outer, n, inner, idx.data());
      break;
    case DType::BF16:
    case DType::F16:
      arg_typed<kMax, uint16_t, float>(c, outer, n, inner, idx.data());
      break;
    case DType::F64:
      arg_typed<kMax, double, double>(c, outer, n, inner, idx.data());
      break;
    case DType::I32:
      arg_typed<kMax, int32_t, int32_t>(c, outer, n, inner, idx.data());
      break;
    case DType::I64:
      arg_typed<kMax, int64_t, int64_t>(c, outer, n, inner, idx.data());
      break;
    case DType::Bool:
      return false;
    default:  // quantized dtypes never reach a reduction (refused when traced)
      return false;
  }
  if (c.out_aval(0).dtype == DType::I32) {
    int32_t* out = c.output<int32_t>(0);
    for (int64_t i = 0; i < on; ++i) out[i] = static_cast<int32_t>(idx[static_cast<size_t>(i)]);
  } else {
    std::memcpy(c.out[0], idx.data(), static_cast<size_t>(on) * sizeof(int64_t));
  }
  return true;
}

struct Registrar {
  Registrar() {
    prim::register_kernel("reduce_sum", "cpu", &reduce_kernel<ReduceKind::kSum>);
    prim::register_kernel("reduce_max", "cpu", &reduce_kernel<ReduceKind::kMax>);
    prim::register_kernel("reduce_min", "cpu", &reduce_kernel<ReduceKind::kMin>);
    for (const char* name : {"reduce_sum", "reduce_max", "reduce_min"}) {
      prim::register_kernel_prepare(
          name, "cpu",
          [](const ir::Attrs& attrs, const std::vector<const ir::Aval*>& in,
             const std::vector<const ir::Aval*>&) -> std::shared_ptr<const void> {
            if (in.size() != 1) return nullptr;
            return std::make_shared<const ReducePlan>(reduce_plan(attrs, *in[0]));
          });
    }
    prim::register_kernel("argmax", "cpu", &arg_kernel<true>);
    prim::register_kernel("argmin", "cpu", &arg_kernel<false>);
  }
} registrar;

}  // namespace
}  // namespace partix::backend::cpu

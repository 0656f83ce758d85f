// Fast CPU dot_general. Every dimension layout becomes a batched matmul
//   C[b..., M, N] = A[b..., M, K] B[b..., K, N]
// over strided views of the operands: the lhs free dims merge into M, the rhs free dims into
// N, each contracting pair into K (in whichever order both operands can read as one stride),
// batch pairs into as few batch dims as the strides allow. The result layout of dot_general
// (batch, lhs free, rhs free) is exactly C, dense. An operand that cannot be read that way
// (free dims interleaved with contracting ones, say) is first copied into the dense
// canonical layout with the cache-blocked permute.
//
// f32 and bf16 (f32 accumulation; bf16 or f32 result) run on oneDNN's matmul, whose
// primitives are cached by layout. oneDNN 2.6 has no f16 matmul on CPUs without AVX512-FP16,
// so f16 operands are widened to f32 (exactly). Other result dtypes are written through an
// f32 buffer. f64 and integers use a blocked i-k-j loop (integer sums wrap, as the
// reference's truncated int64 sums do).
#include <immintrin.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <unordered_map>

#include "backend/cpu/kernel_util.h"
#include "backend/cpu/permute.h"
#include "backend/cpu/half_dot.h"
#include "backend/cpu/quant_dot.h"
#include "core/buffer.h"
#include "core/errors.h"
#include "core/layout.h"
#include "prim/dot.h"
#include "ir/primitive.h"

namespace partix::backend::cpu {

namespace {

using prim::KernelCall;

// ---- the canonical view ----

// One operand of the matmul: its dims, grouped. `batch[i]` are the operand dims (outer to
// inner) of canonical batch dim i; `outer` / `inner` are the rows / cols groups (A: M, K;
// B: K, N).
struct Operand {
  Shape shape;
  std::vector<int64_t> stride;  // row-major element strides of `shape`
  std::vector<std::vector<int>> batch;
  std::vector<int> outer, inner;
};

// The stride at which a group of dims (outer to inner) reads as one dimension; 0 when all
// have size 1 (any stride will do); nullopt when they cannot.
std::optional<int64_t> group_stride(const Operand& op, const std::vector<int>& dims) {
  int64_t stride = 0, expect = 0;
  bool first = true;
  for (size_t i = dims.size(); i-- > 0;) {
    const size_t d = static_cast<size_t>(dims[i]);
    if (op.shape[d] == 1) continue;
    if (first) {
      stride = op.stride[d];
      first = false;
    } else if (op.stride[d] != expect) {
      return std::nullopt;
    }
    expect = op.stride[d] * op.shape[d];
  }
  return stride;
}

int64_t group_size(const Operand& op, const std::vector<int>& dims) {
  int64_t n = 1;
  for (int d : dims) n *= op.shape[static_cast<size_t>(d)];
  return n;
}

// Element strides of the operand as [batch..., outer, inner], or nullopt.
std::optional<std::vector<int64_t>> view_strides(const Operand& op) {
  std::vector<int64_t> s;
  for (const auto& g : op.batch) {
    auto st = group_stride(op, g);
    if (!st) return std::nullopt;
    s.push_back(*st);
  }
  auto so = group_stride(op, op.outer), si = group_stride(op, op.inner);
  if (!so || !si) return std::nullopt;
  const int64_t no = group_size(op, op.outer), ni = group_size(op, op.inner);
  // Size-1 groups: strides that keep the layout recognisably plain for oneDNN.
  if (no == 1) *so = *si == 1 ? ni : 1;
  if (ni == 1) *si = *so == 1 ? no : 1;
  s.push_back(*so);
  s.push_back(*si);
  return s;
}

// The operand with its dims permuted into [batch..., outer, inner] order (dense).
Operand canonical_copy_layout(const Operand& op, std::vector<int>& perm) {
  perm.clear();
  for (const auto& g : op.batch) perm.insert(perm.end(), g.begin(), g.end());
  perm.insert(perm.end(), op.outer.begin(), op.outer.end());
  perm.insert(perm.end(), op.inner.begin(), op.inner.end());
  for (int d = 0; d < static_cast<int>(op.shape.size()); ++d) {  // size-1 dims left out
    if (std::find(perm.begin(), perm.end(), d) == perm.end()) perm.push_back(d);
  }
  std::vector<int> where(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    where[static_cast<size_t>(perm[i])] = static_cast<int>(i);
  Operand out;
  for (int p : perm) out.shape.push_back(op.shape[static_cast<size_t>(p)]);
  out.stride = detail::strides_of(out.shape);
  auto remap = [&](const std::vector<int>& dims) {
    std::vector<int> r;
    for (int d : dims) r.push_back(where[static_cast<size_t>(d)]);
    return r;
  };
  for (const auto& g : op.batch) out.batch.push_back(remap(g));
  out.outer = remap(op.outer);
  out.inner = remap(op.inner);
  return out;
}

// Below this many multiply-adds oneDNN's per-call cost (descriptors, a shared primitive cache,
// stream sync) outweighs the arithmetic: decode steps are full of [1, C] x [C, F] products.
constexpr int64_t kSmallMacs = int64_t{1} << 20;

struct Plan {
  std::vector<int64_t> batch;  // sizes of the canonical batch dims
  int64_t M = 1, N = 1, K = 1;
  Operand a, b;
  // For small_f32_matmul, worked out with the plan: a and b as strided views ([batch groups...,
  // outer, inner] strides), when both are; each batch's element offset in A and in B.
  bool views = false;
  std::vector<int64_t> sa, sb, offa, offb;
};

// Plan::views and what goes with it, once the plan's layouts are final.
void plan_views(Plan& p) {
  auto sa = view_strides(p.a), sb = view_strides(p.b);
  p.views = sa && sb;
  if (!p.views) return;
  p.sa = std::move(*sa);
  p.sb = std::move(*sb);
  const size_t nb = p.batch.size();
  int64_t batches = 1;
  for (int64_t x : p.batch) batches *= x;
  p.offa.assign(static_cast<size_t>(batches), 0);
  p.offb.assign(static_cast<size_t>(batches), 0);
  std::vector<int64_t> idx(nb, 0);
  for (int64_t t = 0; t < batches; ++t) {
    int64_t oa = 0, ob = 0;
    for (size_t i = 0; i < nb; ++i) {
      oa += idx[i] * p.sa[i];
      ob += idx[i] * p.sb[i];
    }
    p.offa[static_cast<size_t>(t)] = oa;
    p.offb[static_cast<size_t>(t)] = ob;
    for (size_t i = nb; i-- > 0;) {
      if (++idx[i] < p.batch[i]) break;
      idx[i] = 0;
    }
  }
}

Plan make_plan(const ir::Attrs& attrs, const ir::Aval& la, const ir::Aval& lb) {
  prim::DotDims d = prim::dot_dims(attrs, la.ndim(), lb.ndim());
  Plan p;
  p.a.shape = la.shape;
  p.b.shape = lb.shape;
  p.a.stride = detail::strides_of(la.shape);
  p.b.stride = detail::strides_of(lb.shape);
  // Batch pairs, merged while both operands continue the previous pair's stride.
  for (size_t i = 0; i < d.lhs_batch.size(); ++i) {
    const int da = d.lhs_batch[i], db = d.rhs_batch[i];
    const int64_t n = la.shape[static_cast<size_t>(da)];
    if (n == 1) continue;
    bool merge = !p.batch.empty();
    if (merge) {
      const int pa = p.a.batch.back().back(), pb = p.b.batch.back().back();
      merge = p.a.stride[static_cast<size_t>(pa)] == p.a.stride[static_cast<size_t>(da)] * n &&
              p.b.stride[static_cast<size_t>(pb)] == p.b.stride[static_cast<size_t>(db)] * n;
    }
    if (merge) {
      p.a.batch.back().push_back(da);
      p.b.batch.back().push_back(db);
      p.batch.back() *= n;
    } else {
      p.a.batch.push_back({da});
      p.b.batch.push_back({db});
      p.batch.push_back(n);
    }
  }
  p.a.outer = d.lhs_free;
  p.b.inner = d.rhs_free;
  p.M = group_size(p.a, p.a.outer);
  p.N = group_size(p.b, p.b.inner);
  // Contracting pairs: in the memory order of A, or of B, whichever lets both read K as one.
  std::vector<size_t> pairs(d.lhs_contract.size());
  std::iota(pairs.begin(), pairs.end(), 0);
  auto ordered = [&](bool by_a) {
    std::vector<size_t> o = pairs;
    std::stable_sort(o.begin(), o.end(), [&](size_t x, size_t y) {
      const Operand& op = by_a ? p.a : p.b;
      const auto& dims = by_a ? d.lhs_contract : d.rhs_contract;
      return op.stride[static_cast<size_t>(dims[x])] > op.stride[static_cast<size_t>(dims[y])];
    });
    return o;
  };
  int best_score = -1;
  for (bool by_a : {true, false}) {
    std::vector<size_t> o = ordered(by_a);
    Operand a = p.a, b = p.b;
    a.inner.clear();
    b.outer.clear();
    for (size_t i : o) {
      a.inner.push_back(d.lhs_contract[i]);
      b.outer.push_back(d.rhs_contract[i]);
    }
    const int score = (view_strides(a) ? 1 : 0) + (view_strides(b) ? 1 : 0);
    if (score > best_score) {
      best_score = score;
      p.a.inner = a.inner;
      p.b.outer = b.outer;
    }
  }
  for (int x : d.lhs_contract) p.K *= la.shape[static_cast<size_t>(x)];
  // Only products small_f32_matmul may take need the views: a large batch count would make
  // the offset tables large for nothing.
  int64_t macs = p.M * p.N * p.K;
  for (int64_t x : p.batch) macs *= x;
  if (macs <= kSmallMacs) plan_views(p);
  return p;
}

// ---- oneDNN ----

using dnnl::memory;

// Never destroyed: device workers' thread-local streams (and the cached primitives) may
// outlive static destruction order at exit and must not see a destroyed engine.
dnnl::engine& cpu_engine() {
  static auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// Streams are not thread-safe; primitives are, so one cached primitive serves every device.
dnnl::stream& thread_stream() {
  thread_local dnnl::stream stream(cpu_engine());
  return stream;
}

struct Matmul {
  dnnl::matmul prim;
  memory::desc a, b, c, scratch;
  bool reference_impl = false;  // oneDNN found no optimised kernel for these strides
};

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

struct Cache {
  std::mutex mu;
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<const Matmul>, KeyHash> map;
};
Cache& cache() {
  static auto* c = new Cache;  // never destroyed, like the engine its primitives use
  return *c;
}

// A cached matmul primitive for these layouts (c_str: the result's strides); nullptr when
// oneDNN rejects the case. Every call runs on one OpenMP thread (run_onednn), so the
// primitives are built for one.
std::shared_ptr<const Matmul> get_matmul(const memory::dims& a_dims, const memory::dims& a_str,
                                         const memory::dims& b_dims, const memory::dims& b_str,
                                         const memory::dims& c_dims, const memory::dims& c_str,
                                         memory::data_type in_dt, memory::data_type out_dt) {
  std::vector<int64_t> key{static_cast<int64_t>(in_dt), static_cast<int64_t>(out_dt),
                           static_cast<int64_t>(a_dims.size())};
  for (const auto* v : {&a_dims, &a_str, &b_dims, &b_str, &c_str})
    key.insert(key.end(), v->begin(), v->end());
  {
    std::lock_guard<std::mutex> lock(cache().mu);
    auto it = cache().map.find(key);
    if (it != cache().map.end()) return it->second;
  }
  // Created outside the lock: other devices keep running while one builds a primitive.
  std::shared_ptr<Matmul> m;
  try {
    m = std::make_shared<Matmul>();
    m->a = memory::desc(a_dims, in_dt, a_str);
    m->b = memory::desc(b_dims, in_dt, b_str);
    m->c = memory::desc(c_dims, out_dt, c_str);
    dnnl::primitive_attr attr;
    // The scratchpad comes from the calling thread: the same primitive runs concurrently on
    // several devices.
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(m->a, m->b, m->c), attr, cpu_engine());
    m->reference_impl = std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
    m->scratch = pd.scratchpad_desc();
    m->prim = dnnl::matmul(pd);
  } catch (const dnnl::error&) {
    m = nullptr;
  }
  std::lock_guard<std::mutex> lock(cache().mu);
  if (cache().map.size() > 4096) cache().map.clear();  // shapes churn (e.g. growing sequences)
  return cache().map.emplace(key, m).first->second;
}

memory::dims dims_of(const Plan& p, int64_t outer, int64_t inner) {
  memory::dims d(p.batch.begin(), p.batch.end());
  d.push_back(outer);
  d.push_back(inner);
  return d;
}

std::atomic<int64_t> onednn_executions{0};

// Products of at least this many multiply-adds split over the device's thread team (each
// piece still takes oneDNN tens of microseconds, against a few to hand it out).
constexpr int64_t kTeamSplitMacs = int64_t{1} << 22;

// One oneDNN call of a split product: its primitive and where its operands start.
struct Piece {
  std::shared_ptr<const Matmul> m;
  int64_t a_off = 0, b_off = 0, c_off = 0;  // elements
};

// Runs C = A B on oneDNN; false when oneDNN has no (optimised) kernel for the layout.
//
// oneDNN runs on one OpenMP thread per call, and a large product is split over the device's
// thread team instead: along the outermost batch dim, else M, else N, each piece a strided
// view. An OpenMP team would leave its threads spinning for milliseconds after every call, on
// the very cores the thread team's next kernel (a quantized product, say) needs: with both
// runtimes on 2 cores, prefill ran at half speed. One runtime per device, and no core is
// fought over.
bool run_onednn(const Plan& p, const void* a, const void* b, void* out, memory::data_type in_dt,
                memory::data_type out_dt, bool allow_reference_impl) {
  auto sa = view_strides(p.a), sb = view_strides(p.b);
  if (!sa || !sb) return false;
  memory::dims a_dims = dims_of(p, p.M, p.K), b_dims = dims_of(p, p.K, p.N),
               c_dims = dims_of(p, p.M, p.N);
  memory::dims c_str(c_dims.size(), 1);
  for (size_t i = c_dims.size() - 1; i-- > 0;) c_str[i] = c_str[i + 1] * c_dims[i + 1];
  int64_t macs = p.M * p.N * p.K;
  for (int64_t x : p.batch) macs *= x;
  // The dim to split (its index in a_dims / b_dims / c_dims), or -1.
  const ThreadTeam* team = ThreadTeam::current();
  const int64_t threads = team ? team->size() : 1;
  const size_t nb = p.batch.size();
  int split_a = -1, split_b = -1, split_c = -1;
  int64_t extent = 1, align = 1;
  if (threads > 1 && macs >= kTeamSplitMacs) {
    if (nb > 0 && p.batch[0] >= threads) {
      split_a = split_b = split_c = 0;
      extent = p.batch[0];
    } else if (p.M >= 8 * threads) {
      split_a = split_c = static_cast<int>(nb);
      extent = p.M;
      align = 8;
    } else if (p.N >= 64 * threads) {
      split_b = split_c = static_cast<int>(nb) + 1;
      extent = p.N;
      align = 64;
    }
  }
  const int64_t chunk =
      split_c < 0 ? extent : ((extent + threads - 1) / threads + align - 1) / align * align;
  std::vector<Piece> pieces;
  for (int64_t s0 = 0; s0 < extent; s0 += chunk) {
    const int64_t len = std::min(chunk, extent - s0);
    Piece pc;
    memory::dims ad = a_dims, bd = b_dims, cd = c_dims;
    if (split_c >= 0) {
      cd[static_cast<size_t>(split_c)] = len;
      pc.c_off = s0 * c_str[static_cast<size_t>(split_c)];
    }
    if (split_a >= 0) {
      ad[static_cast<size_t>(split_a)] = len;
      pc.a_off = s0 * (*sa)[static_cast<size_t>(split_a)];
    }
    if (split_b >= 0) {
      bd[static_cast<size_t>(split_b)] = len;
      pc.b_off = s0 * (*sb)[static_cast<size_t>(split_b)];
    }
    pc.m = get_matmul(ad, *sa, bd, *sb, cd, c_str, in_dt, out_dt);
    if (!pc.m || (pc.m->reference_impl && !allow_reference_impl)) return false;
    pieces.push_back(std::move(pc));
  }
  const int64_t in_es = in_dt == memory::data_type::bf16 ? 2 : 4;
  const int64_t out_es = out_dt == memory::data_type::bf16 ? 2 : 4;
  parallel_for(static_cast<int64_t>(pieces.size()), 1, [&](int64_t lo, int64_t hi) {
    // One OpenMP thread for these calls (a per-thread setting); a thread that is not partix's
    // own gets its setting back.
    struct OneOmpThread {
      int before = omp_get_max_threads();
      OneOmpThread() {
        if (before != 1) omp_set_num_threads(1);
      }
      ~OneOmpThread() {
        if (before != 1) omp_set_num_threads(before);
      }
    } one_thread;
    for (int64_t i = lo; i < hi; ++i) {
      const Piece& pc = pieces[static_cast<size_t>(i)];
      const Matmul& m = *pc.m;
      dnnl::engine& eng = cpu_engine();
      const auto scratch_bytes = static_cast<int64_t>(m.scratch.get_size());
      void* scratch = thread_scratch(scratch_bytes, 1);
      if (!scratch && scratch_bytes > 0) {
        detail::fail("dot_general", "out of memory for oneDNN's scratchpad ({} bytes)",
                     scratch_bytes);
      }
      memory am(m.a, eng, const_cast<char*>(static_cast<const char*>(a)) + pc.a_off * in_es);
      memory bm(m.b, eng, const_cast<char*>(static_cast<const char*>(b)) + pc.b_off * in_es);
      memory cm(m.c, eng, static_cast<char*>(out) + pc.c_off * out_es);
      memory sm(m.scratch, eng, scratch);
      dnnl::stream& s = thread_stream();
      m.prim.execute(s, {{DNNL_ARG_SRC, am},
                         {DNNL_ARG_WEIGHTS, bm},
                         {DNNL_ARG_DST, cm},
                         {DNNL_ARG_SCRATCHPAD, sm}});
      s.wait();
      onednn_executions.fetch_add(1, std::memory_order_relaxed);
    }
  });
  return true;
}

// Copies operand k into the dense canonical layout when it cannot be read as a strided view
// (or always, with `force`); `data` then points at the copy.
void canonicalise(const KernelCall& c, Operand& op, const void*& data, int es, bool force,
                  detail::Buffer& keep) {
  if (!force && view_strides(op)) return;
  std::vector<int> perm;
  Operand canon = canonical_copy_layout(op, perm);
  // `data` may live in `keep` (a second pass): copy first, release after.
  detail::Buffer copy = detail::Buffer::allocate(c.ctx.device, shape_size(op.shape) * es);
  permute_copy(data, copy.data(), op.shape, perm, es);
  keep = std::move(copy);
  data = keep.data();
  op = canon;
}

// ---- f64 and integer loops ----

// C = A B with acc[n] += a[m, k] * b[k, n] in k order, one output row at a time.
template <class T, class Acc, class O>
void loop_matmul(const Plan& p, const T* a, const T* b, O* c) {
  const std::vector<int64_t> sa = *view_strides(p.a), sb = *view_strides(p.b);
  const size_t nb = p.batch.size();
  const int64_t sam = sa[nb], sak = sa[nb + 1], sbk = sb[nb], sbn = sb[nb + 1];
  int64_t batches = 1;
  for (int64_t s : p.batch) batches *= s;
  const int64_t rows = batches * p.M;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(1, p.K * p.N));
  parallel_for(rows, grain, [&](int64_t lo, int64_t hi) {
    std::vector<Acc> acc(static_cast<size_t>(p.N));
    for (int64_t row = lo; row < hi; ++row) {
      int64_t bi = row / p.M, m = row % p.M, oa = 0, ob = 0;
      for (size_t i = nb; i-- > 0;) {
        const int64_t idx = bi % p.batch[i];
        bi /= p.batch[i];
        oa += idx * sa[i];
        ob += idx * sb[i];
      }
      std::fill(acc.begin(), acc.end(), Acc(0));
      Acc* ac = acc.data();
      for (int64_t k = 0; k < p.K; ++k) {
        const Acc x = static_cast<Acc>(a[oa + m * sam + k * sak]);
        const T* br = b + ob + k * sbk;
        if (sbn == 1) {
#pragma omp simd
          for (int64_t n = 0; n < p.N; ++n) ac[n] += x * static_cast<Acc>(br[n]);
        } else {
          for (int64_t n = 0; n < p.N; ++n) ac[n] += x * static_cast<Acc>(br[n * sbn]);
        }
      }
      O* cr = c + row * p.N;
      for (int64_t n = 0; n < p.N; ++n) cr[n] = static_cast<O>(acc[static_cast<size_t>(n)]);
    }
  });
}

// f64 (f64 result) and integers (integer result; sums wrap like the reference's truncated
// int64 sums, so unsigned 64-bit accumulation gives the same bits).
template <class T>
bool loop_kernel(Plan& p, const KernelCall& c) {
  const DType out_dt = c.out_aval(0).dtype;
  const bool ok = std::is_same_v<T, double> ? out_dt == DType::F64
                                            : (out_dt == DType::I32 || out_dt == DType::I64);
  if (!ok) return false;
  const void* a = c.in[0];
  const void* b = c.in[1];
  detail::Buffer ka, kb;
  canonicalise(c, p.a, a, sizeof(T), false, ka);
  canonicalise(c, p.b, b, sizeof(T), false, kb);
  const T* ta = static_cast<const T*>(a);
  const T* tb = static_cast<const T*>(b);
  if constexpr (std::is_same_v<T, double>) {
    loop_matmul<T, double>(p, ta, tb, c.output<double>(0));
  } else if (out_dt == DType::I32) {
    loop_matmul<T, uint64_t>(p, ta, tb, c.output<int32_t>(0));
  } else {
    loop_matmul<T, uint64_t>(p, ta, tb, c.output<int64_t>(0));
  }
  return true;
}

// ---- small f32 products ----


#if defined(__AVX2__)
// The sum of a vector's lanes in lane order, as OpenMP's simd reductions combine their lanes:
// these kernels give the bits the plain loops gave (the models' quantized-versus-f32 checks
// sit close to their tolerance, and any reordering moves them).
inline float hsum(__m256 a) {
  alignas(32) float l[8];
  _mm256_store_ps(l, a);
  float s = l[0];
  for (int i = 1; i < 8; ++i) s += l[i];
  return s;
}
// Separate multiply and add, as the plain loops compile (ISO C++: no contraction into FMA).
inline __m256 mul_add(__m256 a, __m256 b, __m256 c) {
  return _mm256_add_ps(c, _mm256_mul_ps(a, b));
}
#endif

// Rows of B ahead of the ones a kernel is on, fetched into cache meanwhile: decode's attention
// reads a key/value cache that the weights streaming through every layer have evicted, and
// would otherwise wait on memory for every row (prefetches past the end are harmless).
inline void prefetch_rows(const float* row, int64_t stride, int64_t rows, int64_t floats) {
  for (int64_t r = 0; r < rows; ++r) {
    const char* p = reinterpret_cast<const char*>(row + r * stride);
    for (int64_t l = 0; l < floats * 4; l += 64) _mm_prefetch(p + l, _MM_HINT_T0);
  }
}

// Dot products of R rows of A (row r at ar + r * as) with rows n0.. of B (row stride bn), K
// contiguous in both, into C (row r at cr + r * cs): four rows of B at a time, each load of B
// serving every row of A and each load of A four accumulators. Every (row, column) is summed
// as in the one-row loop, whatever R and wherever the column falls.
template <int R>
void dot_rows(const float* ar, int64_t as, const float* B, int64_t bn, int64_t K, int64_t N,
              float* cr, int64_t cs) {
  int64_t n = 0;
#if defined(__AVX2__)
  const int64_t K8 = K & ~int64_t{7};
  for (; n + 4 <= N; n += 4) {
    const float* b0 = B + n * bn;
    const float* b1 = b0 + bn;
    const float* b2 = b1 + bn;
    const float* b3 = b2 + bn;
    prefetch_rows(B + (n + 16) * bn, bn, 4, K);
    __m256 s[R][4];
    for (auto& row : s) {
      for (auto& v : row) v = _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < K8; k += 8) {
      const __m256 w0 = _mm256_loadu_ps(b0 + k), w1 = _mm256_loadu_ps(b1 + k);
      const __m256 w2 = _mm256_loadu_ps(b2 + k), w3 = _mm256_loadu_ps(b3 + k);
      for (int r = 0; r < R; ++r) {
        const __m256 x = _mm256_loadu_ps(ar + r * as + k);
        s[r][0] = mul_add(x, w0, s[r][0]);
        s[r][1] = mul_add(x, w1, s[r][1]);
        s[r][2] = mul_add(x, w2, s[r][2]);
        s[r][3] = mul_add(x, w3, s[r][3]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float* x = ar + r * as;
      float t[4] = {hsum(s[r][0]), hsum(s[r][1]), hsum(s[r][2]), hsum(s[r][3])};
      for (int64_t k = K8; k < K; ++k) {
        t[0] += x[k] * b0[k];
        t[1] += x[k] * b1[k];
        t[2] += x[k] * b2[k];
        t[3] += x[k] * b3[k];
      }
      std::memcpy(cr + r * cs + n, t, sizeof t);
    }
  }
#endif
  for (; n < N; ++n) {
    const float* br = B + n * bn;
    for (int r = 0; r < R; ++r) {
      const float* x = ar + r * as;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int64_t k = 0; k < K; ++k) acc += x[k] * br[k];
      cr[r * cs + n] = acc;
    }
  }
}

// C[r, 0..N) = sum_k A[r, k] B[k, :] for R rows of A (row r at ar + r * as, A[r, k] at stride
// ak; B's rows at stride bk, N contiguous; C's row r at cr + r * cs): 64 columns at a time held
// in registers across all of k, each load of B serving every row of A.
template <int R>
void update_rows(const float* ar, int64_t as, int64_t ak, const float* B, int64_t bk, int64_t K,
                 int64_t N, float* cr, int64_t cs) {
  int64_t n = 0;
#if defined(__AVX2__)
  for (; n + 64 <= N; n += 64) {
    __m256 s[R][8];
    for (auto& row : s) {
      for (auto& v : row) v = _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < K; ++k) {
      const float* br = B + k * bk + n;
      prefetch_rows(br + 16 * bk, bk, 1, 64);
      __m256 x[R];
      for (int r = 0; r < R; ++r) x[r] = _mm256_set1_ps(ar[r * as + k * ak]);
      for (int j = 0; j < 8; ++j) {
        const __m256 w = _mm256_loadu_ps(br + 8 * j);
        for (int r = 0; r < R; ++r) s[r][j] = mul_add(x[r], w, s[r][j]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(cr + r * cs + n + 8 * j, s[r][j]);
    }
  }
  for (; n + 16 <= N; n += 16) {
    for (int r = 0; r < R; ++r) {
      const float* x = ar + r * as;
      __m256 s0 = _mm256_setzero_ps(), s1 = s0;
      for (int64_t k = 0; k < K; ++k) {
        const __m256 xk = _mm256_set1_ps(x[k * ak]);
        const float* br = B + k * bk + n;
        s0 = mul_add(xk, _mm256_loadu_ps(br), s0);
        s1 = mul_add(xk, _mm256_loadu_ps(br + 8), s1);
      }
      _mm256_storeu_ps(cr + r * cs + n, s0);
      _mm256_storeu_ps(cr + r * cs + n + 8, s1);
    }
  }
#endif
  if (n == N) return;
  for (int r = 0; r < R; ++r) {
    const float* x = ar + r * as;
    float* c = cr + r * cs;
    std::fill(c + n, c + N, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float xk = x[k * ak];
      const float* br = B + k * bk;
#pragma omp simd
      for (int64_t j = n; j < N; ++j) c[j] += xk * br[j];
    }
  }
}

// Rows of A that the small-product kernels take at once: all of them share each load of B.
// Row updates hold 8 accumulators per row, which only AVX-512's 32 registers have room for
// past one row.
constexpr int64_t kDotRows = 4;
#if defined(__AVX512VL__)
constexpr int64_t kUpdateRows = 3;
#else
constexpr int64_t kUpdateRows = 1;
#endif

// R (1..4) rows of A against B, by whichever kernel the layout takes (row updates one row at a
// time past kUpdateRows).
void small_rows(int64_t R, bool dots, const float* ar, int64_t as, int64_t ak, const float* B,
                int64_t bk, int64_t bn, int64_t K, int64_t N, float* cr, int64_t cs) {
  if (dots) {
    switch (R) {
      case 1: return dot_rows<1>(ar, as, B, bn, K, N, cr, cs);
      case 2: return dot_rows<2>(ar, as, B, bn, K, N, cr, cs);
      case 3: return dot_rows<3>(ar, as, B, bn, K, N, cr, cs);
      default: return dot_rows<4>(ar, as, B, bn, K, N, cr, cs);
    }
  }
  if (R > kUpdateRows) {
    for (int64_t r = 0; r < R; ++r) update_rows<1>(ar + r * as, as, ak, B, bk, K, N, cr + r * cs, cs);
    return;
  }
  switch (R) {
    case 1: return update_rows<1>(ar, as, ak, B, bk, K, N, cr, cs);
    case 2: return update_rows<2>(ar, as, ak, B, bk, K, N, cr, cs);
    default: return update_rows<3>(ar, as, ak, B, bk, K, N, cr, cs);
  }
}

// C = A B for f32 strided views, vectorised along whichever dimension is contiguous:
// K in both (dot products) or N in B (row updates). The batch x M rows of C are split over
// the team once they hold enough work (prefill's attention).
bool small_f32_matmul(const Plan& p, const float* a, const float* b, float* c) {
  if (!p.views) return false;
  const size_t nb = p.batch.size();
  int64_t batches = 1;
  for (int64_t x : p.batch) batches *= x;
  const int64_t M = p.M, N = p.N, K = p.K;
  const int64_t am = p.sa[nb], ak = p.sa[nb + 1], bk = p.sb[nb], bn = p.sb[nb + 1];
  const std::vector<int64_t>& offa = p.offa;  // element offsets of each batch in A and B
  const std::vector<int64_t>& offb = p.offb;
  // Work units are (block of rows of one batch, piece of the columns): a block's rows share each
  // load of B (decode's attention: the query heads of one key/value head). Products of more
  // than ~16K multiply-adds split over the team, the columns too when there are fewer row
  // blocks than twice the threads, in pieces aligned to the kernels' column groups so that each
  // column is summed exactly as unsplit. Decode's attention is bound by reading the cache
  // from memory: two threads reading halves of it take half the time.
  const bool dots = ak == 1 && bk == 1, updates = !dots && bn == 1;
  const int64_t rb = dots ? std::min(M, kDotRows) : updates ? std::min(M, kUpdateRows) : 1;
  const int64_t blocks = (M + rb - 1) / rb;
  const int64_t units = batches * blocks;
  const int64_t team = ThreadTeam::current() ? ThreadTeam::current()->size() : 1;
  const int64_t macs = batches * M * N * K;
  constexpr int64_t kSplitMacs = int64_t{1} << 14;
  int64_t cols = N;
  if ((dots || updates) && team > 1 && units < 2 * team && macs >= kSplitMacs) {
    const int64_t align = updates ? 64 : 4;
    const int64_t want = std::max<int64_t>(kSplitMacs / (2 * rb * K) + 1,
                                           (N * units + 2 * team - 1) / (2 * team));
    cols = std::min(N, (want + align - 1) / align * align);
  }
  const int64_t pieces = (N + cols - 1) / cols;
  const int64_t unit_macs = std::max<int64_t>(1, rb * cols * K);
  const int64_t grain = macs < kSplitMacs ? units * pieces : std::max<int64_t>(1, kSplitMacs / unit_macs);
  parallel_for(units * pieces, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; ++u) {
      const int64_t unit = u / pieces, n0 = (u % pieces) * cols, n1 = std::min(N, n0 + cols);
      const int64_t t = unit / blocks, m0 = (unit % blocks) * rb, R = std::min(rb, M - m0);
      const float* ar = a + offa[static_cast<size_t>(t)] + m0 * am;
      const float* B = b + offb[static_cast<size_t>(t)];
      float* cr = c + (t * M + m0) * N;
      if (dots) {
        small_rows(R, true, ar, am, ak, B + n0 * bn, bk, bn, K, n1 - n0, cr + n0, N);
      } else if (updates) {
        small_rows(R, false, ar, am, ak, B + n0, bk, bn, K, n1 - n0, cr + n0, N);
      } else {
        for (int64_t n = 0; n < N; ++n) {
          float acc = 0.0f;
          for (int64_t k = 0; k < K; ++k) acc += ar[k * ak] * B[k * bk + n * bn];
          cr[n] = acc;
        }
      }
    }
  });
  return true;
}

// Whether oneDNN has an optimised bf16 matmul on this CPU (it needs AVX-512 or AMX; on an
// AVX2-only CPU it offers only its reference implementation). Probed once on a small case.
bool onednn_fast_bf16() {
  static const bool fast = [] {
    const memory::dims d{64, 64}, s{64, 1};
    auto m = get_matmul(d, s, d, s, d, s, memory::data_type::bf16, memory::data_type::f32);
    return m && !m->reference_impl;
  }();
  return fast;
}

// ---- the kernel ----

// A quantized product's contraction length (its trailing dims of x), found once per
// instruction (dot_dims reads the attributes by name and builds four vectors).
struct QuantPlan {
  int64_t K = 1;
};

int64_t quant_contraction(const ir::Attrs& attrs, const ir::Aval& a, const ir::Aval& b) {
  const size_t nc = prim::dot_dims(attrs, a.ndim(), b.ndim()).lhs_contract.size();
  int64_t K = 1;
  for (size_t i = a.shape.size() - nc; i < a.shape.size(); ++i) K *= a.shape[i];
  return K;
}

// x[M, K] w[N, K]^T with w quantized: the layout dot_general's infer allows (contracting dims
// trailing on both sides, in order), so both operands are dense row-major matrices as they are.
bool quant_dot_kernel(const KernelCall& c) {
  const ir::Aval& a = c.in_aval(0);
  const ir::Aval& b = c.in_aval(1);
  const auto* planned = static_cast<const QuantPlan*>(c.prepared);
  const int64_t K = planned ? planned->K : quant_contraction(c.attrs, a, b);
  if (K == 0) return false;
  quant_matmul(b.dtype, c.input<float>(0), c.in[1], c.output<float>(0), a.size() / K, b.size() / K,
               K);
  return true;
}

// x[M, K] w[N, K]^T with an f32 x and a bf16/f16 w in that layout (contracting dims trailing
// on both sides, in order, no batch): the weight widened in registers.
bool half_weight_kernel(const KernelCall& c) {
  const ir::Aval& a = c.in_aval(0);
  const ir::Aval& b = c.in_aval(1);
  const prim::DotDims d = prim::dot_dims(c.attrs, a.ndim(), b.ndim());
  const int nc = static_cast<int>(d.lhs_contract.size());
  bool ok = d.lhs_batch.empty() && nc > 0 && c.out_aval(0).dtype == DType::F32;
  int64_t K = 1;
  for (int i = 0; ok && i < nc; ++i) {
    ok = d.lhs_contract[static_cast<size_t>(i)] == a.ndim() - nc + i &&
         d.rhs_contract[static_cast<size_t>(i)] == b.ndim() - nc + i;
    K *= a.shape[static_cast<size_t>(a.ndim() - nc + i)];
  }
  // Beyond a few activation rows (prefill) oneDNN's blocked GEMM on the widened weight wins:
  // each weight is reused across the rows, so widening it once costs less than it saves.
  if (!ok || K == 0 || a.size() / K > 8) return false;
  half_weight_matmul(b.dtype, c.input<float>(0), c.input<uint16_t>(1), c.output<float>(0),
                     a.size() / K, b.size() / K, K);
  return true;
}

bool dot_kernel(const KernelCall& c) {
  if (is_quantized(c.in_aval(1).dtype)) return quant_dot_kernel(c);
  const bool mixed = c.in_aval(0).dtype != c.in_aval(1).dtype;  // f32 x bf16/f16 weight
  if (mixed && half_weight_kernel(c)) return true;
  const DType in_dt = mixed ? c.in_aval(1).dtype : c.in_aval(0).dtype;
  const DType out_dt = c.out_aval(0).dtype;
  // The layout plan, made once per instruction when its program was planned (it allocates a
  // dozen small vectors: on 8 devices decoding a token, tens of thousands of allocations).
  Plan unplanned;
  const Plan* planned = static_cast<const Plan*>(c.prepared);
  if (!planned) {
    unplanned = make_plan(c.attrs, c.in_aval(0), c.in_aval(1));
    planned = &unplanned;
  }
  const Plan& p = *planned;
  const int64_t out_n = c.out_aval(0).size();
  if (out_n == 0) return true;
  if (p.K == 0) {  // an empty contraction sums nothing
    std::memset(c.out[0], 0, static_cast<size_t>(c.out_aval(0).nbytes()));
    return true;
  }
  if (in_dt == DType::F64 || in_dt == DType::I32 || in_dt == DType::I64) {
    Plan q = p;  // the loops may rewrite its operands' layouts
    if (in_dt == DType::F64) return loop_kernel<double>(q, c);
    if (in_dt == DType::I32) return loop_kernel<int32_t>(q, c);
    return loop_kernel<int64_t>(q, c);
  }
  // Narrow and unsigned integers (and a float result of any integer product): the reference
  // kernel, which reads and writes every dtype; the paths below read floats only.
  if (!is_floating(c.in_aval(0).dtype) || !is_floating(c.in_aval(1).dtype)) return false;
  if (!is_floating(out_dt) || out_dt == DType::F64) return false;
  if (in_dt == DType::F32 && out_dt == DType::F32 && !mixed) {
    int64_t macs = p.M * p.N * p.K;
    for (int64_t x : p.batch) macs *= x;
    if (macs <= kSmallMacs &&
        small_f32_matmul(p, c.input<float>(0), c.input<float>(1), c.output<float>(0))) {
      return true;
    }
  }

  // Operands as oneDNN takes them: f32 or bf16 (f16, and bf16 where oneDNN has no fast bf16
  // kernel on this CPU, widened exactly to f32).
  const void* a = c.in[0];
  const void* b = c.in[1];
  detail::Buffer wa, wb;
  DType mm_dt = in_dt;
  if (mixed || in_dt == DType::F16 || (in_dt == DType::BF16 && !onednn_fast_bf16())) {
    for (size_t k = 0; k < 2; ++k) {
      if (c.in_aval(k).dtype == DType::F32) continue;  // the f32 side of a mixed product
      const int64_t n = c.in_aval(k).size();
      detail::Buffer& w = k == 0 ? wa : wb;
      w = detail::Buffer::allocate(c.ctx.device, n * 4);
      half_to_f32(in_dt, c.input<uint16_t>(k), static_cast<float*>(w.data()), n);
      (k == 0 ? a : b) = w.data();
    }
    mm_dt = DType::F32;
  }
  const memory::data_type dnnl_in =
      mm_dt == DType::BF16 ? memory::data_type::bf16 : memory::data_type::f32;
  // The result: written in place where oneDNN supports its dtype, else through f32.
  const bool direct = out_dt == DType::F32 || (mm_dt == DType::BF16 && out_dt == DType::BF16);
  detail::Buffer c32;
  void* dst = c.out[0];
  if (!direct) {
    c32 = detail::Buffer::allocate(c.ctx.device, out_n * 4);
    dst = c32.data();
  }
  const memory::data_type dnnl_out =
      out_dt == DType::BF16 && direct ? memory::data_type::bf16 : memory::data_type::f32;
  // Strided views as they are; else with unreadable operands copied; else (oneDNN had only
  // its reference implementation for those strides) both operands dense.
  const int es = dtype_size(mm_dt);
  detail::Buffer ka, kb;
  bool done = run_onednn(p, a, b, dst, dnnl_in, dnnl_out, false);
  if (!done) {
    Plan q = p;  // operands copied into the layouts q then describes
    for (int attempt = 1; !done && attempt <= 2; ++attempt) {
      canonicalise(c, q.a, a, es, attempt == 2, ka);
      canonicalise(c, q.b, b, es, attempt == 2, kb);
      done = run_onednn(q, a, b, dst, dnnl_in, dnnl_out, attempt == 2);
    }
  }
  if (!done) return false;
  if (!direct) f32_to_half(out_dt, static_cast<const float*>(dst), c.output<uint16_t>(0), out_n);
  return true;
}

struct Registrar {
  Registrar() {
    prim::register_kernel("dot_general", "cpu", &dot_kernel);
    prim::register_kernel_prepare(
        "dot_general", "cpu",
        [](const ir::Attrs& attrs, const std::vector<const ir::Aval*>& in,
           const std::vector<const ir::Aval*>&) -> std::shared_ptr<const void> {
          if (in.size() != 2) return nullptr;
          if (is_quantized(in[1]->dtype)) {  // quant_dot_kernel reads a QuantPlan
            return std::make_shared<const QuantPlan>(QuantPlan{quant_contraction(attrs, *in[0], *in[1])});
          }
          return std::make_shared<const Plan>(make_plan(attrs, *in[0], *in[1]));
        });
  }
} registrar;

}  // namespace

int64_t onednn_calls() { return onednn_executions.load(std::memory_order_relaxed); }
}  // namespace partix::backend::cpu

// Counter-based random numbers (threefry2x32, 20 rounds). The value at global flat index i
// depends only on the key and i, so a sharded array generates the same values as an
// unsharded one and no device materialises more than its block.
//   random_bits(key){shape, domain}      -> i32[shape]
//   random_uniform(key){shape, dtype}    -> dtype[shape] in [0, 1)
//   random_fold_in(key, data)            -> i32[2], a new key
#include <algorithm>
#include <cstring>

#include "core/layout.h"
#include "core/scalar.h"
#include "ir/primitive.h"
#include "prim/batching.h"
#include "prim/positional.h"
#include "prim/random_core.h"
#include "prim/util.h"

namespace partix::prim {

std::pair<uint32_t, uint32_t> threefry2x32(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1) {
  static constexpr int kRot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  const uint32_t ks[3] = {k0, k1, 0x1BD11BDAu ^ k0 ^ k1};
  uint32_t x0 = c0 + ks[0], x1 = c1 + ks[1];
  for (int r = 0; r < 20; ++r) {
    x0 += x1;
    x1 = (x1 << kRot[r % 8]) | (x1 >> (32 - kRot[r % 8]));
    x1 ^= x0;
    if (r % 4 == 3) {
      int s = r / 4 + 1;
      x0 += ks[s % 3];
      x1 += ks[(s + 1) % 3] + static_cast<uint32_t>(s);
    }
  }
  return {x0, x1};
}

Shape block_offset(const KernelCall& c, const Shape& local) {
  Shape off(local.size(), 0);
  if (!c.attrs.has("offset_spec") || c.ctx.mesh == nullptr) return off;
  const auto& spec = c.attrs.get<PartitionSpec>("offset_spec");
  for (size_t d = 0; d < local.size(); ++d) {
    int64_t b = 0;
    for (const std::string& ax : spec[static_cast<int>(d)]) {
      b = b * c.ctx.mesh->axis_size(ax) + c.ctx.mesh->axis_coord(c.ctx.mesh_coords, ax);
    }
    off[d] = b * local[d];
  }
  return off;
}

Attrs localize_positional(const Attrs& attrs, const Partitioning::LocalizeArgs& a) {
  const Shape local_shape = a.local_out(0);
  const Shape& global = a.out[0].shape;
  Attrs local = attrs;
  local.set("shape", ir::Ints(local_shape));
  if (local_shape != global) {
    local.set("offset_spec", a.out_shardings[0].spec());
    local.set("global_shape", ir::Ints(global));
  }
  return local;
}

Shape global_shape(const KernelCall& c, const Shape& local) {
  return c.attrs.has("global_shape") ? Shape(c.attrs.ints("global_shape")) : local;
}

namespace {

void check_key(std::string_view op, const Aval& key) {
  if (!(key.dtype == DType::I32 && key.shape == Shape{2})) {
    detail::fail(op, "a key is i32[2] (from random::key), got {}", key.to_string());
  }
}

// Calls fn(local_flat, global_flat, count) for every run of `count` elements whose local and
// global flat indices both advance by one (the rows of the innermost dimension).
template <class Fn>
void for_each_global_run(const KernelCall& c, const Shape& local, Fn&& fn) {
  const int64_t n = shape_size(local);
  if (n == 0) return;
  if (local.empty()) {
    fn(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  Shape off = block_offset(c, local);
  Shape glob = global_shape(c, local);
  auto gs = detail::strides_of(glob);
  const size_t last = local.size() - 1;
  const int64_t row = local[last];
  if (row == 0) return;
  std::vector<int64_t> idx(local.size(), 0);
  for (int64_t i = 0; i < n; i += row) {
    int64_t g = 0;
    for (size_t d = 0; d < idx.size(); ++d) g += (off[d] + idx[d]) * gs[d];
    fn(i, g, row);
    for (size_t d = last; d-- > 0;) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
}

// threefry2x32 of the counters (hi, lo + k) for k < kLanes, the lanes held in vectors of 8
// (GCC's vector extension: one AVX2 register each where the target has it, two SSE ones
// otherwise); the same values as threefry2x32.
constexpr int kLanes = 16;
using Lanes8 = uint32_t __attribute__((vector_size(32)));
constexpr int kVecs = kLanes / 8;

template <int R>
inline void threefry_round(Lanes8* x0, Lanes8* x1) {
  constexpr int kRot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  constexpr int rot = kRot[R % 8];
  for (int v = 0; v < kVecs; ++v) {
    x0[v] += x1[v];
    x1[v] = (x1[v] << rot) | (x1[v] >> (32 - rot));
    x1[v] ^= x0[v];
  }
}

template <int S>
inline void threefry_inject(Lanes8* x0, Lanes8* x1, const uint32_t* ks) {
  const uint32_t a = ks[S % 3], b = ks[(S + 1) % 3] + static_cast<uint32_t>(S);
  for (int v = 0; v < kVecs; ++v) {
    x0[v] += a;
    x1[v] += b;
  }
}

template <int S>
inline void threefry_four_rounds(Lanes8* x0, Lanes8* x1, const uint32_t* ks) {
  threefry_round<4 * (S - 1)>(x0, x1);
  threefry_round<4 * (S - 1) + 1>(x0, x1);
  threefry_round<4 * (S - 1) + 2>(x0, x1);
  threefry_round<4 * (S - 1) + 3>(x0, x1);
  threefry_inject<S>(x0, x1, ks);
}

// x0, x1 in: the counters; out: the two words of each block.
inline void threefry2x32_lanes(uint32_t k0, uint32_t k1, uint32_t* x0p, uint32_t* x1p) {
  const uint32_t ks[3] = {k0, k1, 0x1BD11BDAu ^ k0 ^ k1};
  Lanes8 x0[kVecs], x1[kVecs];
  std::memcpy(x0, x0p, sizeof(x0));
  std::memcpy(x1, x1p, sizeof(x1));
  for (int v = 0; v < kVecs; ++v) {
    x0[v] += ks[0];
    x1[v] += ks[1];
  }
  threefry_four_rounds<1>(x0, x1, ks);
  threefry_four_rounds<2>(x0, x1, ks);
  threefry_four_rounds<3>(x0, x1, ks);
  threefry_four_rounds<4>(x0, x1, ks);
  threefry_four_rounds<5>(x0, x1, ks);
  std::memcpy(x0p, x0, sizeof(x0));
  std::memcpy(x1p, x1, sizeof(x1));
}

// Calls emit(k, x0, x1) with the block words of global index g + k, for k < count.
template <class Emit>
void threefry_run(uint32_t k0, uint32_t k1, uint32_t hi_xor, int64_t g, int64_t count,
                  Emit&& emit) {
  alignas(64) uint32_t x0[kLanes], x1[kLanes];
  for (int64_t base = 0; base < count; base += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t u = static_cast<uint64_t>(g + base + l);
      x0[l] = static_cast<uint32_t>(u >> 32) ^ hi_xor;
      x1[l] = static_cast<uint32_t>(u);
    }
    threefry2x32_lanes(k0, k1, x0, x1);
    const int64_t m = std::min<int64_t>(kLanes, count - base);
    for (int64_t l = 0; l < m; ++l) emit(base + l, x0[l], x1[l]);
  }
}

std::pair<uint32_t, uint32_t> load_key(const KernelCall& c) {
  const uint32_t* k = static_cast<const uint32_t*>(c.in[0]);
  return {k[0], k[1]};
}

// Random draws of attrs.shape from a key: every element is a function of its global position,
// so the result may be sharded any way (the key stays replicated) and has no derivative.
class RandomDraw : public Primitive {
 public:
  Attrs localize_attrs(const Attrs& attrs, const LocalizeArgs& a) const override {
    return localize_positional(attrs, a);
  }
  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    return FactorRuleBuilder::created(in, out[0], /*positional=*/true);
  }
  std::vector<Array> vjp(const VjpArgs&) const override { return {Array()}; }

 protected:
  Shape drawn_shape(const std::vector<Aval>& in, const Attrs& attrs) const {
    check_arity(name(), in, 1);
    check_key(name(), in[0]);
    Shape s = attrs.ints("shape");
    for (int64_t d : s) detail::check(d >= 0, name(), "negative size in {}", shape_to_string(s));
    return s;
  }
};

class RandomBits final : public RandomDraw {
 public:
  std::string_view name() const override { return "random_bits"; }
  const Batching* batching() const override {  // one draw per example's key
    static const MapBatching b(*this);
    return &b;
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    Shape s = drawn_shape(in, attrs);
    return {Aval{s, DType::I32}};
  }
  void reference(const KernelCall& c) const override {
    // Plain variables, not a structured binding: clang before 16 cannot capture those.
    const std::pair<uint32_t, uint32_t> key = load_key(c);
    const uint32_t k0 = key.first, k1 = key.second;
    uint32_t domain = static_cast<uint32_t>(c.attrs.i_or("domain", 0));
    uint32_t* out = static_cast<uint32_t*>(c.out[0]);
    for_each_global_run(c, c.out_aval(0).shape, [&](int64_t i, int64_t g, int64_t count) {
      uint32_t* o = out + i;
      threefry_run(k0, k1, domain << 24, g, count,
                   [o](int64_t k, uint32_t x0, uint32_t) { o[k] = x0; });
    });
  }
};

class RandomUniform final : public RandomDraw {
 public:
  std::string_view name() const override { return "random_uniform"; }
  const Batching* batching() const override {
    static const MapBatching b(*this);
    return &b;
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    Shape s = drawn_shape(in, attrs);
    DType dt = attrs.dtype("dtype");
    detail::check(is_floating(dt), name(), "needs a floating dtype, got {}", dtype_name(dt));
    return {Aval{s, dt}};
  }
  void reference(const KernelCall& c) const override {
    // Plain variables, not a structured binding: clang before 16 cannot capture those.
    const std::pair<uint32_t, uint32_t> key = load_key(c);
    const uint32_t k0 = key.first, k1 = key.second;
    const DType dt = c.out_aval(0).dtype;
    const int es = dtype_size(dt);
    char* out = static_cast<char*>(c.out[0]);
    for_each_global_run(c, c.out_aval(0).shape, [&](int64_t i, int64_t g, int64_t count) {
      if (dt == DType::F32) {  // the common case, without a dtype switch per element
        float* o = reinterpret_cast<float*>(out) + i;
        threefry_run(k0, k1, 0, g, count, [o](int64_t k, uint32_t x0, uint32_t) {
          o[k] = static_cast<float>(x0 >> 8) * 0x1.0p-24f;
        });
        return;
      }
      char* o = out + i * es;
      threefry_run(k0, k1, 0, g, count, [&](int64_t k, uint32_t x0, uint32_t x1) {
        detail::store_scalar(o + k * es, dt, uniform_from_bits(x0, x1, dt));
      });
    });
  }
};

class RandomFoldIn final : public Primitive {
 public:
  std::string_view name() const override { return "random_fold_in"; }
  const Batching* batching() const override {
    static const MapBatching b(*this);
    return &b;
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs&,
                          const Regions&) const override {
    check_arity(name(), in, 2);
    check_key(name(), in[0]);
    if (!(in[1].shape.empty() && is_integral(in[1].dtype))) {
      detail::fail(name(), "data must be an integer scalar, got {}", in[1].to_string());
    }
    return {in[0]};
  }
  std::vector<Array> vjp(const VjpArgs&) const override { return {Array(), Array()}; }
  void reference(const KernelCall& c) const override {
    auto [k0, k1] = load_key(c);
    uint64_t d = static_cast<uint64_t>(detail::load_int(c.in[1], c.in_aval(1).dtype));
    auto [a, b] = threefry2x32(k0, k1, static_cast<uint32_t>(d >> 32) ^ 0x80000000u,
                               static_cast<uint32_t>(d));
    uint32_t* out = static_cast<uint32_t*>(c.out[0]);
    out[0] = a;
    out[1] = b;
  }
};

Register<RandomBits> r_bits;
Register<RandomUniform> r_uniform;
Register<RandomFoldIn> r_fold;

}  // namespace
}  // namespace partix::prim

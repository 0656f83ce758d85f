// Runs one primitive's fast CPU kernel and its reference kernel on the same host buffers and
// compares the results, for tests/backend/*.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/scalar.h"
#include "ir/primitive.h"
#include "ir/program.h"

namespace partix::testing_kernels {

using ir::Attrs;
using ir::Aval;

struct Tensor {
  Aval aval;
  std::vector<char> bytes;
  template <class T>
  T* data() {
    return reinterpret_cast<T*>(bytes.data());
  }
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
  double at(int64_t i) const {
    return detail::load_scalar(bytes.data() + i * dtype_size(aval.dtype), aval.dtype);
  }
};

// How random values are drawn.
enum class Fill {
  kNormal,    // floats ~ N(0, 2); integers in [-50, 50]; bools fair
  kAnyBits,   // floats: uniformly random bit patterns (NaN, inf, subnormals included)
  kSpecial,   // floats: a mix of normal values and +-0, +-inf, NaN, subnormals, huge
  kPositive,  // floats in (0, 4]; integers in [1, 50]
};

inline Tensor random_tensor(DType dt, Shape shape, std::mt19937_64& rng,
                            Fill fill = Fill::kNormal) {
  Tensor t{Aval{shape, dt},
           std::vector<char>(static_cast<size_t>(shape_size(shape) * dtype_size(dt)))};
  const int64_t n = shape_size(shape);
  std::normal_distribution<double> normal(0.0, 2.0);
  std::uniform_int_distribution<int> small(-50, 50);
  std::uniform_real_distribution<double> pos(1e-3, 4.0);
  const double special[] = {0.0,  -0.0,  INFINITY, -INFINITY, NAN, -NAN,    1e-40, -3e-39,
                            1e30, -7e37, 1.0,      -1.0,      0.5, 65504.0, 1e-7,  3.3e38};
  for (int64_t i = 0; i < n; ++i) {
    char* p = t.bytes.data() + i * dtype_size(dt);
    if (dt == DType::Bool) {
      *reinterpret_cast<uint8_t*>(p) = rng() & 1;
    } else if (is_integral(dt)) {
      int64_t v = fill == Fill::kPositive ? std::abs(small(rng)) + 1 : small(rng);
      if (fill == Fill::kAnyBits || fill == Fill::kSpecial) v = static_cast<int64_t>(rng());
      detail::store_int(p, dt, v);
    } else if (fill == Fill::kAnyBits) {
      uint64_t bits = rng();
      std::memcpy(p, &bits, static_cast<size_t>(dtype_size(dt)));
    } else if (fill == Fill::kPositive) {
      detail::store_scalar(p, dt, pos(rng));
    } else if (fill == Fill::kSpecial && rng() % 4 == 0) {
      detail::store_scalar(p, dt, special[rng() % std::size(special)]);
    } else {
      detail::store_scalar(p, dt, normal(rng));
    }
  }
  return t;
}

struct KernelRun {
  bool handled = true;  // the fast kernel accepted the case (always true for the reference)
  std::vector<Tensor> outs;
};

// Runs the fast kernel (fast = true) or the reference. alias >= 0 runs in place: result 0
// starts as a copy of input `alias` and both pointers are the same buffer.
inline KernelRun run_kernel(const std::string& name, const Attrs& attrs,
                            const std::vector<Tensor>& ins, bool fast, int alias = -1) {
  const prim::Primitive& p = prim::get_primitive(name);
  std::vector<Aval> in_avals;
  for (const Tensor& t : ins) in_avals.push_back(t.aval);
  std::vector<Aval> out_avals = p.typing().infer(in_avals, attrs, {});
  KernelRun r;
  for (const Aval& a : out_avals) {
    r.outs.push_back(Tensor{a, std::vector<char>(static_cast<size_t>(a.nbytes()), char(0x5a))});
  }
  std::vector<Tensor> in_copy = ins;  // kernels must not write inputs; in-place uses out 0
  std::vector<const Aval*> ia, oa;
  std::vector<const void*> ip;
  std::vector<void*> op;
  for (const Tensor& t : in_copy) {
    ia.push_back(&t.aval);
    ip.push_back(t.bytes.empty() ? nullptr : t.bytes.data());
  }
  for (Tensor& t : r.outs) {
    oa.push_back(&t.aval);
    op.push_back(t.bytes.empty() ? nullptr : t.bytes.data());
  }
  if (alias >= 0) {
    EXPECT_EQ(in_copy[static_cast<size_t>(alias)].bytes.size(), r.outs[0].bytes.size());
    r.outs[0].bytes = in_copy[static_cast<size_t>(alias)].bytes;
    op[0] = r.outs[0].bytes.empty() ? nullptr : r.outs[0].bytes.data();
    ip[static_cast<size_t>(alias)] = op[0];
  }
  prim::ExecContext ctx;
  prim::Regions regions;
  prim::KernelCall call{attrs, ia, oa, ip, op, ctx, regions};
  if (fast) {
    const prim::KernelFn* k = prim::find_kernel(name, "cpu");
    r.handled = k != nullptr && (*k)(call);
  } else {
    p.execution().reference(call);
  }
  if (alias < 0) {
    for (size_t k = 0; k < ins.size(); ++k) {
      EXPECT_EQ(in_copy[k].bytes, ins[k].bytes) << name << " wrote its input " << k;
    }
  }
  return r;
}

// Distance in units in the last place of `dt` between two elements (0 when both are NaN,
// huge when only one is). Signed zeros are 0 apart here; exact comparisons check bits.
inline double ulp_distance(DType dt, const char* a, const char* b) {
  auto ordered = [](int64_t bits, int width) {
    int64_t sign = int64_t{1} << (width - 1);
    return (bits & sign) ? -(bits & (sign - 1)) : bits;
  };
  double x = detail::load_scalar(a, dt), y = detail::load_scalar(b, dt);
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y) ? 0 : 1e300;
  if (x == y) return 0;
  int w = dtype_size(dt) * 8;
  int64_t ba = 0, bb = 0;
  std::memcpy(&ba, a, static_cast<size_t>(dtype_size(dt)));
  std::memcpy(&bb, b, static_cast<size_t>(dtype_size(dt)));
  if (w == 64) {
    return std::fabs(static_cast<double>(ordered(ba, 64)) - static_cast<double>(ordered(bb, 64)));
  }
  return static_cast<double>(std::llabs(ordered(ba, w) - ordered(bb, w)));
}

// Expects equal bits, except that any two NaNs are equal.
inline void expect_exact(const Tensor& fast, const Tensor& ref, const std::string& what) {
  ASSERT_EQ(fast.aval, ref.aval) << what;
  const int es = dtype_size(ref.aval.dtype);
  int shown = 0;
  for (int64_t i = 0; i < ref.aval.size() && shown < 5; ++i) {
    const char* a = fast.bytes.data() + i * es;
    const char* b = ref.bytes.data() + i * es;
    bool same = std::memcmp(a, b, static_cast<size_t>(es)) == 0 ||
                (is_floating(ref.aval.dtype) && std::isnan(fast.at(i)) && std::isnan(ref.at(i)));
    if (!same) {
      ADD_FAILURE() << what << ": element " << i << " fast " << fast.at(i) << " reference "
                    << ref.at(i);
      shown++;
    }
  }
}

// Expects every element within max_ulp units in the last place of the result dtype; returns
// the largest distance seen.
inline double expect_ulp(const Tensor& fast, const Tensor& ref, double max_ulp,
                         const std::string& what) {
  EXPECT_EQ(fast.aval, ref.aval) << what;
  const int es = dtype_size(ref.aval.dtype);
  double worst = 0;
  int shown = 0;
  for (int64_t i = 0; i < ref.aval.size(); ++i) {
    double d = ulp_distance(ref.aval.dtype, fast.bytes.data() + i * es, ref.bytes.data() + i * es);
    worst = std::max(worst, d);
    if (d > max_ulp && shown++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " fast " << fast.at(i) << " reference "
                    << ref.at(i) << " (" << d << " ulp)";
    }
  }
  return worst;
}

}  // namespace partix::testing_kernels

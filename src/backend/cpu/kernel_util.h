// Pieces shared by the fast CPU kernels: the parallel loop, vectorisable conversions between
// bf16 / f16 and f32, per-thread scratch memory.
//
// The kernels are plain loops that GCC vectorises (`#pragma omp simd`); src/CMakeLists.txt
// compiles this folder with -fno-trapping-math -fno-math-errno so that selects if-convert and
// sqrt/rint vectorise. Neither flag changes a value: partix never reads FP flags or errno.
#pragma once

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string_view>

#include "backend/cpu/thread_team.h"
#include "partix/dtype.h"

namespace partix::backend::cpu {

// Elements below which a parallel region costs more (~µs to wake the team) than it saves.
inline constexpr int64_t kParallelGrain = int64_t{1} << 15;

// Runs fn(begin, end) over [0, n) in blocks of `grain`, on the calling thread and its device
// worker's helper threads (ThreadTeam; per-device thread count), serially elsewhere.
template <class Fn>
void parallel_for(int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  const int64_t blocks = (n + grain - 1) / grain;
  ThreadTeam* team = ThreadTeam::current();
  if (blocks <= 1 || !team || team->size() <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  struct Ctx {
    Fn* fn;
    int64_t n, grain;
  } ctx{&fn, n, grain};
  team->run(
      blocks,
      [](void* p, int64_t b) {
        const Ctx& c = *static_cast<const Ctx*>(p);
        (*c.fn)(b * c.grain, std::min(c.n, (b + 1) * c.grain));
      },
      &ctx);
}

inline bool is_half(DType d) { return d == DType::BF16 || d == DType::F16; }

// bf16 <-> f32, bit-identical to partix::bfloat16 (round to nearest even; NaN keeps its sign
// and becomes quiet). Branch-free so that loops over it vectorise.
inline float bf16_to_f32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// Whole-array conversions of a half type (BF16 or F16) to and from f32, bit-identical to
// partix::bfloat16 / partix::float16 (f16 uses the F16C instructions where available and
// canonicalises NaN as partix::float16 does).
void half_to_f32(DType half, const uint16_t* in, float* out, int64_t n);
void f32_to_half(DType half, const float* in, uint16_t* out, int64_t n);

// out[0, n) = op(a, b) on f32 values with the loop of op's fast kernel (the same bits); sa / sb
// mark an operand read as one scalar. Unary ops ignore b. Defined in elementwise_kernels.cpp.
using F32Loop = void (*)(const float* a, bool sa, const float* b, bool sb, float* out, int64_t n);
// The loop of an f32 unary or binary (non-comparison) op, or nullptr.
F32Loop f32_loop(std::string_view op);

// oneDNN matmul executions so far, all threads (dot_kernels.cpp); tests use it to see that a
// large product was split over a thread team.
int64_t onednn_calls();

// A per-thread scratch buffer that only grows (kernels that need a temporary copy).
void* thread_scratch(int64_t bytes, int slot = 0);

}  // namespace partix::backend::cpu

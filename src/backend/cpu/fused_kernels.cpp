// The CPU evaluator of fused elementwise groups (prim/fusion.h): the group's index space is cut
// into blocks of kBlock elements; per block each node writes its values into a slot of
// per-thread scratch (inputs are read where they lie, the last node writes the result), so the
// intermediates stay in L1. Each op runs the loop of its own fast kernel: the same bits as
// unfused.
#include <cstring>
#include <vector>

#include "backend/cpu/kernel_util.h"
#include "prim/fusion.h"

namespace partix::backend::cpu {

namespace {

using prim::FusedLoop;
using Kind = FusedLoop::Kind;

constexpr int64_t kBlock = 256;

// Elements [i0, i0 + n) of `src` broadcast to node.shape (node.strides: the operand's stride
// per result dimension, 0 where broadcast), into dst.
void broadcast_block(const FusedLoop::Node& node, const float* src, int64_t i0, int64_t n,
                     float* dst) {
  const size_t rank = node.shape.size();
  if (rank == 0) {
    dst[0] = src[0];
    return;
  }
  int64_t idx[16];
  int64_t rest = i0;
  for (size_t d = rank; d-- > 0;) {
    idx[d] = rest % node.shape[d];
    rest /= node.shape[d];
  }
  const size_t last = rank - 1;
  const int64_t inner = node.shape[last], step = node.strides[last];
  int64_t done = 0;
  while (done < n) {
    int64_t off = 0;
    for (size_t d = 0; d < rank; ++d) off += idx[d] * node.strides[d];
    const int64_t run = std::min(inner - idx[last], n - done);
    const float* s = src + off;
    float* o = dst + done;
    if (step == 0) {
      std::fill(o, o + run, s[0]);
    } else if (step == 1) {
      std::memcpy(o, s, static_cast<size_t>(run) * sizeof(float));
    } else {
      for (int64_t j = 0; j < run; ++j) o[j] = s[j * step];
    }
    done += run;
    idx[last] += run;
    for (size_t d = last; d > 0 && idx[d] == node.shape[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

// Whether a broadcast node reads its operand in order: every dimension of extent above 1 has the
// operand's row-major stride (the broadcast adds only dimensions of extent 1).
bool is_identity_broadcast(const FusedLoop::Node& node) {
  int64_t expect = 1;
  for (size_t d = node.shape.size(); d-- > 0;) {
    if (node.shape[d] == 1) continue;
    if (node.strides[d] != expect) return false;
    expect *= node.shape[d];
  }
  return true;
}

bool run_fused(const FusedLoop& g, const std::vector<const void*>& in, void* out,
               const prim::ExecContext&) {
  const size_t k = g.nodes.size();
  if (k == 0 || g.size == 0) return g.size == 0;
  if (k > prim::kMaxFusedNodes) return false;
  // Broadcasts that only add dimensions of extent 1 (a [576] weight read as [1, 576]): element
  // i of the result is element i of the operand, read where it lies rather than copied.
  bool in_place[prim::kMaxFusedNodes] = {};
  for (size_t j = 0; j < k; ++j) {
    const FusedLoop::Node& node = g.nodes[j];
    if (node.kind != Kind::kBroadcast) continue;
    if (node.shape.size() > 16) return false;
    in_place[j] = is_identity_broadcast(node);
  }
  float* result = static_cast<float*>(out);
  parallel_for(g.size, kParallelGrain, [&](int64_t lo, int64_t hi) {
    auto* slots = static_cast<float*>(thread_scratch(static_cast<int64_t>(k * kBlock * sizeof(float)), 2));
    const float* ptr[prim::kMaxFusedNodes];
    bool scalar[prim::kMaxFusedNodes];
    for (int64_t i0 = lo; i0 < hi; i0 += kBlock) {
      const int64_t n = std::min(kBlock, hi - i0);
      for (size_t j = 0; j < k; ++j) {
        const FusedLoop::Node& node = g.nodes[j];
        float* dst = j + 1 == k ? result + i0 : slots + j * kBlock;
        const auto* input = node.input >= 0 ? static_cast<const float*>(in[static_cast<size_t>(node.input)]) : nullptr;
        scalar[j] = false;
        switch (node.kind) {
          case Kind::kInput:
            ptr[j] = input + i0;
            break;
          case Kind::kScalar:
            ptr[j] = input ? input : &node.literal;
            scalar[j] = true;
            break;
          case Kind::kBroadcast:
            if (in_place[j]) {
              ptr[j] = input + i0;
            } else {
              broadcast_block(node, input, i0, n, dst);
              ptr[j] = dst;
            }
            break;
          case Kind::kUnary:
          case Kind::kBinary: {
            const auto fn = reinterpret_cast<F32Loop>(const_cast<void*>(node.fn));
            const size_t a = static_cast<size_t>(node.a);
            const size_t b = node.b >= 0 ? static_cast<size_t>(node.b) : a;
            fn(ptr[a], scalar[a], ptr[b], scalar[b], dst, n);
            ptr[j] = dst;
            break;
          }
        }
        if (j + 1 == k && ptr[j] != dst) {  // a result that is an input or a scalar
          if (scalar[j]) {
            std::fill(dst, dst + n, ptr[j][0]);
          } else {
            std::memcpy(dst, ptr[j], static_cast<size_t>(n) * sizeof(float));
          }
        }
      }
    }
  });
  return true;
}

struct Registrar {
  Registrar() {
    prim::register_fused_kernel(
        "cpu", {[](std::string_view op) { return reinterpret_cast<const void*>(f32_loop(op)); },
                &run_fused});
  }
} registrar;

}  // namespace
}  // namespace partix::backend::cpu

// Quantized matmul kernels on SmolLM2-135M's products (C = 576, F = 1536, V = 49152) at
// decode (M = 1) and prefill (M = 37) sizes, on a team of all cores: GOPS counts the integer
// multiply-adds (2 M N K), GB/s the weight bytes read. from_memory:1 reads a different copy of
// the weights each time (as decode does), from_memory:0 the same one (from the caches).
// Run: build/bin/partix_bench_quant_matmul [--benchmark_filter=Q4_1]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

#include "backend/cpu/quant_dot.h"
#include "backend/cpu/thread_team.h"
#include "partix/dtype.h"

namespace {

using partix::DType;
namespace cpu = partix::backend::cpu;

void bm_quant_matmul(benchmark::State& state, DType dt, int64_t M, int64_t N, int64_t K) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> w(static_cast<size_t>(partix::dtype_nbytes(dt, {N, K})));
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  // Block scales as small finite f16 values (random bytes could be NaN or huge).
  const int64_t bb = partix::dtype_nbytes(dt, {partix::dtype_block_elems(dt)});
  for (size_t off = 0; off < w.size(); off += static_cast<size_t>(bb)) {
    if (dt == DType::Q6_K) {
      w[off + 208] = 0x00;
      w[off + 209] = 0x20;
    } else {
      w[off + 1] = static_cast<uint8_t>(0x20 | (w[off + 1] & 0x03));
      if (dt == DType::Q4_K || dt == DType::Q4_1) w[off + 3] = static_cast<uint8_t>(0x20 | (w[off + 3] & 0x03));
    }
  }
  // Decode reads each weight once per token from memory, not from the caches: `from_memory`
  // cycles through copies of the matrix, 256 MiB in all.
  const bool from_memory = state.range(0) != 0;
  const size_t copies = from_memory ? std::max<size_t>(1, (size_t{256} << 20) / w.size()) : 1;
  std::vector<uint8_t> all(w.size() * copies);
  for (size_t c = 0; c < copies; ++c) std::copy(w.begin(), w.end(), all.begin() + static_cast<std::ptrdiff_t>(c * w.size()));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * K)), y(static_cast<size_t>(M * N));
  for (auto& v : x) v = normal(rng);
  const int helpers = std::max(1, static_cast<int>(std::thread::hardware_concurrency())) - 1;
  cpu::ThreadTeam team(helpers);
  cpu::ThreadTeam::set_current(&team);
  size_t next = 0;
  for (auto _ : state) {
    cpu::quant_matmul(dt, x.data(), all.data() + next * w.size(), y.data(), M, N, K);
    next = (next + 1) % copies;
    benchmark::DoNotOptimize(y.data());
  }
  cpu::ThreadTeam::set_current(nullptr);
  state.counters["GOPS"] = benchmark::Counter(2.0 * static_cast<double>(M * N * K) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.size()) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void register_all() {
  struct Mat {
    const char* name;
    int64_t N, K;
  };
  // The per-device blocks of the 8-device Megatron layout too: column-parallel q and gate
  // (rows split), row-parallel o and down (the contraction split: short rows).
  const Mat mats[] = {{"q_proj", 576, 576}, {"k_proj", 192, 576}, {"gate", 1536, 576},
                      {"down", 576, 1536}, {"lm_head", 49152, 576}, {"q_proj/3", 192, 576},
                      {"o_proj/3", 576, 192}, {"gate/8", 192, 576}, {"down/8", 576, 192}};
  for (DType dt : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    for (int64_t M : {1, 37}) {
      for (const Mat& m : mats) {
        if (dt == DType::Q4_K || dt == DType::Q6_K) {
          if (m.K % 256 != 0) continue;
        }
        const std::string name = std::string(partix::dtype_name(dt)) + "/" + m.name +
                                 "/M=" + std::to_string(M);
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& s) {
          bm_quant_matmul(s, dt, M, m.N, m.K);
        })->ArgName("from_memory")->Arg(0)->Arg(1)->UseRealTime();
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

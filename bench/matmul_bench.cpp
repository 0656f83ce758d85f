// Square matmul throughput, f32 and bf16 at 1024 and 2048, reported as a GFLOP/s counter:
//   partix/...  jit(matmul) on one device: tracing cache, dispatch to the device worker,
//               result allocation, the dot_general kernel (oneDNN underneath, one call per
//               thread of the device's team, each on a piece of the product);
//   onednn/...  the same oneDNN matmul primitive executed directly on an OpenMP team of
//               every core, as the ceiling.
// Run: build/bin/partix_bench_matmul   (ONEDNN_VERBOSE=1 shows the kernels oneDNN picks)
#include <benchmark/benchmark.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "partix/partix.h"

namespace {

using partix::Array;
using partix::DType;

Array random_matrix(int64_t n, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n * n));
  for (float& x : v) x = u(rng);
  Array a = partix::from_vector<float>(v, {n, n});
  return dtype == DType::F32 ? a : partix::astype(a, dtype);
}

void set_counter(benchmark::State& state, int64_t n) {
  const double flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void partix_matmul(benchmark::State& state, DType dtype) {
  const int64_t n = state.range(0);
  Array a = random_matrix(n, dtype, 1), b = random_matrix(n, dtype, 2);
  auto mm = partix::jit([](const Array& x, const Array& y) { return partix::matmul(x, y); });
  Array warm = mm(a, b);  // trace, compile, create the oneDNN primitive
  for (auto _ : state) {
    Array c = mm(a, b);  // runs synchronously on the device worker
    benchmark::DoNotOptimize(c);
  }
  set_counter(state, n);
}

void onednn_matmul(benchmark::State& state, DType dtype) {
  using dnnl::memory;
  const int64_t n = state.range(0);
  const memory::data_type dt =
      dtype == DType::F32 ? memory::data_type::f32 : memory::data_type::bf16;
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  memory::desc md({n, n}, dt, memory::format_tag::ab);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), eng);
  dnnl::matmul mm(pd);
  memory a(md, eng), b(md, eng), c(md, eng), scratch(pd.scratchpad_desc(), eng);
  // Same values as the partix run.
  Array pa = random_matrix(n, dtype, 1), pb = random_matrix(n, dtype, 2);
  const size_t bytes = md.get_size();
  if (dtype == DType::F32) {
    std::vector<float> va = pa.to_vector<float>(), vb = pb.to_vector<float>();
    std::memcpy(a.get_data_handle(), va.data(), bytes);
    std::memcpy(b.get_data_handle(), vb.data(), bytes);
  } else {
    std::vector<partix::bfloat16> va = pa.to_vector<partix::bfloat16>(),
                                  vb = pb.to_vector<partix::bfloat16>();
    std::memcpy(a.get_data_handle(), va.data(), bytes);
    std::memcpy(b.get_data_handle(), vb.data(), bytes);
  }
  auto run = [&] {
    mm.execute(s, {{DNNL_ARG_SRC, a},
                   {DNNL_ARG_WEIGHTS, b},
                   {DNNL_ARG_DST, c},
                   {DNNL_ARG_SCRATCHPAD, scratch}});
    s.wait();
  };
  run();
  for (auto _ : state) run();
  state.SetLabel(pd.impl_info_str());
  set_counter(state, n);
}

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

}  // namespace

// On a shared machine the best of several repetitions is the figure to compare; run with
// --benchmark_repetitions=N --benchmark_enable_random_interleaving=true for the "max" rows.
static double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

#define PARTIX_MATMUL_BENCH(fn, name, dtype) \
  BENCHMARK_CAPTURE(fn, name, dtype)         \
      ->Arg(1024)                            \
      ->Arg(2048)                            \
      ->UseRealTime()                        \
      ->Unit(benchmark::kMillisecond)        \
      ->ComputeStatistics("max", max_of)
PARTIX_MATMUL_BENCH(partix_matmul, f32, DType::F32);
PARTIX_MATMUL_BENCH(onednn_matmul, f32, DType::F32);
PARTIX_MATMUL_BENCH(partix_matmul, bf16, DType::BF16);
PARTIX_MATMUL_BENCH(onednn_matmul, bf16, DType::BF16);

int main(int argc, char** argv) {
  partix::init({.num_cpu_devices = 1});
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const dnnl_version_t* v = dnnl_version();
  benchmark::AddCustomContext("onednn", std::to_string(v->major) + "." + std::to_string(v->minor) +
                                            "." + std::to_string(v->patch));
  benchmark::AddCustomContext("onednn_isa", isa_name(dnnl::get_effective_cpu_isa()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

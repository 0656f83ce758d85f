// What the runtime costs per instruction, apart from kernels: a jitted chain of tiny
// instructions that do not fuse (two slices and a concatenate per step, on 64 floats), run on
// 1 device and on the 8 devices of a mesh with the array replicated, at 200 steps and at 2 (the
// fixed cost of a run). Each device runs the same per-device program; the counter "ns/instr" is
// the wall time per instruction of that program, all devices together, so on 8 devices over 2
// cores a figure 4x the 1-device one means each device costs what one device alone does. The
// collective variant takes a tiny all-reduce every step ("us/step").
// Run: build/bin/partix_bench_runtime_overhead   (PARTIX_NUM_CPU_DEVICES=8 is the default)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "partix/partix.h"

namespace {

using namespace partix;

constexpr int kSteps = 200;
constexpr int64_t kN = 64;

// Three instructions per step: slice, slice, concatenate (a rotation by one element).
Array rotate_chain(const Array& x, int steps) {
  Array y = x;
  for (int s = 0; s < steps; ++s) {
    y = concatenate({slice_axis(y, 0, 1, kN), slice_axis(y, 0, 0, 1)}, 0);
  }
  return y;
}

// A 1-axis mesh of the first state.range(0) local devices, or nothing (the run is skipped).
std::optional<Mesh> mesh_for(benchmark::State& state) {
  const int devices = static_cast<int>(state.range(0));
  std::vector<Device> all = local_devices();
  if (static_cast<int>(all.size()) < devices) {
    state.SkipWithError("not enough local devices");
    return std::nullopt;
  }
  return Mesh({devices}, {"x"}, std::vector<Device>(all.begin(), all.begin() + devices));
}

void BM_SmallInstructions(benchmark::State& state) {
  const std::optional<Mesh> mesh = mesh_for(state);
  if (!mesh) return;
  Array x = device_put(arange(kN, DType::F32), NamedSharding(*mesh, P()));
  const int steps = static_cast<int>(state.range(1));
  auto f = jit([steps](const Array& a) { return rotate_chain(a, steps); });
  f(x).to_vector<float>();  // compile
  for (auto _ : state) {
    Array y = f(x);
    benchmark::DoNotOptimize(y);
  }
  state.counters["ns/instr"] = benchmark::Counter(
      static_cast<double>(3 * steps) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SmallInstructions)->Args({1, 200})->Args({8, 200})->Args({1, 2})->Args({8, 2})->UseRealTime()->Unit(benchmark::kMicrosecond);

// Each step: the sum of a sharded vector's product with another (an all-reduce over 'x').
Array reduce_chain(const Array& x, const Array& w) {
  Array y = w;
  for (int s = 0; s < kSteps / 4; ++s) y = y + sum(x * y);
  return y;
}

void BM_SmallCollectives(benchmark::State& state) {
  const std::optional<Mesh> mesh = mesh_for(state);
  if (!mesh) return;
  Array x = device_put(arange(kN, DType::F32) * 1e-3, NamedSharding(*mesh, P("x")));
  Array w = device_put(full({kN}, 0.5), NamedSharding(*mesh, P("x")));
  auto f = jit(reduce_chain);
  f(x, w).to_vector<float>();
  for (auto _ : state) {
    Array y = f(x, w);
    benchmark::DoNotOptimize(y);
  }
  state.counters["us/step"] = benchmark::Counter(
      static_cast<double>(kSteps / 4) * 1e-6,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_SmallCollectives)->Arg(1)->Arg(8)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  setenv("PARTIX_NUM_CPU_DEVICES", "8", /*overwrite=*/0);  // before the first device query
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

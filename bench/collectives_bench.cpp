// In-process collective bandwidth over 8 device threads, next to memcpy in the same run.
//   build/bin/partix_bench_collectives --benchmark_counters_tabular=true
// Counters: algbw = bytes per device / time; busbw = algbw * 2(n-1)/n for all_reduce and
// algbw * (n-1)/n for all_gather (NCCL's convention, comparable to a copy's bandwidth);
// busbw_vs_memcpy = busbw / the memcpy bandwidth of the same size measured earlier in this run.
// traffic_vs_memcpy compares memory traffic instead: the bytes a collective must read and
// write at least (all_reduce into n outputs: n inputs read, n outputs written; into one shared
// result: n + 1; a gather: its inputs once and every output) per second, against memcpy's
// 2 x bytes per second. Large in-process collectives are bound by memory bandwidth, so this
// says how close one comes to that bound, where busbw_vs_memcpy cannot reach 1.
#include <benchmark/benchmark.h>

#include <barrier>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "comm/thread/thread_communicator.h"
#include "core/buffer.h"
#include "partix/partix.h"

using namespace partix;

namespace {

constexpr int kDevices = 8;

// memcpy bandwidth (GB/s) by size, filled by BM_Memcpy, which runs first.
std::map<int64_t, double>& memcpy_gbps() {
  static std::map<int64_t, double> m;
  return m;
}

// Sets the bandwidth counters of a collective that moved `bytes` per device per iteration
// in `seconds` in all; `bus_factor` turns algbw into busbw.
// `traffic_factor`: the bytes it must read and write at least, in units of `bytes`.
void report(benchmark::State& state, int64_t bytes, double seconds, double bus_factor,
            double traffic_factor) {
  const double algbw = static_cast<double>(bytes) * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = algbw * bus_factor;
  auto it = memcpy_gbps().find(bytes);
  if (it != memcpy_gbps().end()) {
    state.counters["busbw_vs_memcpy"] = algbw * bus_factor / it->second;
    state.counters["traffic_vs_memcpy"] = algbw * traffic_factor / (2 * it->second);
  }
}

constexpr double kAllReduceBus = 2.0 * (kDevices - 1) / kDevices;
constexpr double kAllGatherBus = static_cast<double>(kDevices - 1) / kDevices;

// Runs `op(rank)` on kDevices threads `iters` times, each round started together.
template <class Op>
double run_rounds(int iters, Op op) {
  std::barrier start(kDevices + 1), done(kDevices + 1);
  std::vector<std::thread> ts;
  for (int r = 0; r < kDevices; ++r) {
    ts.emplace_back([&, r] {
      for (int i = 0; i < iters; ++i) {
        start.arrive_and_wait();
        op(r);
        done.arrive_and_wait();
      }
    });
  }
  double total = 0;
  for (int i = 0; i < iters; ++i) {
    start.arrive_and_wait();
    auto t0 = std::chrono::steady_clock::now();
    done.arrive_and_wait();
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (auto& t : ts) t.join();
  return total;
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double seconds = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double gbps = static_cast<double>(bytes) * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.counters["algbw_GBps"] = gbps;
  memcpy_gbps()[static_cast<int64_t>(bytes)] = gbps;
}

void BM_AllReduce(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  const int64_t count = bytes / 4;
  comm::ThreadCommunicator c;
  comm::Group g;
  for (int r = 0; r < kDevices; ++r) g.push_back(r);
  std::vector<std::vector<float>> in(kDevices, std::vector<float>(static_cast<size_t>(count), 1.0f));
  std::vector<std::vector<float>> out(kDevices, std::vector<float>(static_cast<size_t>(count), 0.0f));
  double seconds = 0;
  for (auto _ : state) {
    double t = run_rounds(1, [&](int r) {
      c.all_reduce(in[static_cast<size_t>(r)].data(), out[static_cast<size_t>(r)].data(), count,
                   DType::F32, detail::ReduceKind::kSum, g, r);
    });
    state.SetIterationTime(t);
    seconds += t;
  }
  if (out[3][static_cast<size_t>(count - 1)] != static_cast<float>(kDevices)) state.SkipWithError("wrong sum");
  report(state, bytes, seconds, kAllReduceBus, 2.0 * kDevices);
}

// The form the runtime uses: one result, shared by the members as aliases.
void BM_AllReduceShared(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  const int64_t count = bytes / 4;
  comm::ThreadCommunicator c;
  comm::Group g;
  for (int r = 0; r < kDevices; ++r) g.push_back(r);
  std::vector<std::vector<float>> in(kDevices, std::vector<float>(static_cast<size_t>(count), 1.0f));
  float check = 0;
  double seconds = 0;
  for (auto _ : state) {
    double t = run_rounds(1, [&](int r) {
      detail::Buffer b = c.all_reduce_to_buffer(in[static_cast<size_t>(r)].data(), count, DType::F32,
                                                detail::ReduceKind::kSum, g, r);
      if (r == 5) check = b.as<float>()[count - 1];
    });
    state.SetIterationTime(t);
    seconds += t;
  }
  if (check != static_cast<float>(kDevices)) state.SkipWithError("wrong sum");
  report(state, bytes, seconds, kAllReduceBus, kDevices + 1.0);
}

void BM_AllGatherShared(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  const int64_t per = bytes / kDevices;
  comm::ThreadCommunicator c;
  comm::Group g;
  for (int r = 0; r < kDevices; ++r) g.push_back(r);
  std::vector<std::vector<char>> in(kDevices, std::vector<char>(static_cast<size_t>(per), 1));
  double seconds = 0;
  for (auto _ : state) {
    double t = run_rounds(1, [&](int r) {
      detail::Buffer b = c.all_gather_to_buffer(in[static_cast<size_t>(r)].data(), per, g, r);
      benchmark::DoNotOptimize(b.data());
    });
    state.SetIterationTime(t);
    seconds += t;
  }
  report(state, bytes, seconds, kAllGatherBus, 2.0);  // inputs once, the result once
}

void BM_AllGather(benchmark::State& state) {
  const int64_t bytes = state.range(0);  // output bytes per device
  const int64_t per = bytes / kDevices;
  comm::ThreadCommunicator c;
  comm::Group g;
  for (int r = 0; r < kDevices; ++r) g.push_back(r);
  std::vector<std::vector<char>> in(kDevices, std::vector<char>(static_cast<size_t>(per), 1));
  std::vector<std::vector<char>> out(kDevices, std::vector<char>(static_cast<size_t>(bytes), 0));
  double seconds = 0;
  for (auto _ : state) {
    double t = run_rounds(1, [&](int r) {
      c.all_gather(in[static_cast<size_t>(r)].data(), out[static_cast<size_t>(r)].data(), per, g, r);
    });
    state.SetIterationTime(t);
    seconds += t;
  }
  report(state, bytes, seconds, kAllGatherBus, 1.0 + kDevices);  // inputs once, every output
}

}  // namespace

BENCHMARK(BM_Memcpy)->RangeMultiplier(4)->Range(1 << 20, 256 << 20)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AllReduce)->RangeMultiplier(4)->Range(1 << 20, 256 << 20)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AllReduceShared)->RangeMultiplier(4)->Range(1 << 20, 256 << 20)->UseManualTime()->Unit(benchmark::kMillisecond);
// Latency of small all-reduces (what a decode step's 61 all-reduces cost).
BENCHMARK(BM_AllReduceShared)->Name("BM_AllReduceSmall")->RangeMultiplier(16)->Range(256, 64 << 10)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AllGatherShared)->RangeMultiplier(4)->Range(1 << 20, 256 << 20)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AllGather)->RangeMultiplier(4)->Range(1 << 20, 256 << 20)->UseManualTime()->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
  partix::init({.num_cpu_devices = kDevices});
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}

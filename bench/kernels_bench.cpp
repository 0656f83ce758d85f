// Throughput of the fast CPU kernels against the reference kernels, called directly through
// the kernel registry on one thread team (no jit): elements per second as a counter.
// Run: build/bin/partix_bench_kernels
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "ir/primitive.h"
#include "ir/program.h"
#include "partix/partix.h"

namespace {

using partix::DType;
using partix::Shape;
using partix::ir::Attrs;
using partix::ir::Aval;

struct Case {
  std::string prim;
  Attrs attrs;
  std::vector<Aval> in;
};

void run_case(benchmark::State& state, const Case& cs, bool fast) {
  const partix::prim::Primitive& p = partix::prim::get_primitive(cs.prim);
  std::vector<Aval> out = p.typing().infer(cs.in, cs.attrs, {});
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<std::vector<char>> in_bytes, out_bytes;
  std::vector<const void*> ip;
  std::vector<void*> op;
  std::vector<const Aval*> ia, oa;
  for (const Aval& a : cs.in) {
    in_bytes.emplace_back(static_cast<size_t>(a.nbytes()));
    if (a.dtype == DType::F32) {
      auto* f = reinterpret_cast<float*>(in_bytes.back().data());
      for (int64_t i = 0; i < a.size(); ++i) f[i] = normal(rng);
    }
    ip.push_back(in_bytes.back().data());
    ia.push_back(&a);
  }
  for (const Aval& a : out) {
    out_bytes.emplace_back(static_cast<size_t>(a.nbytes()));
    op.push_back(out_bytes.back().data());
    oa.push_back(&a);
  }
  partix::prim::ExecContext ctx;
  partix::prim::Regions regions;
  partix::prim::KernelCall call{cs.attrs, ia, oa, ip, op, ctx, regions};
  const partix::prim::KernelFn* k = partix::prim::find_kernel(cs.prim, "cpu");
  for (auto _ : state) {
    if (!(fast && k && (*k)(call))) p.execution().reference(call);
    benchmark::ClobberMemory();
  }
  state.counters["Melem/s"] = benchmark::Counter(static_cast<double>(cs.in[0].size()) * 1e-6,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

const int64_t kN = int64_t{1} << 22;  // 16 MiB of f32: DRAM-resident

const Case kCases[] = {
    {"exp", {}, {Aval{{kN}, DType::F32}}},
    {"tanh", {}, {Aval{{kN}, DType::F32}}},
    {"logistic", {}, {Aval{{kN}, DType::F32}}},
    {"erf", {}, {Aval{{kN}, DType::F32}}},
    {"add", {}, {Aval{{kN}, DType::F32}, Aval{{kN}, DType::F32}}},
    {"reduce_sum", {{"axes", partix::ir::Ints{1}}}, {Aval{{kN / 1024, 1024}, DType::F32}}},
    {"reduce_max", {{"axes", partix::ir::Ints{0}}}, {Aval{{kN / 1024, 1024}, DType::F32}}},
    {"transpose", {{"perm", partix::ir::Ints{1, 0}}}, {Aval{{2048, kN / 2048}, DType::F32}}},
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (const Case& cs : kCases) {
    for (bool fast : {true, false}) {
      benchmark::RegisterBenchmark((cs.prim + (fast ? "/fast" : "/reference")).c_str(),
                                   [&cs, fast](benchmark::State& s) { run_case(s, cs, fast); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

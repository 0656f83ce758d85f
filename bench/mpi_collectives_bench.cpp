// partix's collectives across processes next to the MPI collectives they are built on, in the
// same run on the same processes. Run it under mpirun (bench/mpi_collectives.sh):
//
//   mpirun -np 2 -x PARTIX_NUM_CPU_DEVICES=4 build/bin/partix_bench_mpi_collectives
//
// The mesh is every device of the job on one axis "d", so each group spans every process.
// For each size S (per device, f32):
//   all_reduce  partix: jit(shard_map(psum(block, "d"))) of an array sharded P("d") whose
//               block is S bytes.  MPI: MPI_Allreduce(MPI_FLOAT, MPI_SUM) of S bytes per
//               process. algbw = S / time for both.
//   all_gather  partix: jit(shard_map(all_gather(block, "d", 0, tiled))) of blocks of
//               S / devices bytes, so each device ends up with S bytes and each process
//               contributes S * local_devices / devices bytes.  MPI: MPI_Allgather of exactly
//               those bytes per process, S bytes received by each. algbw = S / time for both.
// The processes contribute the same bytes to both and receive the same bytes; partix also
// combines its local devices in shared memory and hands every local device its own result,
// which MPI's one-buffer-per-process collective does not have to do: that is the cost of
// the hierarchy that the ratio shows.
//
// Timing: every repetition starts with an MPI_Barrier, times one call on each process and
// keeps the slowest process's time (a collective is done when its last member is). partix
// calls are synchronous (the result's buffers are filled when the call returns). The
// repetitions of partix and MPI alternate, in turn order swapped every repetition, so that
// noise on a shared machine hits both; the table shows medians. The results are checked once
// per size against values known exactly.
//
// Options: --sizes-mib 1,4,16 (default 1,4,16,64,256)  --reps N (default by size)
//          --warmup N (default 2)
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "partix/distributed.h"
#include "partix/partix.h"

using namespace partix;

namespace {

struct Options {
  std::vector<int64_t> sizes_mib = {1, 4, 16, 64, 256};
  int reps = 0;  // 0: by size
  int warmup = 2;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--sizes-mib") {
      o.sizes_mib.clear();
      std::string v = value();
      for (size_t p = 0; p < v.size();) {
        size_t q = v.find(',', p);
        if (q == std::string::npos) q = v.size();
        o.sizes_mib.push_back(std::stoll(v.substr(p, q - p)));
        p = q + 1;
      }
    } else if (a == "--reps") {
      o.reps = std::stoi(value());
    } else if (a == "--warmup") {
      o.warmup = std::stoi(value());
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  return o;
}

// Enough repetitions for a stable median without spending minutes on the large sizes.
int reps_for(int64_t mib, const Options& o) {
  if (o.reps > 0) return o.reps;
  if (mib <= 4) return 21;
  if (mib <= 16) return 11;
  if (mib <= 64) return 7;
  return 5;
}

// Seconds one call of `op` took on the slowest process, every process starting together.
double timed(const std::function<void()>& op) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  op();
  double mine = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Pair {
  double partix_s = 0, mpi_s = 0;
};

// Warms both up, then alternates them rep times; medians of each.
Pair alternate(const std::function<void()>& ours, const std::function<void()>& theirs, int reps,
               int warmup) {
  for (int i = 0; i < warmup; ++i) {
    timed(ours);
    timed(theirs);
  }
  std::vector<double> a, b;
  for (int i = 0; i < reps; ++i) {
    if (i % 2 == 0) {
      a.push_back(timed(ours));
      b.push_back(timed(theirs));
    } else {
      b.push_back(timed(theirs));
      a.push_back(timed(ours));
    }
  }
  return {median(a), median(b)};
}

// Every process agrees that its own check passed.
void require_everywhere(bool ok, const std::string& what) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) {
    std::fprintf(stderr, "wrong result: %s\n", what.c_str());
    distributed::notify_failure("wrong result: " + what);
    std::exit(1);
  }
}

// The values of each of this process's result blocks (all of them equal `want(i)`).
bool blocks_hold(const Array& result, const std::function<float(int64_t)>& want) {
  for (const Shard& s : result.addressable_shards()) {
    std::vector<float> v = s.data.to_vector<float>();
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] != want(static_cast<int64_t>(i))) return false;
    }
  }
  return true;
}

struct Row {
  int64_t mib = 0;
  Pair reduce, gather;
};

}  // namespace

int main(int argc, char** argv) {
  distributed::initialize();
  const Options opt = parse(argc, argv);
  int rank = 0, nprocs = 1, mpi_up = 0;
  MPI_Initialized(&mpi_up);
  if (!mpi_up) {
    std::fprintf(stderr, "run this under mpirun with at least 2 processes "
                         "(bench/mpi_collectives.sh)\n");
    return 2;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
  const int64_t n = device_count();
  const int64_t local = n / nprocs;
  Mesh mesh({n}, {"d"}, devices());
  const NamedSharding split(mesh, P("d"));

  auto reduce = jit(shard_map([](const Array& b) { return psum(b, "d"); }, mesh, {P("d")}, {P()}),
                    {.name = "bench_psum"});
  auto gather = jit(shard_map([](const Array& b) { return all_gather(b, "d", 0, /*tiled=*/true); },
                              mesh, {P("d")}, {P()}),
                    {.name = "bench_all_gather"});

  if (rank == 0) {
    std::printf("partix vs MPI: %d processes x %lld devices, mesh d=%lld; median of alternating "
                "repetitions; GB/s = algbw = bytes per device (partix) or process (MPI) / time\n",
                nprocs, static_cast<long long>(local), static_cast<long long>(n));
    std::fflush(stdout);
  }

  std::vector<Row> rows;
  for (int64_t mib : opt.sizes_mib) {
    const int64_t bytes = mib << 20;
    const int64_t count = bytes / 4;
    const int reps = reps_for(mib, opt);
    Row row;
    row.mib = mib;
    {
      // Device i's block holds i + 1: the sum, n(n+1)/2, is exact in f32.
      Array x = make_array_from_callback({n * count}, split, [&](const std::vector<Slice>& idx) {
        return full({idx[0].size()}, static_cast<double>(idx[0].start / count + 1), DType::F32);
      });
      std::vector<float> send(static_cast<size_t>(count), static_cast<float>(rank + 1));
      std::vector<float> recv(static_cast<size_t>(count), 0.f);
      Array y;
      row.reduce = alternate(
          [&] {
            y = Array();  // the previous result's buffers go before the next are allocated
            y = reduce(x);
          },
          [&] {
            MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
          },
          reps, opt.warmup);
      const float sum = static_cast<float>(n * (n + 1) / 2);
      require_everywhere(blocks_hold(y, [&](int64_t) { return sum; }),
                         "partix psum of " + std::to_string(mib) + " MiB");
      const float mpi_sum = static_cast<float>(nprocs * (nprocs + 1) / 2);
      require_everywhere(std::all_of(recv.begin(), recv.end(), [&](float v) { return v == mpi_sum; }),
                         "MPI_Allreduce of " + std::to_string(mib) + " MiB");
    }
    {
      // Blocks of S / n bytes, so each device gathers S; element j of block i holds i (exact).
      const int64_t block = count / n;
      Array x = make_array_from_callback({n * block}, split, [&](const std::vector<Slice>& idx) {
        return full({idx[0].size()}, static_cast<double>(idx[0].start / block), DType::F32);
      });
      const int64_t per_process = block * local;  // floats each process contributes
      std::vector<float> send(static_cast<size_t>(per_process), static_cast<float>(rank));
      std::vector<float> recv(static_cast<size_t>(per_process * nprocs), -1.f);
      Array y;
      row.gather = alternate(
          [&] {
            y = Array();
            y = gather(x);
          },
          [&] {
            MPI_Allgather(send.data(), static_cast<int>(per_process), MPI_FLOAT, recv.data(),
                          static_cast<int>(per_process), MPI_FLOAT, MPI_COMM_WORLD);
          },
          reps, opt.warmup);
      require_everywhere(blocks_hold(y, [&](int64_t i) { return static_cast<float>(i / block); }),
                         "partix all_gather of " + std::to_string(mib) + " MiB");
      bool mpi_ok = true;
      for (size_t i = 0; i < recv.size(); ++i) {
        mpi_ok = mpi_ok && recv[i] == static_cast<float>(static_cast<int64_t>(i) / per_process);
      }
      require_everywhere(mpi_ok, "MPI_Allgather of " + std::to_string(mib) + " MiB");
    }
    rows.push_back(row);
    if (rank == 0) {
      std::printf("  %4lld MiB x %2d reps: all_reduce partix %8.3f ms  MPI %8.3f ms | "
                  "all_gather partix %8.3f ms  MPI %8.3f ms\n",
                  static_cast<long long>(mib), reps, row.reduce.partix_s * 1e3,
                  row.reduce.mpi_s * 1e3, row.gather.partix_s * 1e3, row.gather.mpi_s * 1e3);
      std::fflush(stdout);
    }
  }

  if (rank == 0) {
    std::printf("\n| size/device | all_reduce partix GB/s | MPI_Allreduce GB/s | ratio "
                "| all_gather partix GB/s | MPI_Allgather GB/s | ratio |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const Row& r : rows) {
      const double b = static_cast<double>(r.mib << 20) / 1e9;
      const double ap = b / r.reduce.partix_s, am = b / r.reduce.mpi_s;
      const double gp = b / r.gather.partix_s, gm = b / r.gather.mpi_s;
      std::printf("| %lld MiB | %.3f | %.3f | %.2f | %.3f | %.3f | %.2f |\n",
                  static_cast<long long>(r.mib), ap, am, ap / am, gp, gm, gp / gm);
    }
    std::fflush(stdout);
  }
  return 0;
}

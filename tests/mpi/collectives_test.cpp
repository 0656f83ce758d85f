// Many processes (run under mpirun by ctest: 2 processes x 4 devices and 4 x 2): every
// collective over groups that span processes, evenly and unevenly, against values computed on
// the host; arrays across processes; failures that must reach every process.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>

#include "core/fault_injection.h"
#include "ir/program.h"
#include "partix/partix.h"
#include "spmd/compile.h"

namespace partix {
namespace {

// The global operand: G[r][c] = 10 r + c (exact in f32).
float g_at(int64_t r, int64_t c) { return static_cast<float>(10 * r + c); }

Array global_operand(int64_t rows, int64_t cols, const NamedSharding& s) {
  return make_array_from_callback({rows, cols}, s, [&](const std::vector<Slice>& idx) {
    std::vector<float> v;
    for (int64_t r = idx[0].start; r < idx[0].stop; ++r) {
      for (int64_t c = idx[1].start; c < idx[1].stop; ++c) v.push_back(g_at(r, c));
    }
    return from_vector(v, {idx[0].size(), idx[1].size()});
  });
}

std::vector<float> everywhere(const Array& a) { return process_allgather(a).to_vector<float>(); }

// A mesh of the job's 8 devices: x by y, devices in `order` (default: by id).
Mesh mesh_of(int64_t x, int64_t y, std::vector<int> order = {}) {
  if (order.empty()) {
    order.resize(static_cast<size_t>(x * y));
    std::iota(order.begin(), order.end(), 0);
  }
  std::vector<Device> ds;
  for (int id : order) ds.push_back(devices()[static_cast<size_t>(id)]);
  return Mesh({x, y}, {"x", "y"}, ds);
}

struct MeshCase {
  const char* name;
  int64_t x, y;
  std::vector<int> order;
};

// 4x2 by id: x groups span processes evenly; 2x4: x groups hold one device per process (with
// 2 processes); the permuted orders put 3 devices of an x group in one process and 1 in
// another.
std::vector<MeshCase> mesh_cases() {
  return {{"4x2", 4, 2, {}},
          {"2x4", 2, 4, {}},
          {"4x2_uneven", 4, 2, {0, 1, 2, 4, 3, 5, 6, 7}},
          {"2x4_uneven", 2, 4, {0, 4, 1, 2, 3, 5, 6, 7}}};
}

class Collectives : public testing::TestWithParam<int> {
 protected:
  Collectives()
      : c_(mesh_cases()[static_cast<size_t>(GetParam())]), mesh_(mesh_of(c_.x, c_.y, c_.order)) {}
  void SetUp() override { ASSERT_EQ(device_count(), 8) << "run with 8 devices in all"; }
  MeshCase c_;
  Mesh mesh_;
};

TEST_P(Collectives, PsumOverX) {
  const int64_t X = c_.x, Y = c_.y, bx = 2, by = 3;
  Array g = global_operand(X * bx, Y * by, NamedSharding(mesh_, P("x", "y")));
  auto f =
      shard_map([](const Array& b) { return psum(b, "x"); }, mesh_, {P("x", "y")}, {P(None, "y")});
  std::vector<float> got = everywhere(f(g));
  ASSERT_EQ(got.size(), static_cast<size_t>(bx * Y * by));
  for (int64_t a = 0; a < bx; ++a) {
    for (int64_t col = 0; col < Y * by; ++col) {
      float want = 0;
      for (int64_t i = 0; i < X; ++i) want += g_at(i * bx + a, col);
      EXPECT_EQ(got[static_cast<size_t>(a * Y * by + col)], want) << a << "," << col;
    }
  }
}

// The narrow and unsigned integers reduce across processes in their own width (u8 sums wrap
// at 256, u32 values past 2^31 stay unsigned), and gather unchanged.
TEST_P(Collectives, NarrowIntegersReduceInTheirWidth) {
  const int64_t X = c_.x, Y = c_.y, bx = 2, by = 3;
  Array g = global_operand(X * bx, Y * by, NamedSharding(mesh_, P("x", "y")));
  for (DType d : {DType::U8, DType::I8, DType::I16, DType::U16, DType::U32}) {
    SCOPED_TRACE(std::string(dtype_name(d)));
    // 10 r + c scaled into each type's range (u32: past 2^31).
    const double scale = d == DType::U32 ? 60000000.0 : d == DType::U8 ? 7.0 : 3.0;
    auto f = shard_map([](const Array& b) { return psum(b, "x"); }, mesh_, {P("x", "y")},
                       {P(None, "y")});
    Array got = f(astype(g * scale, d));
    EXPECT_EQ(got.dtype(), d);
    std::vector<int64_t> v = process_allgather(astype(got, DType::I64)).to_vector<int64_t>();
    const int64_t mod = int64_t{1} << int_bits(d);
    for (int64_t a = 0; a < bx; ++a) {
      for (int64_t col = 0; col < Y * by; ++col) {
        int64_t want = 0;
        const int64_t lo = is_unsigned(d) ? 0 : -mod / 2,
                      hi = is_unsigned(d) ? mod - 1 : mod / 2 - 1;
        for (int64_t i = 0; i < X; ++i) {  // the float -> integer conversion saturates
          want += std::clamp(static_cast<int64_t>(g_at(i * bx + a, col) * scale), lo, hi);
        }
        want = ((want % mod) + mod) % mod;  // wrapped, as bits
        if (!is_unsigned(d) && want >= mod / 2) want -= mod;
        EXPECT_EQ(v[static_cast<size_t>(a * Y * by + col)], want) << a << "," << col;
      }
    }
  }
}

TEST_P(Collectives, PmaxOverBothAxes) {
  const int64_t X = c_.x, Y = c_.y, bx = 2, by = 3;
  Array g = global_operand(X * bx, Y * by, NamedSharding(mesh_, P("x", "y")));
  auto f = shard_map(
      [](const Array& b) {
        return pmax(b, Axes{"x", "y"});
      },
      mesh_, {P("x", "y")}, {P()});
  std::vector<float> got = everywhere(f(g));
  for (int64_t a = 0; a < bx; ++a) {
    for (int64_t c = 0; c < by; ++c) {
      EXPECT_EQ(got[static_cast<size_t>(a * by + c)], g_at((X - 1) * bx + a, (Y - 1) * by + c));
    }
  }
}

TEST_P(Collectives, AllGatherOverX) {
  const int64_t X = c_.x, Y = c_.y, bx = 2, by = 3;
  Array g = global_operand(X * bx, Y * by, NamedSharding(mesh_, P("x", "y")));
  auto f = shard_map([](const Array& b) { return all_gather(b, "x", 0, /*tiled=*/true); }, mesh_,
                     {P("x", "y")}, {P(None, "y")});
  std::vector<float> got = everywhere(f(g));
  for (int64_t r = 0; r < X * bx; ++r) {
    for (int64_t col = 0; col < Y * by; ++col) {
      EXPECT_EQ(got[static_cast<size_t>(r * Y * by + col)], g_at(r, col));
    }
  }
}

TEST_P(Collectives, PsumScatterOverX) {
  const int64_t X = c_.x, Y = c_.y, bx = X, by = 3;
  Array g = global_operand(X * bx, Y * by, NamedSharding(mesh_, P("x", "y")));
  auto f = shard_map([](const Array& b) { return psum_scatter(b, "x", 0, /*tiled=*/true); }, mesh_,
                     {P("x", "y")}, {P("x", "y")});
  std::vector<float> got = everywhere(f(g));
  ASSERT_EQ(got.size(), static_cast<size_t>(X * Y * by));
  for (int64_t r = 0; r < X; ++r) {
    for (int64_t col = 0; col < Y * by; ++col) {
      float want = 0;
      for (int64_t i = 0; i < X; ++i) want += g_at(i * bx + r, col);
      EXPECT_EQ(got[static_cast<size_t>(r * Y * by + col)], want);
    }
  }
}

TEST_P(Collectives, AllToAllOverX) {
  const int64_t X = c_.x, Y = c_.y, bx = X, by = 3;
  Array g = global_operand(X * bx, Y * by, NamedSharding(mesh_, P("x", "y")));
  auto f = shard_map([](const Array& b) { return all_to_all(b, "x", 0, 1, /*tiled=*/true); }, mesh_,
                     {P("x", "y")}, {P("x", "y")});
  std::vector<float> got = everywhere(f(g));
  const int64_t cols = Y * X * by;
  ASSERT_EQ(got.size(), static_cast<size_t>(X * cols));
  for (int64_t r = 0; r < X; ++r) {
    for (int64_t j = 0; j < Y; ++j) {
      for (int64_t s = 0; s < X; ++s) {
        for (int64_t c = 0; c < by; ++c) {
          EXPECT_EQ(got[static_cast<size_t>(r * cols + j * X * by + s * by + c)],
                    g_at(s * bx + r, j * by + c));
        }
      }
    }
  }
}

TEST_P(Collectives, PpermuteShiftAndPartial) {
  const int64_t X = c_.x, Y = c_.y, bx = 2, by = 3;
  Array g = global_operand(X * bx, Y * by, NamedSharding(mesh_, P("x", "y")));
  std::vector<std::pair<int, int>> shift;
  for (int i = 0; i < X; ++i) shift.emplace_back(i, static_cast<int>((i + 1) % X));
  for (const auto& perm : {shift, std::vector<std::pair<int, int>>{{0, 1}}}) {
    auto f = shard_map([perm](const Array& b) { return ppermute(b, "x", perm); }, mesh_,
                       {P("x", "y")}, {P("x", "y")});
    std::vector<float> got = everywhere(f(g));
    for (int64_t i = 0; i < X; ++i) {
      int src = -1;
      for (const auto& [s, d] : perm) {
        if (d == i) src = s;
      }
      for (int64_t a = 0; a < bx; ++a) {
        for (int64_t col = 0; col < Y * by; ++col) {
          const float want = src < 0 ? 0.f : g_at(src * bx + a, col);
          EXPECT_EQ(got[static_cast<size_t>((i * bx + a) * Y * by + col)], want);
        }
      }
    }
  }
}

TEST_P(Collectives, AxisIndexAndBarrierLikeSum) {
  auto f = shard_map(
      [](const Array& b) { return reshape(astype(axis_index("x"), DType::F32), {1}) + b; }, mesh_,
      {P("x")}, {P("x")});
  Array z = zeros({c_.x}, DType::F32, NamedSharding(mesh_, P("x")));
  std::vector<float> got = everywhere(f(z));
  for (int64_t i = 0; i < c_.x; ++i) EXPECT_EQ(got[static_cast<size_t>(i)], static_cast<float>(i));
}

// jit with propagation: a matmul whose contraction is split over processes (an all_reduce the
// partitioner inserts) and a reshard to another layout.
TEST_P(Collectives, JitMatmulAndReshard) {
  const int64_t X = c_.x, Y = c_.y;
  Array a = global_operand(4, X * Y, NamedSharding(mesh_, P(None, Axes{"x", "y"})));
  Array b = global_operand(X * Y, 2, NamedSharding(mesh_, P(Axes{"x", "y"}, None)));
  Array c = jit([](const Array& p, const Array& q) { return matmul(p, q); })(a, b);
  std::vector<float> got = everywhere(c);
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 2; ++j) {
      double want = 0;
      for (int64_t k = 0; k < X * Y; ++k) want += double(g_at(i, k)) * g_at(k, j);
      EXPECT_NEAR(got[static_cast<size_t>(i * 2 + j)], want, 1e-3 * std::abs(want));
    }
  }
  Array g = global_operand(8, 8, NamedSharding(mesh_, P("x", "y")));
  Array moved = device_put(g, NamedSharding(mesh_, P("y", "x")));
  EXPECT_EQ(everywhere(moved), everywhere(g));
  Array repl = device_put(g, NamedSharding(mesh_, P()));
  std::vector<float> direct = repl.to_vector<float>();  // replicated: readable everywhere
  for (int64_t r = 0; r < 8; ++r) {
    for (int64_t col = 0; col < 8; ++col)
      EXPECT_EQ(direct[static_cast<size_t>(r * 8 + col)], g_at(r, col));
  }
}

// Gradients through a program whose collectives cross processes, against the host.
TEST_P(Collectives, GradOfShardedLoss) {
  const int64_t X = c_.x, Y = c_.y;
  Array w = global_operand(X * 2, Y * 2, NamedSharding(mesh_, P("x", "y")));
  auto loss = [](const Array& p) { return sum(p * p * 0.5f); };
  Array gw = jit(grad(loss))(w);
  EXPECT_EQ(everywhere(gw), everywhere(w));
}

// Blocks of 512 KiB per device: the local part of every collective is split over the
// collective team (small blocks stay on one thread), with the remote part over MPI.
TEST_P(Collectives, LargeBlocksPsumGatherScatter) {
  const int64_t X = c_.x, Y = c_.y, bx = 4 * X, by = 4099;  // odd: pieces end off any block
  Array g = global_operand(X * bx, Y * by, NamedSharding(mesh_, P("x", "y")));
  auto fs =
      shard_map([](const Array& b) { return psum(b, "x"); }, mesh_, {P("x", "y")}, {P(None, "y")});
  std::vector<float> got = everywhere(fs(g));
  ASSERT_EQ(got.size(), static_cast<size_t>(bx * Y * by));
  int64_t wrong = 0;
  for (int64_t a = 0; a < bx; ++a) {
    for (int64_t col = 0; col < Y * by; ++col) {
      float want = 0;
      for (int64_t i = 0; i < X; ++i) want += g_at(i * bx + a, col);
      wrong += got[static_cast<size_t>(a * Y * by + col)] != want;
    }
  }
  EXPECT_EQ(wrong, 0) << "psum";
  auto fg = shard_map([](const Array& b) { return all_gather(b, "x", 0, /*tiled=*/true); }, mesh_,
                      {P("x", "y")}, {P(None, "y")});
  got = everywhere(fg(g));
  wrong = 0;
  for (int64_t r = 0; r < X * bx; ++r) {
    for (int64_t col = 0; col < Y * by; ++col) {
      wrong += got[static_cast<size_t>(r * Y * by + col)] != g_at(r, col);
    }
  }
  EXPECT_EQ(wrong, 0) << "all_gather";
  auto fr = shard_map([](const Array& b) { return psum_scatter(b, "x", 0, /*tiled=*/true); }, mesh_,
                      {P("x", "y")}, {P("x", "y")});
  got = everywhere(fr(g));
  ASSERT_EQ(got.size(), static_cast<size_t>(bx * Y * by));
  wrong = 0;
  const int64_t rows = bx / X;  // rows of the result per member
  for (int64_t r = 0; r < bx; ++r) {
    for (int64_t col = 0; col < Y * by; ++col) {
      float want = 0;
      for (int64_t i = 0; i < X; ++i) want += g_at(i * bx + r, col);
      wrong += got[static_cast<size_t>(r * Y * by + col)] != want;
    }
  }
  EXPECT_EQ(wrong, 0) << "psum_scatter, " << rows << " rows per member";
}

INSTANTIATE_TEST_SUITE_P(Meshes, Collectives, testing::Range(0, 4),
                         [](const testing::TestParamInfo<int>& i) {
                           return std::string(mesh_cases()[static_cast<size_t>(i.param)].name);
                         });

TEST(Processes, DevicesAreProcessMajor) {
  const int n = process_count();
  ASSERT_GT(n, 1);
  EXPECT_EQ(static_cast<int>(devices().size()), n * local_device_count());
  for (const Device& d : devices()) EXPECT_EQ(d.process_index, d.id / local_device_count());
  for (const Device& d : local_devices()) EXPECT_EQ(d.process_index, process_index());
  EXPECT_EQ(default_device().id, process_index() * local_device_count());
  EXPECT_TRUE(distributed::is_multi_process());
}

TEST(Processes, AddressabilityOfASpanningArray) {
  Mesh mesh = mesh_of(4, 2);
  Array g = global_operand(8, 4, NamedSharding(mesh, P("x", "y")));
  EXPECT_FALSE(g.is_fully_addressable());
  EXPECT_EQ(static_cast<int>(g.addressable_shards().size()), local_device_count());
  for (const Shard& s : g.addressable_shards()) {
    EXPECT_EQ(s.device.process_index, process_index());
    std::vector<float> v = s.data.to_vector<float>();
    EXPECT_EQ(v[0], g_at(s.index[0].start, s.index[1].start));
  }
  try {
    (void)g.to_vector<float>();
    ADD_FAILURE() << "reading a sharded array across processes must raise";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not fully addressable"), std::string::npos) << e.what();
  }
  // Replicated over every device: not fully addressable, but every block is here.
  Array r = device_put(g, NamedSharding(mesh, P()));
  EXPECT_FALSE(r.is_fully_addressable());
  EXPECT_EQ(r.to_vector<float>().size(), 32u);
  // Moving it to another mesh would go through the host: refused, naming device_put.
  Mesh other = mesh_of(2, 4);
  try {
    (void)device_put(g, NamedSharding(other, P("x", "y")));
    ADD_FAILURE() << "moving a spanning array between meshes must raise";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[device_put] cannot move"), std::string::npos)
        << e.what();
  }
  // A replicated one can: every process holds all of it.
  EXPECT_EQ(everywhere(device_put(r, NamedSharding(other, P("x", "y")))), r.to_vector<float>());
  // A host value is this process's own.
  Array h = from_vector<float>({1, 2, 3}, {3});
  EXPECT_TRUE(h.is_fully_addressable());
}

TEST(Processes, ProcessLocalDataBuildsTheGlobalBatch) {
  Mesh mesh = mesh_of(4, 2);
  const NamedSharding batch(mesh, P(Axes{"x", "y"}));  // rows split over all 8 devices
  const int64_t per_process = 16 / process_count();
  std::vector<float> mine;
  for (int64_t r = 0; r < per_process; ++r) {
    for (int64_t c = 0; c < 3; ++c) mine.push_back(g_at(process_index() * per_process + r, c));
  }
  Array global = make_array_from_process_local_data(batch, from_vector(mine, {per_process, 3}));
  EXPECT_EQ(global.shape(), (Shape{16, 3}));
  std::vector<float> all = everywhere(global);
  for (int64_t r = 0; r < 16; ++r) {
    for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(all[static_cast<size_t>(r * 3 + c)], g_at(r, c));
  }
  // The same with the global shape given, and a wrong local shape.
  Array again =
      make_array_from_process_local_data(batch, from_vector(mine, {per_process, 3}), Shape{16, 3});
  EXPECT_EQ(everywhere(again), all);
  EXPECT_THROW(
      make_array_from_process_local_data(batch, from_vector(mine, {per_process, 3}), Shape{32, 3}),
      Error);
}

TEST(Processes, DifferentProgramsAreNamed) {
  Mesh mesh = mesh_of(4, 2);
  Array g = global_operand(8, 4, NamedSharding(mesh, P("x", "y")));
  auto f = process_index() == 0
               ? std::function<Array(const Array&)>([](const Array& a) { return sum(a); })
               : std::function<Array(const Array&)>([](const Array& a) { return max(a); });
  try {
    (void)jit(f)(g);
    ADD_FAILURE() << "programs that differ between processes must raise";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("compiled different programs"), std::string::npos)
        << e.what();
  }
  // The job goes on: the next program is the same everywhere.
  EXPECT_EQ(process_allgather(jit([](const Array& a) { return sum(a); })(g)).item<float>(), [] {
    float s = 0;
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 4; ++c) s += g_at(r, c);
    return s;
  }());
}

// A device of the last process fails mid-program: every process raises, naming it, and the
// next program runs.
TEST(Processes, AFailureOnOneProcessReachesEveryProcess) {
  Mesh mesh = mesh_of(4, 2);
  Array g = global_operand(8, 4, NamedSharding(mesh, P("x", "y")));
  auto f = jit([](const Array& a) { return sum(exp(a * 0.001f)); }, {.name = "fails_remotely"});
  const int last = process_count() - 1;
  if (process_index() == last) {
    detail::fail_program_allocation("fails_remotely", {last * local_device_count()}, 1);
  }
  try {
    (void)f(g);
    ADD_FAILURE() << "the failure must reach process " << process_index();
  } catch (const Error& e) {
    const std::string m = e.what();
    if (process_index() != last) {
      EXPECT_NE(m.find("process " + std::to_string(last)), std::string::npos) << m;
    }
  }
  detail::fail_program_allocation("", {}, 0);
  EXPECT_EQ(everywhere(f(g)).size(), 1u);
}

// Devices of a group spanning processes that reach different collectives (a program given as
// text, where the trace-time check does not apply) raise on every process, naming the calls,
// instead of mixing their buffers; the next program runs.
TEST(Processes, DevicesInDifferentCollectivesRaise) {
  const std::string text =
      "program @f mesh<'x': 8> (%0: f32[16] P('x')) -> (%1) {\n"
      "  %1 = shard_map(%0) {check_vma=false, in_specs=[P('x')], mesh=mesh<'x': 8>, "
      "out_specs=[P()]} : f32[2] P() region {\n"
      "    program @body (%0: f32[2] vary('x')) -> (%4) {\n"
      "      %1 = reduce_sum(%0) {axes=[0]} : f32[] vary('x')\n"
      "      %2 = constant() {value=<f32[]: 0>} : f32[]\n"
      "      %3 = gt(%1, %2) : bool[] vary('x')\n"
      "      %4 = cond(%3, %0) : f32[2] vary('x') region {\n"
      "        program @cond_true (%0: f32[2] vary('x')) -> (%1) {\n"
      "          %1 = all_reduce(%0) {axes=['x'], group=8, kind=\"sum\"} : f32[2]\n"
      "        }\n"
      "      } region {\n"
      "        program @cond_false (%0: f32[2] vary('x')) -> (%2) {\n"
      "          %1 = all_gather(%0) {axes=['x'], axis=0, group=8, tiled=false} : f32[8,2]\n"
      "          %2 = reduce_sum(%1) {axes=[0]} : f32[2]\n"
      "        }\n"
      "      }\n"
      "    }\n"
      "  }\n"
      "}\n";
  ir::Program p = ir::parse_program(text);
  spmd::CompileOptions options;
  for (int v : p.params) options.in_shardings.push_back(p.info(v).sharding);
  auto exe = spmd::compile(p, options)->executable;
  // Block d sums above zero (psum) where d is even and below (all_gather) where it is odd: the
  // members of the group inside each process disagree.
  auto input = [&](bool mixed) {
    const NamedSharding s(Mesh({8}, {"x"}), P("x"));
    return make_array_from_callback({16}, s, [&](const std::vector<Slice>& idx) {
      std::vector<float> v;
      for (int64_t i = idx[0].start; i < idx[0].stop; ++i) {
        const int64_t d = i / 2;
        v.push_back(static_cast<float>(mixed && d % 2 == 1 ? -(i + 1) : i + 1));
      }
      return from_vector(v, {idx[0].size()});
    });
  };
  try {
    (void)exe->run({input(true)});
    ADD_FAILURE() << "devices in different collectives must raise on process " << process_index();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("entered different collectives"), std::string::npos)
        << e.what();
  }
  // Every device on the psum branch: each holds the sum of the blocks.
  Array ok = exe->run({input(false)})[0];
  float even = 0, odd = 0;
  for (int i = 0; i < 16; ++i) (i % 2 == 0 ? even : odd) += static_cast<float>(i + 1);
  EXPECT_EQ(everywhere(ok), (std::vector<float>{even, odd}));
}

}  // namespace
}  // namespace partix

int main(int argc, char** argv) {
  try {
    partix::distributed::initialize();
  } catch (const partix::Error& e) {  // e.g. processes with different device counts
    std::fprintf(stderr, "%s\n", e.what());
    partix::distributed::notify_failure(e.what());
    return 1;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

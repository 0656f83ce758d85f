// The per-device runtime: replicated execution over a mesh, buffer lifetimes, donation, and
// errors inside device workers.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <thread>

#include "core/memory.h"
#include "partix/control.h"
#include "partix/profiler.h"
#include "runtime/interpreter.h"
#include "test_util.h"

using namespace partix;

TEST(Runtime, ReplicatedProgramRunsOnEveryDeviceOfTheMesh) {
  Mesh mesh({4, 2}, {"x", "y"});
  NamedSharding rep(mesh, P());
  Array a = device_put(from_vector<float>({1, 2, 3, 4}, {2, 2}), rep);
  Array b = device_put(from_vector<float>({1, 0, 0, 1}, {2, 2}), rep);
  auto f = jit([](const Array& x, const Array& y) { return matmul(x, y) * 2.0 + sum(x); });
  Array r = f(a, b);
  EXPECT_EQ(r.sharding(), rep);
  auto shards = r.addressable_shards();
  ASSERT_EQ(shards.size(), 8u);
  for (const Shard& s : shards) {
    EXPECT_EQ(s.data.to_vector<float>(), (std::vector<float>{12, 14, 16, 18})) << s.device.id;
  }
  // Eager ops on replicated arrays also run on every device of their mesh.
  Array e = a + b;
  EXPECT_EQ(e.sharding(), rep);
  EXPECT_EQ(e.addressable_shards()[5].data.to_vector<float>(), (std::vector<float>{2, 2, 3, 5}));
}

TEST(Runtime, UncommittedArraysFollowCommittedOnes) {
  Mesh mesh({2}, {"x"}, {Device{3}, Device{6}});
  Array a = device_put(ones({3}), NamedSharding(mesh, P()));
  Array b = from_vector<float>({1, 2, 3}, {3});  // uncommitted, on device 0
  Array c = a + b;
  EXPECT_EQ(c.sharding().mesh().device_ids(), (std::vector<int>{3, 6}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{2, 3, 4}));
  Array d = device_put(ones({3}), Device{1});
  EXPECT_PARTIX_ERROR(a + d, "[add]", "different meshes");
}

TEST(Runtime, BuffersAreFreedAfterTheirLastUse) {
  // A chain of elementwise ops on a 4 MiB array: intermediates die (or are reused in place)
  // as soon as they are consumed, so the peak stays near input + one temporary.
  const int64_t n = 1 << 20;
  Array x = device_put(zeros({n}), Device{2});
  auto f = jit([](const Array& v) {
    Array y = v;
    for (int i = 0; i < 10; ++i) y = exp(y) * 0.5 + 1.0;
    return y;
  });
  f(x);  // compile and warm
  reset_peak_memory_stats();
  int64_t before = memory_stats(2).bytes_in_use;
  Array r = f(x);
  int64_t peak = memory_stats(2).peak_bytes_in_use - before;
  EXPECT_LE(peak, 2 * n * 4 + 4096) << "peak temporary bytes " << peak;
  EXPECT_EQ(memory_stats(2).bytes_in_use - before, n * 4);  // only the result remains
  auto m = f.lower(x).memory_analysis();
  EXPECT_EQ(m.argument_bytes[0], n * 4);
  EXPECT_EQ(m.output_bytes[0], n * 4);
  EXPECT_LE(m.peak_temp_bytes[0], n * 4);
}

TEST(Runtime, DonatedArgumentsAreReusedAndGone) {
  const int64_t n = 1 << 18;
  auto f = jit([](const Array& v) { return v * 2.0 + 1.0; }, {.donate_argnums = {0}});
  Array x = device_put(ones({n}), Device{1});
  f(x);  // compile
  Array y = device_put(ones({n}), Device{1});
  reset_peak_memory_stats();
  int64_t before = memory_stats(1).bytes_in_use;
  Array r = f(y);
  // The result took over the donated buffer: no new allocation of n floats remained.
  EXPECT_EQ(memory_stats(1).bytes_in_use, before);
  EXPECT_EQ(r.to_vector<float>()[7], 3.0f);
  EXPECT_PARTIX_ERROR(f(y), "[jit]", "donated");
  EXPECT_PARTIX_ERROR(y + 1.0, "donated");
  // Reading a donated array is an error, never the data that now belongs to the output.
  EXPECT_PARTIX_ERROR(y.to_vector<float>(), "donated", "f32[262144]");
  EXPECT_PARTIX_ERROR(y.addressable_shards(), "[Array.addressable_shards]", "donated");
  EXPECT_PARTIX_ERROR(y.to_string(), "donated");
  EXPECT_PARTIX_ERROR(device_put(y, Device{0}), "[device_put]", "donated");
  // Sharded and zero-size arrays alike.
  Mesh mesh({4}, {"x"});
  auto g = jit([](const Array& v) { return v + 1.0f; }, {.donate_argnums = {0}});
  Array s = device_put(ones({8, 4}), NamedSharding(mesh, P("x")));
  Array e = device_put(ones({0, 4}), NamedSharding(mesh, P("x")));
  g(s);
  g(e);
  EXPECT_PARTIX_ERROR(s.to_vector<float>(), "donated");
  EXPECT_PARTIX_ERROR(e.to_vector<float>(), "donated", "f32[0,4]");
  EXPECT_PARTIX_ERROR(g(e), "donated");
}

// As JAX: a donated argument that no result can take over (no result of its per-device size)
// is not given up; one result takes one donated buffer.
TEST(Runtime, UnusableDonationsKeepTheArgument) {
  auto outer = jit([](const Array& v) { return matmul(v, transpose(v, {1, 0})); },
                   {.donate_argnums = {0}});
  Array x = device_put(ones({8, 2}), Device{0});
  Array r = outer(x);  // an (8, 8) result: the (8, 2) buffer is of no use to it
  EXPECT_EQ(r.to_vector<float>()[0], 2.0f);
  EXPECT_EQ(x.to_vector<float>()[3], 1.0f);  // still the caller's
  auto both = jit([](const Array& a, const Array& b) { return a + b; },
                  {.donate_argnums = {0, 1}});
  Array a = device_put(ones({16}), Device{0}), b = device_put(ones({16}), Device{0});
  both(a, b);
  EXPECT_PARTIX_ERROR(a.to_vector<float>(), "donated");  // the one result took a's buffer
  EXPECT_EQ(b.to_vector<float>()[0], 1.0f);
}

TEST(Runtime, ErrorsInsideDeviceWorkersSurfaceAsPartixError) {
  Mesh mesh({4}, {"x"});
  Array a = device_put(ones({2}), NamedSharding(mesh, P()));
  // A 4 TiB intermediate cannot be allocated: the program is refused before it runs, naming
  // its plan (device workers failing mid-run are tested in isolation_test.cpp).
  auto f = jit([](const Array& v) { return sum(broadcast_to(v, {int64_t{1} << 19, int64_t{1} << 20, 2})); });
  EXPECT_PARTIX_ERROR(f(a), "out of host memory", "4096.00 GiB per device", "memory_analysis()");
  // The pool still works afterwards.
  EXPECT_EQ((a + 1.0).to_vector<float>(), (std::vector<float>{2, 2}));
}

TEST(Runtime, HostMemoryChecksReadTheLimitsAgainOnlyForLargeOrLateRequests) {
  const int64_t avail = detail::available_host_bytes();
  if (avail == std::numeric_limits<int64_t>::max() || avail < (int64_t{1} << 30)) {
    GTEST_SKIP() << "needs a host whose limits are known and at least 1 GiB free";
  }
  // Far below the last reading (under a quarter of it), and soon after it: answered from it.
  // A program's run checks its buffers this way every time (each token of a decode).
  const int64_t first = detail::host_limit_readings();
  for (int i = 0; i < 100; ++i) {
    detail::check_host_memory("test", "a buffer", detail::kCheckedAllocationBytes);
  }
  EXPECT_LE(detail::host_limit_readings() - first, 1);  // one, if 200 ms passed meanwhile
  // The check gives back what it compared against (a pool miss uses it to decide whether to
  // trim its cache, without reading again); below the checked size it checks nothing.
  EXPECT_GE(detail::check_host_memory("test", "a buffer", detail::kCheckedAllocationBytes),
            detail::kCheckedAllocationBytes);
  EXPECT_EQ(detail::check_host_memory("test", "a small buffer", 64),
            std::numeric_limits<int64_t>::max());
  // More than a quarter of it: read every time, and a request past the host is refused.
  const int64_t mid = detail::host_limit_readings();
  for (int i = 0; i < 3; ++i) (void)detail::available_host_bytes_for(avail / 2);
  EXPECT_EQ(detail::host_limit_readings() - mid, 3);
  EXPECT_PARTIX_ERROR(detail::check_host_memory("test", "a huge buffer", avail * 4),
                      "[test] out of host memory", "a huge buffer");
  // A reading older than 200 ms is not used.
  (void)detail::available_host_bytes();
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  const int64_t late = detail::host_limit_readings();
  (void)detail::available_host_bytes_for(detail::kCheckedAllocationBytes);
  EXPECT_EQ(detail::host_limit_readings() - late, 1);
}

TEST(Runtime, ReferenceAndFastKernelsAgreeOnAProgram) {
  Array x = random::normal(random::key(0), {64, 32});
  Array w = random::normal(random::key(1), {32, 16});
  auto f = jit([](const Array& a, const Array& b) { return softmax(gelu(matmul(a, b)), -1); });
  std::vector<float> fast = f(x, w).to_vector<float>();
  runtime::set_kernel_mode(runtime::KernelMode::kReference);
  std::vector<float> ref = f(x, w).to_vector<float>();
  runtime::set_kernel_mode(runtime::KernelMode::kFast);
  ASSERT_EQ(fast.size(), ref.size());
  for (size_t i = 0; i < fast.size(); ++i) EXPECT_NEAR(fast[i], ref[i], 1e-5) << i;
}

namespace {
// Sets the per-device memory limit for one test, and lifts it at the end.
struct MemoryLimitScope {
  explicit MemoryLimitScope(int64_t bytes) { detail::set_device_memory_limit(bytes); }
  ~MemoryLimitScope() { detail::set_device_memory_limit(0); }
  MemoryLimitScope(const MemoryLimitScope&) = delete;
  MemoryLimitScope& operator=(const MemoryLimitScope&) = delete;
};
}  // namespace

TEST(Runtime, DeviceMemoryLimitRefusesAProgramBeforeItRunsAndCountsAllocations) {
  Mesh mesh({4}, {"x"});
  Array a = device_put(ones({1024, 256}), NamedSharding(mesh, P("x")));  // 256 KiB per device
  MemoryLimitScope limit(1 << 20);
  EXPECT_EQ(memory_stats(0).bytes_limit, 1 << 20);
  // [1024, 256] -> 4x bigger intermediates: 1 MiB+ per device beyond the arguments.
  auto big = jit([](const Array& v) { return sum(concatenate({v, v, v, v, v}, 1), {1}); });
  EXPECT_PARTIX_ERROR(big(a), "[jit] out of memory on device 0", "limit 1.0 MiB per device",
                      "memory_analysis()");
  // A direct allocation past the limit is refused too, naming the device and the sizes.
  EXPECT_PARTIX_ERROR(device_put(ones({2048, 1024}), NamedSharding(mesh, P("x"))),
                      "out of memory on device", "limit 1.0 MiB per device");
  // What fits still runs.
  EXPECT_EQ(jit([](const Array& v) { return v * 2.0f; })(a).to_vector<float>(),
            std::vector<float>(1024 * 256, 2.0f));
}

TEST(Runtime, DeviceMemoryCheckCountsDonatedArgumentsAsReusable) {
  Mesh mesh({4}, {"x"});
  Array a = device_put(ones({1024, 600}), NamedSharding(mesh, P("x")));  // 600 KiB per device
  MemoryLimitScope limit(1 << 20);
  auto twice = [](const Array& v) { return v * 2.0f; };
  // Kept, the argument and a result of its size need 1.2 MiB: refused before it runs.
  EXPECT_PARTIX_ERROR(jit(twice)(a), "[jit] out of memory on device 0", "needs up to 600.0 KiB");
  // Donated, the result is written over the argument: it fits, and runs.
  reset_peak_memory_stats();
  Array b = jit(twice, {.donate_argnums = {0}})(a);
  EXPECT_EQ(b.to_vector<float>()[12345], 2.0f);
  EXPECT_LE(memory_stats(0).peak_bytes_in_use, 1 << 20);
}

TEST(Runtime, CancelScopeStopsProgramsAndOtherThreadsRunOn) {
  Mesh mesh({4, 2}, {"x", "y"});
  NamedSharding s(mesh, P("x", "y"));
  Array a = device_put(ones({8, 8}), s);
  auto f = jit([](const Array& x) { return matmul(x, x) + 1.0; });
  std::atomic<bool> flag{true};
  {
    detail::CancelScope scope(&flag);
    EXPECT_THROW(f(a), Cancelled);  // stops before its first instruction, collectives included
    // A program of another thread is not this scope's.
    std::thread other(
        [&] { EXPECT_EQ(f(a).addressable_shards()[0].data.to_vector<float>()[0], 9); });
    other.join();
    flag = false;
    EXPECT_EQ(f(a).addressable_shards()[3].data.to_vector<float>()[0], 9);
  }
  EXPECT_EQ(detail::cancel_flag(), nullptr);
  // The input survived the cancelled run; one device (run on the calling thread) too.
  EXPECT_EQ(a.addressable_shards()[7].data.to_vector<float>()[0], 1);
  Array one = device_put(ones({4}), Device{2});
  flag = true;
  detail::CancelScope scope(&flag);
  EXPECT_THROW((one * 2.0), Cancelled);
}

TEST(Runtime, ProgramsOnDisjointDevicesRunFromTwoThreads) {
  // Device sets 0-3 and 4-7, each program with collectives, from two threads many times: no
  // deadlock and the right values (programs on overlapping devices queue behind each other).
  Mesh m1({4}, {"x"}, {Device{0}, Device{1}, Device{2}, Device{3}});
  Mesh m2({4}, {"x"}, {Device{4}, Device{5}, Device{6}, Device{7}});
  Mesh all({8}, {"x"});
  auto f = jit([](const Array& x) { return sum(x); });
  auto work = [&](const Mesh& m, float v) {
    Array x = device_put(full({8}, v), NamedSharding(m, P("x")));
    for (int i = 0; i < 50; ++i) EXPECT_EQ(f(x).item<float>(), 8 * v);
  };
  std::thread t1([&] { work(m1, 1); }), t2([&] { work(m2, 2); }), t3([&] { work(all, 3); });
  t1.join();
  t2.join();
  t3.join();
}

// A contraction over a dimension split unevenly (17 rows over 8 devices, blocks of 3): devices
// 0-4 hold no padding, device 5 one padded row, devices 6-7 only padding. The operands' padding
// is masked to zero first (log makes it -inf on x here); a weight's mask copies nothing on
// devices without padding (it shares the weight's buffer) and allocates nothing new on devices
// of padding only (they share one block of zeros).
TEST(Runtime, UnevenContractionsMaskPaddingWithoutCopyingWeights) {
  Mesh mesh({8}, {"x"});
  const int64_t rows = 17, cols = 1 << 14;
  std::vector<float> xv(rows), wv(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = 1.0f + 0.25f * static_cast<float>(i);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = static_cast<float>((i * 7) % 13) - 6.0f;
  Array x = device_put(from_vector<float>(xv, {rows}), NamedSharding(mesh, P("x")));
  Array w = device_put(from_vector<float>(wv, {rows, cols}), NamedSharding(mesh, P("x")));
  auto f = jit([](const Array& a, const Array& b) { return dot_general(log(a), b, {0}, {0}); });
  std::vector<float> want(static_cast<size_t>(cols), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      want[static_cast<size_t>(c)] += std::log(xv[static_cast<size_t>(r)]) * wv[static_cast<size_t>(r * cols + c)];
    }
  }
  auto check = [&](const Array& r) {
    std::vector<float> got = r.to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t c = 0; c < got.size(); c += 97) EXPECT_NEAR(got[c], want[c], 1e-3) << c;
  };
  EXPECT_NE(f.lower(x, w).as_text().find("pad_mask"), std::string::npos);
  check(f(x, w));  // compiles
  const int64_t block = 3 * cols * 4;  // one device's block of w
  reset_peak_memory_stats();
  std::vector<int64_t> before;
  for (int d = 0; d < 8; ++d) before.push_back(memory_stats(d).bytes_in_use);
  Array r = f(x, w);
  check(r);
  for (int d : {0, 4}) {  // no padding: nothing near a block's size is allocated
    EXPECT_LT(memory_stats(d).peak_bytes_in_use - before[static_cast<size_t>(d)], block) << d;
  }
  runtime::set_kernel_mode(runtime::KernelMode::kReference);
  check(f(x, w));
  runtime::set_kernel_mode(runtime::KernelMode::kFast);
}

// A product whose operand is split unevenly so that some devices hold only padding: 3 columns
// (a model's 3 key/value heads) over 8 devices leaves devices 3-7 with blocks of padding only.
// Their dot_general result is a shared block of zeros instead of a product (its values are
// padding); the gathered result is the unsplit product, with fast and reference kernels, for a
// free, a batch and a contracting dimension split that way.
TEST(Runtime, ProductsOfAllPaddingBlocksAreSkippedAndResultsExact) {
  Mesh mesh({8}, {"x"});
  const int64_t k = 64;
  Array x = random::normal(random::key(3), {5, k});
  Array w = random::normal(random::key(4), {k, 3});
  Array xb = random::normal(random::key(5), {3, 5, k});
  Array wb = random::normal(random::key(6), {3, k, 2});
  Array xc = random::normal(random::key(7), {5, 3});
  Array wc = random::normal(random::key(8), {3, 4});
  auto free_split = jit([](const Array& a, const Array& b) { return matmul(a, b); });
  auto batch_split = jit([](const Array& a, const Array& b) { return einsum("bmk,bkn->bmn", {a, b}); });
  auto contract_split = jit([](const Array& a, const Array& b) { return matmul(a, b); });
  const Array wf = device_put(w, NamedSharding(mesh, P(None, "x")));
  const Array xbs = device_put(xb, NamedSharding(mesh, P("x")));
  const Array wbs = device_put(wb, NamedSharding(mesh, P("x")));
  const Array xcs = device_put(xc, NamedSharding(mesh, P(None, "x")));
  const Array wcs = device_put(wc, NamedSharding(mesh, P("x")));
  EXPECT_NE(free_split.lower(x, wf).as_text().find("uneven="), std::string::npos);
  auto close = [](const Array& got, const Array& want) {
    std::vector<float> g = got.to_vector<float>(), e = want.to_vector<float>();
    ASSERT_EQ(g.size(), e.size());
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-4) << i;
  };
  for (auto mode : {runtime::KernelMode::kFast, runtime::KernelMode::kReference}) {
    runtime::set_kernel_mode(mode);
    close(free_split(x, wf), matmul(x, w));
    close(batch_split(xbs, wbs), einsum("bmk,bkn->bmn", {xb, wb}));
    close(contract_split(xcs, wcs), matmul(xc, wc));
  }
  runtime::set_kernel_mode(runtime::KernelMode::kFast);
}

// A kernel's prepare function runs once per instruction, when the program is planned, and what
// it made reaches every run of that instruction on every device.
TEST(Runtime, KernelsPrepareOncePerInstructionAndEveryRunGetsWhatWasPrepared) {
  Mesh mesh({8}, {"x"});
  const Array host = random::normal(random::key(11), {16, 32});
  Array a = device_put(host, NamedSharding(mesh, P("x")));
  Array b = random::normal(random::key(12), {32, 32});
  auto f = jit([](const Array& x, const Array& w) { return matmul(tanh(matmul(x, w)), w); });
  // One device, before the counting starts.
  const std::vector<float> want = matmul(tanh(matmul(host, b)), b).to_vector<float>();

  const prim::KernelPrepareFn* found = prim::find_kernel_prepare("dot_general", "cpu");
  ASSERT_NE(found, nullptr);
  const prim::KernelPrepareFn prepare = *found;
  const prim::KernelFn kernel = *prim::find_kernel("dot_general", "cpu");
  static std::atomic<int> prepared{0}, runs{0}, unprepared{0};
  prepared = runs = unprepared = 0;
  struct Restore {
    prim::KernelPrepareFn prepare;
    prim::KernelFn kernel;
    ~Restore() {
      prim::register_kernel_prepare("dot_general", "cpu", prepare);
      prim::register_kernel("dot_general", "cpu", kernel);
    }
  } restore{prepare, kernel};
  prim::register_kernel_prepare(
      "dot_general", "cpu",
      [prepare](const ir::Attrs& at, const std::vector<const ir::Aval*>& in,
                const std::vector<const ir::Aval*>& out) {
        ++prepared;
        return prepare(at, in, out);
      });
  prim::register_kernel("dot_general", "cpu", [kernel](const prim::KernelCall& c) {
    ++runs;
    if (!c.prepared) ++unprepared;
    return kernel(c);
  });

  std::vector<float> got = f(a, b).to_vector<float>();
  const int after_first = prepared.load();
  EXPECT_GE(after_first, 2);  // both products, planned once for all 8 devices
  EXPECT_LE(after_first, 4);  // (and at most once more by a memory analysis)
  for (int i = 0; i < 2; ++i) got = f(a, b).to_vector<float>();
  EXPECT_EQ(prepared.load(), after_first);  // runs do not plan again
  EXPECT_EQ(runs.load(), 3 * 2 * 8);
  EXPECT_EQ(unprepared.load(), 0);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
}

// Each thread keeps the small blocks it frees; when it ends they go back to the shared pool,
// where another thread takes them, and the device's counters see each buffer once.
TEST(Runtime, BlocksFreedOnAThreadThatEndedAreTakenFromTheSharedPool) {
  const int64_t n = 777 * 64;  // a size no other buffer of this test has
  const int64_t in_use = memory_stats(0).bytes_in_use;
  void* freed = nullptr;
  std::thread([&] {
    detail::Buffer b = detail::Buffer::allocate(0, n);
    freed = b.data();
    EXPECT_EQ(memory_stats(0).bytes_in_use, in_use + n);
    b = detail::Buffer();
    detail::Buffer again = detail::Buffer::allocate(0, n);  // from this thread's own cache
    EXPECT_EQ(again.data(), freed);
  }).join();
  EXPECT_EQ(memory_stats(0).bytes_in_use, in_use);
  detail::Buffer taken = detail::Buffer::allocate(0, n);
  EXPECT_EQ(taken.data(), freed);
  EXPECT_EQ(memory_stats(0).bytes_in_use, in_use + n);
}

// Buffer handles (their shared_ptr control blocks) come from a free list of the calling thread.
// Handles made on one thread and dropped on another join the second thread's list and are
// reused there for buffers, views and aliases; every buffer keeps its own bytes, and the
// device's counters see each buffer, view and alias once.
TEST(Runtime, BufferHandlesDroppedOnAnotherThreadAreReusedThere) {
  const int64_t n = 96;
  const int64_t in_use = memory_stats(1).bytes_in_use;
  std::vector<detail::Buffer> made;
  std::thread([&] {
    for (int i = 0; i < 300; ++i) {
      made.push_back(detail::Buffer::allocate(1, n));
      std::memset(made.back().data(), i & 0x7f, static_cast<size_t>(n));
    }
  }).join();
  EXPECT_EQ(memory_stats(1).bytes_in_use, in_use + 300 * n);
  std::thread([&] {
    made.clear();  // the handles go to this thread's list
    EXPECT_EQ(memory_stats(1).bytes_in_use, in_use);
    std::vector<detail::Buffer> again, views;
    for (int i = 0; i < 300; ++i) {
      again.push_back(detail::Buffer::allocate(1, n));
      std::memset(again.back().data(), (i + 1) & 0x7f, static_cast<size_t>(n));
    }
    for (int i = 0; i < 300; i += 3) {
      views.push_back(again[static_cast<size_t>(i)].view(0, 64));
      views.push_back(again[static_cast<size_t>(i)].alias_for(2));
    }
    EXPECT_EQ(memory_stats(1).bytes_in_use, in_use + 300 * n + 100 * 64);
    for (int i = 0; i < 300; ++i) {
      const auto* p = again[static_cast<size_t>(i)].as<unsigned char>();
      for (int64_t k = 0; k < n; ++k) ASSERT_EQ(p[k], (i + 1) & 0x7f) << i;
      EXPECT_EQ(again[static_cast<size_t>(i)].nbytes(), n);
    }
    for (size_t v = 0; v < views.size(); v += 2) {
      EXPECT_EQ(views[v].nbytes(), 64);
      EXPECT_EQ(views[v].data(), again[v / 2 * 3].data());
      EXPECT_EQ(views[v + 1].device(), 2);
      EXPECT_FALSE(again[v / 2 * 3].unique());  // a view or alias shares it
    }
    views.clear();
    EXPECT_TRUE(again[0].unique());
    again.clear();
    EXPECT_EQ(memory_stats(1).bytes_in_use, in_use);
  }).join();
}

// Small blocks freed on a thread stay in that thread's cache, counted by the pool (the
// host-memory checks count them as available) while the thread lives, after it ends (they move
// to the shared cache), and until another thread takes them again.
TEST(Runtime, PoolCountsTheBlocksEveryThreadKeeps) {
  constexpr int64_t kBlock = 37 * 64, kCount = 10;
  std::atomic<int> stage{0};
  auto wait_for = [&](int k) {
    while (stage.load() != k) std::this_thread::yield();
  };
  int64_t held = 0;  // the pool's count while the keeper holds its buffers
  std::thread keeper([&] {
    std::vector<detail::Buffer> made;
    for (int64_t i = 0; i < kCount; ++i) made.push_back(detail::Buffer::allocate(1, kBlock));
    stage.store(1);
    wait_for(2);
    made.clear();  // into this thread's cache
    stage.store(3);
    wait_for(4);
  });
  wait_for(1);
  held = detail::pool_cached_bytes();
  stage.store(2);
  wait_for(3);
  EXPECT_EQ(detail::pool_cached_bytes(), held + kCount * kBlock);  // read from another thread
  stage.store(4);
  keeper.join();
  EXPECT_EQ(detail::pool_cached_bytes(), held + kCount * kBlock);  // now in the shared cache
  std::thread([&] {
    std::vector<detail::Buffer> again;
    for (int64_t i = 0; i < kCount; ++i) again.push_back(detail::Buffer::allocate(1, kBlock));
    EXPECT_EQ(detail::pool_cached_bytes(), held);  // taken back out of the shared cache
  }).join();
  EXPECT_EQ(detail::pool_cached_bytes(), held + kCount * kBlock);
  detail::release_pool_cache();
  EXPECT_LE(detail::pool_cached_bytes(), held);
}

// A view (reshape, pvary, stop_gradient, ...) of a value that stays live holds the same buffer:
// nothing is copied or counted twice, in the run and in the plan; and while both live, neither
// is written in place (the view still reads the values it was made from).
TEST(Runtime, ViewsOfLiveValuesShareTheirBufferAndAreNeverWrittenThrough) {
  const int64_t n = 1 << 18;
  const Array host = random::normal(random::key(21), {512, 512});
  Array x = device_put(host, Device{3});
  // A view of an argument: the result is exp of the argument's bytes, one buffer of n floats.
  auto of_argument = jit([](const Array& v) { return exp(reshape(v, {n})); });
  // A view of a temporary that stays live while the temporary dies in an elementwise op that
  // could have reused its buffer.
  auto of_temporary = jit([](const Array& v) {
    Array a = exp(v);
    Array flat = reshape(a, {n});
    Array doubled = a * 2.0;  // a dies here, but flat still holds its buffer
    return std::make_pair(doubled, flat);
  });
  for (int round = 0; round < 2; ++round) {  // the first compiles
    reset_peak_memory_stats();
    const int64_t before = memory_stats(3).bytes_in_use;
    Array r = of_argument(x);
    EXPECT_EQ(memory_stats(3).peak_bytes_in_use - before, n * 4);  // the result only
    auto [doubled, flat] = of_temporary(x);
    const std::vector<float> e = exp(host).to_vector<float>(), d = doubled.to_vector<float>(),
                             f = flat.to_vector<float>();
    ASSERT_EQ(f.size(), e.size());
    for (size_t i = 0; i < e.size(); i += 4099) {
      EXPECT_FLOAT_EQ(f[i], e[i]) << i;  // not doubled in place under the view
      EXPECT_FLOAT_EQ(d[i], 2 * e[i]) << i;
    }
  }
  // The argument and the result, no copy between (the plan counts the argument too).
  EXPECT_EQ(of_argument.lower(x).memory_analysis().peak_bytes[0], 2 * n * 4);
  // exp(v) and its view: one buffer; the doubled result: another.
  reset_peak_memory_stats();
  const int64_t before = memory_stats(3).bytes_in_use;
  { auto r = of_temporary(x); }
  const int64_t measured = memory_stats(3).peak_bytes_in_use - before;
  EXPECT_GE(measured, 2 * n * 4);
  EXPECT_LE(measured, 2 * n * 4 + 64);  // and the scalar 2.0
  const MemoryAnalysis m = of_temporary.lower(x).memory_analysis();
  EXPECT_EQ(m.peak_bytes[0] - m.argument_bytes[0], measured);
}

TEST(Runtime, LoopCarriesHandedOverStayOneBufferMeasuredAndPlanned) {
  // A donated 4 MiB cache carried through a loop that writes one row per run (a KV cache
  // through a scanned model): updated in place, it is never live twice, and the plan says so.
  const int64_t rows = 1024, row = 1024;
  for (bool scanned : {false, true}) {
    SCOPED_TRACE(scanned ? "scan" : "fori_loop");
    auto f = jit(
        [&](const Array& cache) {
          Array zero = astype(zeros({}), DType::I32);
          auto write = [&](const Array& i, const Array& c) {
            return dynamic_update_slice(c, astype(full({1, row}, 1.0), DType::F32) * astype(i, DType::F32),
                                        {i, zero});
          };
          if (!scanned) return fori_loop(0, 8, write, cache);
          return scan([&](const Array& c, const Array& i) { return std::pair{write(i, c), std::vector<Array>{}}; },
                      cache, arange(8, DType::I32))
              .first;
        },
        {.donate_argnums = {0}});
    auto fresh = [&] { return device_put(zeros({rows, row}), Device{4}); };
    f(fresh());  // compiles
    Array x = fresh();
    reset_peak_memory_stats();
    const int64_t before = memory_stats(4).bytes_in_use;
    const MemoryAnalysis m = f.lower(x).memory_analysis();
    Array r = f(x);
    const int64_t measured = memory_stats(4).peak_bytes_in_use - before;
    EXPECT_LT(measured, rows * row * 4 / 8) << "the cache was copied";
    EXPECT_EQ(m.peak_bytes[0] - m.argument_bytes[0], measured);
    const std::vector<float> v = r.to_vector<float>();
    EXPECT_EQ(v[static_cast<size_t>(3 * row + 5)], 3.0f);
    EXPECT_EQ(v[static_cast<size_t>(9 * row)], 0.0f);
  }
}

// A value whose block on a device lies wholly in padding is not computed there (nothing
// observable reads it: the partitioner masks padding before every contraction and reduction).
// 3 rows over 8 devices: devices 3-7 run no elementwise kernel, and every result, reductions
// and contractions over the padded rows included, is the one device's.
TEST(Runtime, ValuesThatAreAllPaddingOnADeviceAreNotComputedThere) {
  Mesh mesh({8}, {"x"});
  const Array host = random::normal(random::key(21), {3, 64});
  const Array x = device_put(host, NamedSharding(mesh, P("x")));
  auto f = jit([](const Array& a) {
    Array y = tanh(a) * 2.0 + 1.0;
    Array e = exp(y);
    return std::make_tuple(y, sum(e, {0}), max(e, {0}), matmul(transpose(y), y));
  });
  const auto [y1, s1, m1, g1] = f(host);  // one device
  f(x);                                   // compiled outside the recording
  profiler::start();
  const auto [y8, s8, m8, g8] = f(x);
  profiler::stop();
  std::set<int> tanh_devices;
  for (const auto& s : profiler::spans()) {
    if (s.name.find("tanh") != std::string::npos) tanh_devices.insert(s.device);
  }
  EXPECT_EQ(tanh_devices, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(y8.sharding(), NamedSharding(mesh, P("x")));
  auto close = [](const Array& got, const Array& want) {
    std::vector<float> g = got.to_vector<float>(), e = want.to_vector<float>();
    ASSERT_EQ(g.size(), e.size());
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-4 * (1 + std::abs(e[i]))) << i;
  };
  close(y8, y1);
  close(s8, s1);
  close(m8, m1);
  close(g8, g1);
}

// A chain of values that are all padding on a device leaves nothing there: only the last,
// which a running instruction reads (the masked sum over the padded rows), gets a block of
// zeros. Devices with real rows allocate each value they compute; the padding devices fewer.
TEST(Runtime, PaddingReadByNothingRunningIsNotMaterialised) {
  Mesh mesh({8}, {"x"});
  const Array host = random::normal(random::key(24), {3, 32});
  const Array w1 = random::normal(random::key(25), {32, 32}) * 0.2;
  const Array w2 = random::normal(random::key(26), {32, 16}) * 0.2;
  auto f = jit([](const Array& a, const Array& m1, const Array& m2) {
    Array y = tanh(a) * 2.0 + 1.0;          // padded rows on devices 3-7 ...
    Array u = tanh(matmul(y, m1)) - 0.5;    // ... and so on down the chain
    return sum(matmul(u, m2), {0});         // the padding is masked before the sum reads it
  });
  const Array want = f(host, w1, w2);
  const Array x = device_put(host, NamedSharding(mesh, P("x")));
  const Array r1 = device_put(w1, NamedSharding(mesh, P()));
  const Array r2 = device_put(w2, NamedSharding(mesh, P()));
  f(x, r1, r2);  // compiled outside the count
  std::vector<int64_t> before(8);
  for (int d = 0; d < 8; ++d) before[static_cast<size_t>(d)] = memory_stats(d).num_allocs;
  const Array got = f(x, r1, r2);
  std::vector<int64_t> allocs(8);
  for (int d = 0; d < 8; ++d) {
    allocs[static_cast<size_t>(d)] = memory_stats(d).num_allocs - before[static_cast<size_t>(d)];
  }
  for (int d = 3; d < 8; ++d) EXPECT_LT(allocs[static_cast<size_t>(d)], allocs[0]) << "device " << d;
  const std::vector<float> g = got.to_vector<float>(), e = want.to_vector<float>();
  ASSERT_EQ(g.size(), e.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-4 * (1 + std::abs(e[i]))) << i;
}

// The same across the product: gradients through values that are all padding on some devices,
// a loop carrying one, and an input resharded into the uneven split inside jit, all equal one
// device's (and the padding devices still run no tanh).
TEST(Runtime, PaddingSkippedUnderGradLoopsAndReshardingEqualsOneDevice) {
  Mesh mesh({8}, {"x"});
  const Array host = random::normal(random::key(22), {3, 16});
  const Array w = random::normal(random::key(23), {16, 16});
  auto loss = [](const Array& a, const Array& m) {
    Array y = fori_loop(
        0, 3, [&](const Array&, const Array& c) { return tanh(matmul(c, m)); }, a);
    return sum(exp(y) * y);
  };
  auto g = jit(grad(loss, std::vector<int>{0, 1}));
  // Replicated in, split unevenly inside: the constraint reshards.
  auto resharded = jit([&](const Array& a, const Array& m) {
    Array s = with_sharding_constraint(a, NamedSharding(mesh, P("x")));
    return std::make_tuple(loss(s, m), tanh(s) * 3.0);
  });
  const auto want = g(host, w);
  const auto [want_l, want_t] = resharded(host, w);
  const Array x = device_put(host, NamedSharding(mesh, P("x")));
  const Array xr = device_put(host, NamedSharding(mesh, P()));
  g(x, w);
  resharded(xr, w);  // compiled outside the recording
  profiler::start();
  const auto got = g(x, w);
  const auto [got_l, got_t] = resharded(xr, w);
  profiler::stop();
  std::set<int> tanh_devices;
  for (const auto& s : profiler::spans()) {
    if (s.name.find("tanh") != std::string::npos) tanh_devices.insert(s.device);
  }
  EXPECT_EQ(tanh_devices, (std::set<int>{0, 1, 2}));
  auto close = [](const Array& a, const Array& b) {
    std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-4 * (1 + std::abs(y[i]))) << i;
  };
  ASSERT_EQ(got.size(), 2u);
  close(got[0], want[0]);
  close(got[1], want[1]);
  close(got_l, want_l);
  close(got_t, want_t);
}

// The compile cache jit, eager ops and device_put share: hits, one compile for concurrent
// requests of one key, failed compiles, least-recently-used eviction that never frees a program
// in use, and the statistics partix::compile_cache_stats reports.
#include "dispatch/compile_cache.h"

#include <atomic>
#include <chrono>
#include <latch>
#include <thread>

#include "core/errors.h"
#include "test_util.h"

using namespace partix;
using detail::CompileCache;

namespace {

using Program = CompileCache::Program;

// A compile function that counts its calls and makes a distinct (empty) program.
struct Counting {
  std::atomic<int> calls{0};
  std::chrono::milliseconds delay{0};
  CompileCache::CompileFn fn() {
    return [this] {
      calls++;
      std::this_thread::sleep_for(delay);
      return std::make_shared<spmd::Compiled>();
    };
  }
};

// A real program: reshards a [16] f32 array from replicated to split over 8 devices.
Program reshard_program(const Mesh& mesh) {
  ir::Program p;
  p.name = "reshard";
  int v = p.add_value(ir::Aval{{16}, DType::F32});
  p.params = {v};
  p.results = {v};
  spmd::CompileOptions o;
  o.in_shardings = {NamedSharding(mesh, P())};
  o.out_shardings = {NamedSharding(mesh, P("x"))};
  return spmd::compile(p, o);
}

std::vector<float> iota16() {
  std::vector<float> v(16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  return v;
}

// Sets the process cache's limit while it lives.
struct ProcessCacheLimit {
  explicit ProcessCacheLimit(size_t n)
      : before(static_cast<size_t>(compile_cache_stats().capacity)) {
    detail::compile_cache().set_capacity(n);
  }
  ~ProcessCacheLimit() { detail::compile_cache().set_capacity(before); }
  size_t before;
};

}  // namespace

TEST(CompileCache, SecondRequestHitsWithoutCompiling) {
  CompileCache cache(8);
  Counting c;
  Program a = cache.get_or_compile("a", c.fn());
  Program again = cache.get_or_compile("a", c.fn());
  Program b = cache.get_or_compile("b", c.fn());
  EXPECT_EQ(c.calls, 2);
  EXPECT_EQ(a, again);
  EXPECT_NE(a, b);
  CompileCacheStats s = cache.stats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.evictions, 0);
  EXPECT_EQ(s.size, 2);
  EXPECT_EQ(s.capacity, 8);
}

TEST(CompileCache, ConcurrentRequestsForOneKeyCompileOnce) {
  CompileCache cache(8);
  Counting c;
  c.delay = std::chrono::milliseconds(100);  // the others arrive while it compiles
  constexpr int kThreads = 8;
  std::vector<Program> got(kThreads);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      got[static_cast<size_t>(t)] = cache.get_or_compile("k", c.fn());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.calls, 1);
  for (const Program& p : got) EXPECT_EQ(p, got[0]);
  EXPECT_NE(got[0], nullptr);
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_EQ(cache.stats().hits, kThreads - 1);
  EXPECT_EQ(cache.stats().size, 1);
}

TEST(CompileCache, AFailedCompileCachesNothingAndAWaiterCompilesForItself) {
  CompileCache cache(8);
  std::atomic<bool> started{false};
  std::atomic<int> calls{0};
  const CompileCache::CompileFn bad = [&]() -> Program {
    calls++;
    started = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    detail::fail("test", "bad program");
  };
  std::thread failing([&] { EXPECT_PARTIX_ERROR(cache.get_or_compile("k", bad), "bad program"); });
  while (!started) std::this_thread::yield();
  // Arrives while the first compile runs: it waits, sees it fail, and compiles itself.
  Program p = cache.get_or_compile("k", [&] {
    calls++;
    return std::make_shared<spmd::Compiled>();
  });
  failing.join();
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache.get_or_compile("k", [&]() -> Program { return nullptr; }), p);
  EXPECT_EQ(cache.stats().misses, 2);
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_EQ(cache.stats().size, 1);
}

TEST(CompileCache, TheLeastRecentlyUsedLeavesFirst) {
  CompileCache cache(2);
  Counting c;
  Program a = cache.get_or_compile("a", c.fn());
  Program b = cache.get_or_compile("b", c.fn());
  EXPECT_EQ(cache.get_or_compile("a", c.fn()), a);  // a is now the most recent
  cache.get_or_compile("c", c.fn());                // evicts b
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.stats().size, 2);
  EXPECT_EQ(cache.get_or_compile("a", c.fn()), a);
  EXPECT_EQ(c.calls, 3);
  Program b2 = cache.get_or_compile("b", c.fn());  // compiled again (evicts c)
  EXPECT_EQ(c.calls, 4);
  EXPECT_NE(b2, b);
  EXPECT_EQ(cache.stats().evictions, 2);
  // Shrinking evicts at once, oldest first: c went already, then a.
  cache.set_capacity(1);
  EXPECT_EQ(cache.stats().evictions, 3);
  EXPECT_EQ(cache.get_or_compile("b", c.fn()), b2);
  EXPECT_EQ(c.calls, 4);
}

TEST(CompileCache, EvictionNeverFreesAProgramThatIsRunning) {
  const Mesh mesh({8}, {"x"});
  CompileCache cache(1);
  Program running = cache.get_or_compile("reshard", [&] { return reshard_program(mesh); });
  std::weak_ptr<spmd::Compiled> watch = running;
  const std::vector<float> want = iota16();
  Array x = device_put(from_vector<float>(want, {16}), NamedSharding(mesh, P()));
  std::atomic<bool> evicted{false};
  std::atomic<int> runs{0};
  std::thread runner([&, program = std::move(running)] {
    // Runs on while the cache drops the program (and after).
    while (!evicted || runs < 20) {
      Array y = program->executable->run({x})[0];
      ASSERT_EQ(y.sharding(), NamedSharding(mesh, P("x")));
      ASSERT_EQ(y.to_vector<float>(), want);
      runs++;
    }
  });
  while (runs == 0) std::this_thread::yield();
  Counting c;
  cache.get_or_compile("other", c.fn());  // limit 1: the running program leaves the cache
  EXPECT_EQ(cache.stats().evictions, 1);
  evicted = true;
  EXPECT_FALSE(watch.expired());  // the runner's reference keeps it alive
  runner.join();
  // The cache held no second reference: once its user let go, the program is freed.
  EXPECT_TRUE(watch.expired());
}

TEST(CompileCache, EagerOpsDevicePutAndJitHitOnTheSecondCall) {
  const Mesh mesh({8}, {"x"});
  const NamedSharding replicated(mesh, P()), split(mesh, P(None, "x"));
  // A shape no other test uses, so the first calls miss. (Onto the mesh through the host: no
  // program.)
  Array a = device_put(from_vector<float>(std::vector<float>(24, 1.5f), {3, 8}), replicated);
  Array b = device_put(from_vector<float>(std::vector<float>(24, 2.0f), {3, 8}), replicated);
  CompileCacheStats s0 = compile_cache_stats();
  Array sum = a + b;
  CompileCacheStats s1 = compile_cache_stats();
  EXPECT_EQ(s1.misses, s0.misses + 1);
  Array sum2 = b + a;
  CompileCacheStats s2 = compile_cache_stats();
  EXPECT_EQ(s2.misses, s1.misses);
  EXPECT_EQ(s2.hits, s1.hits + 1);
  EXPECT_EQ(sum2.to_vector<float>(), std::vector<float>(24, 3.5f));

  Array d = device_put(sum, split);  // a reshard on the mesh: a program
  CompileCacheStats s3 = compile_cache_stats();
  EXPECT_EQ(s3.misses, s2.misses + 1);
  Array d2 = device_put(sum2, split);
  CompileCacheStats s4 = compile_cache_stats();
  EXPECT_EQ(s4.misses, s3.misses);
  EXPECT_EQ(s4.hits, s3.hits + 1);
  EXPECT_EQ(d2.sharding(), split);

  int64_t held = 0;
  {
    auto f = jit([](const Array& u, const Array& v) { return u * v - u; });
    Array r = f(d, d2);
    CompileCacheStats s5 = compile_cache_stats();
    EXPECT_EQ(s5.misses, s4.misses + 1);
    held = s5.size;
    Array r2 = f(d2, d);
    CompileCacheStats s6 = compile_cache_stats();
    EXPECT_EQ(s6.misses, s5.misses);
    EXPECT_EQ(s6.hits, s5.hits + 1);
    EXPECT_EQ(f.trace_count(), 1);
    EXPECT_EQ(r2.to_vector<float>(), std::vector<float>(24, 3.5f * 3.5f - 3.5f));
  }
  // A dead jitted function's programs can never be asked for again: they leave with it.
  EXPECT_EQ(compile_cache_stats().size, held - 1);
}

TEST(CompileCache, AnEvictedJitProgramIsCompiledAgainWithoutTracing) {
  ProcessCacheLimit limit(1);
  Array x = from_vector<float>({1, 2, 3, 4, 5}, {5});
  auto f = jit([](const Array& u) { return u * 2.0f; });
  EXPECT_EQ(f(x).to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10}));
  Array y = x + x;  // a one-op program: evicts f's
  const CompileCacheStats before = compile_cache_stats();
  EXPECT_EQ(f(x).to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10}));
  EXPECT_EQ(compile_cache_stats().misses, before.misses + 1);
  EXPECT_EQ(f.trace_count(), 1);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10}));
}

TEST(CompileCache, ThreadsRunJittedProgramsWhileEagerOpsChurnASmallCache) {
  // A limit of two: the jitted programs are evicted and compiled again while other threads run
  // them; every result stays right and nothing is traced twice.
  ProcessCacheLimit limit(2);
  const Mesh mesh({8}, {"x"});
  const std::vector<float> want = iota16();
  Array x = device_put(from_vector<float>(want, {16}), NamedSharding(mesh, P("x")));
  auto f = jit([](const Array& u) { return u * 3.0f + 1.0f; });
  f(x);
  std::vector<float> expect(16);
  for (size_t i = 0; i < 16; ++i) expect[i] = want[i] * 3.0f + 1.0f;
  std::atomic<bool> done{false};
  std::vector<std::thread> runners;
  for (int t = 0; t < 3; ++t) {
    runners.emplace_back([&] {
      while (!done) ASSERT_EQ(f(x).to_vector<float>(), expect);
    });
  }
  const int64_t evictions = compile_cache_stats().evictions;
  for (int64_t n = 1; n <= 40; ++n) {
    Array z = from_vector<float>(std::vector<float>(static_cast<size_t>(n), 1.0f), {n});
    EXPECT_EQ((z + z).to_vector<float>(), std::vector<float>(static_cast<size_t>(n), 2.0f));
  }
  done = true;
  for (auto& t : runners) t.join();
  EXPECT_GT(compile_cache_stats().evictions, evictions + 20);
  EXPECT_EQ(f.trace_count(), 1);
  EXPECT_LE(compile_cache_stats().size, 2);
}

TEST(CompileCache, AJittedFunctionThatFailsAfterCompilingLeavesNothingBehind) {
  ProcessCacheLimit limit(1 << 20);  // nothing is evicted meanwhile
  Array x = from_vector<float>({1, 2, 3, 4, 5, 6, 7}, {7});
  const int64_t before = compile_cache_stats().size;
  {
    // donate_argnums is checked once the program is compiled.
    auto f = jit([](const Array& u) { return u + 1.0f; }, {.donate_argnums = {2}});
    EXPECT_PARTIX_ERROR(f(x), "donate_argnums names argument 2");
    EXPECT_EQ(compile_cache_stats().size, before + 1);
  }
  EXPECT_EQ(compile_cache_stats().size, before);
}

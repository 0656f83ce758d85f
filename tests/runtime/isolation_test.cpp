// Failure isolation: a program that fails on some of its devices cancels exactly its own
// collectives. Several host threads run correct and failing programs (collectives of every
// kind) at once: every correct call returns the exact value, every failing call raises the
// original error, nothing deadlocks (a watchdog fails the test), and workers stay usable.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <thread>

#include "comm/communicator.h"
#include "core/fault_injection.h"
#include "runtime/device_pool.h"
#include "test_util.h"

using namespace partix;

namespace {

// Every collective kind, on blocks of x [8, 16] split over 'x' (block [1, 16]).
Array every_collective(const Array& b) {
  Array a = psum(b, "x");                                // all_reduce
  Array g = all_gather(b, "x", 0, /*tiled=*/true);        // [8, 16]
  Array s = psum_scatter(g, "x", 0, /*tiled=*/true);      // reduce_scatter: [1, 16]
  std::vector<std::pair<int, int>> shift;
  for (int i = 0; i < 8; ++i) shift.push_back({i, (i + 1) % 8});
  Array p = ppermute(b, "x", shift);                      // collective_permute
  Array t = all_to_all(reshape(b, {8, 2}), "x", 0, 0, /*tiled=*/true);  // [8, 2]
  return a + s + p * 3.0f + reshape(t, {1, 16}) * 5.0f;
}

// The same on the host, row by row.
std::vector<float> every_collective_on_host(const std::vector<float>& x) {
  std::vector<float> out(128);
  for (int i = 0; i < 8; ++i) {
    for (int c = 0; c < 16; ++c) {
      float a = 0;
      for (int j = 0; j < 8; ++j) a += x[static_cast<size_t>(j * 16 + c)];
      const float s = 8 * x[static_cast<size_t>(i * 16 + c)];
      const float p = x[static_cast<size_t>(((i + 7) % 8) * 16 + c)];
      const float t = x[static_cast<size_t>((c / 2) * 16 + 2 * i + c % 2)];
      out[static_cast<size_t>(i * 16 + c)] = a + s + p * 3.0f + t * 5.0f;
    }
  }
  return out;
}

struct Programs {
  Mesh mesh = make_mesh({8}, {"x"});
  Array x = device_put(random::normal(random::key(7), {8, 16}), NamedSharding(mesh, P("x")));
  Array w = device_put(random::normal(random::key(8), {16, 4}), NamedSharding(mesh, P("x")));
  std::function<Array(const Array&)> collectives =
      jit(shard_map(every_collective, mesh, {P("x")}, {P("x")}), {.name = "collectives"});
  // jit inserts the collectives itself: the contraction dimension of w is split.
  std::function<Array(const Array&, const Array&)> contract =
      jit([](const Array& a, const Array& b) { return matmul(a, b); }, {.name = "contract"});
  std::function<Array(const Array&)> failing =
      jit(shard_map(every_collective, mesh, {P("x")}, {P("x")}), {.name = "failing"});
};

// Runs `body` on a thread; fails the test (and ends the process: a hung thread cannot be
// joined) if it does not finish within `seconds`.
void with_watchdog(double seconds, const std::function<void()>& body) {
  auto done = std::async(std::launch::async, body);
  if (done.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << "deadlock: not finished after " << seconds << " s";
    std::fflush(nullptr);
    std::_Exit(1);
  }
  done.get();
}

struct FaultGuard {
  ~FaultGuard() {
    detail::fail_program_allocation("", {}, 0);
    detail::fail_nth_allocation(0);
    comm::set_collective_timeout_seconds(300);
  }
};

}  // namespace

TEST(Isolation, ReferenceOfTheCollectivesProgram) {
  Programs pr;
  const std::vector<float> got = pr.collectives(pr.x).to_vector<float>();
  const std::vector<float> want = every_collective_on_host(pr.x.to_vector<float>());
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4f) << i;
}

TEST(Isolation, FailureOnSomeDevicesCancelsItsCollectivesAndReportsTheCause) {
  FaultGuard guard;
  comm::set_collective_timeout_seconds(60);
  Programs pr;
  // Devices 2 and 5 fail at their first allocation; the others wait in a collective.
  detail::fail_program_allocation("failing", {2, 5}, 1);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_PARTIX_ERROR(pr.failing(pr.x), "out of memory", "injected in program 'failing'");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0) << "peers waited for the timeout instead of being cancelled";
  // Workers and communicators are usable right after.
  EXPECT_EQ(pr.collectives(pr.x).to_vector<float>(),
            Programs().collectives(pr.x).to_vector<float>());
}

TEST(Isolation, ConcurrentFailingAndCorrectPrograms) {
  FaultGuard guard;
  comm::set_collective_timeout_seconds(60);
  Programs pr;
  const Array want_c = pr.collectives(pr.x);
  const Array want_m = pr.contract(pr.x, pr.w);
  detail::fail_program_allocation("failing", {1, 6}, 2);
  // PARTIX_STRESS_ITERATIONS makes the long version (scripts/tsan.sh runs it).
  const char* env = std::getenv("PARTIX_STRESS_ITERATIONS");
  const int kThreads = 4, kIterations = env ? std::max(1, std::atoi(env)) : 25;
  std::atomic<int> wrong{0}, missing_error{0}, wrong_error{0}, correct_calls{0}, failed_calls{0};
  std::vector<std::string> examples(kThreads);
  with_watchdog(60 + kIterations, [&] {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int it = 0; it < kIterations; ++it) {
          switch ((t + it) % 3) {
            case 0:
              wrong += !(pr.collectives(pr.x).to_vector<float>() == want_c.to_vector<float>());
              correct_calls++;
              break;
            case 1:
              wrong += !(pr.contract(pr.x, pr.w).to_vector<float>() == want_m.to_vector<float>());
              correct_calls++;
              break;
            default:
              try {
                pr.failing(pr.x);
                missing_error++;
              } catch (const CollectiveCancelled& e) {
                wrong_error++;  // the cause must be reported, not its consequence
                examples[static_cast<size_t>(t)] = e.what();
              } catch (const Error& e) {
                const std::string m = e.what();
                if (m.find("injected in program 'failing'") == std::string::npos) {
                  wrong_error++;
                  examples[static_cast<size_t>(t)] = m;
                }
              }
              failed_calls++;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
  });
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(missing_error.load(), 0);
  EXPECT_EQ(wrong_error.load(), 0) << examples[0] << examples[1] << examples[2] << examples[3];
  EXPECT_EQ(correct_calls.load() + failed_calls.load(), kThreads * kIterations);
  EXPECT_GT(failed_calls.load(), 0);
}

TEST(Isolation, EveryInjectedAllocationFailureIsAnErrorAndTheNextCallWorks) {
  FaultGuard guard;
  Programs pr;
  auto step = jit([](const Array& x, const Array& w) {
    return value_and_grad([&](const Array& v) { return sum(square(matmul(x, v))); })(w);
  });
  const auto want = step(pr.x, pr.w);
  detail::fail_nth_allocation(1 << 30);  // count only
  step(pr.x, pr.w);
  const int64_t n = detail::allocations_seen();
  ASSERT_GT(n, 0);
  int failures = 0;
  for (int64_t k = 1; k <= n; ++k) {
    detail::fail_nth_allocation(k);
    try {
      step(pr.x, pr.w);
    } catch (const Error& e) {
      failures++;
      EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
    }
    detail::fail_nth_allocation(0);
    const auto again = step(pr.x, pr.w);
    EXPECT_EQ(again.first.item<float>(), want.first.item<float>()) << "after failing allocation " << k;
  }
  EXPECT_EQ(failures, n);
}

TEST(Isolation, TheRootCauseIsReportedOverItsConsequences) {
  auto cancelled = std::make_exception_ptr(CollectiveCancelled("[all_reduce] cancelled"));
  auto timeout = std::make_exception_ptr(TimeoutError("[all_gather] timed out waiting for 3"));
  auto oom = std::make_exception_ptr(std::bad_alloc());
  auto error = std::make_exception_ptr(Error("[Buffer] out of memory on device 4"));
  std::vector<int> ids{0, 1, 2, 3};
  // A timeout outranks the cancellations it caused.
  EXPECT_THROW(runtime::rethrow_first({cancelled, timeout, cancelled, nullptr}, ids), TimeoutError);
  // A device's own failure outranks a peer's timeout and cancellations, whatever the order.
  EXPECT_PARTIX_ERROR(runtime::rethrow_first({cancelled, timeout, nullptr, oom}, ids),
                      "device 3 ran out of host memory");
  EXPECT_PARTIX_ERROR(runtime::rethrow_first({timeout, cancelled, error, oom}, ids),
                      "out of memory on device 4");
  EXPECT_NO_THROW(runtime::rethrow_first({nullptr, nullptr, nullptr, nullptr}, ids));
}

// Fibers (core/fiber.h): interleaving at yields, the exception being handled and the
// allocation-fault program scope kept per fiber across switches, stacks that hold deep frames,
// and progress notifications.
#include "core/fiber.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/fault_injection.h"

using namespace partix::detail;

TEST(Fiber, InterleavesAtYieldsAndRunsToTheEnd) {
  std::vector<std::string> log;
  EXPECT_FALSE(in_fiber());
  Fiber a([&] {
    EXPECT_TRUE(in_fiber());
    log.push_back("a1");
    fiber_yield();
    log.push_back("a2");
    fiber_yield();
    log.push_back("a3");
  });
  Fiber b([&] {
    log.push_back("b1");
    fiber_yield();
    log.push_back("b2");
  });
  int rounds = 0;
  while (!(a.finished() && b.finished())) {
    a.resume();
    b.resume();
    ++rounds;
  }
  EXPECT_EQ(rounds, 3);
  EXPECT_EQ(log, (std::vector<std::string>{"a1", "b1", "a2", "b2", "a3"}));
  EXPECT_FALSE(in_fiber());
  EXPECT_TRUE(a.resume());  // a finished fiber stays finished
}

TEST(Fiber, EachFiberKeepsTheExceptionItHandlesAcrossYields) {
  // Both fibers yield inside a catch block while the other throws and catches its own; a bare
  // `throw;` afterwards must rethrow each fiber's own exception.
  std::string a_got, b_got;
  auto body = [](const char* what, std::string& got) {
    return [what, &got] {
      try {
        try {
          throw std::runtime_error(what);
        } catch (...) {
          fiber_yield();
          EXPECT_EQ(std::uncaught_exceptions(), 0);
          throw;
        }
      } catch (const std::runtime_error& e) {
        got = e.what();
      }
    };
  };
  Fiber a(body("from a", a_got));
  Fiber b(body("from b", b_got));
  while (!(a.finished() && b.finished())) {
    a.resume();
    b.resume();
  }
  EXPECT_EQ(a_got, "from a");
  EXPECT_EQ(b_got, "from b");
}

TEST(Fiber, AllocationFaultScopeIsPerFiber) {
  // The program named by a ProgramScope inside one fiber is not seen by another fiber on the
  // same thread, nor by the thread once the fiber yields.
  const std::string outer = "outer", in_a = "in_a";
  ProgramScope scope(outer);
  const std::string* seen_in_b = nullptr;
  Fiber a([&] {
    ProgramScope mine(in_a);
    fiber_yield();
    EXPECT_EQ(program_scope_state().program, &in_a);
  });
  Fiber b([&] { seen_in_b = program_scope_state().program; });
  a.resume();
  EXPECT_EQ(program_scope_state().program, &outer);
  b.resume();
  EXPECT_EQ(seen_in_b, nullptr);
  a.resume();
  EXPECT_TRUE(a.finished());
  EXPECT_EQ(program_scope_state().program, &outer);
}

namespace {
int deep(int n) {
  volatile char pad[1024];
  pad[0] = static_cast<char>(n);
  return n == 0 ? pad[0] : deep(n - 1) + 1;
}
}  // namespace

TEST(Fiber, StacksHoldDeepFramesAndAreReused) {
  // 4 MiB of frames on a fiber's 8 MiB stack, then the same stacks again.
  for (int round = 0; round < 3; ++round) {
    int result = -1;
    Fiber f([&] { result = deep(4000); });
    EXPECT_TRUE(f.resume());
    EXPECT_EQ(result, 4000);
  }
}

TEST(Fiber, WaitForProgressReturnsOnNotifyOrTimeout) {
  const uint64_t e = progress_epoch();
  // Nobody notifies: the wait times out (its answer says whether the epoch moved meanwhile).
  const bool moved = wait_for_progress(e, std::chrono::microseconds(1000));
  EXPECT_EQ(moved, progress_epoch() != e);
  std::thread t([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    notify_progress();
  });
  EXPECT_TRUE(wait_for_progress(e, std::chrono::seconds(30)));
  EXPECT_NE(progress_epoch(), e);
  t.join();
}

#if defined(__x86_64__)
namespace {
uint32_t read_mxcsr() {
  uint32_t m = 0;
  asm volatile("stmxcsr %0" : "=m"(m));
  return m;
}
void write_mxcsr(uint32_t m) { asm volatile("ldmxcsr %0" : : "m"(m)); }
// Values held in callee-saved registers across a yield, where the switch must keep them.
[[gnu::noinline]] int64_t sum_across_yield(int64_t seed) {
  int64_t a = seed, b = seed * 3, c = seed * 5, d = seed * 7, e = seed * 11, f = seed * 13;
  asm volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f));
  fiber_yield();
  asm volatile("" : "+r"(a), "+r"(b), "+r"(c), "+r"(d), "+r"(e), "+r"(f));
  return a + b + c + d + e + f;
}
}  // namespace

TEST(Fiber, SwitchesKeepEachSidesRegistersControlWordsAndStackAlignment) {
  // Each fiber runs with its own SSE control word (rounding mode, flush-to-zero) across
  // yields, and the scheduler's comes back unchanged after every switch.
  const uint32_t thread_mxcsr = read_mxcsr();
  constexpr uint32_t kRoundDown = 0x2000, kFlushToZero = 0x8000;
  uint32_t seen_a = 0, seen_b = 0;
  int64_t sum_a = 0, sum_b = 0;
  bool aligned = true;
  Fiber a([&] {
    alignas(64) float local[16] = {};
    aligned = aligned && reinterpret_cast<uintptr_t>(local) % 64 == 0;
    write_mxcsr((read_mxcsr() & ~0x6000u) | kRoundDown);
    sum_a = sum_across_yield(1);
    seen_a = read_mxcsr();
    local[0] = 1.0f;
    aligned = aligned && local[0] == 1.0f;
  });
  Fiber b([&] {
    write_mxcsr(read_mxcsr() | kFlushToZero);
    sum_b = sum_across_yield(2);
    seen_b = read_mxcsr();
  });
  while (!(a.finished() && b.finished())) {
    a.resume();
    EXPECT_EQ(read_mxcsr(), thread_mxcsr);
    b.resume();
    EXPECT_EQ(read_mxcsr(), thread_mxcsr);
  }
  EXPECT_TRUE(aligned);
  EXPECT_EQ(seen_a & 0x6000u, kRoundDown);
  EXPECT_EQ(seen_a & kFlushToZero, thread_mxcsr & kFlushToZero);
  EXPECT_EQ(seen_b & kFlushToZero, kFlushToZero);
  EXPECT_EQ(seen_b & 0x6000u, thread_mxcsr & 0x6000u);
  EXPECT_EQ(sum_a, 1 + 3 + 5 + 7 + 11 + 13);
  EXPECT_EQ(sum_b, 2 * (1 + 3 + 5 + 7 + 11 + 13));
}
#endif

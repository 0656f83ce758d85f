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

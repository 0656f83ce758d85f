// The kernels' thread team: every chunk runs exactly once, nested and concurrent uses stay
// correct, exceptions reach the caller, and a parallel_for covers its range.
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/cpu/kernel_util.h"
#include "backend/cpu/thread_team.h"
#include "test_util.h"

using partix::backend::cpu::ThreadTeam;

namespace {

struct Counts {
  std::vector<std::atomic<int>> hits;
  explicit Counts(size_t n) : hits(n) {}
};

void count_chunk(void* p, int64_t c) { static_cast<Counts*>(p)->hits[static_cast<size_t>(c)]++; }

// A few microseconds of work the compiler keeps.
void busy_work() {
  int s = 0;
  for (int k = 0; k < 2000; ++k) {
    s += k;
    asm volatile("" : "+r"(s));
  }
}

}  // namespace

TEST(ThreadTeam, EveryChunkRunsExactlyOnceAcrossManyJobs) {
  for (int helpers : {0, 1, 3}) {
    ThreadTeam team(helpers);
    EXPECT_EQ(team.size(), helpers + 1);
    for (int64_t chunks : {1, 2, 3, 7, 64, 1000}) {
      for (int rep = 0; rep < 200; ++rep) {
        Counts counts(static_cast<size_t>(chunks));
        team.run(chunks, &count_chunk, &counts);
        for (int64_t c = 0; c < chunks; ++c) {
          ASSERT_EQ(counts.hits[static_cast<size_t>(c)].load(), 1)
              << "helpers " << helpers << ", chunk " << c << " of " << chunks << ", rep " << rep;
        }
      }
    }
  }
}

TEST(ThreadTeam, HelpersThatSleptWakeForTheNextJob) {
  ThreadTeam team(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the spin: the helper sleeps
  std::atomic<int> ran_elsewhere{0};
  const auto main_id = std::this_thread::get_id();
  struct Ctx {
    std::atomic<int>* ran_elsewhere;
    std::thread::id main_id;
  } ctx{&ran_elsewhere, main_id};
  // Chunks slow enough that a woken helper gets some of them.
  team.run(
      64,
      [](void* p, int64_t) {
        auto& c = *static_cast<Ctx*>(p);
        if (std::this_thread::get_id() != c.main_id) (*c.ran_elsewhere)++;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      },
      &ctx);
  EXPECT_GT(ran_elsewhere.load(), 0);
}

TEST(ThreadTeam, ExceptionsReachTheCallerAndTheTeamStaysUsable) {
  ThreadTeam team(1);
  EXPECT_THROW(team.run(
                   16,
                   [](void*, int64_t c) {
                     if (c == 5) throw std::runtime_error("chunk 5");
                   },
                   nullptr),
               std::runtime_error);
  Counts counts(10);
  team.run(10, &count_chunk, &counts);
  for (auto& h : counts.hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadTeam, ParallelForCoversItsRangeOnTheCurrentTeamAndNestsSerially) {
  ThreadTeam team(1);
  ThreadTeam::set_current(&team);
  std::vector<std::atomic<int>> seen(10007);
  partix::backend::cpu::parallel_for(10007, 100, [&](int64_t lo, int64_t hi) {
    // A nested loop (from the caller or a helper) runs serially and still covers its range.
    std::atomic<int64_t> inner{0};
    partix::backend::cpu::parallel_for(hi - lo, 3, [&](int64_t a, int64_t b) { inner += b - a; });
    EXPECT_EQ(inner.load(), hi - lo);
    for (int64_t i = lo; i < hi; ++i) seen[static_cast<size_t>(i)]++;
  });
  ThreadTeam::set_current(nullptr);
  for (auto& s : seen) ASSERT_EQ(s.load(), 1);
}

TEST(ThreadTeam, StartsAndStopsWhileHelpersSpinOrSleep) {
  for (int rep = 0; rep < 40; ++rep) {
    ThreadTeam team(2);
    Counts counts(8);
    team.run(8, &count_chunk, &counts);
    // Alternately destroyed while its helpers still spin and after they went to sleep.
    if (rep % 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    for (auto& h : counts.hits) ASSERT_EQ(h.load(), 1);
  }
}

// A thread outside the team (the fiber pool's other device thread, idle while its devices wait
// in a collective) runs chunks of the team's jobs through help(); size() counts it only while
// it is idle, every chunk still runs exactly once, a chunk it runs sees no team of its own,
// and an exception thrown there reaches the job's caller.
TEST(ThreadTeam, IdlePeersRunChunksOfTheTeamsJobs) {
  ThreadTeam team(0);
  std::atomic<int> idle{0};
  team.set_idle_peers(&idle);
  EXPECT_EQ(team.size(), 1);
  idle = 1;
  EXPECT_EQ(team.size(), 2);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> by_peer{0};
  std::atomic<int> nested_team{0};
  std::thread peer([&] {
    while (!stop.load()) {
      if (!team.help()) std::this_thread::yield();
    }
  });
  struct Job {
    std::vector<std::atomic<int>> hits;
    std::thread::id owner;
    std::atomic<int64_t>* by_peer;
    std::atomic<int>* nested_team;
    int64_t throw_at = -1;
  };
  for (int64_t chunks : {2, 7, 64}) {
    for (int rep = 0; rep < 300; ++rep) {
      Job job{std::vector<std::atomic<int>>(static_cast<size_t>(chunks)),
              std::this_thread::get_id(), &by_peer, &nested_team};
      team.run(
          chunks,
          [](void* p, int64_t c) {
            Job& j = *static_cast<Job*>(p);
            j.hits[static_cast<size_t>(c)]++;
            if (std::this_thread::get_id() != j.owner) {
              ++*j.by_peer;
              if (ThreadTeam::current() != nullptr) ++*j.nested_team;
            }
            busy_work();  // long enough for the peer to claim some
          },
          &job);
      for (int64_t c = 0; c < chunks; ++c) ASSERT_EQ(job.hits[static_cast<size_t>(c)].load(), 1);
    }
  }
  EXPECT_GT(by_peer.load(), 0);
  EXPECT_EQ(nested_team.load(), 0);
  // An exception in a chunk, wherever it ran, reaches the caller; the team stays usable.
  for (int rep = 0; rep < 50; ++rep) {
    EXPECT_THROW(team.run(
                     16,
                     [](void*, int64_t c) {
                       busy_work();
                       if (c % 5 == 3) throw std::runtime_error("chunk failed");
                     },
                     nullptr),
                 std::runtime_error);
  }
  Counts counts(8);
  team.run(8, &count_chunk, &counts);
  for (auto& h : counts.hits) EXPECT_EQ(h.load(), 1);
  stop = true;
  peer.join();
  idle = 0;
  EXPECT_EQ(team.size(), 1);
}

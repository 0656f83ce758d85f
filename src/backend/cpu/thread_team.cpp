#include "backend/cpu/thread_team.h"

#include <chrono>
#include <system_error>

#include "core/errors.h"

namespace partix::backend::cpu {

namespace {

thread_local ThreadTeam* g_current = nullptr;

constexpr uint64_t kIndexMask = 0xffffffffu;
constexpr uint64_t kClosed = kIndexMask;  // the index of a finished job: nothing to claim
// How long a helper keeps polling for the next job before it sleeps, and how often the clock
// is read meanwhile.
constexpr auto kSpin = std::chrono::microseconds(500);
constexpr int kPollsPerClockRead = 64;

}  // namespace

ThreadTeam* ThreadTeam::current() { return g_current; }
void ThreadTeam::set_current(ThreadTeam* team) { g_current = team; }

ThreadTeam::ThreadTeam(int helpers) {
  try {
    for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { helper_loop(); });
  } catch (const std::system_error& e) {
    wake_all_to_stop();
    detail::fail("runtime",
                 "could not start {} kernel helper threads (out of host memory for their "
                 "stacks, or at the process's thread limit): {}",
                 helpers, e.what());
  }
}

ThreadTeam::~ThreadTeam() { wake_all_to_stop(); }

void ThreadTeam::wake_all_to_stop() {
  stop_.store(true);
  generation_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(sleep_mu_);
    wake_.notify_all();
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
}

int64_t ThreadTeam::work(uint64_t gen) {
  int64_t ran = 0;
  const uint64_t tag = (gen & kIndexMask) << 32;
  uint64_t t = ticket_.load(std::memory_order_acquire);
  while (true) {
    if ((t & ~kIndexMask) != tag) return ran;  // another job's ticket
    const uint64_t index = t & kIndexMask;
    // A stale read of chunks_ cannot claim anything: the ticket is closed before it changes.
    if (index >= static_cast<uint64_t>(chunks_.load(std::memory_order_relaxed))) return ran;
    if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      continue;  // t now holds the current ticket
    }
    // The claimed chunk keeps this job from finishing, so its fields stay as they are.
    try {
      fn_(ctx_, static_cast<int64_t>(index));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    done_.fetch_add(1, std::memory_order_release);
    ++ran;
    t = ticket_.load(std::memory_order_acquire);
  }
}

void ThreadTeam::run(int64_t chunks, void (*fn)(void*, int64_t), void* ctx) {
  if (chunks <= 0) return;
  if (chunks == 1 || (threads_.empty() && !idle_peers_) || busy_ ||
      chunks >= static_cast<int64_t>(kClosed)) {
    for (int64_t c = 0; c < chunks; ++c) fn(ctx, c);
    return;
  }
  busy_ = true;
  fn_ = fn;
  ctx_ = ctx;
  chunks_.store(chunks, std::memory_order_relaxed);
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t gen = generation_.load(std::memory_order_relaxed) + 1;
  const uint64_t tag = (gen & kIndexMask) << 32;
  ticket_.store(tag, std::memory_order_release);
  generation_.store(gen);  // seq_cst: ordered against the sleepers_ read below
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(sleep_mu_);
    wake_.notify_all();
  }
  work(gen);
  // Only chunks a helper has claimed are outstanding: they are running now.
  for (int spins = 0; done_.load(std::memory_order_acquire) < chunks; ++spins) {
    if (spins < 4096) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // the helper holding a chunk was descheduled
    }
  }
  ticket_.store(tag | kClosed, std::memory_order_release);
  busy_ = false;
  if (error_) std::rethrow_exception(error_);
}

bool ThreadTeam::help() {
  if (stop_.load(std::memory_order_relaxed)) return false;
  // The claim protocol is the helpers' (work()): a chunk of an earlier or later job than the
  // one read here cannot be claimed.
  const uint64_t g = generation_.load(std::memory_order_acquire);
  ThreadTeam* own = g_current;
  g_current = nullptr;
  const int64_t ran = work(g);
  g_current = own;
  return ran > 0;
}

void ThreadTeam::helper_loop() {
  // The generation the team started with: a job (or the stop) published before this thread
  // got to run is not missed.
  uint64_t seen = 0;
  while (true) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    auto start = std::chrono::steady_clock::now();
    for (int polls = 0; g == seen; ++polls) {
      if (polls % kPollsPerClockRead == kPollsPerClockRead - 1 &&
          std::chrono::steady_clock::now() - start > kSpin) {
        std::unique_lock<std::mutex> lock(sleep_mu_);
        sleepers_.fetch_add(1);  // seq_cst: a job published after this is seen or notified
        wake_.wait(lock, [&] { return generation_.load() != seen; });
        sleepers_.fetch_sub(1);
        start = std::chrono::steady_clock::now();
      } else {
        cpu_relax();
      }
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    work(g);
  }
}

}  // namespace partix::backend::cpu

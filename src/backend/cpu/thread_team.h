// The helper threads of one device worker, for splitting a kernel's loop.
//
// A fork-join team (OpenMP's) makes the calling thread wait at the end of every parallel
// region until each member has arrived, even members that had nothing left to do. On a machine
// whose cores are also busy with other work, a member that is not scheduled stalls every
// region by a scheduler time slice (milliseconds, against microseconds of work in a decode
// step). Here the caller and the helpers claim chunks from one counter; the caller runs chunks
// too and waits only for chunks a helper has already claimed, so a helper that arrives late
// finds nothing left and costs nothing. Helpers spin briefly between jobs (a decode step's
// kernels come microseconds apart), then sleep.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace partix::backend::cpu {

// One round of a spin-wait: tells the core it is spinning (on x86, `pause`).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

class ThreadTeam {
 public:
  // Starts `helpers` threads (0: the caller alone). Throws partix::Error when a thread cannot
  // be started.
  explicit ThreadTeam(int helpers);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  // The threads that would run a job published now: the caller, the helpers, and the peers
  // idle at this moment (set_idle_peers).
  int size() const {
    return static_cast<int>(threads_.size()) + 1 +
           (idle_peers_ ? idle_peers_->load(std::memory_order_relaxed) : 0);
  }

  // Threads outside the team may run chunks of its jobs (help()): the fiber pool's other
  // device threads, while all their devices wait in collectives. `idle` counts those idle now;
  // kernels split their work for them (size()) only then.
  void set_idle_peers(const std::atomic<int>* idle) { idle_peers_ = idle; }
  // Claims and runs chunks of this team's open job, if any, on the calling thread (not one of
  // the team's; chunks it runs see no team of their own, so nothing nests). Returns whether it
  // ran any.
  bool help();

  // Calls fn(ctx, chunk) once for every chunk in [0, chunks), on the calling thread and the
  // helpers, and returns when all calls have returned. The first exception a call throws is
  // rethrown here (after every claimed chunk has finished). A call made while the team is busy
  // (from inside a chunk) runs serially on the caller.
  void run(int64_t chunks, void (*fn)(void* ctx, int64_t chunk), void* ctx);

  // The team of the calling thread (set by the device worker that owns it), or nullptr.
  static ThreadTeam* current();
  static void set_current(ThreadTeam* team);

 private:
  void helper_loop();
  void wake_all_to_stop();
  // Claims and runs chunks of job `gen` until none is left; returns how many it ran.
  int64_t work(uint64_t gen);

  // (generation << 32) | next unclaimed chunk: a claim is a compare-and-swap that only
  // succeeds within the generation it read, so a helper that wakes late cannot claim a chunk of
  // a later job with an earlier job's function.
  // Closed before the first job (index 0xffffffff of generation 0): a thread that helps before
  // any job was published claims nothing.
  std::atomic<uint64_t> ticket_{0xffffffffu};
  std::atomic<uint64_t> generation_{0};  // bumped to publish a job; helpers wait on it
  std::atomic<int64_t> done_{0};         // chunks finished in the current job
  std::atomic<int> sleepers_{0};
  // Sleeping helpers wait here (not on the atomic itself: libstdc++ 12's wait on a 64-bit
  // atomic can miss a notification).
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  std::atomic<bool> stop_{false};
  bool busy_ = false;  // only the owning thread reads or writes it
  std::atomic<int64_t> chunks_{0};  // read by helpers before they claim
  void (*fn_)(void*, int64_t) = nullptr;
  void* ctx_ = nullptr;
  std::mutex error_mu_;
  std::exception_ptr error_;
  std::vector<std::thread> threads_;
  const std::atomic<int>* idle_peers_ = nullptr;
};

}  // namespace partix::backend::cpu

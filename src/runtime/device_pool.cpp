#include "runtime/device_pool.h"

#include <omp.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>

#include "backend/cpu/thread_team.h"
#include "core/device_registry.h"
#include "core/errors.h"
#include "core/fiber.h"
#include "partix/device.h"
#include "prim/callback.h"

namespace partix::runtime {

namespace {

class Worker {
 public:
  // The kernels' helper threads start here, so that a failure is an error of the caller.
  // own_thread: the worker runs submitted tasks on a thread of its own (thread-per-device
  // mode); otherwise it only lends its kernel team to a one-device program (run_here).
  Worker(int threads, bool own_thread)
      : team_(std::make_unique<backend::cpu::ThreadTeam>(threads - 1)) {
    if (own_thread) thread_ = std::thread([this] { loop(); });
  }
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  // Hands this worker its task of the current program. A program holds its devices until all
  // its tasks are done, so the worker is idle; moving a std::function cannot throw, so a run never
  // submits partially.
  void submit(std::function<void()>&& fn) noexcept {
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = std::move(fn);
    }
    cv_.notify_one();
  }
  // Runs fn on the calling thread with this worker's kernel threads; the caller holds the
  // device, so the worker itself is idle meanwhile.
  void run_here(const std::function<void()>& fn) {
    backend::cpu::ThreadTeam* prev_team = backend::cpu::ThreadTeam::current();
    const int prev_omp = omp_get_max_threads();
    omp_set_num_threads(1);
    backend::cpu::ThreadTeam::set_current(team_.get());
    fn();  // catches everything itself
    backend::cpu::ThreadTeam::set_current(prev_team);
    omp_set_num_threads(prev_omp);
  }

 private:
  void loop() {
    // oneDNN runs on one OpenMP thread per call: the device's thread team splits large
    // products (backend/cpu/dot_kernels.cpp), and no OpenMP team spins on its cores.
    omp_set_num_threads(1);  // per calling thread
    backend::cpu::ThreadTeam::set_current(team_.get());
    while (true) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || task_; });
        if (!task_) return;
        fn = std::move(task_);
        task_ = nullptr;
      }
      fn();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> task_;
  bool stop_ = false;
  std::unique_ptr<backend::cpu::ThreadTeam> team_;
  std::thread thread_;
};

// A lock for the fiber queues, held for a few instructions at a time by the pool's threads
// (one per core) on every fiber switch. A std::mutex there put a thread to sleep in the kernel
// whenever both touched the queues at once, and waking it cost more than the switch.
class SpinLock {
 public:
  // A holder the operating system preempted (more threads than cores: several processes on
  // one machine) keeps the lock for a time slice: past a short spin, waiters yield the core.
  void lock() noexcept {
    for (unsigned spins = 0; flag_.exchange(true, std::memory_order_acquire);) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins % 64 == 0) {
          std::this_thread::yield();
          continue;
        }
        backend::cpu::cpu_relax();
      }
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

// Device fibers (core/fiber.h) on one thread per core. Each thread has its own queue of
// devices: it takes the next fiber there, runs it until it finishes or waits in a collective,
// and puts a waiting one back at the end of its own queue. A device thus stays on the thread
// (and the core's caches) where it last ran, across collectives and across programs: a device
// that moved between cores at every collective found its buffers' headers in the other core's
// cache on every instruction. A thread whose own devices all wait takes the next one from the
// longest other queue (so one whose devices have less to do, skipping products of padding,
// takes work from the others), and that device then stays with it. A thread that has found
// every fiber still waiting, with no collective released meanwhile, spins for 50 µs and then
// sleeps until one is released somewhere (or new fibers come).
class FiberPool {
 public:
  // idle_spin: threads with nothing queued spin before they sleep; not where several processes
  // may share the cores (their spinning would take them from the devices the others run).
  FiberPool(int threads, int team_threads, bool idle_spin)
      : idle_spin_(idle_spin), queues_(static_cast<size_t>(threads)) {
    for (int i = 0; i < threads; ++i) {
      teams_.push_back(std::make_unique<backend::cpu::ThreadTeam>(team_threads - 1));
      if (threads > 1) teams_.back()->set_idle_peers(&idle_);
    }
    try {
      for (int i = 0; i < threads; ++i) {
        threads_.emplace_back(
            [this, i] { loop(static_cast<size_t>(i), teams_[static_cast<size_t>(i)].get()); });
      }
    } catch (...) {
      // A thread that could not start (no memory for its stack): those already running stop
      // and are joined here, since a joinable std::thread destroyed while the error unwinds
      // would end the process without a word.
      stop_and_join();
      throw;
    }
  }
  ~FiberPool() { stop_and_join(); }
  // fibers[i] runs local device devices[i].
  void submit(std::vector<std::unique_ptr<detail::Fiber>>&& fibers,
              const std::vector<size_t>& devices) {
    {
      std::lock_guard<SpinLock> lock(queue_mu_);
      for (size_t i = 0; i < fibers.size(); ++i) {
        const size_t d = devices[i];
        if (home_.size() <= d) {
          const size_t from = home_.size();
          home_.resize(d + 1);
          for (size_t k = from; k <= d; ++k) home_[k] = k % queues_.size();
        }
        queues_[home_[d]].push_back({std::move(fibers[i]), d});
        queued_.fetch_add(1);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);  // a sleeper checks queued_ under it
    }
    cv_.notify_all();
    detail::notify_progress();  // threads idle in wait_for_progress
  }

 private:
  void stop_and_join() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true);
    }
    cv_.notify_all();
    detail::notify_progress();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }
  struct Entry {
    std::unique_ptr<detail::Fiber> fiber;
    size_t device;
  };
  // The next fiber for thread `me` (with queue_mu_ held and some fiber queued): its own, unless it
  // has none or `steal` asks for another thread's.
  Entry take(size_t me, bool steal) {
    size_t from = me;
    if (queues_[me].empty() || steal) {
      for (size_t q = 0; q < queues_.size(); ++q) {
        if (q != me && queues_[q].size() > (from == me ? 0 : queues_[from].size())) from = q;
      }
      if (from == me && queues_[me].empty()) detail::internal_error("FiberPool", "no fiber queued");
    }
    Entry e = std::move(queues_[from].front());
    queues_[from].pop_front();
    queued_.fetch_sub(1);
    return e;
  }

  void loop(size_t me, backend::cpu::ThreadTeam* team) {
    omp_set_num_threads(1);
    backend::cpu::ThreadTeam::set_current(team);
    size_t idle_streak = 0;     // fibers found waiting in a row, nothing released meanwhile
    size_t polling_streak = 0;  // fibers found polling another process in a row
    bool steal = false;         // this thread's own fibers all wait: try another thread's
    while (true) {
      Entry e;
      while (true) {
        {
          std::lock_guard<SpinLock> lock(queue_mu_);
          if (queued_.load() > 0) {
            e = take(me, steal);
            break;
          }
        }
        // Nothing queued: spin a little first (the next program of a loop of small ones
        // usually comes within microseconds, and a thread woken from sleep takes tens of them
        // to start), then sleep until a submit or a requeue (each checks waiting_ after
        // queueing, as this checks queued_ after counting itself waiting).
        if (spin_for_queued()) continue;
        std::unique_lock<std::mutex> lock(mu_);
        waiting_.fetch_add(1);
        cv_.wait(lock, [this] { return stop_.load() || queued_.load() > 0; });
        waiting_.fetch_sub(1);
        if (stop_.load() && queued_.load() == 0) return;
      }
      const uint64_t epoch = detail::progress_epoch();
      if (e.fiber->resume()) {
        idle_streak = 0;
        steal = false;
        continue;  // finished: its task has told its caller
      }
      const detail::YieldKind kind = detail::take_yield_kind();
      const bool idle = kind == detail::YieldKind::kIdle && detail::progress_epoch() == epoch;
      const bool polling = kind == detail::YieldKind::kPolling;
      size_t queued, own;
      {
        std::lock_guard<SpinLock> lock(queue_mu_);
        home_[e.device] = me;
        queues_[me].push_back(std::move(e));
        queued = queued_.fetch_add(1) + 1;
        own = queues_[me].size();
      }
      if (waiting_.load() > 0) {
        { std::lock_guard<std::mutex> lock(mu_); }
        cv_.notify_one();
      }
      if (!idle || polling) {
        idle_streak = 0;
        steal = false;
        // Every device of this thread polls another process: give the core to any other
        // runnable thread (another process's devices on the same cores, which the wait is
        // for) before polling again. The system call returns at once when none is waiting.
        polling_streak = polling ? polling_streak + 1 : 0;
        if (polling_streak >= own) {
          polling_streak = 0;
          std::this_thread::yield();
        }
        continue;
      }
      polling_streak = 0;
      ++idle_streak;
      steal = idle_streak >= own;
      if (idle_streak < queued) continue;
      idle_streak = 0;
      steal = false;
      // Every queued fiber waits for a collective that others must reach (a release after
      // `epoch` was read moves it, so none is missed).
      // Meanwhile it runs chunks of the products the other threads' devices have split for it
      // (ThreadTeam::help): a device with more to do than the others (the real attention
      // heads, where the others hold padding) no longer keeps a core idle until it reaches the
      // collective. While there is such work, it keeps spinning.
      constexpr auto kSpin = std::chrono::microseconds(50);
      auto spin_until = std::chrono::steady_clock::now() + kSpin;
      idle_.fetch_add(1, std::memory_order_relaxed);
      // The clock is read every 32 rounds: reading it each round was most of the spin.
      for (unsigned round = 1; detail::progress_epoch() == epoch; ++round) {
        bool helped = false;
        for (size_t q = 0; q < teams_.size(); ++q) {
          if (q != me) helped |= teams_[q]->help();
        }
        if (helped) {
          spin_until = std::chrono::steady_clock::now() + kSpin;
          continue;
        }
        backend::cpu::cpu_relax();
        if (round % 32 == 0 && std::chrono::steady_clock::now() >= spin_until) break;
      }
      idle_.fetch_sub(1, std::memory_order_relaxed);
      // Bounded, so that waiting fibers see their collective timeouts.
      if (detail::progress_epoch() == epoch)
        detail::wait_for_progress(epoch, std::chrono::milliseconds(2));
    }
  }

  // Whether a fiber was queued within kIdleSpin (false at once when stopping).
  bool spin_for_queued() {
    if (!idle_spin_) return false;
    constexpr auto kIdleSpin = std::chrono::microseconds(50);
    const auto until = std::chrono::steady_clock::now() + kIdleSpin;
    for (unsigned round = 1; queued_.load(std::memory_order_relaxed) == 0; ++round) {
      if (stop_.load(std::memory_order_relaxed)) return false;
      backend::cpu::cpu_relax();
      if (round % 32 == 0 && std::chrono::steady_clock::now() >= until) return false;
    }
    return true;
  }

  const bool idle_spin_;
  SpinLock queue_mu_;                      // queues_, home_
  std::vector<std::deque<Entry>> queues_;  // by thread
  std::vector<size_t> home_;               // by local device: the thread that last ran it
  std::atomic<size_t> queued_{0};
  // Threads with nothing to run sleep on cv_ (under mu_) until something is queued.
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> waiting_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<backend::cpu::ThreadTeam>> teams_;
  std::atomic<int> idle_{0};  // threads spinning with every fiber waiting (they help teams_)
  std::vector<std::thread> threads_;
};

// fork() copies only the calling thread: in a child forked after the pool started, the pool's
// threads (device threads, kernel helpers) are gone, and a lock one of them held stays locked,
// so a program there would wait forever. The child refuses to run programs instead; the rest
// of the child (its own numpy work, exit) is unaffected.
std::atomic<bool> g_forked{false};
pid_t g_started_in = 0;  // the process that started the pool

void on_fork_child() { g_forked.store(true, std::memory_order_relaxed); }

[[noreturn]] void fail_forked() {
  detail::fail("runtime",
               "the partix runtime was started in process {} before fork(); a forked child "
               "(this is process {}) cannot use it: fork() copies only the calling thread, so "
               "the runtime's device threads are gone. Use partix before forking only in the "
               "parent, or start the workers as new processes (multiprocessing's 'spawn' or "
               "'forkserver' start method)",
               g_started_in, getpid());
}

// Thread-per-device mode (PARTIX_DEVICE_THREADS=1): each device's task on its own worker
// thread, as before fibers; kept for debugging (a debugger and perf see one thread per device).
bool thread_per_device_mode() {
  static const bool on = [] {
    const char* e = std::getenv("PARTIX_DEVICE_THREADS");
    return e != nullptr && std::string_view(e) == "1";
  }();
  return on;
}

}  // namespace

struct DevicePool::Impl {
  std::vector<std::unique_ptr<Worker>> workers;  // by local device index
  std::unique_ptr<FiberPool> fibers;             // one thread per core (at most one per device)
  // Devices held by a running program: programs on overlapping devices run one at a time (so
  // their tasks never queue in different orders on two workers and wait on each other in a
  // collective); programs on disjoint devices run at once.
  std::mutex busy_mu;
  std::condition_variable busy_cv;
  std::vector<bool> busy;
};

DevicePool::DevicePool() : impl_(new Impl) {
  int n = local_device_count();
  int threads = detail::threads_per_device();
  try {
    const bool per_device = thread_per_device_mode();
    for (int i = 0; i < n; ++i)
      impl_->workers.push_back(std::make_unique<Worker>(threads, per_device));
    if (!per_device) {
      const int fiber_threads = std::max(1, std::min(n, detail::usable_cores()));
      impl_->fibers = std::make_unique<FiberPool>(
          fiber_threads, std::max(1, detail::usable_cores() / fiber_threads),
          /*idle_spin=*/process_count() == 1);
    }
    impl_->busy.assign(static_cast<size_t>(n), false);
    g_started_in = getpid();
    pthread_atfork(nullptr, nullptr, on_fork_child);
  } catch (const std::system_error& e) {
    delete impl_;  // joins the workers already started
    detail::fail("runtime",
                 "could not start the worker threads of {} devices (out of host memory for their "
                 "stacks, or at the process's thread limit): {}",
                 n, e.what());
  } catch (...) {
    delete impl_;
    throw;
  }
}

DevicePool::~DevicePool() { delete impl_; }

DevicePool& DevicePool::instance() {
  // Never destroyed: when main returns while another host thread still runs a program, exit
  // must not wait for (or free memory under) workers in the middle of a collective.
  static DevicePool* pool = new DevicePool;
  return *pool;
}

std::vector<std::exception_ptr> DevicePool::run(const std::vector<int>& device_ids,
                                                const std::function<void(size_t)>& task) {
  if (g_forked.load(std::memory_order_relaxed)) fail_forked();
  if (prim::in_host_callback()) {
    throw Error(
        "[host callback] a callback's function cannot run partix programs: its own program "
        "holds the devices until it returns. Compute with numpy inside the callback.");
  }
  const size_t n = device_ids.size();
  std::vector<std::exception_ptr> errors(n);
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  const int first_local = local_devices().empty() ? 0 : local_devices()[0].id;
  // Every task is built before any is submitted (building may run out of memory).
  std::vector<size_t> workers(n);
  std::vector<std::function<void()>> tasks(n);
  for (size_t i = 0; i < n; ++i) {
    workers[i] = static_cast<size_t>(device_ids[i] - first_local);
    if (workers[i] >= impl_->workers.size()) {
      detail::internal_error("DevicePool", fmt::format("device {} is not local", device_ids[i]));
    }
    tasks[i] = [&, i] {
      try {
        task(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      if (++done == n) cv.notify_one();
    };
  }
  {
    std::unique_lock<std::mutex> busy_lock(impl_->busy_mu);
    impl_->busy_cv.wait(busy_lock, [&] {
      return std::none_of(workers.begin(), workers.end(), [&](size_t w) { return impl_->busy[w]; });
    });
    for (size_t w : workers) impl_->busy[w] = true;
  }
  struct Release {
    Impl* impl;
    const std::vector<size_t>& workers;
    ~Release() {
      {
        std::lock_guard<std::mutex> busy_lock(impl->busy_mu);
        for (size_t w : workers) impl->busy[w] = false;
      }
      impl->busy_cv.notify_all();
    }
  } release{impl_, workers};
  if (n == 1) {
    // One device: its task runs on the calling thread, as the device's worker would run it
    // (its kernel threads, one OpenMP thread), saving two thread hand-offs per small program.
    impl_->workers[workers[0]]->run_here(tasks[0]);
    return errors;
  }
  if (thread_per_device_mode()) {
    for (size_t i = 0; i < n; ++i) impl_->workers[workers[i]]->submit(std::move(tasks[i]));
  } else {
    // Fibers are made before any is submitted (making one may fail).
    std::vector<std::unique_ptr<detail::Fiber>> fibers;
    for (size_t i = 0; i < n; ++i)
      fibers.push_back(std::make_unique<detail::Fiber>(std::move(tasks[i])));
    impl_->fibers->submit(std::move(fibers), workers);
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == n; });
  return errors;
}

namespace {
// Lower is more informative: the error a device raised itself before any consequence of it.
int rank_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const CollectiveCancelled&) {
    return 3;  // a consequence of another device's failure
  } catch (const TimeoutError&) {
    return 2;  // peers of a failed device may time out after it
  } catch (const Error&) {
    return 0;
  } catch (...) {
    return 1;
  }
}
}  // namespace

void rethrow_first(const std::vector<std::exception_ptr>& errors, const std::vector<int>& ids) {
  std::exception_ptr first;
  size_t first_i = 0;
  int best = 4;
  for (size_t i = 0; i < errors.size(); ++i) {
    if (!errors[i]) continue;
    const int r = rank_of(errors[i]);
    if (r < best) best = r, first = errors[i], first_i = i;
  }
  if (!first) return;
  try {
    std::rethrow_exception(first);
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    detail::fail("runtime", "device {} ran out of host memory", ids[first_i]);
  } catch (const std::exception& e) {
    detail::fail("runtime", "device {} failed: {}", ids[first_i], e.what());
  }
}

}  // namespace partix::runtime

#include "runtime/device_pool.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string_view>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

#include "backend/cpu/thread_team.h"
#include "core/device_registry.h"
#include "core/fiber.h"
#include "core/errors.h"
#include "partix/device.h"

namespace partix::runtime {

namespace {

class Worker {
 public:
  // The kernels' helper threads start here, so that a failure is an error of the caller.
  explicit Worker(int threads)
      : team_(std::make_unique<backend::cpu::ThreadTeam>(threads - 1)),
        thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
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

// One thread per core running device fibers (core/fiber.h): round-robin over its fibers; a
// fiber that waits in a collective yields, and when every fiber it holds waits, the thread
// spins for 50 µs and then sleeps until a collective is released somewhere (or new fibers come).
class FiberThread {
 public:
  explicit FiberThread(int threads)
      : team_(std::make_unique<backend::cpu::ThreadTeam>(threads - 1)),
        thread_([this] { loop(); }) {}
  ~FiberThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    detail::notify_progress();
    thread_.join();
  }
  void submit(std::vector<std::unique_ptr<detail::Fiber>>&& fibers) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& f : fibers) inbox_.push_back(std::move(f));
    }
    cv_.notify_one();
    detail::notify_progress();  // a thread idle between rounds
  }

 private:
  bool has_new() {
    std::lock_guard<std::mutex> lock(mu_);
    return !inbox_.empty();
  }
  void loop() {
    omp_set_num_threads(1);
    backend::cpu::ThreadTeam::set_current(team_.get());
    std::vector<std::unique_ptr<detail::Fiber>> mine;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (mine.empty()) cv_.wait(lock, [this] { return stop_ || !inbox_.empty(); });
        if (stop_ && inbox_.empty() && mine.empty()) return;
        for (auto& f : inbox_) mine.push_back(std::move(f));
        inbox_.clear();
      }
      const uint64_t epoch = detail::progress_epoch();
      bool finished = false;
      for (size_t i = 0; i < mine.size();) {
        if (mine[i]->resume()) {
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(i));
          finished = true;
        } else {
          ++i;
        }
      }
      // A fiber polling another process is not idle.
      if (detail::take_poll_request() || finished || mine.empty()) continue;
      // Every fiber here waits for a collective that others must reach: nothing to run until
      // one is released (a release after `epoch` was read moves it, so none is missed).
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
      while (detail::progress_epoch() == epoch && std::chrono::steady_clock::now() < spin_until) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
      }
      if (detail::progress_epoch() == epoch && !has_new()) {
        // Bounded, so that waiting fibers see their collective timeouts.
        detail::wait_for_progress(epoch, std::chrono::milliseconds(2));
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<detail::Fiber>> inbox_;
  bool stop_ = false;
  std::unique_ptr<backend::cpu::ThreadTeam> team_;
  std::thread thread_;
};

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
  std::vector<std::unique_ptr<FiberThread>> fiber_threads;  // one per core (at most one per device)
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
    for (int i = 0; i < n; ++i) impl_->workers.push_back(std::make_unique<Worker>(threads));
    const int fiber_threads = std::max(1, std::min(n, detail::usable_cores()));
    const int per_thread = std::max(1, detail::usable_cores() / fiber_threads);
    for (int i = 0; i < fiber_threads; ++i) {
      impl_->fiber_threads.push_back(std::make_unique<FiberThread>(per_thread));
    }
    impl_->busy.assign(static_cast<size_t>(n), false);
  } catch (const std::system_error& e) {
    delete impl_;  // joins the workers already started
    detail::fail("runtime", "could not start the worker threads of {} devices: {}", n, e.what());
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
    // Device i's fiber runs on thread (local index % threads), so that every thread holds an
    // equal share of the program's devices. Fibers are made before any is submitted.
    const size_t t = impl_->fiber_threads.size();
    std::vector<std::vector<std::unique_ptr<detail::Fiber>>> per_thread(t);
    for (size_t i = 0; i < n; ++i) {
      per_thread[workers[i] % t].push_back(std::make_unique<detail::Fiber>(std::move(tasks[i])));
    }
    for (size_t k = 0; k < t; ++k) {
      if (!per_thread[k].empty()) impl_->fiber_threads[k]->submit(std::move(per_thread[k]));
    }
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

#include "runtime/device_pool.h"

#include <omp.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "core/device_registry.h"
#include "core/errors.h"
#include "partix/device.h"

namespace partix::runtime {

namespace {

class Worker {
 public:
  explicit Worker(int threads) : thread_([this, threads] { loop(threads); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void submit(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

 private:
  void loop(int threads) {
    omp_set_num_threads(threads);  // per calling thread: this worker's OpenMP team size
    while (true) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

struct DevicePool::Impl {
  std::vector<std::unique_ptr<Worker>> workers;  // by local device index
  std::mutex run_mu;                              // one program at a time
};

DevicePool::DevicePool() : impl_(new Impl) {
  int n = local_device_count();
  int threads = detail::threads_per_device();
  for (int i = 0; i < n; ++i) impl_->workers.push_back(std::make_unique<Worker>(threads));
}

DevicePool::~DevicePool() { delete impl_; }

DevicePool& DevicePool::instance() {
  static DevicePool pool;
  return pool;
}

std::vector<std::exception_ptr> DevicePool::run(const std::vector<int>& device_ids,
                                                const std::function<void(size_t)>& task) {
  std::lock_guard<std::mutex> run_lock(impl_->run_mu);
  const size_t n = device_ids.size();
  std::vector<std::exception_ptr> errors(n);
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  const int first_local = local_devices().empty() ? 0 : local_devices()[0].id;
  for (size_t i = 0; i < n; ++i) {
    size_t w = static_cast<size_t>(device_ids[i] - first_local);
    if (w >= impl_->workers.size()) {
      detail::internal_error("DevicePool", fmt::format("device {} is not local", device_ids[i]));
    }
    impl_->workers[w]->submit([&, i] {
      try {
        task(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      if (++done == n) cv.notify_one();
    });
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == n; });
  return errors;
}

void rethrow_first(const std::vector<std::exception_ptr>& errors, const std::vector<int>& ids) {
  std::exception_ptr first;
  size_t first_i = 0;
  // Prefer a partix::Error that is not a timeout: peers of a failed device time out after it.
  for (int pass = 0; pass < 3 && !first; ++pass) {
    for (size_t i = 0; i < errors.size() && !first; ++i) {
      if (!errors[i]) continue;
      try {
        std::rethrow_exception(errors[i]);
      } catch (const TimeoutError&) {
        if (pass == 2) first = errors[i], first_i = i;
      } catch (const Error&) {
        if (pass == 0) first = errors[i], first_i = i;
      } catch (...) {
        if (pass == 1) first = errors[i], first_i = i;
      }
    }
  }
  if (!first) return;
  try {
    std::rethrow_exception(first);
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    detail::fail("runtime", "device {} ran out of memory", ids[first_i]);
  } catch (const std::exception& e) {
    detail::fail("runtime", "device {} failed: {}", ids[first_i], e.what());
  }
}

}  // namespace partix::runtime

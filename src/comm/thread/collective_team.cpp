#include "comm/thread/collective_team.h"

#include <sched.h>

#include <atomic>
#include <exception>
#include <system_error>

namespace partix::comm {

struct CollectiveTeam::Job {
  const std::function<void(int64_t)>* fn = nullptr;
  int64_t pieces = 0;
  std::atomic<int64_t> next{0};  // the next unclaimed piece
  std::atomic<int64_t> done{0};  // pieces finished
  std::mutex mu;                 // guards error and finished
  std::condition_variable finished_cv;
  bool finished = false;
  std::exception_ptr error;
};

int process_cores() {
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  return cores < 1 ? 1 : cores;
}

CollectiveTeam& CollectiveTeam::instance() {
  // Never destroyed: a program may still be in a collective when main returns.
  static CollectiveTeam* team = new CollectiveTeam(process_cores() - 1);
  return *team;
}

CollectiveTeam::CollectiveTeam(int helpers) {
  for (int i = 0; i < helpers; ++i) {
    try {
      threads_.emplace_back([this] { helper_loop(); });
    } catch (const std::system_error&) {
      break;  // fewer helpers only slow collectives down
    }
  }
}

CollectiveTeam::~CollectiveTeam() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void CollectiveTeam::work(Job& job) {
  while (true) {
    const int64_t i = job.next.fetch_add(1);
    // A helper that wakes after the job ended claims past its end and never touches fn,
    // which may be gone by then.
    if (i >= job.pieces) return;
    try {
      (*job.fn)(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.mu);
      if (!job.error) job.error = std::current_exception();
    }
    if (job.done.fetch_add(1) + 1 == job.pieces) {
      std::lock_guard<std::mutex> lock(job.mu);
      job.finished = true;
      job.finished_cv.notify_all();
    }
  }
}

void CollectiveTeam::helper_loop() {
  uint64_t seen = 0;
  while (true) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    if (job) work(*job);
  }
}

void CollectiveTeam::run(int64_t pieces, const std::function<void(int64_t)>& fn) {
  std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
  if (pieces <= 1 || threads_.empty() || !busy.owns_lock()) {
    // As the team would: every piece runs, the first failure is raised at the end.
    std::exception_ptr error;
    for (int64_t i = 0; i < pieces; ++i) {
      try {
        fn(i);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->pieces = pieces;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = job;
    ++generation_;
  }
  wake_.notify_all();
  work(*job);
  {
    std::unique_lock<std::mutex> lock(job->mu);
    job->finished_cv.wait(lock, [&] { return job->finished; });
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_.reset();
  }
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace partix::comm

// The threads that do the memory work of in-process collectives: one per core this process may
// run on (the calling thread and cores - 1 helpers), shared by every communicator.
//
// When the local devices of a group have all arrived at a collective, none of them has anything
// else to do until it completes, so the whole reduction or copy is one job for this team, split
// by bytes. With one thread per device each device would do 1/n of it: on a machine with fewer
// cores than devices those threads time-slice, and every collective needs a second meeting to
// know that all shares are done. Here the last device to arrive runs the job with the team while
// the others sleep, and releases them once it is complete.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace partix::comm {

class CollectiveTeam {
 public:
  // The process's team (helpers start on first use; a helper that cannot start is left out).
  static CollectiveTeam& instance();
  // A team of the caller and `helpers` threads (tests use small ones).
  explicit CollectiveTeam(int helpers);
  ~CollectiveTeam();
  CollectiveTeam(const CollectiveTeam&) = delete;
  CollectiveTeam& operator=(const CollectiveTeam&) = delete;

  // Threads that can work on one job, the caller included.
  int size() const { return static_cast<int>(threads_.size()) + 1; }

  // Calls fn(i) for every i in [0, pieces) on the calling thread and the helpers, and returns
  // when every call has returned; the first exception a call throws is rethrown then. Pieces
  // are claimed from one counter, so a helper that is slow to wake finds nothing left rather
  // than delaying the job. While another caller's job runs (collectives of programs on
  // disjoint devices), the calls run on the calling thread alone.
  void run(int64_t pieces, const std::function<void(int64_t)>& fn);

 private:
  struct Job;
  void helper_loop();
  static void work(Job& job);

  std::mutex mu_;
  std::condition_variable wake_;
  std::shared_ptr<Job> job_;  // the job in progress, or null
  uint64_t generation_ = 0;   // bumped for every job published
  bool stop_ = false;
  std::mutex busy_;  // held by the caller whose job the helpers work on
  std::vector<std::thread> threads_;
};

// Cores this process may run on (its affinity mask), at least 1.
int process_cores();

}  // namespace partix::comm

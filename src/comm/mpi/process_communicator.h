// Collectives of one execution whose mesh spans several processes: hierarchical.
// The members of a group that live in this process meet in shared memory (a Rendezvous); the
// first of them in rank order, the process's leader for the group, does the local work
// (reductions, copies) on the collective team and makes every MPI call of the collective, exchanging with the leaders of
// the other processes directly (so every process hears from every other, and a silent one is
// named). Groups entirely inside this process use the in-process communicator unchanged.
//
// Reductions are deterministic and identical on every process: each process reduces its
// members in rank order, then chunk i of the result is reduced by the i-th process over the
// processes in order and sent to the others.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi/mpi_runtime.h"
#include "comm/rendezvous.h"
#include "comm/thread/thread_communicator.h"

namespace partix::comm {

class ProcessCommunicator final : public Communicator {
 public:
  // An execution on `mesh`, whose devices live in several processes (this one among them).
  explicit ProcessCommunicator(const Mesh& mesh);
  ~ProcessCommunicator() override;
  std::string name() const override { return "processes"; }

  void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceKind kind,
                  const Group& group, int self) override;
  void all_gather(const void* in, void* out, int64_t bytes, const Group& group,
                  int self) override;
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceKind kind,
                      const Group& group, int self) override;
  void all_to_all(const void* in, void* out, int64_t bytes, const Group& group,
                  int self) override;
  void permute(const void* in, void* out, int64_t bytes,
               const std::vector<std::pair<int, int>>& pairs, const Group& group,
               int self) override;
  void barrier(const Group& group, int self) override;
  detail::Buffer all_reduce_to_buffer(const void* in, int64_t count, DType dtype,
                                      ReduceKind kind, const Group& group, int self) override;
  detail::Buffer all_gather_to_buffer(const void* in, int64_t bytes, const Group& group,
                                      int self) override;

  // The processes of the mesh (ascending) and this execution's number among executions on
  // that same set of processes.
  const std::vector<int>& processes() const { return processes_; }

  // How a group's ranks fall on processes.
  struct Split {
    std::vector<int> procs;                  // ascending
    std::vector<int> proc_of_rank;           // index into procs, per rank
    std::vector<std::vector<int>> ranks_of;  // per index into procs, ranks ascending
    int me = 0;                              // index of this process
    const std::vector<int>& local() const { return ranks_of[static_cast<size_t>(me)]; }
  };
  struct Slot;

 protected:
  void wake_all() override;

 private:
  Slot& slot(const Group& group);
  // Runs one collective: the local members meet, the leader runs work(slot), all leave.
  template <class Work>
  void run(const Call& call, const Group& group, int self, const void* in, void* out, Work work);
  mpi::ExchangeContext context(const char* what, const Group& group, int phase);

  ThreadCommunicator local_;
  std::vector<int> processes_;
  uint64_t key_ = 0, run_ = 0;
  std::mutex mu_;
  std::map<Group, std::unique_ptr<Slot>> slots_;
};

}  // namespace partix::comm

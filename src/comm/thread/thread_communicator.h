// In-process collectives among local devices (fibers, or worker threads), for one execution of a
// program: members publish their buffers in a shared rendezvous; the last to arrive does the whole
// collective in one pass over its peers' memory, split by bytes over the collective team (one
// thread per core), then releases them. all_reduce_to_buffer and all_gather_to_buffer compute one
// result that every member receives as an alias (memory is still attributed to each device, as if
// copied).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "comm/communicator.h"

namespace partix::comm {

struct Call;  // comm/rendezvous.h

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator();
  ~ThreadCommunicator() override;
  std::string name() const override { return "threads"; }

  void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceKind kind,
                  const Group& group, int self) override;
  void all_gather(const void* in, void* out, int64_t bytes, const Group& group, int self) override;
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceKind kind,
                      const Group& group, int self) override;
  void all_to_all(const void* in, void* out, int64_t bytes, const Group& group, int self) override;
  void permute(const void* in, void* out, int64_t bytes,
               const std::vector<std::pair<int, int>>& pairs, const Group& group,
               int self) override;
  void barrier(const Group& group, int self) override;
  detail::Buffer all_reduce_to_buffer(const void* in, int64_t count, DType dtype, ReduceKind kind,
                                      const Group& group, int self) override;
  detail::Buffer all_gather_to_buffer(const void* in, int64_t bytes, const Group& group,
                                      int self) override;
  // Members wait `slack` longer than the collective timeout (see Rendezvous::wait_all).
  void set_wait_slack(std::chrono::milliseconds slack) { slack_ = slack; }
  // Raises CollectiveCancelled when a member of this execution has failed.
  void check_abort(const char* what, const Group& group) const { throw_if_aborted(what, group); }

  struct Slot;

 protected:
  void wake_all() override;

 private:
  Slot& slot(const Group& group);
  // Publishes this member's buffers and waits for all members; the last to arrive runs
  // work() for all of them, then releases them. Returns the rank. Raises when the members
  // entered different calls, or what work() raised (in every member).
  template <class Work>
  int meet(Slot& s, const Call& call, const Group& group, int self, const void* in, void* out,
           Work work);
  // Gives every member an alias of the round's shared result (s.result).
  static void share_result(Slot& s, const Group& group);

  std::mutex mu_;
  std::map<Group, std::unique_ptr<Slot>> slots_;
  std::chrono::milliseconds slack_{0};
};

// One step of a collective's memory work: copy srcs[0] to every dst, zero every dst, or
// reduce the srcs element by element, in rank order, into every dst (dsts may alias srcs).
// Several dsts are written from one read of the sources.
struct Move {
  enum Kind { kCopy, kZero, kReduce } kind = kCopy;
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  int64_t count = 0;  // elements (bytes for copies and zeros)
  int64_t es = 1;     // bytes per element
  DType dtype = DType::F32;
  ReduceKind reduce = ReduceKind::kSum;
};
Move copy_move(const void* src, std::vector<void*> dsts, int64_t bytes);
Move zero_move(std::vector<void*> dsts, int64_t bytes);
Move reduce_move(std::vector<const void*> srcs, std::vector<void*> dsts, int64_t count, DType dtype,
                 ReduceKind kind);

// Runs the moves on the calling thread and the collective team, split by bytes. Each
// element's result does not depend on the split.
void run_moves(const std::vector<Move>& moves);

// Reduces srcs[r][0..count) into every dst (dsts may alias srcs: each block is fully read
// before it is written).
void reduce_into(const std::vector<void*>& dsts, const std::vector<const void*>& srcs,
                 int64_t count, DType dtype, ReduceKind kind);

}  // namespace partix::comm

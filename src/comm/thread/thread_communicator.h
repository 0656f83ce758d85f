// In-process collectives over device worker threads: members publish their buffers in a
// shared rendezvous, then each member does its share of the work directly on its peers'
// memory (all-reduce = reduce-scatter + all-gather with every member reducing one chunk).
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "comm/communicator.h"

namespace partix::comm {

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator();
  ~ThreadCommunicator() override;
  std::string name() const override { return "threads"; }

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
  void abort() override;
  void reset_abort() override;

  struct Slot;

 private:
  Slot& slot(const Group& group);
  // Publishes this member's buffers and waits for all members (phase 1); returns its rank.
  int arrive(Slot& s, const char* what, const Group& group, int self, const void* in, void* out);
  // Waits until every member finished its share (phase 2).
  void depart(Slot& s, const char* what, const Group& group, int self);

  std::mutex mu_;
  std::map<Group, std::unique_ptr<Slot>> slots_;
  std::atomic<bool> aborted_{false};
};

// Reduces `n` chunks (pointers) of `count` elements into dst (which may alias a source).
void reduce_into(void* dst, const std::vector<const void*>& srcs, int64_t count, DType dtype,
                 ReduceKind kind);

}  // namespace partix::comm

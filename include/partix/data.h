// Data loading (as Grain): a deterministic loader over a real text corpus: bytes as tokens,
// fixed-length windows in a seeded shuffled order, a background thread prefetching batches.
// Each process reads only its rows of the global batch (as Grain's ShardByJaxProcess), and
// make_array_from_process_local_data assembles the global batch from them:
//
//   auto [index, count] = partix::io::process_rows(batch_sharding, global_batch);
//   partix::io::DataLoader loader(tokens, global_batch, seq, seed, index, count);
//   partix::io::Batch b = loader.next();
//   Array ids = make_array_from_process_local_data(batch_sharding,
//                                                  from_vector(b.inputs, {b.rows, b.seq}),
//                                                  Shape{global_batch, seq});
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "partix/sharding.h"

namespace partix::io {

// Every regular file under the directories/files given (sorted by path), concatenated as bytes.
// Fortune files' "%" separators become blank lines.
std::vector<int32_t> load_corpus(const std::vector<std::string>& paths);
// The corpus the training CLI uses by default (Debian's fortunes packages).
std::vector<std::string> default_corpus_paths();

struct Batch {
  int64_t step = 0;
  std::vector<int32_t> inputs;   // [rows, seq] this process's rows of the global batch
  std::vector<int32_t> targets;  // inputs shifted by one token
  int64_t rows = 0, seq = 0;
};

// Which part of a global batch of `global_batch` rows this process's devices hold under
// `sharding` (rows split over its first dimension): {index, count} with the batch cut into
// `count` equal parts, this process holding part `index` ({0, 1} in a single process).
std::pair<int, int> process_rows(const NamedSharding& sharding, int64_t global_batch);

class DataLoader {
 public:
  // global_batch rows per step, split evenly over process_count processes. Batches are a
  // function of the step alone: first_step resumes a run at that position.
  DataLoader(std::vector<int32_t> tokens, int64_t global_batch, int64_t seq, uint64_t seed,
             int process_index = 0, int process_count = 1, int prefetch = 2,
             int64_t first_step = 0);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  Batch next();  // blocks until the prefetch thread has the next batch
  int64_t windows() const { return static_cast<int64_t>(order_.size()); }

 private:
  Batch make(int64_t step);
  void run();

  std::vector<int32_t> tokens_;
  int64_t global_batch_, seq_;
  uint64_t seed_;
  int process_index_, process_count_;
  size_t prefetch_;
  std::vector<int64_t> order_;  // window starts, reshuffled every epoch
  int64_t epoch_ = -1;
  int64_t next_step_ = 0;
  std::deque<Batch> ready_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace partix::io

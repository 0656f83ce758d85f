#include "data/data_loader.h"

#include "core/errors.h"
#include "partix/distributed.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <sstream>

#include "core/errors.h"
#include "files/input_file.h"

namespace partix::io {

std::pair<int, int> process_rows(const NamedSharding& sharding, int64_t global_batch) {
  const Slice rows = process_local_box(sharding, {global_batch})[0];
  const int64_t part = rows.size();
  if (!(part > 0 && global_batch % part == 0 && rows.start % part == 0)) {
    detail::fail("process_rows",
                 "this process holds rows [{}, {}) of a batch of {} under {}: not one of equal "
                 "parts",
                 rows.start, rows.stop, global_batch, sharding.to_string());
  }
  return {static_cast<int>(rows.start / part), static_cast<int>(global_batch / part)};
}


namespace fs = std::filesystem;

std::vector<std::string> default_corpus_paths() { return {"/usr/share/games/fortunes"}; }

namespace {
// Each byte becomes an int32 token: a file this large would need 16 GiB of tokens.
constexpr uint64_t kMaxCorpusFileBytes = uint64_t{4} << 30;
}  // namespace

std::vector<int32_t> load_corpus(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(p, ec)) {
        std::string name = e.path().filename().string();
        // Skip fortune index files and links to files already read.
        if (!e.is_regular_file() || e.is_symlink() || name.ends_with(".dat")) continue;
        files.push_back(e.path().string());
      }
    } else if (fs::exists(p, ec)) {
      files.push_back(p);  // read_text_file names what it is when it is not a regular file
    } else {
      detail::fail("load_corpus",
                   "'{}' does not exist (install the corpus with "
                   "scripts/setup.sh)",
                   p);
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<int32_t> out;
  for (const auto& f : files) {
    // Through the one open helper: a FIFO or device in the corpus is refused, not read forever.
    std::string text = detail::read_text_file(f, "load_corpus", kMaxCorpusFileBytes);
    std::string line;
    std::istringstream lines(text);
    while (std::getline(lines, line)) {
      if (line == "%") line.clear();
      for (unsigned char ch : line) out.push_back(ch);
      out.push_back('\n');
    }
  }
  if (out.empty()) {
    detail::fail("load_corpus", "the corpus under {} is empty", fmt::join(paths, ", "));
  }
  return out;
}

DataLoader::DataLoader(std::vector<int32_t> tokens, int64_t global_batch, int64_t seq,
                       uint64_t seed, int process_index, int process_count, int prefetch,
                       int64_t first_step)
    : tokens_(std::move(tokens)),
      global_batch_(global_batch),
      seq_(seq),
      seed_(seed),
      process_index_(process_index),
      process_count_(process_count),
      prefetch_(static_cast<size_t>(std::max(1, prefetch))),
      next_step_(first_step) {
  detail::check(first_step >= 0, "DataLoader", "first_step {} is negative", first_step);
  detail::check(global_batch > 0 && seq > 0, "DataLoader", "batch {} and seq {} must be positive",
                global_batch, seq);
  detail::check(process_count > 0 && process_index >= 0 && process_index < process_count,
                "DataLoader", "process {} of {}", process_index, process_count);
  detail::check(global_batch % process_count == 0, "DataLoader",
                "global batch {} does not split over {} processes", global_batch, process_count);
  const int64_t n = static_cast<int64_t>(tokens_.size());
  detail::check(n > seq + 1, "DataLoader", "the corpus ({} tokens) is shorter than a window ({})",
                n, seq + 1);
  for (int64_t s = 0; s + seq + 1 <= n; s += seq) order_.push_back(s);
  thread_ = std::thread([this] { run(); });
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Batch DataLoader::make(int64_t step) {
  const int64_t windows = static_cast<int64_t>(order_.size());
  const int64_t rows = global_batch_ / process_count_;
  Batch b;
  b.step = step;
  b.rows = rows;
  b.seq = seq_;
  for (int64_t r = 0; r < rows; ++r) {
    // Global row index -> position in the endless shuffled sequence of windows.
    int64_t g = step * global_batch_ + process_index_ * rows + r;
    int64_t epoch = g / windows;
    if (epoch != epoch_) {
      // Deterministic Fisher-Yates with a fixed generator (std::shuffle is unspecified).
      for (int64_t i = 0; i < windows; ++i) order_[static_cast<size_t>(i)] = i * seq_;
      std::mt19937_64 rng(seed_ * 1000003ull + static_cast<uint64_t>(epoch));
      for (int64_t i = windows - 1; i > 0; --i) {
        int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
        std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
      }
      epoch_ = epoch;
    }
    int64_t start = order_[static_cast<size_t>(g % windows)];
    for (int64_t t = 0; t < seq_; ++t) {
      b.inputs.push_back(tokens_[static_cast<size_t>(start + t)]);
      b.targets.push_back(tokens_[static_cast<size_t>(start + t + 1)]);
    }
  }
  return b;
}

void DataLoader::run() {
  while (true) {
    int64_t step;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || ready_.size() < prefetch_; });
      if (stop_) return;
      step = next_step_++;
    }
    Batch b = make(step);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(std::move(b));
    }
    cv_.notify_all();
  }
}

Batch DataLoader::next() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !ready_.empty(); });
  Batch b = std::move(ready_.front());
  ready_.pop_front();
  cv_.notify_all();
  return b;
}

}  // namespace partix::io

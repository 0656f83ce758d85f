// Saving: every process plans every chunk of every leaf the same way (so the index needs no
// communication but the checksums), copies the chunks it owns into one host arena laid out as
// its data file, and a background thread writes the file and commits the step. The writer
// starts with the copy: it writes each part of the arena as soon as the copy has passed it, so
// a save costs the longer of copying and writing, not their sum.
//
// With several processes the writers agree in three stages on a control channel of their own:
// process 0 makes the temporary folder and names it; each writes and fsyncs its data file and
// sends its chunks' checksums; process 0 writes the index and commits. A failure anywhere is
// reported to all at the next stage, so no step is committed half written.
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "comm/mpi/mpi_runtime.h"
#include "core/array_impl.h"
#include "core/errors.h"
#include "core/layout.h"
#include "core/memory.h"
#include "files/atomic_file.h"
#include "checkpoint/checkpoint.h"
#include "files/checksum.h"
#include "files/folder_lock.h"
#include "formats/safetensors.h"
#include "partix/distributed.h"

namespace partix {

namespace {

namespace fs = std::filesystem;
using detail::CheckpointChunk;
using detail::CheckpointIndex;
using detail::CheckpointLeaf;

constexpr std::string_view kApi = "ckpt.save";

// "[api] message" -> "message", to nest one error in another.
std::string without_api(const std::string& what) {
  if (what.starts_with('[')) {
    const size_t close = what.find("] ");
    if (close != std::string::npos) return what.substr(close + 2);
  }
  return what;
}

// A chunk this process writes: where its bytes come from and where they go in the arena.
struct LocalChunk {
  size_t leaf, chunk;
  int64_t device;   // index into the leaf's mesh devices
  uint64_t offset;  // in the arena (= in the data buffer of this process's file)
};

struct Plan {
  CheckpointIndex index;
  // Per leaf, a hash of what the index says of it (no checksums yet): every process must plan
  // the same checkpoint, or their files would not make one.
  std::vector<uint64_t> fingerprints;
  std::string header;  // this process's file up to its data: u64 length, JSON, padding
  std::vector<LocalChunk> local;
  uint64_t local_bytes = 0;
};

Plan make_plan(int64_t step, const std::vector<std::string>& names,
               const std::vector<Array>& leaves, const ckpt::SaveOptions& options) {
  const int processes = process_count(), me = process_index();
  Plan plan;
  plan.index.step = step;
  plan.index.process_count = processes;
  plan.index.metadata = options.metadata;
  for (int p = 0; p < processes; ++p) {
    plan.index.files.push_back(detail::checkpoint_data_file(p, processes));
  }
  // Offsets are first relative to each file's data buffer; made absolute once headers are known.
  std::vector<uint64_t> used(static_cast<size_t>(processes), 0);
  std::vector<nlohmann::ordered_json> headers(static_cast<size_t>(processes));
  for (auto& h : headers) {
    h["__metadata__"] = {{"format", std::string(detail::kCheckpointFormat)},
                         {"step", std::to_string(step)}};
  }
  std::vector<std::vector<int>> owner(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Array& a = leaves[i];
    const NamedSharding& s = a.sharding();
    CheckpointLeaf leaf;
    leaf.name = names[i];
    leaf.shape = a.shape();
    leaf.dtype = a.dtype();
    leaf.sharding = s.to_string();
    leaf.mesh_axes = s.mesh().axis_names();
    leaf.mesh_shape = s.mesh().axis_sizes();
    leaf.spec = s.spec().entries();
    for (int64_t k = 0; k < s.mesh().size(); ++k) {
      // Replica 0 of each block writes it; empty blocks (uneven splits) hold nothing.
      if (s.replica_id(k) != 0) continue;
      std::vector<Slice> idx = s.device_index(a.shape(), k);
      CheckpointChunk c;
      for (const Slice& sl : idx) {
        c.offsets.push_back(sl.start);
        c.extent.push_back(sl.size());
      }
      // Quantized blocks are stored whole: the sharding splits rows on block boundaries.
      const uint64_t n = static_cast<uint64_t>(dtype_nbytes(a.dtype(), c.extent));
      if (n == 0) continue;
      const int p = s.mesh().devices()[static_cast<size_t>(k)].process_index;
      c.file = plan.index.files[static_cast<size_t>(p)];
      c.tensor = detail::checkpoint_tensor_name(leaf.name, c.offsets);
      c.begin = used[static_cast<size_t>(p)];
      c.end = c.begin + n;
      used[static_cast<size_t>(p)] = c.end;
      headers[static_cast<size_t>(p)][c.tensor] = {
          {"dtype", detail::checkpoint_stored_dtype(a.dtype())},
          {"shape", detail::checkpoint_stored_shape(a.dtype(), c.extent)},
          {"data_offsets", {c.begin, c.end}}};
      if (p == me) plan.local.push_back({i, leaf.chunks.size(), k, c.begin});
      owner[i].push_back(p);
      leaf.chunks.push_back(std::move(c));
    }
    plan.index.leaves.push_back(std::move(leaf));
  }
  std::vector<uint64_t> data_start(static_cast<size_t>(processes));
  for (int p = 0; p < processes; ++p) {
    std::string text;
    try {
      text = headers[static_cast<size_t>(p)].dump();
    } catch (const nlohmann::json::exception& e) {
      detail::fail(kApi, "leaf names must be UTF-8: {}", e.what());
    }
    // The data starts on a block boundary, so the writer can hand the arena to the disk
    // directly (O_DIRECT); the padding is spaces, as safetensors allows (and it keeps the 8-byte
    // alignment safetensors asks for).
    constexpr size_t kAlign = detail::AtomicFile::kDirectAlign;
    text.append((kAlign - (8 + text.size()) % kAlign) % kAlign, ' ');
    data_start[static_cast<size_t>(p)] = 8 + text.size();
    if (p == me) {
      const uint64_t len = text.size();
      plan.header.assign(reinterpret_cast<const char*>(&len), 8);
      plan.header += text;
    }
  }
  for (size_t i = 0; i < plan.index.leaves.size(); ++i) {
    for (size_t j = 0; j < plan.index.leaves[i].chunks.size(); ++j) {
      CheckpointChunk& c = plan.index.leaves[i].chunks[j];
      c.begin += data_start[static_cast<size_t>(owner[i][j])];
      c.end += data_start[static_cast<size_t>(owner[i][j])];
    }
  }
  plan.local_bytes = used[static_cast<size_t>(me)];
  for (const CheckpointLeaf& leaf : plan.index.leaves) {
    CheckpointIndex one;
    one.leaves.push_back(leaf);
    const std::string text = detail::index_to_json(one);
    plan.fingerprints.push_back(detail::xxh64(text.data(), text.size()));
  }
  return plan;
}

void check_leaves(int64_t step, const std::vector<std::string>& names,
                  const std::vector<Array>& leaves) {
  detail::check(step >= 0, kApi, "step {} is negative", step);
  detail::check(names.size() == leaves.size(), kApi, "{} names for {} leaves", names.size(),
                leaves.size());
  std::set<std::string> seen;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Array& a = leaves[i];
    detail::check(seen.insert(names[i]).second, kApi, "leaf '{}' appears twice", names[i]);
    detail::check(a.valid(), kApi, "leaf '{}' is an empty Array handle", names[i]);
    detail::check(!a.is_tracer(), kApi,
                  "leaf '{}' is a traced value inside jit/grad/shard_map; save concrete arrays",
                  names[i]);
    detail::check(!a.impl()->donated, kApi,
                  "leaf '{}' was donated to an earlier call and is gone; save before donating",
                  names[i]);
    detail::check(!a.is_abstract(), kApi,
                  "leaf '{}' is abstract (a ShapeDtypeStruct): it has no values to save", names[i]);
    detail::check(a.sharding().unreduced().empty(), kApi,
                  "leaf '{}' is unreduced ({}): its devices hold partial sums; reshard it to a "
                  "sharding without unreduced axes before saving",
                  names[i], a.sharding().to_string());
  }
}

}  // namespace

namespace ckpt {

struct Checkpointer::Impl {
  std::thread thread;
  std::mutex mu;
  std::exception_ptr error;  // of the last background write, until raised
  // The host copy of the chunks, reused by the next save (its pages are already mapped), on a
  // block boundary for O_DIRECT writes.
  struct AlignedFree {
    void operator()(char* p) const {
      ::operator delete[](p, std::align_val_t(detail::AtomicFile::kDirectAlign));
    }
  };
  std::unique_ptr<char[], AlignedFree> arena;
  uint64_t arena_capacity = 0;

  void join() {
    if (thread.joinable()) thread.join();
  }
  void raise_pending() {
    std::exception_ptr e;
    {
      std::lock_guard<std::mutex> lock(mu);
      std::swap(e, error);
    }
    if (e) std::rethrow_exception(e);
  }
};

namespace {

// How far the host copy has filled the arena (a prefix, since chunks are copied in arena
// order), shared by the copying caller and the writer and hasher threads.
class CopyProgress {
 public:
  void advance(uint64_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_ = bytes;
    }
    cv_.notify_all();
  }
  void abandon() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      abandoned_ = true;
    }
    cv_.notify_all();
  }
  // Blocks until the first `bytes` of the arena are copied; throws if the copy was abandoned.
  void wait_for(uint64_t bytes) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return ready_ >= bytes || abandoned_; });
    if (ready_ < bytes) detail::fail(kApi, "the host copy of the chunks did not complete");
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t ready_ = 0;
  bool abandoned_ = false;
};

struct Job {
  std::string dir, step_dir;
  Plan plan;
  bool overwrite = false;
  // Process 0's lock of `dir`, from the start of the save until the writer thread ends.
  std::shared_ptr<void> lock;
  // With several processes, why process 0 could not claim the folder: raised at stage 1, so
  // that every process fails the save alike.
  std::exception_ptr claim_error;
  const char* arena = nullptr;
  CopyProgress progress;
  std::function<void()> after_commit;
};

// The arena is written in parts of this size as the copy passes them.
constexpr uint64_t kWritePart = uint64_t{32} << 20;

void hash_chunks(Job& job) {
  for (const LocalChunk& lc : job.plan.local) {
    CheckpointChunk& c = job.plan.index.leaves[lc.leaf].chunks[lc.chunk];
    const uint64_t n = c.end - c.begin;
    c.block = std::min(n, detail::kChecksumBlock);
    c.xxh64.clear();
    for (uint64_t at = 0; at < n; at += c.block) {
      const uint64_t len = std::min(c.block, n - at);
      job.progress.wait_for(lc.offset + at + len);
      c.xxh64.push_back(detail::xxh64(job.arena + lc.offset + at, len));
    }
  }
}

bool committed(const std::string& step_dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(step_dir) / detail::kIndexName, ec);
}

// Saving a step twice would silently replace the first one (another run's, perhaps).
void refuse_committed(const Job& job) {
  if (job.overwrite || !committed(job.step_dir)) return;
  detail::fail(kApi,
               "step {} of '{}' is already committed ('{}'); saving it again would replace it: "
               "save another step, or ask to replace it (SaveOptions::overwrite; in Python "
               "ckpt.save(..., overwrite=True))",
               job.plan.index.step, job.dir, job.step_dir);
}

std::vector<std::string> step_names(const Job& job) {
  std::vector<std::string> allowed = job.plan.index.files;
  allowed.emplace_back(detail::kIndexName);
  return allowed;
}

// Process 0 checks the destination, locks the folder for the whole save and checks that the
// step is new (or may be replaced). Alone, a refusal is raised to the caller at once; with
// other processes it fails the save on all of them at its first stage.
void claim_folder(Job& job, const void* owner) {
  if (process_index() != 0) return;
  try {
    detail::check_writable_dir(job.step_dir, kApi, step_names(job));
    job.lock = detail::lock_folder(job.dir, owner, kApi, /*create=*/true);
    refuse_committed(job);
  } catch (...) {
    job.lock.reset();
    if (process_count() == 1) throw;
    job.claim_error = std::current_exception();
  }
}

// A failure of the hook that runs after the commit (deleting old steps): the step is committed.
class AfterCommitError : public Error {
 public:
  using Error::Error;
};

// Commits of this process's Checkpointers, one at a time: they share one channel, on which two
// at once would take each other's messages. (Processes that order two concurrent saves
// differently see different step folders at stage 1 and fail alike.)
std::mutex& commit_mutex() {
  static std::mutex mu;
  return mu;
}

// What a process hands in at each stage of a commit: "ok\n" and the stage's data, or
// "error\n" and why it failed. "after\n": committed, but the after-commit hook failed.
constexpr std::string_view kOk = "ok\n", kFailed = "error\n", kAfter = "after\n";

std::string status_of(const std::exception& e, std::string_view kind = kFailed) {
  return std::string(kind) + e.what();
}

// One stage: every process sends its status and receives the others'. Raises the same error
// on every process when any failed (its own error first), else returns the stages' data.
std::vector<std::string> agree(const std::string& mine, const char* stage) {
  std::vector<int> all(static_cast<size_t>(process_count()));
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::string> got =
      comm::mpi::exchange_control(all, mine, stage, comm::mpi::kCheckpointChannel);
  const size_t me = static_cast<size_t>(process_index());
  std::vector<size_t> order{me};
  for (size_t p = 0; p < got.size(); ++p) {
    if (p != me) order.push_back(p);
  }
  for (size_t p : order) {
    const std::string& g = got[p];
    if (g.starts_with(kAfter)) throw AfterCommitError(g.substr(kAfter.size()));
    if (g.starts_with(kFailed)) {
      if (p == me) throw Error(g.substr(kFailed.size()));
      detail::fail(kApi, "process {} failed: {}", p, without_api(g.substr(kFailed.size())));
    }
    if (!g.starts_with(kOk)) {
      detail::internal_error(kApi, fmt::format("process {} sent '{}' at {}", p, g, stage));
    }
  }
  for (std::string& g : got) g.erase(0, kOk.size());
  return got;
}

// Stage 1 data: the temporary folder (process 0's), the step's folder and the leaves'
// fingerprints, which every process must share.
std::string opening(const Job& job, const std::string& tmp) {
  std::string out = tmp + "\n" + job.step_dir + "\n";
  for (uint64_t f : job.plan.fingerprints) out += detail::hex64(f) + " ";
  return out;
}

void check_same_plan(const Job& job, const std::vector<std::string>& got) {
  const std::string mine = opening(job, "");
  const std::string mine_rest = mine.substr(1);  // without the (empty) folder name
  for (size_t p = 0; p < got.size(); ++p) {
    const std::string rest = got[p].substr(got[p].find('\n') + 1);
    if (rest == mine_rest) continue;
    const std::string dir = rest.substr(0, rest.find('\n'));
    if (dir != job.step_dir) {
      detail::fail(kApi,
                   "process {} saves to '{}' but process {} to '{}'; every process must save the "
                   "same step to the same folder (on a file system they share)",
                   p, dir, process_index(), job.step_dir);
    }
    // The first leaf whose plan differs.
    const std::string theirs = rest.substr(rest.find('\n') + 1);
    std::string ours = mine_rest.substr(mine_rest.find('\n') + 1);
    size_t leaf = 0;
    for (size_t at = 0; at < std::min(theirs.size(), ours.size()) && theirs[at] == ours[at]; ++at) {
      leaf += theirs[at] == ' ';
    }
    const std::vector<CheckpointLeaf>& leaves = job.plan.index.leaves;
    const std::string what =
        leaf < leaves.size()
            ? fmt::format("leaf '{}' ({}) differs", leaves[leaf].name, leaves[leaf].sharding)
            : std::string("the number of leaves differs");
    detail::fail(kApi,
                 "process {} saves another tree than process {}: {}; every process must save the "
                 "same leaves, with arrays on meshes of the same devices (not each process's own "
                 "default device)",
                 p, process_index(), what);
  }
}

// Writes this process's data file into `folder` and fsyncs it; the chunks' checksums follow.
void write_data(Job& job, const std::string& folder) {
  std::exception_ptr hash_error;
  std::thread hasher([&job, &hash_error] {
    try {
      hash_chunks(job);
    } catch (...) {
      hash_error = std::current_exception();
    }
  });
  struct Joiner {  // a failed write still joins the hasher before unwinding
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{hasher};
  const CheckpointIndex& index = job.plan.index;
  const std::string& file = index.files[static_cast<size_t>(process_index())];
  detail::AtomicFile data((std::filesystem::path(folder) / file).string(), kApi);
  data.write(job.plan.header);
  for (uint64_t at = 0; at < job.plan.local_bytes;) {
    const uint64_t end = std::min(job.plan.local_bytes, at + kWritePart);
    job.progress.wait_for(end);
    data.write_direct(std::string_view(job.arena + at, end - at));
    at = end;
  }
  data.commit();
  hasher.join();
  if (hash_error) std::rethrow_exception(hash_error);
}

// Writes and commits the step (with every process of the job); then runs the after-commit hook
// on process 0. Hashing runs beside the write, so it costs no time of its own.
void write_step(Job& job) {
  std::lock_guard<std::mutex> lock(commit_mutex());
  const int me = process_index();
  CheckpointIndex& index = job.plan.index;
  // Stage 1: process 0 makes the temporary folder; all check that they save the same thing.
  std::optional<detail::AtomicDir> out;
  std::string status;
  try {
    if (me == 0) {
      if (job.claim_error) std::rethrow_exception(job.claim_error);
      out.emplace(job.step_dir, kApi, step_names(job));
    }
    // Absolute: the others may have started in other folders.
    status = std::string(kOk) + opening(job, out ? fs::absolute(out->temporary()).string() : "");
  } catch (const std::exception& e) {
    status = status_of(e);
  }
  std::vector<std::string> got = agree(status, "ckpt.save (opening the step)");
  check_same_plan(job, got);
  const std::string folder = got[0].substr(0, got[0].find('\n'));
  // Stage 2: each process writes its file; process 0 learns every chunk's checksum.
  try {
    write_data(job, folder);
    status = std::string(kOk);
    for (const LocalChunk& lc : job.plan.local) {
      for (uint64_t h : index.leaves[lc.leaf].chunks[lc.chunk].xxh64) status += detail::hex64(h);
      status += " ";
    }
  } catch (const std::exception& e) {
    status = status_of(e);
  }
  got = agree(status, "ckpt.save (writing the data files)");
  // Stage 3: process 0 writes the index and commits; the others wait for the outcome, so that
  // when their save completes the step is there for them too.
  status = std::string(kOk);
  if (me == 0) {
    try {
      for (size_t p = 1; p < got.size(); ++p) {
        std::istringstream hashes(got[p]);
        for (CheckpointLeaf& leaf : index.leaves) {
          for (CheckpointChunk& c : leaf.chunks) {
            if (c.file != index.files[p]) continue;
            std::string hex;
            const uint64_t n = c.end - c.begin;
            c.block = std::min(n, detail::kChecksumBlock);
            c.xxh64.assign(n / c.block + (n % c.block != 0), 0);
            bool ok = static_cast<bool>(hashes >> hex) && hex.size() == 16 * c.xxh64.size();
            for (size_t b = 0; ok && b < c.xxh64.size(); ++b) {
              ok = detail::parse_hex64(std::string_view(hex).substr(16 * b, 16), &c.xxh64[b]);
            }
            if (!ok) {
              detail::internal_error(kApi, fmt::format("process {} sent too few checksums", p));
            }
          }
        }
      }
      detail::write_file_atomic(out->file(std::string(detail::kIndexName)), kApi,
                                detail::index_to_json(index));
      refuse_committed(job);  // (a writer that takes no lock, such as an older partix)
      out->commit();
    } catch (const std::exception& e) {
      status = status_of(e);
    }
    if (status == kOk && job.after_commit) {
      try {
        job.after_commit();
      } catch (const std::exception& e) {
        status = status_of(e, kAfter);
      }
    }
  }
  agree(status, "ckpt.save (committing the step)");
}

}  // namespace

Checkpointer::Checkpointer() : impl_(std::make_unique<Impl>()) {}

Checkpointer::~Checkpointer() {
  impl_->join();
  if (impl_->error) {
    // Nobody waited for this save; its failure must still be seen.
    try {
      std::rethrow_exception(impl_->error);
    } catch (const std::exception& e) {
      std::cerr << "partix: a checkpoint save failed and was never waited for: " << e.what()
                << "\n";
    }
  }
}

void Checkpointer::wait() {
  impl_->join();
  impl_->raise_pending();
}

void Checkpointer::save_leaves(const std::string& dir, int64_t step,
                               const std::vector<std::string>& names,
                               const std::vector<Array>& leaves, const SaveOptions& options,
                               std::function<void()> after_commit) {
  check_leaves(step, names, leaves);
  detail::check(!dir.empty(), kApi, "the checkpoint folder is an empty path");
  wait();  // one save at a time: its arena is about to be reused
  auto job = std::make_shared<Job>();
  job->dir = dir;
  job->step_dir = step_path(dir, step);
  job->plan = make_plan(step, names, leaves, options);
  job->overwrite = options.overwrite;
  job->after_commit = std::move(after_commit);
  claim_folder(*job, this);

  Impl& im = *impl_;
  const uint64_t bytes = job->plan.local_bytes;
  if (bytes > im.arena_capacity) {
    im.arena.reset();
    im.arena_capacity = 0;
    detail::check_host_memory(kApi, fmt::format("the host copy of step {}", step),
                              static_cast<int64_t>(bytes));
    try {
      im.arena.reset(static_cast<char*>(
          ::operator new[](bytes, std::align_val_t(detail::AtomicFile::kDirectAlign))));
    } catch (const std::bad_alloc&) {
      detail::fail(kApi, "out of host memory: the host copy of step {} needs {}", step,
                   detail::format_bytes(static_cast<int64_t>(bytes)));
    }
    im.arena_capacity = bytes;
  }
  job->arena = im.arena.get();
  im.thread = std::thread([job, &im] {
    try {
      write_step(*job);
    } catch (const AfterCommitError& e) {
      std::lock_guard<std::mutex> lock(im.mu);
      im.error = std::make_exception_ptr(Error(e.what()));
    } catch (const std::exception& e) {
      const std::string msg =
          fmt::format("[{}] cannot write step {} to '{}' (earlier steps are unchanged): {}", kApi,
                      job->plan.index.step, job->step_dir, without_api(e.what()));
      std::lock_guard<std::mutex> lock(im.mu);
      im.error = std::make_exception_ptr(Error(msg));
    }
    job->lock.reset();  // committed or failed: the folder is free
  });
  // The synchronous part: device blocks to host, so the arrays may be donated right after.
  // The writer follows the copy through the arena.
  try {
    for (const LocalChunk& lc : job->plan.local) {
      const Array& a = leaves[lc.leaf];
      const detail::ArrayImpl& ai = *a.impl();
      const CheckpointChunk& c = job->plan.index.leaves[lc.leaf].chunks[lc.chunk];
      // In units of the dtype: quantized rows are rows of whole blocks.
      const int64_t per_block = dtype_block_elems(ai.dtype);
      Shape local = ai.sharding->shard_shape(ai.shape), extent = c.extent;
      if (per_block > 1) {
        local.back() /= per_block;
        extent.back() /= per_block;
      }
      const Shape zero(local.size(), 0);
      const detail::Buffer& b = ai.shards[static_cast<size_t>(lc.device)];
      detail::copy_box(b.data(), local, zero, im.arena.get() + lc.offset, extent, zero, extent,
                       dtype_size(ai.dtype));
      job->progress.advance(lc.offset + (c.end - c.begin));
    }
  } catch (...) {
    // The writer gives up without committing; this error, not its consequence, is raised.
    job->progress.abandon();
    im.join();
    std::lock_guard<std::mutex> lock(im.mu);
    im.error = nullptr;
    throw;
  }
  job->progress.advance(bytes);
}

Checkpointer& default_checkpointer() {
  static Checkpointer writer;
  return writer;
}

void wait() { default_checkpointer().wait(); }

}  // namespace ckpt

// ---------------------------------------------------------------------------------------

namespace {

constexpr std::string_view kManagerApi = "CheckpointManager";

// Temporaries of saves (and deletions) that died with their process.
void remove_dead_temporaries(const std::string& dir) {
  std::error_code ec;
  std::set<std::string> targets;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const size_t tmp = name.find(".tmp-");
    if (name.starts_with("step_") && tmp != std::string::npos) {
      targets.insert((fs::path(dir) / name.substr(0, tmp)).string());
    }
  }
  for (const std::string& t : targets) detail::remove_stale_temporaries(t);
}

}  // namespace

// Two runs writing one folder would interleave their steps and delete each other's: the
// manager of process 0 holds the folder's lock (files/folder_lock.h) while it lives; its
// writer's saves take it again as the same owner. `required`: the folder is about to be
// written (made if absent); otherwise a folder that cannot take the lock file (read-only,
// absent) defers the lock.
void CheckpointManager::lock(bool required) {
  // (The launch's index: constructing a manager must not start the devices.)
  if (lock_ || distributed::launch_process_index() != 0) return;
  lock_ = detail::lock_folder(dir_, &writer_, kManagerApi, required);
}

CheckpointManager::CheckpointManager(std::string dir, CheckpointManagerOptions options)
    : dir_(std::move(dir)), options_(options) {
  detail::check(!dir_.empty(), kManagerApi, "the checkpoint folder is an empty path");
  detail::check(options_.keep >= 0, kManagerApi, "keep is {}; it must be >= 0 (0 keeps all)",
                options_.keep);
  detail::check(options_.save_every >= 1, kManagerApi, "save_every is {}; it must be >= 1",
                options_.save_every);
  std::error_code ec;
  if (fs::exists(dir_, ec)) {
    detail::check(fs::is_directory(dir_, ec), kManagerApi, "'{}' exists and is not a folder", dir_);
    // Only process 0 makes temporaries (and knows whether their pids run on its machine).
    // (The launch's index: constructing a manager must not start the devices.)
    if (distributed::launch_process_index() == 0) {
      remove_dead_temporaries(dir_);
      lock(/*required=*/false);
    }
  }
}

CheckpointManager::~CheckpointManager() {
  try {
    writer_.wait();
  } catch (const std::exception& e) {
    std::cerr << "partix: a checkpoint save failed and was never waited for: " << e.what()
              << "\n";
  }
  lock_.reset();
}

bool CheckpointManager::should_save(int64_t step) const {
  return step >= 0 && step % options_.save_every == 0;
}

void CheckpointManager::save_leaves(int64_t step, const std::vector<std::string>& names,
                                    const std::vector<Array>& leaves,
                                    const ckpt::SaveOptions& options) {
  writer_.wait();  // the step in flight counts among the committed ones below
  lock(/*required=*/true);
  // Steps only move forward: a lower step would be the first deleted by `keep` (or would
  // replace a step of the run that wrote the later ones).
  const std::optional<int64_t> latest = latest_step();
  detail::check(!latest || step > *latest, kManagerApi,
                "cannot save step {} in '{}', which holds the later or equal step {}; a run "
                "continues after its latest step (resume from it, or choose another folder)",
                step, dir_, latest.value_or(0));
  writer_.save_leaves(dir_, step, names, leaves, options,
                      [this, step] { delete_old_steps(step); });
}

void CheckpointManager::wait() { writer_.wait(); }

// Runs on process 0 alone, after the commit (the steps are shared by every process).
void CheckpointManager::delete_old_steps(int64_t written) {
  if (options_.keep == 0 || process_index() != 0) return;
  std::vector<int64_t> steps = all_steps();
  for (size_t i = 0; i + static_cast<size_t>(options_.keep) < steps.size(); ++i) {
    if (steps[i] == written) continue;  // never the step just committed
    const std::string path = ckpt::step_path(dir_, steps[i]);
    // Renamed out of the committed namespace first: a crash while deleting must not leave a
    // half-deleted step that still looks committed.
    const std::string doomed = fmt::format("{}.tmp-{}", path, ::getpid());
    std::error_code ec;
    fs::remove_all(doomed, ec);
    fs::rename(path, doomed, ec);
    if (ec) {
      detail::fail(kManagerApi, "cannot remove the old step '{}': {}", path, ec.message());
    }
    detail::fsync_dir(dir_, kManagerApi);
    fs::remove_all(doomed, ec);
    if (ec) detail::fail(kManagerApi, "cannot remove '{}': {}", doomed, ec.message());
  }
}

namespace detail {

std::unique_lock<std::mutex> hold_checkpoint_commits() {
  return std::unique_lock<std::mutex>(ckpt::commit_mutex());
}

}  // namespace detail

}  // namespace partix

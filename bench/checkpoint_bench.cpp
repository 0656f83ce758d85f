// Checkpoint cost, two figures:
//
// 1. Stall: GPT-2 small training steps on a mesh (default 4x2), one trainer without
//    checkpoints and one saving every `--save-every` steps (asynchronously: save() copies this
//    process's chunks to host and returns; a thread writes). The steps alternate between the
//    two trainers, so both see the same machine. Reports the median plain step, the median
//    step that called save() (its blocking part is StepMetrics::save_seconds), the median step
//    run while a write was in flight, and the overall mean, each against the plain median.
//
// 2. Throughput: the same training state saved whole with ckpt::save + wait (chunk copies,
//    safetensors headers, XXH64, fsync of every file and of the folders, rename) against a raw
//    sequential write of the same bytes (the checkpoint's files, read back into one buffer)
//    into the same folder, done both ways a program that only writes would: write() in parts,
//    fsync, close; and the same with O_DIRECT; each with the best of 8, 32 and 128 MiB parts.
//    They alternate `--repeats` times; medians; the ratio is against the faster raw write. (The checkpoint writes its data with
//    O_DIRECT too where the file system allows it.)
//
//   partix_bench_checkpoint [--mesh 4x2] [--model small|tiny] [--batch 8] [--seq 128]
//                           [--steps 12] [--save-every 3] [--repeats 3] [--dir DIR]
// DIR (default: a fresh folder under $TMPDIR or /tmp) must be on the disk to measure.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <memory>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "partix/models/gpt2.h"
#include "partix/partix.h"

namespace {

using namespace partix;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string model = "small";
  int64_t data = 4, model_parallel = 2;
  int64_t batch = 8, seq = 128, steps = 12, save_every = 3, repeats = 3;
  std::string dir;
};

int64_t integer(const std::string& flag, const std::string& text, int64_t least) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < least) {
    throw Error(
        fmt::format("[checkpoint_bench] {} wants an integer >= {}, got '{}'", flag, least, text));
  }
  return v;
}

int64_t positive(const std::string& flag, const std::string& text) {
  return integer(flag, text, 1);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw Error("[checkpoint_bench] " + k + " needs a value");
    const std::string v = argv[++i];
    if (k == "--model") {
      if (v != "small" && v != "tiny") throw Error("[checkpoint_bench] --model: small or tiny");
      a.model = v;
    } else if (k == "--mesh") {
      const size_t x = v.find('x');
      if (x == std::string::npos) throw Error("[checkpoint_bench] --mesh looks like 4x2");
      a.data = positive(k, v.substr(0, x));
      a.model_parallel = positive(k, v.substr(x + 1));
    } else if (k == "--batch") a.batch = positive(k, v);
    else if (k == "--seq") a.seq = positive(k, v);
    else if (k == "--steps") a.steps = integer(k, v, 0);  // 0: throughput only
    else if (k == "--save-every") a.save_every = positive(k, v);
    else if (k == "--repeats") a.repeats = positive(k, v);
    else if (k == "--dir") a.dir = v;
    else throw Error("[checkpoint_bench] unknown argument " + k);
  }
  return a;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Bytes on a 4096-byte boundary, as O_DIRECT needs.
struct AlignedBytes {
  static constexpr size_t kAlign = 4096;
  struct Free {
    void operator()(char* p) const { ::operator delete[](p, std::align_val_t(kAlign)); }
  };
  std::unique_ptr<char[], Free> data;
  size_t size = 0;
  explicit AlignedBytes(const std::vector<char>& from)
      : data(static_cast<char*>(::operator new[](std::max<size_t>(from.size(), 1),
                                                 std::align_val_t(kAlign)))),
        size(from.size()) {
    std::memcpy(data.get(), from.data(), from.size());
  }
};

// The same bytes from memory to the same disk as a program that only writes would do it, in
// the two ways such a program would: write() of parts of one buffer, fsync, close; or the same
// with O_DIRECT for the whole blocks (the tail through the cache). The faster is the baseline.
double raw_write_seconds(const fs::path& file, const AlignedBytes& bytes, bool direct,
                         size_t part) {
  const auto t = Clock::now();
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) throw Error("[checkpoint_bench] cannot create " + file.string());
  const size_t whole = direct ? bytes.size / AlignedBytes::kAlign * AlignedBytes::kAlign : bytes.size;
  size_t done = 0;
  while (done < bytes.size) {
    if (direct && done == whole) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_DIRECT);
    const size_t n = std::min(part, (done < whole ? whole : bytes.size) - done);
    const ssize_t w = ::write(fd, bytes.data.get() + done, n);
    if (w <= 0) throw Error("[checkpoint_bench] write failed on " + file.string());
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    throw Error("[checkpoint_bench] fsync/close failed on " + file.string());
  }
  const double s = seconds_since(t);
  fs::remove(file);
  return s;
}

// Every file of a folder, concatenated.
std::vector<char> folder_contents(const fs::path& p) {
  std::vector<char> out;
  for (const auto& e : fs::recursive_directory_iterator(p)) {
    if (!e.is_regular_file()) continue;
    const size_t at = out.size();
    out.resize(at + e.file_size());
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error("[checkpoint_bench] cannot open " + e.path().string());
    size_t done = 0;
    while (at + done < out.size()) {
      const ssize_t r = ::read(fd, out.data() + at + done, out.size() - at - done);
      if (r <= 0) throw Error("[checkpoint_bench] cannot read " + e.path().string());
      done += static_cast<size_t>(r);
    }
    ::close(fd);
  }
  return out;
}

models::gpt2::TrainOptions options(const Args& a) {
  models::gpt2::TrainOptions o;
  o.model = a.model == "small" ? models::gpt2::small() : models::gpt2::tiny();
  // Bytes as tokens, as `partix train` and the JAX comparison train GPT-2 small: two trainers
  // with a 50257-entry vocabulary (logits of 8 x 128 x 50257) do not fit this machine's memory.
  o.model.vocab_size = 256;
  o.data = a.data;
  o.model_parallel = a.model_parallel;
  o.batch = a.batch;
  o.seq = a.seq;
  o.steps = 1 << 20;
  return o;
}

void stall(const Args& a, const fs::path& root);
void throughput(const Args& a, const fs::path& root);

int run(const Args& a) {
  fs::path root = a.dir;
  if (root.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/partix-ckpt-bench-XXXXXX";
    if (!::mkdtemp(pattern.data())) throw Error("[checkpoint_bench] cannot create " + pattern);
    root = pattern;
  }
  fs::create_directories(root);
  init({.num_cpu_devices = static_cast<int>(a.data * a.model_parallel)});

  if (a.steps > 0) stall(a, root);
  throughput(a, root);
  if (a.dir.empty()) fs::remove_all(root);
  return 0;
}

void stall(const Args& a, const fs::path& root) {
  models::gpt2::TrainOptions plain_o = options(a);
  models::gpt2::TrainOptions saving_o = options(a);
  saving_o.checkpoint_dir = (root / "train").string();
  saving_o.save_every = a.save_every;
  saving_o.keep = 1;
  models::gpt2::Trainer plain(plain_o);
  models::gpt2::Trainer saving(saving_o);
  plain.step();  // compile
  saving.step();
  saving.wait_for_checkpoints();
  std::vector<double> t_plain, t_save, t_inflight, t_all_saving;
  std::vector<double> blocked;
  bool in_flight = false;
  for (int64_t s = 0; s < a.steps; ++s) {
    t_plain.push_back(plain.step().seconds);
    const models::gpt2::StepMetrics m = saving.step();
    t_all_saving.push_back(m.seconds);
    if (m.save_seconds > 0) {
      t_save.push_back(m.seconds);
      blocked.push_back(m.save_seconds);
      in_flight = true;
    } else if (in_flight) {
      t_inflight.push_back(m.seconds);
      in_flight = false;  // the write of one save overlaps the next step at most, typically
    }
  }
  saving.wait_for_checkpoints();
  const double base = median(t_plain);
  double mean_saving = 0;
  for (double t : t_all_saving) mean_saving += t;
  mean_saving /= static_cast<double>(t_all_saving.size());
  fmt::print("stall ({} {}x{}, batch {} x seq {}, a save every {} steps, {} steps each):\n",
             a.model, a.data, a.model_parallel, a.batch, a.seq, a.save_every, a.steps);
  fmt::print("  plain step (median)            {:8.3f} s\n", base);
  fmt::print("  step that saves (median)       {:8.3f} s  {:+6.1f}%  (save() blocked {:.3f} s)\n",
             median(t_save), 100 * (median(t_save) / base - 1), median(blocked));
  fmt::print("  next step, write in flight     {:8.3f} s  {:+6.1f}%\n", median(t_inflight),
             100 * (median(t_inflight) / base - 1));
  fmt::print("  mean step while saving         {:8.3f} s  {:+6.1f}%\n", mean_saving,
             100 * (mean_saving / base - 1));

}

void throughput(const Args& a, const fs::path& root) {
  models::gpt2::TrainOptions o = options(a);
  o.steps = 1;
  models::gpt2::Trainer trainer(o);
  const models::gpt2::TrainState state = trainer.state();
  std::vector<double> t_ckpt, t_raw, t_direct, t_blocked;
  size_t total = 0;
  for (int64_t r = 0; r < a.repeats; ++r) {
    const fs::path dir = root / fmt::format("whole_{}", r);
    auto t = Clock::now();
    ckpt::save(dir.string(), 1, state);
    t_blocked.push_back(seconds_since(t));
    ckpt::wait();
    t_ckpt.push_back(seconds_since(t));
    const AlignedBytes bytes(folder_contents(dir));
    total = bytes.size;
    fs::remove_all(dir);
    // The best part size for each (the checkpoint writes 32 MiB parts).
    double b = 1e30, d = 1e30;
    for (size_t part : {size_t{8} << 20, size_t{32} << 20, size_t{128} << 20}) {
      b = std::min(b, raw_write_seconds(root / "raw.bin", bytes, false, part));
      d = std::min(d, raw_write_seconds(root / "raw.bin", bytes, true, part));
    }
    t_raw.push_back(b);
    t_direct.push_back(d);
  }
  const double ck = median(t_ckpt), buffered = median(t_raw), direct = median(t_direct);
  const double raw = std::min(buffered, direct);
  const double mib = static_cast<double>(total) / (1 << 20);
  fmt::print("throughput ({:.0f} MiB of training state, {} repeats, medians):\n", mib, a.repeats);
  fmt::print("  checkpoint save + commit       {:8.3f} s  {:8.1f} MiB/s  (save() returned after {:.3f} s)\n",
             ck, mib / ck, median(t_blocked));
  fmt::print("  raw write + fsync              {:8.3f} s  {:8.1f} MiB/s\n", buffered, mib / buffered);
  fmt::print("  raw O_DIRECT write + fsync     {:8.3f} s  {:8.1f} MiB/s\n", direct, mib / direct);
  fmt::print("  ratio (against the faster raw) {:8.2f}\n", raw / ck);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    fmt::print(stderr, "partix_bench_checkpoint: {}\n", e.what());
    return 1;
  }
}

// Helpers for the io tests: temporary folders, raw file writing, golden files, the cached
// SmolLM2 GGUF, and a file-size limit that stands in for a full disk.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "partix/partix.h"
#include "test_util.h"

namespace partix::test {

// A fresh folder removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    std::string name =
        std::string("partix_io_") + (info ? info->name() : "x") + "_" + std::to_string(::getpid());
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline std::string golden_path(const std::string& name) {
  return std::string(PARTIX_TESTS_DIR) + "/io/golden/" + name;
}

inline nlohmann::json read_golden_json(const std::string& name) {
  return nlohmann::json::parse(read_bytes(golden_path(name)));
}

// The SmolLM2 GGUF that scripts/fetch_smollm2.sh caches, or "" when it is not there.
inline std::string smollm2_path() {
  if (const char* p = std::getenv("PARTIX_SMOLLM2_GGUF")) return p;
  std::string cache;
  if (const char* c = std::getenv("PARTIX_CACHE")) {
    cache = c;
  } else if (const char* h = std::getenv("HOME")) {
    cache = std::string(h) + "/.cache/partix";
  }
  std::string p = cache + "/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
  return std::filesystem::exists(p) ? p : "";
}

#define PARTIX_REQUIRE_SMOLLM2(var)                                                      \
  const std::string var = ::partix::test::smollm2_path();                                \
  if (var.empty()) {                                                                     \
    GTEST_SKIP() << "SmolLM2 GGUF not in the cache; run scripts/fetch_smollm2.sh (CI's " \
                    "scripts/setup.sh does) to enable this test";                        \
  }

// Per-device bytes a call allocates at its peak, for devices 0..n-1.
template <class F>
std::vector<int64_t> peak_bytes_during(int n, F&& f) {
  std::vector<int64_t> before(static_cast<size_t>(n));
  reset_peak_memory_stats();
  for (int d = 0; d < n; ++d) before[static_cast<size_t>(d)] = memory_stats(d).bytes_in_use;
  f();
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    out[static_cast<size_t>(d)] =
        memory_stats(d).peak_bytes_in_use - before[static_cast<size_t>(d)];
  }
  return out;
}

// A GGUF file written byte by byte, so tests can break any part of it.
class GgufBuilder {
 public:
  template <class T>
  static void put(std::string& s, T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    s.append(b, sizeof(T));
  }
  static void put_str(std::string& s, std::string_view v) {
    put<uint64_t>(s, v.size());
    s.append(v);
  }
  // One metadata entry whose value bytes (after the type) are given.
  GgufBuilder& kv(std::string_view key, uint32_t type, const std::string& value) {
    put_str(kv_, key);
    put<uint32_t>(kv_, type);
    kv_ += value;
    ++n_kv;
    return *this;
  }
  GgufBuilder& kv_u32(std::string_view key, uint32_t v) {
    std::string b;
    put<uint32_t>(b, v);
    return kv(key, 4, b);
  }
  GgufBuilder& kv_str(std::string_view key, std::string_view v) {
    std::string b;
    put_str(b, v);
    return kv(key, 8, b);
  }
  // dims fastest first, as the file stores them.
  GgufBuilder& tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t type,
                      uint64_t offset) {
    put_str(ti_, name);
    put<uint32_t>(ti_, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) put<uint64_t>(ti_, d);
    put<uint32_t>(ti_, type);
    put<uint64_t>(ti_, offset);
    ++n_tensors;
    return *this;
  }
  std::string build() const {
    std::string s = magic;
    put<uint32_t>(s, version);
    put<uint64_t>(s, n_tensors);
    put<uint64_t>(s, n_kv);
    s += kv_ + ti_;
    s.append((alignment - s.size() % alignment) % alignment, '\0');
    return s + data;
  }

  std::string magic = "GGUF";
  uint32_t version = 3;
  uint64_t n_tensors = 0, n_kv = 0;
  uint64_t alignment = 32;
  std::string data;

 private:
  std::string kv_, ti_;
};

// A file-size limit stands in for a full disk: writes past it fail with EFBIG (SIGXFSZ, which
// would kill the process, is ignored meanwhile).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  sighandler_t old_handler_;
};

}  // namespace partix::test

// Shared by the fuzz harnesses. Each harness defines LLVMFuzzerTestOneInput: libFuzzer drives
// it in the fuzzing build, replay_main.cpp feeds it the committed corpus in the test suite.
//
// The contract checked (files are untrusted input): a reader either succeeds or
// throws partix::Error. Any other exception aborts with its type and message, so both libFuzzer
// and the corpus replay report it as a crash; sanitizers report the rest.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <typeinfo>

#include "partix/partix.h"

namespace partix::fuzz {

[[noreturn]] inline void die(std::string_view what) {
  std::fprintf(stderr, "partix fuzz: %.*s\n", static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  std::abort();
}

// Runs f. Returns true when it returned, false when it threw partix::Error (the documented
// outcome for a bad file); any other exception is a bug in the reader.
template <class F>
bool expect_partix_error(F&& f) {
  try {
    f();
    return true;
  } catch (const Error&) {
    return false;
  } catch (const std::exception& e) {
    die(std::string("an exception other than partix::Error escaped: ") + typeid(e).name() + ": " +
        e.what());
  } catch (...) {
    die("a non-std exception escaped");
  }
}

// The message of the partix::Error f throws, or "" when it returns.
template <class F>
std::string error_message(F&& f) {
  std::string message;
  try {
    f();
  } catch (const Error& e) {
    message = e.what();
    if (message.empty()) die("a partix::Error with an empty message");
  } catch (const std::exception& e) {
    die(std::string("an exception other than partix::Error escaped: ") + typeid(e).name() + ": " +
        e.what());
  } catch (...) {
    die("a non-std exception escaped");
  }
  return message;
}

// A private folder for the files the readers open (they take paths), removed at exit. Under
// $TMPDIR when set, so a driver can keep the files on tmpfs and collect what a crash leaves.
class ScratchDir {
 public:
  static const ScratchDir& get() {
    static const ScratchDir dir;
    return dir;
  }
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }
  const std::string& path() const { return path_; }

  // Replaces the file `name` with the bytes (one write, no stdio buffering: it runs for
  // every input).
  std::string write(std::string_view name, const void* data, size_t size) const {
    const std::string p = file(name);
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) die("cannot create " + p + ": " + std::strerror(errno));
    const auto* bytes = static_cast<const char*>(data);
    size_t done = 0;
    while (done < size) {
      ssize_t n = ::write(fd, bytes + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) die("cannot write " + p + ": " + std::strerror(errno));
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return p;
  }
  std::string write(std::string_view name, std::string_view bytes) const {
    return write(name, bytes.data(), bytes.size());
  }

  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

 private:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/partix-fuzz-XXXXXX";
    if (!::mkdtemp(pattern.data())) die("cannot create a scratch folder: " + pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string path_;
};

// Virtual CPU devices for the harnesses that load tensors with a sharding (once per process).
inline void init_devices(int n) {
  if (!is_initialized()) init({.num_cpu_devices = n});
}

}  // namespace partix::fuzz

// Where the member threads of one collective meet inside a process: each publishes its
// buffers, then a generation-counting barrier releases them all at once. Used by the
// in-process communicator for whole groups and by the process communicator for the members of
// a group that live in this process.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/fiber.h"
#include "partix/dtype.h"
#include "partix/error.h"

namespace partix::comm {

// What one member entered: the collective and the size of its contribution. The members of
// one round must agree; devices that reach different collectives (a branch taken on some
// devices only) would otherwise read each other's buffers as the wrong thing.
struct Call {
  const char* what = "";
  int64_t bytes = 0;  // this member's input
  int dtype = -1;     // reductions: the element type and the reduction
  int kind = -1;
  bool shared = false;  // the form whose members receive one shared result
  bool operator==(const Call& o) const {
    return std::string_view(what) == o.what && bytes == o.bytes && dtype == o.dtype &&
           kind == o.kind && shared == o.shared;
  }
  // `form`: say which form of the call it is (when members differ only in that).
  std::string to_string(bool form) const {
    static constexpr const char* kKinds[] = {"sum", "max", "min"};
    std::string s = fmt::format("{} of {} bytes", what, bytes);
    if (dtype >= 0 && kind >= 0 && kind < 3) {
      s += fmt::format(" ({} {})", kKinds[kind], dtype_name(static_cast<DType>(dtype)));
    }
    if (form) s += shared ? " into a shared result" : " into its own buffer";
    return s;
  }
};

// A reduction's call: `count` elements of `dtype` per member.
inline Call reduction_call(const char* what, int64_t count, DType dtype, ReduceKind kind,
                           bool shared = false) {
  return Call{what, count * dtype_size(dtype), static_cast<int>(dtype), static_cast<int>(kind),
              shared};
}

struct Rendezvous {
  explicit Rendezvous(size_t members)
      : in(members), out(members), here(members, false), calls(members) {}

  std::mutex mu;
  std::condition_variable cv;
  std::vector<const void*> in;
  std::vector<void*> out;
  detail::Buffer result;  // shared result of the current round, if any
  std::atomic<int64_t> generation{0};
  int arrived = 0;
  std::vector<bool> here;
  std::vector<Call> calls;  // this round's, by rank
  std::string mismatch;     // set on release when the calls differ
  bool working = false;     // the last member is doing the round's work (under mu)

  // Run on release (under the lock): compares the members' calls.
  void compare_calls(const std::vector<int>& members) {
    mismatch.clear();
    bool same = true, forms = false;
    for (const Call& c : calls) {
      same = same && c == calls[0];
      forms = forms || c.shared != calls[0].shared;
    }
    if (same) return;
    std::vector<std::string> who;
    for (size_t r = 0; r < calls.size(); ++r) {
      who.push_back(fmt::format("device {}: {}", members[r], calls[r].to_string(forms)));
    }
    mismatch = fmt::format(
        "the devices of group [{}] entered different collectives ({}); every device of a group "
        "must run the same collectives, with the same sizes, in the same order (a cond or "
        "while_loop whose predicate differs between devices cannot hold a collective)",
        fmt::join(members, ","), fmt::join(who, "; "));
  }
  // After the meeting: raises when compare_calls found the members disagreeing.
  void throw_if_mismatched(const char* what) const {
    if (!mismatch.empty()) throw Error(fmt::format("[{}] {}", what, mismatch));
  }

  // The barrier: member `rank` of `members` (device ids, for messages) arrives; the last one
  // runs `on_release` (under the lock), then `work` (outside it: members waiting on the lock
  // would otherwise wake one after another when it is released), then releases everyone.
  // `work` must not throw. While it runs, the waiting members neither time out nor leave on
  // an abort: it reads their buffers. Waiters spin (yielding: there are more device threads
  // than cores) before they block. `check_abort` raises when a member has failed; a member
  // that waits past the collective timeout raises TimeoutError naming the devices that did
  // not arrive.
  // `slack` lengthens the timeout: a process communicator's members wait a little longer for
  // each other than its leaders wait for other processes, so that a silent process is named
  // (by the leader) rather than the local device stuck waiting for it.
  template <class CheckAbort, class Aborted, class OnRelease, class Work>
  void wait_all_then(const char* what, const std::vector<int>& members, int rank,
                     CheckAbort check_abort, Aborted aborted, OnRelease on_release, Work work,
                     std::chrono::milliseconds slack = std::chrono::milliseconds(0)) {
    const int n = static_cast<int>(members.size());
    check_abort();
    int64_t gen;
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      gen = generation.load();
      here[static_cast<size_t>(rank)] = true;
      if (++arrived == n) {
        arrived = 0;
        std::fill(here.begin(), here.end(), false);
        on_release();
        working = last = true;
      }
    }
    if (last) {
      work();
      {
        std::lock_guard<std::mutex> lock(mu);
        working = false;
        generation.fetch_add(1);
        cv.notify_all();
      }
      detail::notify_progress();
      return;
    }
    if (detail::in_fiber()) {
      // A device fiber: its thread runs the other devices meanwhile (core/fiber.h).
      // The deadline counts from arrival; the timeout (an environment lookup) is read only when
      // a check first comes due.
      const auto arrival = std::chrono::steady_clock::now();
      std::optional<std::chrono::steady_clock::time_point> deadline;
      bool first = true;  // after arriving: the fiber has run since it was last resumed
      // Aborts and the deadline are checked every 16th time the fiber finds the round still
      // open: the lock and the clock on every resume were most of what a waiting fiber cost.
      for (unsigned polls = 0; generation.load() == gen;) {
        detail::fiber_yield(first ? detail::YieldKind::kWork : detail::YieldKind::kIdle);
        first = false;
        if (generation.load() != gen) return;
        if (++polls % 16 != 0) continue;
        std::unique_lock<std::mutex> lock(mu);
        if (generation.load() != gen || working) continue;
        lock.unlock();
        check_abort();
        if (!deadline) {
          deadline = arrival + slack +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(collective_timeout_seconds()));
        }
        if (std::chrono::steady_clock::now() < *deadline) continue;
        lock.lock();
        if (generation.load() != gen || working) continue;
        throw_timeout(what, members);
      }
      return;
    }
    auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (generation.load() == gen && !aborted() &&
           std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    }
    if (generation.load() != gen) return;
    std::unique_lock<std::mutex> lock(mu);
    const auto deadline = collective_deadline() + slack;
    while (generation.load() == gen) {
      if (working) {
        cv.wait(lock);
        continue;
      }
      check_abort();
      if (cv.wait_until(lock, deadline) == std::cv_status::timeout && generation.load() == gen &&
          !working) {
        throw_timeout(what, members);
      }
    }
  }
  // Under the lock, past the deadline: names the members that have not arrived.
  [[noreturn]] void throw_timeout(const char* what, const std::vector<int>& members) const {
    std::vector<int> missing;
    for (size_t r = 0; r < members.size(); ++r) {
      if (!here[r]) missing.push_back(members[r]);
    }
    throw TimeoutError(fmt::format(
        "[{}] timed out after {} s waiting for device(s) {} of group [{}]", what,
        collective_timeout_seconds(), fmt::join(missing, ", "), fmt::join(members, ",")));
  }
  // wait_all_then without work.
  template <class CheckAbort, class Aborted, class OnRelease>
  void wait_all(const char* what, const std::vector<int>& members, int rank, CheckAbort check_abort,
                Aborted aborted, OnRelease on_release,
                std::chrono::milliseconds slack = std::chrono::milliseconds(0)) {
    wait_all_then(
        what, members, rank, check_abort, aborted, on_release, [] {}, slack);
  }

  void notify() {
    {
      std::lock_guard<std::mutex> l(mu);
      cv.notify_all();
    }
    detail::notify_progress();
  }
};

}  // namespace partix::comm

#include "comm/mpi/mpi_runtime.h"

#include <mpi.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "comm/communicator.h"
#include "core/device_registry.h"
#include "core/errors.h"
#include "core/fiber.h"

namespace partix::comm::mpi {

namespace {

constexpr int kNoticeTag = 1;  // control channels (exchange_control's) are the other tags
static_assert(kControlChannel != kNoticeTag && kCheckpointChannel != kNoticeTag &&
              kFinalizeChannel != kNoticeTag && kControlChannel != kCheckpointChannel &&
              kFinalizeChannel != kControlChannel && kFinalizeChannel != kCheckpointChannel);
// Signs of life at exit: a process waiting for another in the closing handshake pings it, and
// every process answers from a thread of its own, even while its main thread is still working.
constexpr int kPingTag = 5;
constexpr int kPongTag = 6;
static_assert(kPingTag > kFinalizeChannel && kPongTag > kFinalizeChannel);
constexpr int64_t kPiece = int64_t{1} << 30;  // bytes per MPI message (counts are int)

struct State {
  std::once_flag once;
  std::string start_error;  // a failed start, raised again by every later launch()
  Launch launch;
  bool active = false;
  std::mutex mu;                     // every MPI call
  MPI_Comm data = MPI_COMM_NULL;     // collectives' bytes
  MPI_Comm control = MPI_COMM_NULL;  // notices and control exchanges
  std::deque<std::pair<std::shared_ptr<std::string>, MPI_Request>> pending_notices;
  std::function<void(const Notice&)> handler;
  std::mutex handler_mu;
  std::atomic<bool> failed{false};
  // Set in a child forked after MPI started: MPI does not survive fork(), so the child neither
  // communicates nor takes part in the closing handshake.
  std::atomic<bool> forked{false};
  pid_t pid = 0;  // the process that started MPI
  std::map<int, std::string> stopped;  // processes that said they stop, and why (under mu)
  std::thread responder;               // answers pings (respond_to_pings)
  std::mutex responder_mu;
  std::condition_variable responder_cv;
  bool responder_stop = false;  // under responder_mu
};

State& state() {
  static State* s = new State;  // never destroyed: device threads may use it during exit
  return *s;
}

[[noreturn]] void mpi_fail(const char* what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  detail::fail(what, "MPI failed: {}", std::string(text, static_cast<size_t>(len)));
}

void check_mpi(int code, const char* what) {
  if (code != MPI_SUCCESS) mpi_fail(what, code);
}

// Runs `call`, an MPI call that waits for every process of the job in the launcher's handshake
// (MPI_Init, MPI_Finalize) and has no timeout of its own. A watchdog thread gives it the
// collective timeout: past it, it reports what was waited for and ends this process with
// status 1 (mpirun then ends the job), since the call itself can be neither interrupted nor
// cancelled.
void run_with_watchdog(const char* api, const char* call_name, const char* waiting_for,
                       const std::function<void()>& call) {
  struct Watch {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
  };
  auto w = std::make_shared<Watch>();
  const double seconds = collective_timeout_seconds();
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const std::string message =
      fmt::format("partix: [{}] timed out after {} s in {} waiting for {}; process {} exits\n", api,
                  seconds, call_name, waiting_for, rank != nullptr ? rank : "?");
  std::thread dog([w, seconds, message] {
    std::unique_lock<std::mutex> lock(w->mu);
    const auto limit = std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9));
    if (w->cv.wait_for(lock, limit, [&] { return w->done; })) return;
    std::fputs(message.c_str(), stderr);
    std::fflush(stderr);
    std::_Exit(1);
  });
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->done = true;
    }
    w->cv.notify_one();
    dog.join();
  };
  try {
    call();
  } catch (...) {
    finish();
    throw;
  }
  finish();
}

void wait_requests(State& s, std::vector<MPI_Request>& reqs, const std::vector<int>& peers,
                   const char* what, const std::string& group,
                   const std::function<void()>& check_abort, bool watch_exits = false);

void respond_to_pings(State& s) {
  char none = 0;
  std::unique_lock<std::mutex> wait_lock(s.responder_mu);
  while (!s.responder_stop) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      while (true) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, s.control, &flag, &st) != MPI_SUCCESS || !flag) {
          break;
        }
        MPI_Recv(&none, 0, MPI_BYTE, st.MPI_SOURCE, kPingTag, s.control, MPI_STATUS_IGNORE);
        MPI_Request r = MPI_REQUEST_NULL;
        if (MPI_Isend(&none, 0, MPI_BYTE, st.MPI_SOURCE, kPongTag, s.control, &r) == MPI_SUCCESS) {
          MPI_Request_free(&r);
        }
      }
    }
    s.responder_cv.wait_for(wait_lock, std::chrono::milliseconds(50));
  }
}

void stop_responder(State& s) {
  {
    std::lock_guard<std::mutex> lock(s.responder_mu);
    s.responder_stop = true;
  }
  s.responder_cv.notify_all();
  if (s.responder.joinable()) s.responder.join();
}

// The closing handshake: every process tells every other that it reached the end, and waits
// for theirs. A process that has not arrived yet but answers pings is still working, and is
// waited for (as MPI_Finalize would); one silent for the collective timeout is stopped or hung:
// raises TimeoutError naming it. Raises Error when a process said it stopped.
void exit_handshake(State& s) {
  using Clock = std::chrono::steady_clock;
  const int me = s.launch.index;
  const auto silence =
      std::chrono::nanoseconds(static_cast<int64_t>(collective_timeout_seconds() * 1e9));
  const auto period = std::min<Clock::duration>(silence / 4, std::chrono::seconds(1));
  char none = 0;
  std::vector<MPI_Request> sends;
  std::vector<int> send_peers;
  std::map<int, Clock::time_point> waiting;  // peer -> its last sign of life
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (int p = 0; p < s.launch.count; ++p) {
      if (p == me) continue;
      MPI_Request r = MPI_REQUEST_NULL;
      check_mpi(MPI_Isend(&none, 0, MPI_BYTE, p, kFinalizeChannel, s.control, &r),
                "distributed::finalize");
      sends.push_back(r);
      send_peers.push_back(p);
      waiting[p] = Clock::now();
    }
  }
  Clock::time_point next_ping = Clock::now();
  while (!waiting.empty()) {
    const Clock::time_point now = Clock::now();
    {
      std::lock_guard<std::mutex> lock(s.mu);
      for (auto it = waiting.begin(); it != waiting.end();) {
        int flag = 0;
        check_mpi(MPI_Iprobe(it->first, kFinalizeChannel, s.control, &flag, MPI_STATUS_IGNORE),
                  "distributed::finalize");
        if (!flag) {
          ++it;
          continue;
        }
        MPI_Recv(&none, 0, MPI_BYTE, it->first, kFinalizeChannel, s.control, MPI_STATUS_IGNORE);
        it = waiting.erase(it);
      }
      while (true) {
        int flag = 0;
        MPI_Status st;
        if (MPI_Iprobe(MPI_ANY_SOURCE, kPongTag, s.control, &flag, &st) != MPI_SUCCESS || !flag) {
          break;
        }
        MPI_Recv(&none, 0, MPI_BYTE, st.MPI_SOURCE, kPongTag, s.control, MPI_STATUS_IGNORE);
        auto it = waiting.find(st.MPI_SOURCE);
        if (it != waiting.end()) it->second = now;
      }
      if (now >= next_ping) {
        for (const auto& [p, heard] : waiting) {
          MPI_Request r = MPI_REQUEST_NULL;
          if (MPI_Isend(&none, 0, MPI_BYTE, p, kPingTag, s.control, &r) == MPI_SUCCESS) {
            MPI_Request_free(&r);
          }
        }
        next_ping = now + period;
      }
    }
    if (waiting.empty()) break;
    poll_notices();
    std::vector<int> silent;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      for (const auto& [p, heard] : waiting) {
        auto it = s.stopped.find(p);
        if (it != s.stopped.end()) {
          detail::fail("distributed::finalize", "process {} stopped: {}", p, it->second);
        }
        if (now - heard > silence) silent.push_back(p);
      }
    }
    if (!silent.empty()) {
      throw TimeoutError(fmt::format(
          "[distributed::finalize] timed out after {} s waiting for process(es) {}, which "
          "neither reached the end of the program nor answered (stopped or hung); this process "
          "exits without MPI_Finalize, which would wait for it forever",
          collective_timeout_seconds(), fmt::join(silent, ", ")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  wait_requests(s, sends, send_peers, "distributed::finalize", "exit", nullptr);
}

// At exit, before MPI_Finalize: the closing handshake, which names a process that stopped or
// hung, then MPI_Finalize under the watchdog (a process may stop between the two).
void finalize_at_exit() {
  State& s = state();
  if (!s.active || s.failed.load() || s.forked.load()) return;
  try {
    exit_handshake(s);
  } catch (const TimeoutError& e) {
    std::fprintf(stderr, "partix: %s\n", e.what());
    std::fflush(stderr);
    std::_Exit(1);
  } catch (const std::exception& e) {
    // Another process stopped with an error (its notice names it): the job has failed, and
    // MPI_Finalize would wait for that process. Exit without it.
    std::fprintf(stderr, "partix: %s\n", e.what());
    std::fflush(stderr);
    s.failed.store(true);
    return;
  }
  stop_responder(s);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  run_with_watchdog("distributed::finalize", "MPI_Finalize", "the job's other processes to finish",
                    [] { MPI_Finalize(); });
}

// The exit handler: a process that exits with a nonzero status (an uncaught error, a failed
// check, sys.exit(1)) tells the others that it stopped, so that they raise at once naming it
// instead of waiting for it; one that exits with status 0 meets them in the closing handshake.
void on_process_exit(int status, void*) {
  State& s = state();
  if (!s.active || s.forked.load()) return;
  if (status != 0) {
    notify_failure(fmt::format("it exited with status {}", status));
    return;
  }
  finalize_at_exit();
}

void on_fork_child() { state().forked.store(true); }

[[noreturn]] void fail_forked(const char* what) {
  detail::fail(what,
               "this process was forked from process {} (pid {}) of the MPI job after MPI "
               "started, and MPI does not survive fork(): a forked child cannot communicate "
               "(start workers that use partix as new processes, e.g. multiprocessing's "
               "'spawn' start method)",
               state().launch.index, state().pid);
}

std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 20) {
    detail::fail("distributed::initialize", "{} is '{}', not a process count or rank", name, v);
  }
  return static_cast<int>(x);
}

void start(State& s) {
  const std::optional<int> size = env_int("OMPI_COMM_WORLD_SIZE");
  if (!size || *size <= 1) return;
  int provided = 0;
  int initialized = 0;
  MPI_Initialized(&initialized);
  // MPI_Init and the duplications below (collective over every process) wait for the whole
  // job: a process stopped or dead before it started would keep them waiting forever.
  const std::string waiting = fmt::format(
      "the job's {} processes to start (a process that was stopped, died or never "
      "started keeps the others waiting)",
      *size);
  std::string init_error;
  run_with_watchdog("distributed::initialize", "MPI_Init", waiting.c_str(), [&] {
    if (!initialized) {
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (rc != MPI_SUCCESS) {
        init_error = "MPI_Init failed";
        return;
      }
    } else {
      MPI_Query_thread(&provided);
    }
    if (MPI_Comm_dup(MPI_COMM_WORLD, &s.data) != MPI_SUCCESS ||
        MPI_Comm_dup(MPI_COMM_WORLD, &s.control) != MPI_SUCCESS) {
      init_error = "MPI_Comm_dup failed";
    }
  });
  if (!init_error.empty()) {
    detail::fail("distributed::initialize", "{} (process {} of {})", init_error,
                 std::getenv("OMPI_COMM_WORLD_RANK") ? std::getenv("OMPI_COMM_WORLD_RANK") : "?",
                 *size);
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    detail::fail("distributed::initialize",
                 "the MPI library gives thread level {}; partix needs at least "
                 "MPI_THREAD_SERIALIZED", provided);
  }
  int rank = 0, count = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &count);
  // Errors come back as codes, which partix turns into partix::Error.
  MPI_Comm_set_errhandler(s.data, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(s.control, MPI_ERRORS_RETURN);
  int* tag_ub = nullptr;
  int has = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has);
  if (!has || tag_ub == nullptr || *tag_ub < 0x7FFFFFFF) {
    detail::fail("distributed::initialize",
                 "the MPI library allows message tags up to {}; partix needs 2^31-1 (Open MPI's)",
                 has && tag_ub ? *tag_ub : 0);
  }
  s.launch = Launch{rank, count};
  s.active = true;
  s.pid = getpid();
  s.responder = std::thread([&s] { respond_to_pings(s); });
  pthread_atfork(nullptr, nullptr, on_fork_child);
#ifdef __GLIBC__
  on_exit(on_process_exit, nullptr);  // as atexit, with the exit status
#else
  std::atexit(finalize_at_exit);
#endif
}

// Between polls of a wait: spins for 200 us (the peer is usually about to answer), then backs
// off, since there are more threads than cores. The spin is timed, not counted: a fiber's poll
// costs a switch, and when switches became 20 times cheaper a count of 64 polls ran out within
// microseconds, so that waits of a millisecond slept in 20 us steps (2 processes x 4 devices
// trained 1.28x slower).
class Backoff {
 public:
  void pause() {
    const auto waited = std::chrono::steady_clock::now() - start_;
    const bool spinning = waited < std::chrono::microseconds(200);
    if (!spinning) {
      std::this_thread::sleep_for(
          std::chrono::microseconds(waited < std::chrono::milliseconds(20) ? 20 : 500));
    }
    if (detail::in_fiber()) {
      // The thread's other devices run meanwhile: they may be what another process waits for.
      detail::fiber_yield(detail::YieldKind::kPolling);
    } else if (spinning) {
      std::this_thread::yield();
    }
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// A process whose program ended (it sent its closing message and waits in the closing
// handshake) joins no collective any more, so a wait for it would last the whole collective
// timeout. A wait that has lasted kAfter looks for the closing messages of the processes it
// waits for, every kEvery; one still awaited kGrace (and kPolls polls) after its message was
// seen is named: what it sent before it ended has had time to arrive (between two processes
// Open MPI delivers in order, so it has in practice already arrived when the message is seen).
class ExitWatch {
 public:
  explicit ExitWatch(bool on) : on_(on), next_(Clock::now() + kAfter) {}

  // Raises Error when one of the processes `awaited()` returns ended its program.
  template <class Awaited>
  void check(State& s, const char* what, const std::string& group, const Awaited& awaited) {
    if (!on_) return;
    ++polls_;
    const Clock::time_point now = Clock::now();
    if (now < next_) return;
    next_ = now + kEvery;
    for (int p : awaited()) {
      auto it = ended_.find(p);
      if (it == ended_.end()) {
        if (reached_exit(s, p)) ended_.emplace(p, Seen{now, polls_});
      } else if (now - it->second.at >= kGrace && polls_ - it->second.polls >= kPolls) {
        detail::fail(what,
                     "process {} stopped: its program ended (it exited) while this process "
                     "still waits for it ({}); every process must run the same collectives in "
                     "the same order (one that returned or exited early, or skipped a step, "
                     "leaves the others waiting)",
                     p, group);
      }
    }
  }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kAfter = std::chrono::milliseconds(500);
  static constexpr auto kEvery = std::chrono::milliseconds(100);
  static constexpr auto kGrace = std::chrono::milliseconds(1500);
  static constexpr int64_t kPolls = 20;
  struct Seen {
    Clock::time_point at;
    int64_t polls;
  };

  static bool reached_exit(State& s, int p) {
    std::lock_guard<std::mutex> lock(s.mu);
    int flag = 0;
    return MPI_Iprobe(p, kFinalizeChannel, s.control, &flag, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
           flag != 0;
  }

  bool on_;
  Clock::time_point next_;
  int64_t polls_ = 0;
  std::map<int, Seen> ended_;
};

// Waits for `reqs` (owned by peers[i]) until all completed or the deadline; polls notices
// and `check_abort` in between (and, with watch_exits, whether an awaited process's program
// ended: ExitWatch). On any exit but completion, cancels what is left.
void wait_requests(State& s, std::vector<MPI_Request>& reqs, const std::vector<int>& peers,
                   const char* what, const std::string& group,
                   const std::function<void()>& check_abort, bool watch_exits) {
  ExitWatch exits(watch_exits);
  auto awaited = [&] {
    std::vector<int> out;
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (reqs[i] != MPI_REQUEST_NULL) out.push_back(peers[i]);
    }
    return out;
  };
  const auto deadline = collective_deadline();
  std::vector<int> indices(reqs.size());
  size_t left = reqs.size();
  for (const MPI_Request& r : reqs) left -= (r == MPI_REQUEST_NULL);
  auto cancel_rest = [&] {
    std::lock_guard<std::mutex> lock(s.mu);
    for (MPI_Request& r : reqs) {
      if (r == MPI_REQUEST_NULL) continue;
      // A receive is cancelled; a send is left to finish (or not) on its own.
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  };
  Backoff backoff;
  while (left > 0) {
    int done = 0;
    int rc = MPI_SUCCESS;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      rc = MPI_Testsome(static_cast<int>(reqs.size()), reqs.data(), &done, indices.data(),
                        MPI_STATUSES_IGNORE);
    }
    if (rc != MPI_SUCCESS) {
      cancel_rest();
      mpi_fail(what, rc);
    }
    if (done != MPI_UNDEFINED) left -= static_cast<size_t>(done);
    if (left == 0) break;
    try {
      poll_notices();
      if (check_abort) check_abort();
      exits.check(s, what, group, awaited);
    } catch (...) {
      cancel_rest();
      throw;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::set<int> missing;
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (reqs[i] != MPI_REQUEST_NULL) missing.insert(peers[i]);
      }
      cancel_rest();
      throw TimeoutError(fmt::format(
          "[{}] timed out after {} s waiting for process(es) {} ({}); a process that died, "
          "raised an error or runs a different program stops the others",
          what, collective_timeout_seconds(), fmt::join(missing, ", "), group));
    }
    backoff.pause();
  }
}

}  // namespace

Launch launch() {
  State& s = state();
  std::call_once(s.once, [&] {
    try {
      start(s);
    } catch (const std::exception& e) {
      s.start_error = e.what();
    }
  });
  if (!s.start_error.empty()) throw Error(s.start_error);
  return s.launch;
}

bool multi_process() { return launch().count > 1; }

void exchange(const ExchangeContext& ctx, const std::vector<Transfer>& sends,
              const std::vector<Transfer>& recvs) {
  State& s = state();
  if (!s.active) detail::internal_error("mpi::exchange", "MPI is not initialised");
  if (s.forked.load(std::memory_order_relaxed)) fail_forked(ctx.what);
  std::vector<MPI_Request> reqs;
  std::vector<int> peers;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto post = [&](const Transfer& t, bool send) {
      int64_t off = 0;
      do {
        const int n = static_cast<int>(std::min(kPiece, t.bytes - off));
        MPI_Request r = MPI_REQUEST_NULL;
        char* p = static_cast<char*>(t.data) + off;
        const int tag = ctx.tag_of ? ctx.tag_of(t.process, send) : ctx.tag;
        int rc = send ? MPI_Isend(p, n, MPI_BYTE, t.process, tag, s.data, &r)
                      : MPI_Irecv(p, n, MPI_BYTE, t.process, tag, s.data, &r);
        if (rc != MPI_SUCCESS) mpi_fail(ctx.what, rc);
        reqs.push_back(r);
        peers.push_back(t.process);
        off += n;
      } while (off < t.bytes);
    };
    for (const Transfer& t : recvs) post(t, false);
    for (const Transfer& t : sends) post(t, true);
  }
  wait_requests(s, reqs, peers, ctx.what, ctx.group, ctx.check_abort, /*watch_exits=*/true);
}

void set_notice_handler(std::function<void(const Notice&)> handler) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.handler_mu);
  s.handler = std::move(handler);
}

void send_notice(const Notice& n, const std::vector<int>& processes) {
  State& s = state();
  if (!s.active || s.forked.load()) return;
  auto text = std::make_shared<std::string>();
  text->resize(24);
  std::memcpy(text->data(), &n.key, 8);
  std::memcpy(text->data() + 8, &n.run, 8);
  std::memcpy(text->data() + 16, &n.process, 4);
  std::memcpy(text->data() + 20, &n.device, 4);
  *text += n.cause.substr(0, 4000);
  std::lock_guard<std::mutex> lock(s.mu);
  for (int p : processes) {
    if (p == s.launch.index) continue;
    MPI_Request r = MPI_REQUEST_NULL;
    if (MPI_Isend(text->data(), static_cast<int>(text->size()), MPI_BYTE, p, kNoticeTag,
                  s.control, &r) == MPI_SUCCESS) {
      s.pending_notices.emplace_back(text, r);
    }
  }
}

void poll_notices() {
  State& s = state();
  if (!s.active || s.forked.load(std::memory_order_relaxed)) return;
  std::vector<Notice> got;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    while (!s.pending_notices.empty()) {  // sent notices whose send finished
      int done = 0;
      MPI_Test(&s.pending_notices.front().second, &done, MPI_STATUS_IGNORE);
      if (!done) break;
      s.pending_notices.pop_front();
    }
    while (true) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kNoticeTag, s.control, &flag, &st) != MPI_SUCCESS || !flag) {
        break;
      }
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      std::string text(static_cast<size_t>(std::max(count, 0)), '\0');
      MPI_Recv(text.data(), count, MPI_BYTE, st.MPI_SOURCE, kNoticeTag, s.control,
               MPI_STATUS_IGNORE);
      if (text.size() < 24) continue;
      Notice n;
      std::memcpy(&n.key, text.data(), 8);
      std::memcpy(&n.run, text.data() + 8, 8);
      std::memcpy(&n.process, text.data() + 16, 4);
      std::memcpy(&n.device, text.data() + 20, 4);
      n.cause = text.substr(24);
      if (n.run == kJob) s.stopped.emplace(n.process, n.cause);
      got.push_back(std::move(n));
    }
  }
  if (got.empty()) return;
  std::lock_guard<std::mutex> lock(s.handler_mu);
  for (const Notice& n : got) {
    if (s.handler) s.handler(n);
  }
}

std::vector<std::string> exchange_control(const std::vector<int>& processes,
                                          const std::string& mine, const char* what, int channel) {
  State& s = state();
  if (channel == kNoticeTag || channel < 0) {
    detail::internal_error("mpi::exchange_control", fmt::format("channel {} is reserved", channel));
  }
  std::vector<std::string> out(processes.size());
  if (!s.active) {
    out.assign(processes.size(), mine);
    return out;
  }
  if (s.forked.load()) fail_forked(what);
  const int me = s.launch.index;
  std::vector<MPI_Request> sends;
  std::vector<int> send_peers;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (int p : processes) {
      if (p == me) continue;
      MPI_Request r = MPI_REQUEST_NULL;
      check_mpi(MPI_Isend(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, p, channel,
                          s.control, &r), what);
      sends.push_back(r);
      send_peers.push_back(p);
    }
  }
  // Receives by probing: the sizes are not known in advance.
  const auto deadline = collective_deadline();
  std::vector<bool> have(processes.size(), false);
  size_t left = 0;
  for (size_t i = 0; i < processes.size(); ++i) {
    if (processes[i] == me) {
      out[i] = mine;
      have[i] = true;
    } else {
      ++left;
    }
  }
  auto missing = [&] {
    std::vector<int> out;
    for (size_t i = 0; i < processes.size(); ++i) {
      if (!have[i]) out.push_back(processes[i]);
    }
    return out;
  };
  // A checkpoint's commit may be awaited from a writer thread after the program's end.
  ExitWatch exits(channel == kControlChannel);
  Backoff backoff;
  while (left > 0) {
    for (size_t i = 0; i < processes.size(); ++i) {
      if (have[i]) continue;
      std::lock_guard<std::mutex> lock(s.mu);
      int flag = 0;
      MPI_Status st;
      check_mpi(MPI_Iprobe(processes[i], channel, s.control, &flag, &st), what);
      if (!flag) continue;
      int count = 0;
      MPI_Get_count(&st, MPI_BYTE, &count);
      out[i].resize(static_cast<size_t>(std::max(count, 0)));
      check_mpi(MPI_Recv(out[i].data(), count, MPI_BYTE, processes[i], channel, s.control,
                         MPI_STATUS_IGNORE), what);
      have[i] = true;
      --left;
    }
    if (left == 0) break;
    poll_notices();
    {
      std::lock_guard<std::mutex> lock(s.mu);
      for (size_t i = 0; i < processes.size(); ++i) {
        auto it = s.stopped.find(processes[i]);
        if (!have[i] && it != s.stopped.end()) {
          detail::fail(what, "process {} stopped: {}", it->first, it->second);
        }
      }
    }
    exits.check(s, what, "an exchange between processes", missing);
    if (std::chrono::steady_clock::now() > deadline) {
      throw TimeoutError(fmt::format(
          "[{}] timed out after {} s waiting for process(es) {}; every process must run the "
          "same program (a process that died or raised an error stops the others)",
          what, collective_timeout_seconds(), fmt::join(missing(), ", ")));
    }
    backoff.pause();
  }
  wait_requests(s, sends, send_peers, what, "control", nullptr);
  return out;
}

void notify_failure(const std::string& cause) {
  State& s = state();
  if (!s.active || s.forked.load() || s.failed.exchange(true)) return;
  std::vector<int> all;
  for (int p = 0; p < s.launch.count; ++p) all.push_back(p);
  send_notice(Notice{0, kJob, s.launch.index, -1, cause}, all);
  // Give the notices a moment to leave; a peer that is gone never takes them.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < until) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      while (!s.pending_notices.empty()) {
        int done = 0;
        MPI_Test(&s.pending_notices.front().second, &done, MPI_STATUS_IGNORE);
        if (!done) break;
        s.pending_notices.pop_front();
      }
      if (s.pending_notices.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // A moment for the others to report the notice before mpirun, seeing this process exit
  // with an error, ends the job.
  std::this_thread::sleep_for(std::chrono::seconds(2));
}

namespace {

// Devices learn the job's processes through these (core sits below communication).
const bool hooks_installed = [] {
  detail::set_process_hooks({
      [] {
        const Launch l = launch();
        return detail::ProcessLaunch{l.index, l.count};
      },
      [](const std::vector<int>& processes, const std::string& mine, const char* what) {
        return exchange_control(processes, mine, what);
      },
  });
  return true;
}();

}  // namespace

}  // namespace partix::comm::mpi

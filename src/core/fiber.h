// Fibers: the local devices of a program run as fibers, a few per worker thread (one thread per
// core), instead of one thread each. A fiber has its own stack; it runs on its
// scheduler's thread until it waits in a collective, where it yields so that the thread runs
// another device up to the same collective. No thread ever sleeps while a device it holds could
// run, and the operating system never has more device threads than cores to switch between.
//
// Waits that may hold a fiber (collectives) yield with fiber_yield() while in_fiber(), and
// whatever releases such a wait calls notify_progress(), which wakes idle schedulers.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace partix::detail {

// Whether the calling code runs on a fiber (false on ordinary threads).
bool in_fiber();
// Back to the scheduler; returns when the scheduler resumes this fiber. Only on a fiber.
void fiber_yield();

// How a fiber yielded, for its scheduler: kWork after running (the first yield of a wait),
// kIdle when a wait found nothing changed since it last yielded (the scheduler may count the
// fiber idle), kPolling for a wait on another process, which notifies nobody (the scheduler
// runs its fibers again without sleeping). take_yield_kind() says, on a scheduler's thread,
// how the fiber it last resumed yielded.
enum class YieldKind { kWork, kIdle, kPolling };
void fiber_yield(YieldKind kind);
YieldKind take_yield_kind();

// Something a waiting fiber may wait for has happened (a collective released or aborted).
void notify_progress();
uint64_t progress_epoch();
// Blocks until progress_epoch() differs from `seen`, or `timeout` passes (for schedulers with
// nothing to run). Returns whether the epoch moved.
bool wait_for_progress(uint64_t seen, std::chrono::microseconds timeout);

// One fiber: a function run on its own stack (8 MiB of address space, committed as used, with a
// guard page; stacks are kept for reuse). resume() runs it on the calling thread until it
// yields or returns; it must always be resumed on the same thread. `fn` must not throw.
class Fiber {
 public:
  explicit Fiber(std::function<void()> fn);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
  // Returns true once the function has returned.
  bool resume();
  bool finished() const;

  struct State;

 private:
  std::unique_ptr<State> s_;
};

}  // namespace partix::detail

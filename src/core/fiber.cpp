#include "core/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/errors.h"
#include "core/fault_injection.h"

// On x86-64 a fiber switch saves and restores only what the ABI asks a callee to keep (the
// callee-saved registers, the SSE and x87 control words) and swaps stacks. swapcontext also
// saves the signal mask, a system call on every switch: with a switch per device per
// collective, that was a tenth of a collective-heavy program's time.
#if defined(__x86_64__) && defined(__linux__)
#define PARTIX_FIBER_ASM 1
#endif

#ifdef PARTIX_FIBER_ASM
// Saves the caller's registers on its stack and its stack pointer in *save, then continues on
// the stack `load` (one saved by an earlier call, or laid out by Fiber's constructor).
extern "C" void partix_fiber_switch(void** save, void* load);
asm(R"(
    .text
    .p2align 4
    .globl partix_fiber_switch
    .hidden partix_fiber_switch
    .type partix_fiber_switch, @function
partix_fiber_switch:
    .cfi_startproc
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    stmxcsr 8(%rsp)
    fnstcw (%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    fldcw (%rsp)
    ldmxcsr 8(%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size partix_fiber_switch, .-partix_fiber_switch
)");
#else
#include <ucontext.h>
#endif

// Sanitizers must be told about stack switches (AddressSanitizer's fake stacks, ThreadSanitizer's
// per-fiber clocks).
#if defined(__SANITIZE_ADDRESS__)
#define PARTIX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PARTIX_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define PARTIX_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PARTIX_TSAN 1
#endif
#endif
#ifdef PARTIX_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef PARTIX_TSAN
#include <sanitizer/tsan_interface.h>
#endif

// The C++ runtime keeps the exceptions being handled per thread (Itanium C++ ABI): a fiber that
// yields inside a catch block must take its own with it.
struct __cxa_eh_globals;
extern "C" __cxa_eh_globals* __cxa_get_globals() noexcept;

namespace partix::detail {

namespace {

struct EhGlobals {  // the Itanium ABI's __cxa_eh_globals
  void* caught_exceptions = nullptr;
  unsigned int uncaught_exceptions = 0;
};

EhGlobals& eh_globals() { return *reinterpret_cast<EhGlobals*>(__cxa_get_globals()); }

constexpr size_t kStackBytes = size_t{8} << 20;
constexpr size_t kCachedStacks = 64;

// Fiber stacks: mapped once, committed page by page as used, a guard page below; kept for reuse
// so that a program run maps and faults nothing.
class StackPool {
 public:
  static StackPool& get() {
    static StackPool* p = new StackPool;  // never destroyed: fibers may end during exit
    return *p;
  }
  void* take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        void* s = free_.back();
        free_.pop_back();
        return s;
      }
    }
    void* s = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (s == MAP_FAILED) {
      const int e = errno;
      fail("runtime", "{}could not map a device fiber's stack ({} KiB): {}",
           e == ENOMEM ? "out of host memory: " : "", kStackBytes >> 10, std::strerror(e));
    }
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    if (mprotect(s, page, PROT_NONE) != 0) {
      munmap(s, kStackBytes);
      fail("runtime", "could not protect a device fiber's stack: {}", std::strerror(errno));
    }
    return s;
  }
  void give(void* s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < kCachedStacks) {
      free_.push_back(s);
      return;
    }
    munmap(s, kStackBytes);
  }

 private:
  std::mutex mu_;
  std::vector<void*> free_;
};

std::atomic<uint64_t> g_epoch{0};
std::atomic<int> g_sleepers{0};
std::mutex g_progress_mu;
std::condition_variable g_progress_cv;

}  // namespace

struct Fiber::State {
  std::function<void()> fn;
#ifdef PARTIX_FIBER_ASM
  void* sp = nullptr;         // the fiber's saved stack pointer while it is not running
  void* caller_sp = nullptr;  // the scheduler's, while the fiber runs
#else
  ucontext_t context{}, caller{};
#endif
  void* stack = nullptr;
  bool started = false, done = false;
  // What the thread-level state is while this fiber runs (saved when it yields).
  EhGlobals eh;
  ProgramScopeState program;
#ifdef PARTIX_ASAN
  void* resume_fake = nullptr;
  void* yield_fake = nullptr;
  const void* caller_bottom = nullptr;
  size_t caller_size = 0;
#endif
#ifdef PARTIX_TSAN
  void* tsan_fiber = nullptr;
  void* tsan_caller = nullptr;
#endif
};

namespace {

thread_local Fiber::State* t_current = nullptr;

// Into the caller (the scheduler), from the fiber.
void switch_to_caller(Fiber::State* s, bool ending) {
#ifdef PARTIX_ASAN
  __sanitizer_start_switch_fiber(ending ? nullptr : &s->yield_fake, s->caller_bottom, s->caller_size);
#endif
#ifdef PARTIX_TSAN
  __tsan_switch_to_fiber(s->tsan_caller, 0);
#endif
  (void)ending;
#ifdef PARTIX_FIBER_ASM
  partix_fiber_switch(&s->sp, s->caller_sp);
#else
  swapcontext(&s->context, &s->caller);
#endif
#ifdef PARTIX_ASAN
  __sanitizer_finish_switch_fiber(s->yield_fake, &s->caller_bottom, &s->caller_size);
#endif
}

void fiber_entry() {
  Fiber::State* s = t_current;
#ifdef PARTIX_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &s->caller_bottom, &s->caller_size);
#endif
  s->fn();  // catches everything itself
  s->done = true;
  switch_to_caller(s, /*ending=*/true);
  __builtin_trap();  // a finished fiber is never resumed
}

}  // namespace

Fiber::Fiber(std::function<void()> fn) : s_(std::make_unique<State>()) {
  s_->fn = std::move(fn);
  s_->stack = StackPool::get().take();
#ifdef PARTIX_FIBER_ASM
  // The frame partix_fiber_switch pops on the first resume: control words, six callee-saved
  // registers (zero), and fiber_entry as the return address. fiber_entry then starts with the
  // stack aligned as after a call, above it a null return address that ends backtraces.
  auto* top = reinterpret_cast<uint64_t*>(static_cast<char*>(s_->stack) + kStackBytes);
  uint64_t* sp = top - 10;  // 80 bytes: 16-byte aligned, so fiber_entry sees rsp = 8 (mod 16)
  uint32_t mxcsr = 0;
  uint16_t fpu_cw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpu_cw));
  sp[0] = fpu_cw;
  sp[1] = mxcsr;
  for (int k = 2; k < 8; ++k) sp[k] = 0;  // r15, r14, r13, r12, rbx, rbp
  sp[8] = reinterpret_cast<uint64_t>(&fiber_entry);
  sp[9] = 0;
  s_->sp = sp;
#else
  getcontext(&s_->context);
  s_->context.uc_stack.ss_sp = s_->stack;
  s_->context.uc_stack.ss_size = kStackBytes;
  s_->context.uc_link = nullptr;
  makecontext(&s_->context, fiber_entry, 0);
#endif
#ifdef PARTIX_TSAN
  s_->tsan_fiber = __tsan_create_fiber(0);
#endif
}

Fiber::~Fiber() {
  if (s_->started && !s_->done) {
    // Its stack still holds live frames: unreachable by construction (schedulers run every
    // fiber to its end), and unsafe to reuse.
    internal_error("Fiber", "destroyed before its function returned");
  }
#ifdef PARTIX_TSAN
  __tsan_destroy_fiber(s_->tsan_fiber);
#endif
  StackPool::get().give(s_->stack);
}

bool Fiber::finished() const { return s_->done; }

bool Fiber::resume() {
  if (s_->done) return true;
  if (t_current != nullptr) internal_error("Fiber", "resumed from inside another fiber");
  State* s = s_.get();
  s->started = true;
  // The thread's own state steps aside for the fiber's, and comes back when it yields.
  const EhGlobals thread_eh = eh_globals();
  const ProgramScopeState thread_program = program_scope_state();
  eh_globals() = s->eh;
  set_program_scope_state(s->program);
  t_current = s;
#ifdef PARTIX_TSAN
  s->tsan_caller = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(s->tsan_fiber, 0);
#endif
#ifdef PARTIX_ASAN
  __sanitizer_start_switch_fiber(&s->resume_fake, s->stack, kStackBytes);
#endif
#ifdef PARTIX_FIBER_ASM
  partix_fiber_switch(&s->caller_sp, s->sp);
#else
  swapcontext(&s->caller, &s->context);
#endif
#ifdef PARTIX_ASAN
  __sanitizer_finish_switch_fiber(s->resume_fake, nullptr, nullptr);
#endif
  t_current = nullptr;
  s->eh = eh_globals();
  s->program = program_scope_state();
  eh_globals() = thread_eh;
  set_program_scope_state(thread_program);
  return s->done;
}

bool in_fiber() { return t_current != nullptr; }

void fiber_yield() {
  Fiber::State* s = t_current;
  if (s == nullptr) internal_error("fiber_yield", "called outside a fiber");
  switch_to_caller(s, /*ending=*/false);
}

namespace {
thread_local YieldKind t_yield_kind = YieldKind::kWork;
}

void fiber_yield(YieldKind kind) {
  t_yield_kind = kind;
  fiber_yield();
}

YieldKind take_yield_kind() {
  const YieldKind k = t_yield_kind;
  t_yield_kind = YieldKind::kWork;
  return k;
}

void notify_progress() {
  g_epoch.fetch_add(1);
  if (g_sleepers.load() > 0) {
    std::lock_guard<std::mutex> lock(g_progress_mu);
    g_progress_cv.notify_all();
  }
}

uint64_t progress_epoch() { return g_epoch.load(); }

bool wait_for_progress(uint64_t seen, std::chrono::microseconds timeout) {
  g_sleepers.fetch_add(1);
  bool moved;
  {
    std::unique_lock<std::mutex> lock(g_progress_mu);
    moved = g_progress_cv.wait_for(lock, timeout, [&] { return g_epoch.load() != seen; });
  }
  g_sleepers.fetch_sub(1);
  return moved;
}

}  // namespace partix::detail

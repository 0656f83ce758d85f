#include "core/fault_injection.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "core/errors.h"

namespace partix::detail {

namespace {

std::atomic<bool> g_enabled{false};  // the fast path: one relaxed load per allocation
std::atomic<int64_t> g_nth{0};
std::atomic<int64_t> g_seen{0};

std::mutex g_mu;
std::string g_program;  // guarded by g_mu
std::vector<int> g_devices;
int64_t g_program_nth = 0;

thread_local const std::string* t_program = nullptr;
thread_local int64_t t_count = 0;

void update_enabled() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_enabled.store(g_nth.load() > 0 || !g_program.empty());
}

}  // namespace

void fail_nth_allocation(int64_t n) {
  g_nth.store(std::max<int64_t>(0, n));
  g_seen.store(0);
  update_enabled();
}

int64_t allocations_seen() { return g_seen.load(); }

void fail_program_allocation(std::string program, std::vector<int> devices, int64_t nth) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_program = std::move(program);
    g_devices = std::move(devices);
    g_program_nth = nth;
  }
  update_enabled();
}

ProgramScope::ProgramScope(const std::string& name)
    : previous_(t_program), previous_count_(t_count) {
  t_program = &name;
  t_count = 0;
}

ProgramScope::~ProgramScope() {
  t_program = previous_;
  t_count = previous_count_;
}

ProgramScopeState program_scope_state() { return {t_program, t_count}; }
void set_program_scope_state(ProgramScopeState state) {
  t_program = state.program;
  t_count = state.count;
}

void maybe_inject_allocation_fault(std::string_view api, int device, int64_t nbytes) {
  if (!g_enabled.load(std::memory_order_relaxed)) return;
  const int64_t seen = g_seen.fetch_add(1) + 1;
  const int64_t nth = g_nth.load();
  if (nth > 0 && seen == nth) {
    fail(api, "out of memory allocating {} bytes on device {} (injected failure of allocation {})",
         nbytes, device, nth);
  }
  if (t_program == nullptr || device < 0) return;
  const int64_t mine = ++t_count;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_program.empty() || *t_program != g_program || mine != g_program_nth) return;
  if (std::find(g_devices.begin(), g_devices.end(), device) == g_devices.end()) return;
  fail(api, "out of memory allocating {} bytes on device {} (injected in program '{}')", nbytes,
       device, g_program);
}

}  // namespace partix::detail

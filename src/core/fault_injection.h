// Test hooks that make allocations fail on purpose, to check that every allocation failure
// ends in a partix::Error and leaves partix usable. Off unless a test turns them on.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace partix::detail {

// The nth allocation from now (1-based; device buffers and host staging buffers, on any
// thread) fails; 0 turns it off. allocations_seen() counts allocations since the last call.
void fail_nth_allocation(int64_t n);
int64_t allocations_seen();

// Every execution of the program named `program` fails on each of `devices` at its nth
// device allocation there (a failure on some devices of a program, mid-run). An empty name
// turns it off.
void fail_program_allocation(std::string program, std::vector<int> devices, int64_t nth);

// Set by the interpreter on a device worker while it runs one program.
class ProgramScope {
 public:
  explicit ProgramScope(const std::string& name);
  ~ProgramScope();
  ProgramScope(const ProgramScope&) = delete;
  ProgramScope& operator=(const ProgramScope&) = delete;

 private:
  const std::string* previous_;
  int64_t previous_count_;
};

// The calling thread's ProgramScope state; a fiber switch saves and restores it, since the
// devices sharing a thread run different programs' allocations in turn.
struct ProgramScopeState {
  const std::string* program = nullptr;
  int64_t count = 0;
};
ProgramScopeState program_scope_state();
void set_program_scope_state(ProgramScopeState state);

// Called by every allocation (device = -1 for host and shared memory); throws the injected
// partix::Error when a fault is due.
void maybe_inject_allocation_fault(std::string_view api, int device, int64_t nbytes);

}  // namespace partix::detail

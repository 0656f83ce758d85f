// Whether loops and branches may widen their carries' and results' varying axes (see
// control_flow.cpp). A user's scan, fori_loop, while_loop or cond inside shard_map must keep
// each carry's varying axes (and its branches must agree), as JAX's check_vma demands; the
// loops that autodiff and batching build from a user's (cotangent accumulators, batched
// carries) widen instead, inside a LooseCarriesScope.
#pragma once

namespace partix::detail {

class LooseCarriesScope {
 public:
  LooseCarriesScope();
  ~LooseCarriesScope();
  LooseCarriesScope(const LooseCarriesScope&) = delete;
  LooseCarriesScope& operator=(const LooseCarriesScope&) = delete;

 private:
  bool previous_;
};

bool loose_carries();
// Sets the flag for this thread and returns its previous value (for the Python package's own
// loops, e.g. random.gamma's rejection loop: partix's library code, not the user's).
bool set_loose_carries(bool on);

}  // namespace partix::detail

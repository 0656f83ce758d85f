// Host callbacks: an instruction that hands its operands to a function of the host program
// (a Python function: jax.pure_callback, io_callback, debug.print) and takes its results back.
// The function is registered once and named by an id in the instruction's attributes
// (ARCHITECTURE.md, "Host callbacks").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/program.h"
#include "partix/array.h"

namespace partix::prim {

// What one call of a host callback sees: its operands and the buffers for its results, on one
// device (inside shard_map, that device's blocks).
struct HostCallbackCall {
  std::vector<const ir::Aval*> in_avals;
  std::vector<const void*> in;
  std::vector<const ir::Aval*> out_avals;
  std::vector<void*> out;
  int device = 0;
  int64_t mesh_position = -1;  // the device's index in the program's mesh, -1 without one
};
// Fills every result buffer or throws (partix::Error, naming the callback's API).
using HostCallbackFn = std::function<void(const HostCallbackCall&)>;

// Whether this thread is running a host callback's function. The devices are held by the
// callback's program meanwhile, so the device pool refuses to start another program there
// (partix::Error, not a deadlock).
bool in_host_callback();

// Keeps `fn` for the life of the process and returns its id (the "callback" attribute).
int64_t register_host_callback(std::shared_ptr<const HostCallbackFn> fn);

// Forgets every registered function (at the host program's exit, while its objects can still
// be released).
void clear_host_callbacks();

// Binds a host callback instruction on `operands`: results of `out` avals. `effect`: the call
// is an effect (a print, a write), kept though its results go unused and made once per program
// on its first device, which sends its results to the others; inside a shard_map body, once per
// device on its blocks. Otherwise (a pure function) every device calls it on its operands.
// `vmap_method` ("sequential", "expand_dims", "broadcast_all"; empty: vmap refuses) says how a
// vmap batches the call. `api` names the caller in messages.
std::vector<Array> host_callback(const char* api, int64_t id, const std::vector<Array>& operands,
                                 const std::vector<ir::Aval>& out, bool effect,
                                 const std::string& vmap_method);

}  // namespace partix::prim

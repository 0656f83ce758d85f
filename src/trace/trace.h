// The trace stack: inside jit/grad/shard_map, ops on tracer Arrays record instructions
// into the innermost trace; outside any trace they run eagerly (src/trace/eager.cpp).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/array_impl.h"
#include "ir/primitive.h"
#include "ir/program.h"

namespace partix::detail {

class TraceState;

struct TracerRef {
  std::weak_ptr<TraceState> trace;
  int value = -1;
};

// One trace being recorded.
class TraceState : public std::enable_shared_from_this<TraceState> {
 public:
  explicit TraceState(std::string name);

  ir::Program& program() { return program_; }
  const ir::Program& program() const { return program_; }

  // A new parameter of the program, returned as a tracer.
  Array add_param(const ir::Aval& aval, std::optional<NamedSharding> sharding = std::nullopt,
                  std::set<std::string> varying = {});
  // The value id of `a` in this program: its own tracer, or a capture (a concrete array or
  // a tracer of an outer trace becomes an extra parameter; see captures()).
  int value_of(const Array& a);
  Array tracer(int value);
  // Marks program results.
  void set_results(const std::vector<Array>& results);

  // Arrays from outside this trace, one per extra parameter after the user's parameters.
  const std::vector<Array>& captures() const { return captures_; }
  int num_user_params() const { return num_user_params_; }

  // shard_map bodies: values vary over manual axes.
  std::optional<Mesh> manual_mesh;
  std::set<std::string> manual_axes;
  // Axes every value captured from outside varies over here besides its own (a cond's branch:
  // what it captures is widened by the predicate's axes, as its operands are).
  std::set<std::string> capture_vary_floor;
  // The vmapped axes collectives may name here (vmap's axis_name, innermost last) and their
  // sizes.
  std::vector<std::pair<std::string, int64_t>> vmap_axes;

  // What a trace nested in `outer` (a region, grad's or vmap's trace) sees of it: the manual
  // axes of the shard_map body it is in and the vmapped axes. Nothing when outer is null.
  void inherit(const TraceState* outer);

 private:
  ir::Program program_;
  std::vector<Array> captures_;
  std::unordered_map<const ArrayImpl*, int> capture_ids_;
  int num_user_params_ = 0;
  bool params_closed_ = false;
};

// Inside a shard_map body, the mesh axes `a` varies over as the current trace sees it (empty
// elsewhere).
using Vary = std::set<std::string>;
Vary vary_of(const Array& a);
// Inside a shard_map body, the manual axes `a` holds partial sums over (unreduced) and is reduced
// over (empty elsewhere); and `a` retyped so (an identity: lax.pcast to 'unreduced' / 'reduced').
std::pair<Vary, Vary> sum_types_of(const Array& a);
Array with_sum_types(const Array& a, const Vary& unreduced, const Vary& reduced);

// Traces fn on fresh parameters of `avals` (varying as `vary` says) into a program nothing
// runs, for analyses of what a function reads; fn also gets the trace being recorded.
using ProbeFn = std::function<std::vector<Array>(const std::vector<Array>&, TraceState&)>;
ir::Program trace_probe(const std::vector<ir::Aval>& avals, const std::vector<Vary>& vary,
                        const ProbeFn& fn);

// Pushes a trace for the lifetime of the scope.
class TraceScope {
 public:
  explicit TraceScope(std::shared_ptr<TraceState> trace);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
  TraceState& trace() { return *trace_; }

 private:
  std::shared_ptr<TraceState> trace_;
};

TraceState* current_trace();  // nullptr outside any trace
// Inside a shard_map body (t.manual_mesh set): the mesh in context there, the map's mesh with
// its manual axes typed Manual; a nested shard_map runs on it (trace/shard_map.cpp).
Mesh manual_context(const TraceState& t);
// Inside a shard_map body: whether the map leaves an Explicit mesh axis automatic
// (axis_names=), along which the body's values keep types.
bool has_free_explicit_axes(const TraceState& t);
bool is_tracing();

// The trace a tracer belongs to; throws partix::Error if that trace has ended (a leaked
// tracer) or is not on this thread's stack.
TraceState* trace_of(const Array& a, const char* api);

// Applies a primitive: records it into the current trace, or runs it eagerly.
std::vector<Array> bind(const prim::Primitive& p, const std::vector<Array>& inputs,
                        ir::Attrs attrs = {}, prim::Regions regions = {});
Array bind1(const prim::Primitive& p, const std::vector<Array>& inputs, ir::Attrs attrs = {},
            prim::Regions regions = {});
Array bind1(std::string_view prim, const std::vector<Array>& inputs, ir::Attrs attrs = {});

// A scalar constant of the given dtype: a literal instruction while tracing, a host array
// otherwise.
Array literal(double value, DType dtype);
Array literal(const ir::Literal& lit);

// ---- implemented by the dispatch layer (src/dispatch), which compiles and runs ----

// Runs one primitive eagerly on concrete arrays; `out_types` (explicit sharding) are the
// results' types, which their shardings then are (empty: the partitioner decides).
std::vector<Array> execute_eager(const prim::Primitive& p, const std::vector<Array>& inputs,
                                 const ir::Attrs& attrs, const prim::Regions& regions,
                                 const std::vector<std::optional<NamedSharding>>& out_types = {});

// Traces `make` (no arguments) into a program whose one result has `sharding` and runs it:
// each device computes only its block. Compiled programs are cached by the traced text.
Array execute_created(const char* api, const NamedSharding& sharding,
                      const std::function<Array()>& make);

// ---- explicit sharding, implemented by the dispatch layer ----

// An array's type along Explicit mesh axes: its sharding restricted to them (unreduced axes
// included), or nullopt when its mesh has no Explicit axis (Auto: propagation decides).
std::optional<NamedSharding> explicit_type(const std::optional<NamedSharding>& sharding);

// The types of an op's results, at trace time, from its operands' types: the primitive's
// factor rule (the rule propagation uses), its pinned shardings, or its regions' results for
// control flow. Empty when no operand is typed. Where the rule has no unique answer (operands
// split differently along one factor, a contraction split in both operands, a split the op
// cannot keep, an axis used twice) it raises partix::Error naming the op, the operands' types
// and the user's source location, and suggesting out_sharding= or reshard.
std::vector<std::optional<NamedSharding>> explicit_result_types(
    const prim::Primitive& p, const std::vector<std::optional<NamedSharding>>& in_types,
    const std::vector<ir::Aval>& in, const std::vector<ir::Aval>& out, const ir::Attrs& attrs,
    const prim::Regions& regions);

// Within its scope, an op whose result type would be ambiguous gives an untyped result (the
// partitioner decides) instead of raising. Ops with out_sharding= compute in it and then type
// their result; VJPs run in it and type each cotangent like its primal.
class ExplicitLenientScope {
 public:
  ExplicitLenientScope();
  ~ExplicitLenientScope();
  ExplicitLenientScope(const ExplicitLenientScope&) = delete;
  ExplicitLenientScope& operator=(const ExplicitLenientScope&) = delete;
};
bool explicit_lenient();

// `x`, a result just computed, with the type `type`: a traced op's own fresh result is typed
// in place (the partitioner computes it so), another traced value is constrained, a concrete
// array is moved there. Returns x itself when it already has that type.
Array give_type(const Array& x, const NamedSharding& type);

// out_sharding= (explicit sharding): computes `make` (one op, or a few) allowing ambiguous
// types, then gives its result the type `out` on the typed operands' mesh (else the current
// mesh): under jit the result value is typed so (the partitioner places it there), eagerly it
// is moved there. Errors name `api`.
Array with_out_sharding(const char* api, const std::vector<Array>& operands, const OutSharding& out,
                        const std::function<Array()>& make);

// Named scopes label recorded instructions ("block0/attn") for messages.
std::string current_scope();
void push_scope(std::string name);
void pop_scope();

}  // namespace partix::detail

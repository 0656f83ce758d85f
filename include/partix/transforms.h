// Transforms: jit (with sharding propagation), with_sharding_constraint, shard_map with
// explicit collectives, grad / value_and_grad.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "partix/array.h"
#include "partix/tree.h"

namespace partix {

struct JitOptions {
  // One per argument (applies to all its leaves) or one per flattened leaf; empty: from args.
  std::vector<std::optional<NamedSharding>> in_shardings;
  // One per result leaf; empty: propagated.
  std::vector<std::optional<NamedSharding>> out_shardings;
  std::vector<int> donate_argnums;
  std::string name = "jit";  // names the program in text and messages
};

struct CostAnalysis {
  double flops = 0;                      // per device
  double duplicated_flops_fraction = 0;  // flops computed identically elsewhere
  // Bytes one device sends, per collective kind: "all_reduce", "all_gather",
  // "reduce_scatter", "all_to_all", "collective_permute". Ring convention, n devices in the
  // group, B = bytes of the local operand: all_reduce 2(n-1)/n*B; all_gather (n-1)/n*B_out;
  // reduce_scatter and all_to_all (n-1)/n*B; collective_permute B.
  std::map<std::string, double> bytes_per_device;
};

struct MemoryAnalysis {  // one entry per mesh device
  std::vector<int64_t> argument_bytes, output_bytes, peak_temp_bytes;
};

namespace detail {
struct LoweredImpl;
}

class Lowered {
 public:
  explicit Lowered(std::shared_ptr<const detail::LoweredImpl> impl) : impl_(std::move(impl)) {}
  std::string as_text() const;         // per-device program, collectives visible
  std::string global_text() const;     // the global program with every value's sharding
  CostAnalysis cost_analysis() const;
  MemoryAnalysis memory_analysis() const;
  std::vector<std::string> warnings() const;  // e.g. gather-then-slice resharding
  std::vector<NamedSharding> in_shardings() const;
  std::vector<NamedSharding> out_shardings() const;

 private:
  std::shared_ptr<const detail::LoweredImpl> impl_;
};

namespace detail {

bool is_tracing();

// The non-template engine behind jit: a compile cache keyed by avals and shardings.
class JitState {
 public:
  struct Entry;
  using TraceFn = std::function<std::vector<Array>(const std::vector<Array>& tracers,
                                                   std::shared_ptr<void>& out_proto)>;
  explicit JitState(JitOptions options);
  // Traces (once per key) and compiles. `arg_leaf_counts` maps leaves to arguments.
  std::shared_ptr<Entry> get(const std::vector<Array>& leaves, const std::vector<size_t>& arg_leaf_counts,
                             const std::string& tree_key, const TraceFn& trace);
  std::vector<Array> run(const Entry& entry, const std::vector<Array>& leaves);
  Lowered lower(const Entry& entry) const;
  const std::shared_ptr<void>& out_proto(const Entry& entry) const;
  int trace_count() const { return trace_count_; }

 private:
  JitOptions options_;
  struct Cache;
  std::shared_ptr<Cache> cache_;
  int trace_count_ = 0;
};

}  // namespace detail

template <class F>
class Jitted {
 public:
  Jitted(F f, JitOptions options)
      : f_(std::move(f)), state_(std::make_shared<detail::JitState>(std::move(options))) {}

  template <class... Args>
  auto operator()(const Args&... args) const {
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    if (detail::is_tracing()) return f_(args...);  // nested: inline into the outer trace
    auto entry = prepare<R>(args...);
    std::vector<Array> leaves;
    (TreeDef<Args>::flatten(args, leaves), ...);
    std::vector<Array> outs = state_->run(*entry, leaves);
    return tree_unflatten(*std::static_pointer_cast<R>(state_->out_proto(*entry)), outs);
  }

  // Traces and compiles for these arguments without running.
  template <class... Args>
  Lowered lower(const Args&... args) const {
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    return state_->lower(*prepare<R>(args...));
  }

  // How many times the function has been traced (once per distinct avals/shardings).
  int trace_count() const { return state_->trace_count(); }

 private:
  template <class R, class... Args>
  std::shared_ptr<detail::JitState::Entry> prepare(const Args&... args) const {
    std::vector<Array> leaves;
    std::vector<size_t> counts;
    std::string key;
    auto add = [&](const auto& a) {
      size_t before = leaves.size();
      TreeDef<std::decay_t<decltype(a)>>::flatten(a, leaves);
      counts.push_back(leaves.size() - before);
      key += TreeDef<std::decay_t<decltype(a)>>::key(a) + ";";
    };
    (add(args), ...);
    return state_->get(leaves, counts, key,
                       [&](const std::vector<Array>& tracers, std::shared_ptr<void>& proto) {
                         const Array* it = tracers.data();
                         std::tuple<Args...> targs{TreeDef<Args>::unflatten(args, it)...};
                         R r = std::apply(f_, targs);
                         proto = std::make_shared<R>(r);
                         return tree_leaves(r);
                       });
  }

  F f_;
  std::shared_ptr<detail::JitState> state_;
};

// jit(f)(args...) traces f once per (avals, shardings), compiles it for the devices the
// arguments live on and runs it; jit(f).lower(args...) shows what was decided.
template <class F>
Jitted<F> jit(F f, JitOptions options = {}) {
  return Jitted<F>(std::move(f), std::move(options));
}

// Constrains x's sharding at this point of a traced program (eagerly: device_put).
Array with_sharding_constraint(const Array& x, const NamedSharding& sharding);

}  // namespace partix

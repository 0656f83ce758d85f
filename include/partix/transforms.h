// Transforms: jit (with sharding propagation), with_sharding_constraint, shard_map with
// explicit collectives, grad / value_and_grad.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "partix/array.h"
#include "partix/tree.h"

namespace partix {

struct JitOptions {
  // One per argument (applies to all its leaves) or one per flattened leaf; empty: from args.
  std::vector<std::optional<NamedSharding>> in_shardings{};
  // One per result leaf; empty: propagated.
  std::vector<std::optional<NamedSharding>> out_shardings{};
  std::vector<int> donate_argnums{};
  std::string name = "jit";  // names the program in text and messages
  // Called after tracing with the out_proto the trace made and the number of results: the
  // out_shardings for this trace (overrides out_shardings). For bindings whose result trees
  // are known only once traced (Python's out_shardings prefix trees).
  std::function<std::vector<std::optional<NamedSharding>>(const std::shared_ptr<void>& out_proto,
                                                          size_t num_results)>
      out_shardings_fn{};
};

struct CostAnalysis {
  double flops = 0;                      // per device
  double duplicated_flops_fraction = 0;  // flops computed identically elsewhere
  // Bytes one device sends, per collective kind: "all_reduce", "all_gather",
  // "reduce_scatter", "all_to_all", "collective_permute". Ring convention, n devices in the
  // group, B = bytes of the local operand: all_reduce 2(n-1)/n*B; all_gather (n-1)/n*B_out;
  // reduce_scatter and all_to_all (n-1)/n*B; collective_permute B.
  std::map<std::string, double> bytes_per_device;
  // Collective instructions a device runs, per kind (as often as their loops run them).
  std::map<std::string, double> collectives_per_device{};
  // Bytes a device's computing instructions read and write: operands and results of each
  // instruction that is neither a collective, a view nor a constant (as often as it runs).
  double bytes_accessed = 0;
  // Instructions a device runs (as often as their loops run them): what a per-instruction
  // overhead is paid for.
  double instructions = 0;
};

struct MemoryAnalysis {  // one entry per mesh device
  std::vector<int64_t> argument_bytes, output_bytes, peak_temp_bytes;
  // The most bytes live on the device at once during one run: arguments (a donated one until
  // its last use), temporaries and outputs. What the device's memory must hold.
  std::vector<int64_t> peak_bytes{};
  // For each device and each output: the bytes live (arguments included) when that output has
  // just been computed. For a training step whose last output is the loss, what exceeds the
  // arguments there is what the forward pass keeps for the backward pass.
  std::vector<std::vector<int64_t>> live_bytes_at_output{};
};

namespace detail {
struct LoweredImpl;
}

class Lowered {
 public:
  explicit Lowered(std::shared_ptr<const detail::LoweredImpl> impl) : impl_(std::move(impl)) {}
  std::string as_text() const;  // per-device program, collectives visible
  // The per-device program's fused loops, one line each: "%6 = fusion(broadcast_in_dim,sub,exp)
  // (%0, %3) : f32[3,5] {%4 %5 %6}" (result, ops, values read, the results it computes).
  std::vector<std::string> fusions() const;
  std::string global_text() const;  // the global program with every value's sharding
  // The global program as XLA HLO text (jit(f).lower(...).compiler_ir(dialect="hlo")); an op
  // with no HLO form throws partix::Error naming it.
  // Captured arrays become constants; with print_large_constants false, constants of more
  // than 1000 elements print as {...} (as XLA prints them; such text does not parse back).
  std::string hlo_text(bool print_large_constants = false) const;
  CostAnalysis cost_analysis() const;
  MemoryAnalysis memory_analysis() const;
  std::vector<std::string> warnings() const;  // e.g. gather-then-slice resharding
  std::vector<NamedSharding> in_shardings() const;
  std::vector<NamedSharding> out_shardings() const;

 private:
  std::shared_ptr<const detail::LoweredImpl> impl_;
};

// jit, eager ops and device_put share one cache of compiled programs: a jitted function's
// program per call signature (it is traced once per signature and keeps its traces, so a
// program evicted past the limit is compiled again without tracing), a one-op program per
// (primitive, attributes, avals, shardings), a reshard per (aval, from, to). Past its limit
// (PARTIX_COMPILE_CACHE_SIZE programs, default 4096) the least recently used leaves it; a
// program that is running is never freed under it.
struct CompileCacheStats {
  int64_t hits = 0;       // requests served without compiling (waits for another's compile too)
  int64_t misses = 0;     // requests that compiled
  int64_t evictions = 0;  // programs dropped past the limit
  int64_t size = 0;       // programs held now
  int64_t capacity = 0;   // the limit
};
CompileCacheStats compile_cache_stats();

namespace detail {

bool is_tracing();

// The non-template engine behind jit: traces once per call signature (avals, shardings, tree)
// and compiles through the shared compile cache.
class JitState {
 public:
  struct Entry;
  using TraceFn = std::function<std::vector<Array>(const std::vector<Array>& tracers,
                                                   std::shared_ptr<void>& out_proto)>;
  explicit JitState(JitOptions options);
  // Traces (once per key) and compiles. `arg_leaf_counts` maps leaves to arguments.
  // paths: makes each leaf's path ("args[1]['w']") for messages; called only when the call traces.
  std::shared_ptr<Entry> get(const std::vector<Array>& leaves,
                             const std::vector<size_t>& arg_leaf_counts,
                             const std::string& tree_key,
                             const std::function<std::vector<std::string>()>& paths,
                             const TraceFn& trace);
  std::vector<Array> run(const Entry& entry, const std::vector<Array>& leaves);
  Lowered lower(const Entry& entry) const;
  const std::shared_ptr<void>& out_proto(const Entry& entry) const;
  int trace_count() const { return trace_count_.load(); }

 private:
  JitOptions options_;
  struct Cache;
  std::shared_ptr<Cache> cache_;
  std::atomic<int> trace_count_{0};  // jit may be called from several threads
};

}  // namespace detail

namespace detail {
// jit(f).lower and eval_shape take ShapeDtypeStructs where f takes Arrays.
template <class T>
struct AbstractArg {
  static const T& get(const T& t) { return t; }
};
template <>
struct AbstractArg<ShapeDtypeStruct> {
  static Array get(const ShapeDtypeStruct& s) { return Array(s); }
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

  // Traces and compiles for these arguments without running. Arguments may be abstract
  // (ShapeDtypeStruct, or trees of abstract Arrays), on meshes of abstract devices.
  template <class... Args>
  Lowered lower(const Args&... args) const {
    return lower_arrays(detail::AbstractArg<Args>::get(args)...);
  }

  // f's result tree with abstract Arrays (shape, dtype and the sharding the program gives each
  // result), for these arguments; nothing runs. See eval_shape.
  template <class... Args>
  auto eval_shape(const Args&... args) const {
    return eval_shape_arrays(detail::AbstractArg<Args>::get(args)...);
  }

  // How many times the function has been traced (once per distinct avals/shardings).
  int trace_count() const { return state_->trace_count(); }

 private:
  template <class... Args>
  Lowered lower_arrays(const Args&... args) const {
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    return state_->lower(*prepare<R>(args...));
  }

  template <class... Args>
  auto eval_shape_arrays(const Args&... args) const {
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    auto entry = prepare<R>(args...);
    const std::vector<NamedSharding> shardings = state_->lower(*entry).out_shardings();
    const R& proto = *std::static_pointer_cast<R>(state_->out_proto(*entry));
    std::vector<Array> leaves = tree_leaves(proto), out;
    for (size_t i = 0; i < leaves.size(); ++i) {
      out.emplace_back(ShapeDtypeStruct{leaves[i].shape(), leaves[i].dtype(), shardings[i]});
    }
    return tree_unflatten(proto, out);
  }

  template <class R, class... Args>
  std::shared_ptr<detail::JitState::Entry> prepare(const Args&... args) const {
    std::vector<Array> leaves;
    std::vector<size_t> counts;
    std::string key;
    [[maybe_unused]] auto add = [&](const auto& a) {
      size_t before = leaves.size();
      TreeDef<std::decay_t<decltype(a)>>::flatten(a, leaves);
      counts.push_back(leaves.size() - before);
      key += TreeDef<std::decay_t<decltype(a)>>::key(a) + ";";
    };
    (add(args), ...);
    // Names of the arguments in messages ("args[1]['w']"), made only when a call traces.
    auto paths = [&] {
      std::vector<std::string> out;
      [[maybe_unused]] size_t k = 0;
      ((TreeDef<Args>::paths(args, "args[" + std::to_string(k++) + "]", out)), ...);
      return out;
    };
    return state_->get(leaves, counts, key, paths,
                       [&](const std::vector<Array>& tracers, std::shared_ptr<void>& proto) {
                         [[maybe_unused]] const Array* it = tracers.data();
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

// As jax.eval_shape: f's result tree with abstract Arrays (shape, dtype, sharding) for these
// arguments (concrete, abstract or ShapeDtypeStruct), found by tracing and partitioning f
// without running it or allocating its values. Works at any size and on abstract meshes.
template <class F, class... Args>
auto eval_shape(F f, const Args&... args) {
  return Jitted<F>(std::move(f), JitOptions{.name = "eval_shape"}).eval_shape(args...);
}

// Constrains x's sharding at this point of a traced program (eagerly: device_put).
Array with_sharding_constraint(const Array& x, const NamedSharding& sharding);
// The same with the dimensions `unconstrained_dims` left to the compiler (JAX's
// P.UNCONSTRAINED; their entries in `sharding` must be empty): propagation splits them as the
// values around the constraint are split. Eagerly they keep x's own split where x is on the
// same mesh.
Array with_sharding_constraint(const Array& x, const NamedSharding& sharding,
                               std::vector<int> unconstrained_dims);

// jax.sharding.reshard: x with sharding s. Eagerly it moves the data as device_put does (the
// result is committed); inside a traced program it is a sharding constraint the partitioner
// always honours. The PartitionSpec form uses the current mesh (partix::Error if none is
// set). Errors name reshard: a spec naming an axis not in the mesh, more spec entries than x
// has dimensions, a quantized array onto a sharding that splits its blocks.
Array reshard(const Array& x, const NamedSharding& s);
Array reshard(const Array& x, const PartitionSpec& spec);

// ---- explicit sharding: axis types for a region (JAX's auto_axes, explicit_axes) ----
using ArraysFn = std::function<std::vector<Array>(const std::vector<Array>&)>;
// jax.sharding.auto_axes: fn runs with `axes` (empty: every Explicit axis) Auto, so its
// operands' types forget those axes and the partitioner decides inside (the fallback for an op
// whose sharding rule is ambiguous); its results are then resharded to `out_shardings` (one
// for all results, or one each) on the outer mesh and typed so. The mesh is the typed
// arguments', else the current one.
std::vector<Array> auto_axes(const ArraysFn& fn, const std::vector<Array>& args,
                             std::vector<PartitionSpec> out_shardings,
                             std::vector<std::string> axes = {});
Array auto_axes(const std::function<Array(const Array&)>& fn, const Array& x,
                PartitionSpec out_sharding, std::vector<std::string> axes = {});
// jax.sharding.explicit_axes: fn runs with `axes` (empty: every Auto axis) Explicit: the
// arguments enter resharded to `in_shardings` (one for all, or one each) and typed; its results
// leave with those axes Auto again (their placement stays as computed). The mesh is the
// arguments', else the current one.
std::vector<Array> explicit_axes(const ArraysFn& fn, const std::vector<Array>& args,
                                 std::vector<PartitionSpec> in_shardings,
                                 std::vector<std::string> axes = {});
Array explicit_axes(const std::function<Array(const Array&)>& fn, const Array& x,
                    PartitionSpec in_sharding, std::vector<std::string> axes = {});

// The out_sharding= of a composite op (a front end's op built from others): make() computes it
// with ambiguous types allowed, and its result then has the type `out` (see OutSharding).
Array with_out_sharding(std::string_view api, const std::vector<Array>& operands,
                        const OutSharding& out, const std::function<Array()>& make);

// ---- shard_map: explicit per-device programming ----

namespace detail {

// The non-template engine behind shard_map.
class ShardMapState {
 public:
  using TraceFn = std::function<std::vector<Array>(const std::vector<Array>& tracers,
                                                   std::shared_ptr<void>& out_proto)>;
  ShardMapState(Mesh mesh, std::vector<PartitionSpec> in_specs,
                std::vector<PartitionSpec> out_specs, bool check_vma);
  std::vector<Array> call(const std::vector<Array>& leaves,
                          const std::vector<size_t>& arg_leaf_counts, const TraceFn& trace,
                          std::shared_ptr<void>& out_proto) const;
  // Out specs found after tracing from the out_proto and the number of results (overrides
  // out_specs). For bindings whose result trees are known only once traced (Python).
  using OutSpecsFn =
      std::function<std::vector<PartitionSpec>(const std::shared_ptr<void>& out_proto, size_t n)>;
  void set_out_specs_fn(OutSpecsFn fn) { out_specs_fn_ = std::move(fn); }
  // JAX's P(..., unreduced={...}) in the specs: per argument, the axes over which it enters as
  // partial sums (each device's block is its own partial sum, typed unreduced in the body);
  // per result (one for all, or one each; or found after tracing by `out_fn`), the axes its
  // body values leave as partial sums (the result is unreduced over them, nothing is summed).
  using AxisSets = std::vector<std::set<std::string>>;
  using AxisSetsFn = std::function<AxisSets(const std::shared_ptr<void>& out_proto, size_t n)>;
  void set_unreduced(AxisSets in, AxisSets out, AxisSetsFn out_fn = nullptr) {
    in_unreduced_ = std::move(in);
    out_unreduced_ = std::move(out);
    out_unreduced_fn_ = std::move(out_fn);
  }
  // JAX's P(..., reduced={...}): replicated values typed so that their cotangents come back
  // unreduced (no psum on the backward pass). Per argument, and per result as above; a reduced
  // result must be invariant over those axes.
  void set_reduced(AxisSets in, AxisSets out, AxisSetsFn out_fn = nullptr) {
    in_reduced_ = std::move(in);
    out_reduced_ = std::move(out);
    out_reduced_fn_ = std::move(out_fn);
  }
  // JAX's axis_names=: the body is manual over these mesh axes only; over the others it is
  // automatic (its values are whole along them, replicated on their devices, and the specs
  // and collectives may not name them). Empty: manual over every axis.
  void set_manual_axes(std::set<std::string> axes) { manual_axes_ = std::move(axes); }
  // The mapped function's name, which the errors about its arguments name (as JAX's do).
  void set_function_name(std::string name) { function_name_ = std::move(name); }

 private:
  Mesh mesh_;
  std::vector<PartitionSpec> in_specs_, out_specs_;
  bool check_vma_;
  OutSpecsFn out_specs_fn_{};
  AxisSets in_unreduced_{}, out_unreduced_{}, in_reduced_{}, out_reduced_{};
  AxisSetsFn out_unreduced_fn_{}, out_reduced_fn_{};
  std::set<std::string> manual_axes_{};
  std::string function_name_{};
};

}  // namespace detail

template <class F>
class ShardMapped {
 public:
  ShardMapped(F f, detail::ShardMapState state) : f_(std::move(f)), state_(std::move(state)) {}

  template <class... Args>
  auto operator()(const Args&... args) const {
    using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
    std::vector<Array> leaves;
    std::vector<size_t> counts;
    [[maybe_unused]] auto add = [&](const auto& a) {
      size_t before = leaves.size();
      TreeDef<std::decay_t<decltype(a)>>::flatten(a, leaves);
      counts.push_back(leaves.size() - before);
    };
    (add(args), ...);
    std::shared_ptr<void> proto;
    std::vector<Array> outs = state_.call(
        leaves, counts,
        [&](const std::vector<Array>& tracers, std::shared_ptr<void>& p) {
          [[maybe_unused]] const Array* it = tracers.data();
          std::tuple<Args...> targs{TreeDef<Args>::unflatten(args, it)...};
          R r = std::apply(f_, targs);
          p = std::make_shared<R>(r);
          return tree_leaves(r);
        },
        proto);
    return tree_unflatten(*std::static_pointer_cast<R>(proto), outs);
  }

  // JAX's axis_names=: the same map, manual over these mesh axes only; over the others the
  // body's values are whole (automatic), and its specs and collectives may not name them.
  ShardMapped axis_names(std::set<std::string> axes) const {
    ShardMapped s = *this;
    s.state_.set_manual_axes(std::move(axes));
    return s;
  }

 private:
  F f_;
  detail::ShardMapState state_;
};

// shard_map(f, mesh, in_specs, out_specs): f is traced once on local blocks (one in_spec per
// argument, applied to all its arrays; one out_spec per result array, or one for all) and its
// program runs on every device. Inside, values carry the mesh axes they vary over; with
// check_vma an out_spec that claims replication over an axis the value varies over is an error.
template <class F>
ShardMapped<F> shard_map(F f, Mesh mesh, std::vector<PartitionSpec> in_specs,
                         std::vector<PartitionSpec> out_specs, bool check_vma = true) {
  return ShardMapped<F>(std::move(f), detail::ShardMapState(std::move(mesh), std::move(in_specs),
                                                            std::move(out_specs), check_vma));
}

// ---- collectives, valid inside shard_map; `axes` is one mesh axis name or several ----
Array psum(const Array& x, Axes axes);
Array pmean(const Array& x, Axes axes);
Array pmax(const Array& x, Axes axes);
Array pmin(const Array& x, Axes axes);
// Gathers the blocks of the group along `axis`: stacked as a new axis, or concatenated (tiled).
Array all_gather(const Array& x, Axes axes, int axis = 0, bool tiled = false);
// Sums over the group and keeps this device's piece of `scatter_dimension`.
Array psum_scatter(const Array& x, Axes axes, int scatter_dimension = 0, bool tiled = false);
// Sends x from device perm[i].first to perm[i].second (indices over `axes`); devices that
// receive nothing get zeros.
Array ppermute(const Array& x, Axes axes, std::vector<std::pair<int, int>> perm);
Array all_to_all(const Array& x, Axes axes, int split_axis, int concat_axis, bool tiled = false);
Array axis_index(Axes axes);  // int32 scalar
int64_t axis_size(Axes axes);
// Marks x as varying over axes (identity on values).
Array pvary(const Array& x, Axes axes);
// Valid elements of this device's block of a dimension of global size n split over `axes`
// (blocks are padded to ceil(n / k)): an int32 scalar.
Array valid_size(int64_t n, Axes axes);

// Collectives over axis_index_groups (JAX's `axis_index_groups`): the ranks along the
// collective's axes are split into groups of equal size that together hold every rank once,
// and the collective runs within each group (all_gather, psum_scatter and all_to_all sizes are
// the group size). The results vary over the axes: different groups hold different values.
// An empty `groups` is the whole axis, as the overloads above.
using IndexGroups = std::vector<std::vector<int64_t>>;
Array psum(const Array& x, Axes axes, const IndexGroups& groups);
Array pmean(const Array& x, Axes axes, const IndexGroups& groups);
Array pmax(const Array& x, Axes axes, const IndexGroups& groups);
Array pmin(const Array& x, Axes axes, const IndexGroups& groups);
Array all_gather(const Array& x, Axes axes, int axis, bool tiled, const IndexGroups& groups);
Array psum_scatter(const Array& x, Axes axes, int scatter_dimension, bool tiled,
                   const IndexGroups& groups);
Array all_to_all(const Array& x, Axes axes, int split_axis, int concat_axis, bool tiled,
                 const IndexGroups& groups);
// The size a collective over axes (and groups) runs over, checked as `api` checks it: the
// group size with groups, else the product of the axis sizes.
int64_t collective_size(const char* api, Axes axes, const IndexGroups& groups);

// ---- autodiff ----

namespace detail {

struct GradOutput {
  Array value;
  std::vector<Array> grads;  // per leaf; filled where requested
  std::vector<Array> aux;    // grad_engine_aux: f's other results (has_aux), not differentiated
};
// Traces f on tracers for `leaves`, evaluates it in the current context and runs it backward.
// f must return a scalar float Array. Gradients carry the shardings of their arguments.
GradOutput grad_engine(const std::vector<Array>& leaves, const std::vector<bool>& wrt,
                       const std::function<Array(const std::vector<Array>&)>& f);
// As grad_engine, for f returning {value, aux...}: the aux results are evaluated with the
// value and returned in GradOutput::aux (JAX's has_aux).
GradOutput grad_engine_aux(const std::vector<Array>& leaves, const std::vector<bool>& wrt,
                           const std::function<std::vector<Array>(const std::vector<Array>&)>& f);
[[noreturn]] void grad_bad_argnum(int argnum, size_t num_args);
[[noreturn]] void grad_bad_argument_kind(int argnum);

// The gradient tree of argument `a` (Array or Params) from its leaves' gradients.
template <class T>
Tree gradient_tree(const T& proto, const Array*& it, int argnum) {
  if constexpr (std::is_same_v<T, Array>) {
    return Tree(*it++);
  } else if constexpr (std::is_same_v<T, Params>) {
    return Tree(TreeDef<Params>::unflatten(proto, it));
  } else {
    grad_bad_argument_kind(argnum);
  }
}

template <class F, bool kWithValue, bool kMulti>
class GradFn {
 public:
  GradFn(F f, std::vector<int> argnums) : f_(std::move(f)), argnums_(std::move(argnums)) {}

  template <class... Args>
  auto operator()(const Args&... args) const {
    constexpr size_t n = sizeof...(Args);
    std::vector<Array> leaves;
    std::vector<size_t> first, count;
    [[maybe_unused]] auto add = [&](const auto& a) {
      first.push_back(leaves.size());
      TreeDef<std::decay_t<decltype(a)>>::flatten(a, leaves);
      count.push_back(leaves.size() - first.back());
    };
    (add(args), ...);
    std::vector<bool> wrt(leaves.size(), false);
    for (int a : argnums_) {
      if (a < 0 || static_cast<size_t>(a) >= n) grad_bad_argnum(a, n);
      for (size_t j = 0; j < count[static_cast<size_t>(a)]; ++j)
        wrt[first[static_cast<size_t>(a)] + j] = true;
    }
    GradOutput out = grad_engine(leaves, wrt, [&](const std::vector<Array>& tracers) -> Array {
      const Array* it = tracers.data();
      std::tuple<Args...> targs{TreeDef<Args>::unflatten(args, it)...};
      return std::apply(f_, targs);
    });
    // One tree per requested argument, in argnums order.
    std::vector<Tree> trees;
    for (int a : argnums_) {
      const Array* it = out.grads.data() + first[static_cast<size_t>(a)];
      int idx = 0;
      Tree t;
      ((idx++ == a ? (t = gradient_tree(args, it, a), 0) : 0), ...);
      trees.push_back(std::move(t));
    }
    if constexpr (kMulti) {
      if constexpr (kWithValue)
        return std::pair<Array, std::vector<Tree>>{out.value, trees};
      else
        return trees;
    } else {
      if constexpr (kWithValue)
        return std::pair<Array, Tree>{out.value, trees[0]};
      else
        return trees[0];
    }
  }

 private:
  F f_;
  std::vector<int> argnums_;
};

}  // namespace detail

// grad(f) / grad(f, 1): the gradient of a scalar-valued f with respect to one argument (an
// Array, or Params if that argument is Params); grad(f, std::vector<int>{0, 2}): a vector of
// them. value_and_grad returns {value, gradient(s)}. All compose with jit and shard_map.
template <class F>
auto grad(F f, int argnum = 0) {
  return detail::GradFn<F, false, false>(std::move(f), {argnum});
}
template <class F>
auto grad(F f, std::vector<int> argnums) {
  return detail::GradFn<F, false, true>(std::move(f), std::move(argnums));
}
template <class F>
auto value_and_grad(F f, int argnum = 0) {
  return detail::GradFn<F, true, false>(std::move(f), {argnum});
}
template <class F>
auto value_and_grad(F f, std::vector<int> argnums) {
  return detail::GradFn<F, true, true>(std::move(f), std::move(argnums));
}

// ---- vmap ----
using ArraysFn = std::function<std::vector<Array>(const std::vector<Array>&)>;
namespace detail {
// A value under vmap: the array and its batch dimension (-1: not batched, one value shared by
// every example).
struct Batched {
  Array value;
  int bdim = -1;
};
// vmap's axis: the number of examples, its name (axis_name; "" when none: no collective can
// name it) and the mesh axes the examples split over (spmd_axis_name; empty: none).
struct BatchAxis {
  int64_t size = 0;
  std::string name;
  std::vector<std::string> spmd;
};
// vmap's engine: f traced on one example's avals (each leaf without its in_axes dimension;
// in_axes -1: not mapped, the same for every example), then evaluated on the batch where the
// call is made, each primitive through its batching rule. Returns f's results with their batch
// dimensions; place_batched moves one to `out_axis` (-1: an unmapped result, which must not
// depend on the mapped axis).
std::vector<Batched> vmap_call(
    const std::vector<Array>& leaves, const std::vector<int>& in_axes,
    std::optional<int64_t> axis_size, const std::string& axis_name,
    const std::vector<std::string>& spmd_axis_name,
    const std::function<std::vector<Array>(const std::vector<Array>&, std::shared_ptr<void>&)>& f,
    std::shared_ptr<void>& proto);
Array place_batched(const Batched& b, int64_t size, int out_axis);
}  // namespace detail

// vmap(f, in_axes, out_axes)(args): f mapped over axis in_axes[i] of argument i (-1: not
// mapped), its results stacked along out_axes[k] (one entry: every result). f takes and returns
// vectors of arrays. Composes with jit, grad, loops and sharded arguments (a mapped axis keeps
// its sharding); a primitive without a batching rule is refused by name. Collectives inside f
// may name `axis_name` (psum over the examples, axis_index their position, ...);
// `spmd_axis_name` splits the examples over those mesh axes wherever f constrains a sharding.
ArraysFn vmap(ArraysFn f, std::vector<int> in_axes, std::vector<int> out_axes = {0},
              std::optional<int64_t> axis_size = std::nullopt, std::string axis_name = "",
              std::vector<std::string> spmd_axis_name = {});

// vmap's options by name: vmap(f, VmapOptions{.in_axes = {0, -1},
// .axis_name = "batch"}).
struct VmapOptions {
  std::vector<int> in_axes{0};   // per argument (one entry: every argument); -1: not mapped
  std::vector<int> out_axes{0};  // per result (one entry: every result); -1: not mapped
  std::optional<int64_t> axis_size;
  std::string axis_name;
  std::vector<std::string> spmd_axis_name;
};
ArraysFn vmap(ArraysFn f, VmapOptions options);

// ---- custom derivatives ----
// custom_vjp(f, fwd, bwd): a function of arrays that computes f and is differentiated by the
// rules: fwd(args) returns f's outputs followed by the residuals it keeps for bwd, and
// bwd(residuals..., output cotangents...) returns one cotangent per argument (shaped as it).
// custom_jvp(f, jvp): jvp(primals..., tangents...) returns f's outputs followed by their
// tangents, linear in the tangents; reverse mode transposes it. Both compose with jit, grad,
// shard_map and sharded arguments; a rule that returns the wrong avals is an error naming it.
ArraysFn custom_vjp(ArraysFn f, ArraysFn fwd, ArraysFn bwd);
ArraysFn custom_jvp(ArraysFn f, ArraysFn jvp);

namespace detail {
// The engines under custom_vjp / custom_jvp (and Python's): each rule is traced once into a
// region of one instruction; `proto` receives what the caller needs to rebuild its outputs'
// structure (Python's tree ids).
using CustomRuleFn =
    std::function<std::vector<Array>(const std::vector<Array>&, std::shared_ptr<void>&)>;
struct CustomProtos {
  std::shared_ptr<void> f, fwd, bwd;  // custom_jvp: fwd holds the jvp rule's
};
std::vector<Array> custom_vjp_call(const std::vector<Array>& args, const CustomRuleFn& f,
                                   const CustomRuleFn& fwd, const CustomRuleFn& bwd,
                                   CustomProtos& protos);
std::vector<Array> custom_jvp_call(const std::vector<Array>& args, const CustomRuleFn& f,
                                   const CustomRuleFn& jvp, CustomProtos& protos);
}  // namespace detail

// ---- rematerialisation ----

// Which of a checkpointed function's intermediates the forward pass keeps for the backward
// pass (JAX's jax.checkpoint_policies); the others are recomputed from the function's inputs.
struct SavePolicy {
  enum class Kind {
    kNothing,              // nothing_saveable: everything recomputed (the default)
    kEverything,           // everything_saveable: nothing recomputed (no remat)
    kDots,                 // dots_saveable: the results of contractions (dot_general)
    kDotsWithNoBatchDims,  // dots_with_no_batch_dims_saveable: those without batch dims
    kNames,                // save_only_these_names: values named with checkpoint_name
    kNamesExcept,          // save_any_names_but_these: named values but those listed
    kPrimitives,           // a policy function: the results of the primitives listed
  };
  Kind kind = Kind::kNothing;
  std::vector<std::string> names;  // kNames, kNamesExcept: value names; kPrimitives: primitives
};

// x, named for a SavePolicy of kind kNames (jax.ad_checkpoint.checkpoint_name); an identity
// everywhere else.
Array checkpoint_name(const Array& x, const std::string& name);

namespace detail {
// Traces f into a region and binds one remat instruction; its VJP recomputes the region, but
// for the values `policy` saves.
std::vector<Array> remat_call(
    const std::vector<Array>& leaves,
    const std::function<std::vector<Array>(const std::vector<Array>&, std::shared_ptr<void>&)>&
        trace,
    std::shared_ptr<void>& out_proto, const SavePolicy& policy = {});
}  // namespace detail

// checkpoint(f, policy): f's activations are recomputed in the backward pass instead of being
// kept, but for those `policy` saves.
template <class F>
auto checkpoint(F f, SavePolicy policy = {}) {
  return [f, policy](const auto&... args) {
    using R = std::decay_t<std::invoke_result_t<const F&, decltype(args)...>>;
    std::vector<Array> leaves;
    (TreeDef<std::decay_t<decltype(args)>>::flatten(args, leaves), ...);
    std::shared_ptr<void> proto;
    std::vector<Array> outs = detail::remat_call(
        leaves,
        [&](const std::vector<Array>& tracers, std::shared_ptr<void>& p) {
          [[maybe_unused]] const Array* it = tracers.data();
          std::tuple<std::decay_t<decltype(args)>...> targs{
              TreeDef<std::decay_t<decltype(args)>>::unflatten(args, it)...};
          R r = std::apply(f, targs);
          p = std::make_shared<R>(r);
          return tree_leaves(r);
        },
        proto, policy);
    return tree_unflatten(*std::static_pointer_cast<R>(proto), outs);
  };
}

}  // namespace partix

// ---- pullbacks and forward mode: vjp, jvp, linearize ----

namespace partix {
namespace detail {

struct VjpState;  // the traced program, its evaluated values and residuals
                  // (src/autodiff/forward.cpp)

// A vjp's pullback: runs the saved program backward from its results' cotangents, never its
// forward pass again; it may be called any number of times, in the context vjp ran in (eagerly,
// or inside the same trace).
class Pullback {
 public:
  Pullback() = default;
  explicit Pullback(std::shared_ptr<const VjpState> s) : s_(std::move(s)) {}
  // One cotangent per result leaf (an empty Array: zero; ignored for integer results); one
  // cotangent per primal leaf back, each with the primal's sharding (integer primals: zeros).
  std::vector<Array> operator()(const std::vector<Array>& cotangents) const;
  const std::vector<Array>& primals() const;  // the primal leaves
  const std::vector<Array>& outputs() const;  // the results' values
  bool valid() const { return s_ != nullptr; }
  const VjpState& state() const { return *s_; }

 private:
  std::shared_ptr<const VjpState> s_;
};

struct VjpOutput {
  std::vector<Array> outputs;  // f's result leaves
  Pullback pullback;
};
using LeavesFn = std::function<std::vector<Array>(const std::vector<Array>&)>;
// Traces f once on tracers for `leaves`, evaluates it in the current context keeping what the
// backward pass needs, and returns its results with the pullback.
VjpOutput vjp_engine(const std::vector<Array>& leaves, const LeavesFn& f);

// The Jacobian-vector product of the pullback's function at its primals: one tangent per
// primal leaf (shape and dtype as the primal; ignored for integer primals). One tangent per
// result leaf back (integer results: zeros), each with its result's sharding. Errors name `api`.
std::vector<Array> jvp_of_pullback(const Pullback& pb, const std::vector<Array>& tangents,
                                   std::string_view api = "jvp");

struct JvpOutput {
  std::vector<Array> outputs, tangents;
};
// jvp: f's results and their tangents (vjp_engine, then jvp_of_pullback).
JvpOutput jvp_engine(const std::vector<Array>& primals, const std::vector<Array>& tangents,
                     const LeavesFn& f);

// The program f traces to on `leaves` (concrete or abstract), as text with global shapes, before
// any partitioning (make_jaxpr). Values f captures from outside are extra parameters.
std::string trace_text(const std::vector<Array>& leaves, const LeavesFn& f);

template <class... Args>
std::vector<Array> flatten_all(const Args&... args) {
  std::vector<Array> leaves;
  (TreeDef<Args>::flatten(args, leaves), ...);
  return leaves;
}

template <class... Args>
std::tuple<Args...> unflatten_all(const std::tuple<Args...>& proto, const std::vector<Array>& l) {
  [[maybe_unused]] const Array* it = l.data();
  return std::apply(
      [&](const auto&... p) { return std::tuple<Args...>{TreeDef<Args>::unflatten(p, it)...}; },
      proto);
}

}  // namespace detail

// vjp(f, args...) = {f(args...), pullback}: pullback(cotangent of f's result tree) returns a
// tuple of cotangents, one tree per argument. The pullback reuses the values the forward pass
// saved (it does not run f again) and may be called several times.
template <class F, class... Args>
auto vjp(F f, const Args&... args) {
  using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
  std::shared_ptr<R> proto;
  auto flat = [&](const std::vector<Array>& tracers) {
    [[maybe_unused]] const Array* it = tracers.data();
    std::tuple<Args...> targs{TreeDef<Args>::unflatten(args, it)...};
    proto = std::make_shared<R>(std::apply(f, targs));
    return tree_leaves(*proto);
  };
  detail::VjpOutput out = detail::vjp_engine(detail::flatten_all(args...), flat);
  std::tuple<Args...> in_proto{args...};
  auto pullback = [pb = out.pullback, in_proto](const R& cotangent) {
    return detail::unflatten_all(in_proto, pb(tree_leaves(cotangent)));
  };
  return std::pair{tree_unflatten(*proto, out.outputs), pullback};
}

// jvp(f, {primals...}, {tangents...}) = {f(primals...), J tangents}. Forward mode is the
// transpose of reverse mode here: J t is the gradient over u of <VJP(u), t> (partix has a VJP
// rule per primitive and no JVP rules yet; per-primitive JVP rules are future work). It costs
// a forward and two backward passes.
template <class F, class... Args>
auto jvp(F f, const std::tuple<Args...>& primals, const std::tuple<Args...>& tangents) {
  using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
  std::shared_ptr<R> proto;
  auto flat = [&](const std::vector<Array>& tracers) {
    std::tuple<Args...> targs = detail::unflatten_all(primals, tracers);
    proto = std::make_shared<R>(std::apply(f, targs));
    return tree_leaves(*proto);
  };
  auto leaves = [](const std::tuple<Args...>& t) {
    return std::apply([](const auto&... a) { return detail::flatten_all(a...); }, t);
  };
  detail::JvpOutput out = detail::jvp_engine(leaves(primals), leaves(tangents), flat);
  return std::pair{tree_unflatten(*proto, out.outputs), tree_unflatten(*proto, out.tangents)};
}

// jacrev(f, argnum)(args): for each result of f, its Jacobian with respect to args[argnum],
// shaped result.shape + argument.shape: the pullback vmapped over each result's basis (reverse
// mode). jacfwd: the same from the linearized map vmapped over the argument's basis (forward
// mode). hessian(f, argnum) = jacfwd(jacrev(f, argnum), argnum). Integer results get zero rows.
ArraysFn jacrev(ArraysFn f, int argnum = 0);
ArraysFn jacfwd(ArraysFn f, int argnum = 0);
ArraysFn hessian(ArraysFn f, int argnum = 0);

// linearize(f, args...) = {f(args...), f_jvp}: f_jvp(tangents...) is J tangents at args,
// computed from the saved forward pass (f is neither traced nor run again).
template <class F, class... Args>
auto linearize(F f, const Args&... args) {
  using R = std::decay_t<std::invoke_result_t<const F&, const Args&...>>;
  std::shared_ptr<R> proto;
  auto flat = [&](const std::vector<Array>& tracers) {
    [[maybe_unused]] const Array* it = tracers.data();
    std::tuple<Args...> targs{TreeDef<Args>::unflatten(args, it)...};
    proto = std::make_shared<R>(std::apply(f, targs));
    return tree_leaves(*proto);
  };
  detail::VjpOutput out = detail::vjp_engine(detail::flatten_all(args...), flat);
  auto f_jvp = [pb = out.pullback, proto](const Args&... tangents) {
    return tree_unflatten(
        *proto, detail::jvp_of_pullback(pb, detail::flatten_all(tangents...), "linearize"));
  };
  return std::pair{tree_unflatten(*proto, out.outputs), f_jvp};
}

}  // namespace partix

// jit: trace once per (avals, shardings), compile through the SPMD pipeline and the shared
// compile cache, run.
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.h"
#include "core/log.h"
#include "dispatch/compile_cache.h"
#include "spmd/analysis.h"
#include "sharding/axes.h"
#include "spmd/compile.h"
#include "trace/trace.h"

namespace partix {
namespace detail {

namespace {

// What one call signature's trace decided: everything a call needs but the compiled program,
// which lives in the compile cache (so the cache's limit bounds compiled programs, and an
// evicted one is compiled again from here without tracing).
struct JitTrace {
  std::string compile_key;
  ir::Program program;
  spmd::CompileOptions options;
  std::vector<Array> captures;
  std::shared_ptr<void> out_proto;
  std::vector<bool> donate;  // per argument leaf
};

}  // namespace

// One call's view: the signature's trace and the program it runs, held for the call.
struct JitState::Entry {
  std::shared_ptr<const JitTrace> trace;
  std::shared_ptr<spmd::Compiled> compiled;
};

struct JitState::Cache {
  // Compile keys are this function's own: its signatures mean nothing to another function.
  const std::string key_prefix = "jit#" + std::to_string(next_id()) + "|";
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const JitTrace>> traces;
  // Every key this function compiled under (also those of traces that failed after compiling).
  std::unordered_set<std::string> compile_keys;

  // A dead function's programs can never be asked for again: they leave the cache with it.
  ~Cache() { compile_cache().erase({compile_keys.begin(), compile_keys.end()}); }

  static uint64_t next_id() {
    static std::atomic<uint64_t> id{0};
    return id++;
  }
};

JitState::JitState(JitOptions options)
    : options_(std::move(options)), cache_(std::make_shared<Cache>()) {}

namespace {

std::string leaf_key(const Array& a) {
  auto& impl = *a.impl();
  std::call_once(impl.key_once, [&] {
    impl.key = std::string(dtype_name(impl.dtype)) + shape_to_string(impl.shape);
    if (impl.sharding) impl.key += impl.sharding->to_string();
  });
  return impl.key + (impl.committed ? "c" : "u");
}

std::shared_ptr<spmd::Compiled> compile_traced(const JitTrace& t) {
  return compile_cache().get_or_compile(t.compile_key, [&] {
    auto c = spmd::compile(t.program, t.options);
    for (const auto& w : c->warnings) warn_once("[" + t.options.name + "] " + w);
    return c;
  });
}

}  // namespace

std::shared_ptr<JitState::Entry> JitState::get(const std::vector<Array>& leaves,
                                               const std::vector<size_t>& arg_leaf_counts,
                                               const std::string& tree_key,
                                               const std::function<std::vector<std::string>()>& make_paths,
                                               const TraceFn& trace) {
  const std::string& name = options_.name;
  for (const Array& a : leaves) {
    if (a.is_tracer()) internal_error(name, "jit called with tracers outside a trace");
    if (!a.is_abstract()) check_alive(a, name);  // abstract arguments lower; run() refuses them
  }
  std::string key = tree_key;
  for (const Array& a : leaves) key += "|" + leaf_key(a);
  // A current mesh with Explicit axes types uncommitted arguments (below): part of the key.
  std::optional<Mesh> explicit_current;
  if (has_current_mesh()) {
    Mesh cur = current_mesh(name);
    if (has_axis_type(cur, AxisType::Explicit)) explicit_current = std::move(cur);
  }
  if (explicit_current) key += "|current " + explicit_current->to_string();
  std::shared_ptr<const JitTrace> known;
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    auto it = cache_->traces.find(key);
    if (it != cache_->traces.end()) known = it->second;
  }
  if (known) {
    auto entry = std::make_shared<Entry>();
    entry->compiled = compile_traced(*known);
    entry->trace = std::move(known);
    return entry;
  }
  const std::vector<std::string> paths = make_paths();
  // Explicit in_shardings: one per argument (prefix) or one per leaf.
  std::vector<std::optional<NamedSharding>> given(leaves.size());
  const auto& ins = options_.in_shardings;
  if (!ins.empty()) {
    if (ins.size() == 1) {
      given.assign(leaves.size(), ins[0]);  // one sharding for every argument (as JAX)
    } else if (ins.size() == arg_leaf_counts.size()) {
      size_t k = 0;
      for (size_t a = 0; a < arg_leaf_counts.size(); ++a) {
        for (size_t j = 0; j < arg_leaf_counts[a]; ++j) given[k++] = ins[a];
      }
    } else if (ins.size() == leaves.size()) {
      given = ins;
    } else {
      fail(name, "in_shardings has {} entries; expected one per argument ({}) or per array ({})",
           ins.size(), arg_leaf_counts.size(), leaves.size());
    }
  }
  for (size_t i = 0; i < leaves.size(); ++i) {
    const auto& impl = leaves[i].impl();
    if (given[i] && impl->committed && !(*impl->sharding == *given[i])) {
      // As JAX: a committed array is never silently moved to meet in_shardings.
      fail(name,
           "argument {} ({}{}) is committed to {}, which differs from in_shardings' {}; "
           "device_put it first",
           i < paths.size() ? paths[i] : std::to_string(i), dtype_name(impl->dtype), shape_to_string(impl->shape), impl->sharding->to_string(),
           given[i]->to_string());
    }
    if (!given[i] && impl->committed) given[i] = *impl->sharding;
    if (given[i]) {
      given[i]->check_shape(leaves[i].shape());
      check_block_sharding(name, leaves[i].dtype(), leaves[i].shape(), *given[i]);
    }
  }
  // Explicit sharding: under a current mesh with Explicit axes, an uncommitted argument (a host
  // array) enters replicated on it and so is typed replicated, as JAX types arrays made under
  // such a mesh; committed arguments elsewhere leave it to the usual placement.
  if (explicit_current) {
    bool same = true;
    for (const auto& g : given) same = same && (!g || g->mesh() == *explicit_current);
    if (same) {
      for (auto& g : given) {
        if (!g) g = NamedSharding(*explicit_current, P());
      }
    }
  }
  // Trace.
  auto ts = std::make_shared<TraceState>(name);
  std::shared_ptr<void> proto;
  {
    TraceScope scope(ts);
    std::vector<Array> tracers;
    for (size_t i = 0; i < leaves.size(); ++i) {
      tracers.push_back(ts->add_param(ir::Aval{leaves[i].shape(), leaves[i].dtype()}, given[i]));
      if (i < paths.size()) ts->program().info(ts->program().params.back()).name = paths[i];
    }
    std::vector<Array> outs = trace(tracers, proto);
    ts->set_results(outs);
  }
  trace_count_++;
  auto traced = std::make_shared<JitTrace>();
  traced->compile_key = cache_->key_prefix + key;
  traced->out_proto = proto;
  traced->captures = ts->captures();
  for (const Array& c : traced->captures) {
    given.push_back(c.impl()->committed ? std::optional<NamedSharding>(*c.impl()->sharding)
                                        : std::nullopt);
  }
  // Every argument runs on one mesh: the one committed arrays and in_shardings name.
  std::optional<Mesh> mesh;
  auto what = [&](size_t i) {
    if (i < paths.size()) return "argument " + paths[i];
    if (i < leaves.size()) return fmt::format("argument leaf {}", i);
    return fmt::format("a captured array (#{})", i - leaves.size());
  };
  size_t first = 0;
  for (size_t i = 0; i < given.size(); ++i) {
    const auto& g = given[i];
    if (!g) continue;
    if (!mesh) {
      mesh = g->mesh();
      first = i;
    } else if (g->mesh() != *mesh) {
      fail(name,
           "arguments are committed to different meshes: {} is on {} ({}) but {} is on {} ({}); "
           "device_put one of them onto the other's mesh, or give in_shardings on one mesh",
           what(first), mesh->to_string(), given[first]->to_string(), what(i),
           g->mesh().to_string(), g->to_string());
    }
  }
  for (const auto& o : options_.out_shardings) {
    if (o && !mesh) mesh = o->mesh();
  }
  if (options_.out_shardings_fn && !mesh) {
    for (const auto& o : options_.out_shardings_fn(proto, ts->program().results.size())) {
      if (o && !mesh) mesh = o->mesh();
    }
  }
  // Uncommitted arguments go where the program's shard_maps and constraints name.
  if (!mesh) mesh = ir::named_mesh(ts->program());
  if (!mesh) mesh = single_device_sharding(partix::default_device()).mesh();
  spmd::CompileOptions co;
  co.name = name;
  for (auto& g : given) co.in_shardings.push_back(g ? *g : NamedSharding(*mesh, P()));
  ir::Program prog = ts->program();
  prog.mesh = *mesh;  // also for programs without arguments (created values, constraints)
  std::vector<std::optional<NamedSharding>> outs_given = options_.out_shardings;
  if (options_.out_shardings_fn) outs_given = options_.out_shardings_fn(proto, prog.results.size());
  if (!outs_given.empty()) {
    co.out_shardings = outs_given;
    // One entry applies to every result (as JAX's out_shardings prefix).
    if (co.out_shardings.size() == 1) co.out_shardings.assign(prog.results.size(), co.out_shardings[0]);
    if (co.out_shardings.size() != prog.results.size()) {
      fail(name, "out_shardings has {} entries for {} results (give one for all, or one each)",
           outs_given.size(), prog.results.size());
    }
    // Quantized results: whole blocks per device, and never a partial sum of blocks.
    for (size_t k = 0; k < prog.results.size(); ++k) {
      const ir::Aval& r = prog.aval(prog.results[k]);
      const auto& o = co.out_shardings[k];
      if (!o || !is_quantized(r.dtype)) continue;
      if (!(o->unreduced().empty())) {
        fail(name,
             "out_shardings asks for result {} ({}) unreduced ({}); quantized blocks cannot be "
             "summed",
             k, r.to_string(), o->to_string());
      }
      check_block_sharding(name, r.dtype, r.shape, *o);
    }
  }
  traced->program = std::move(prog);
  traced->options = std::move(co);
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    cache_->compile_keys.insert(traced->compile_key);
  }
  auto entry = std::make_shared<Entry>();
  entry->compiled = compile_traced(*traced);
  // Donation, per argument leaf.
  traced->donate.assign(leaves.size(), false);
  for (int a : options_.donate_argnums) {
    if (a < 0 || static_cast<size_t>(a) >= arg_leaf_counts.size()) {
      fail(name, "donate_argnums names argument {} but the function takes {}", a,
           arg_leaf_counts.size());
    }
    size_t first = 0;
    for (int b = 0; b < a; ++b) first += arg_leaf_counts[static_cast<size_t>(b)];
    for (size_t j = 0; j < arg_leaf_counts[static_cast<size_t>(a)]; ++j) {
      traced->donate[first + j] = true;
    }
  }
  std::lock_guard<std::mutex> lock(cache_->mu);
  // Two threads that traced one signature at once: the first trace kept stands for it (both
  // traces asked the compile cache for the same key, so it compiled once).
  entry->trace = cache_->traces.emplace(key, std::move(traced)).first->second;
  return entry;
}

std::vector<Array> JitState::run(const Entry& entry, const std::vector<Array>& leaves) {
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (leaves[i].is_abstract()) {
      fail(options_.name,
           "argument leaf {} ({}{}) is abstract (a ShapeDtypeStruct): it has no values to run "
           "on; use jit(f).lower(...) or eval_shape to inspect the program",
           i, dtype_name(leaves[i].dtype()), shape_to_string(leaves[i].shape()));
    }
  }
  const auto& exe = *entry.compiled->executable;
  const JitTrace& traced = *entry.trace;
  std::vector<Array> args;
  std::vector<bool> donate;
  auto place = [&](const Array& a, size_t i, bool give) {
    const NamedSharding& want = exe.in_shardings()[i];
    if (*a.impl()->sharding == want) {
      args.push_back(a);
      donate.push_back(give || a.impl()->temporary);
    } else {
      args.push_back(device_put(a, want));
      donate.push_back(true);  // a private copy: the program may reuse it
    }
  };
  for (size_t i = 0; i < leaves.size(); ++i) place(leaves[i], i, traced.donate[i]);
  for (size_t i = 0; i < traced.captures.size(); ++i) {
    place(traced.captures[i], leaves.size() + i, false);
  }
  std::vector<Array> outs = exe.run(args, donate);
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (traced.donate[i]) mark_donated(*leaves[i].impl());  // the caller's array is gone
  }
  for (Array& o : outs) o.impl()->committed = true;
  return outs;
}

const std::shared_ptr<void>& JitState::out_proto(const Entry& entry) const {
  return entry.trace->out_proto;
}

Lowered JitState::lower(const Entry& entry) const {
  return Lowered(
      std::make_shared<LoweredImpl>(LoweredImpl{entry.compiled, entry.trace->donate}));
}

}  // namespace detail

Array with_sharding_constraint(const Array& x, const NamedSharding& sharding) {
  sharding.check_shape(x.shape());
  if (!detail::is_tracing()) return device_put(x, sharding);
  return detail::bind1("sharding_constraint", {x},
                       {{"mesh", sharding.mesh()}, {"spec", sharding.spec()}});
}

}  // namespace partix

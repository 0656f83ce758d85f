// jit: trace once per (avals, shardings), compile through the SPMD pipeline and the shared
// compile cache, run.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/errors.h"
#include "core/log.h"
#include "dispatch/compile_cache.h"
#include "sharding/axes.h"
#include "spmd/analysis.h"
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
  // Which donated leaves a result takes over (usable_donations): the same for every call of
  // this signature, so found once.
  mutable std::once_flag usable_once;
  mutable std::vector<bool> usable;
  // The results are committed to their devices: something placed the program (committed
  // arguments, in/out_shardings, constraints or shard_maps naming a mesh, or more than one
  // device). Otherwise, as JAX's, they stay uncommitted and may move to meet other arrays.
  bool commit_outputs = true;
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

// The current mesh when it has Explicit axes: it types uncommitted arguments (given_shardings).
std::optional<Mesh> explicit_current_mesh(const std::string& name) {
  if (!has_current_mesh()) return std::nullopt;
  Mesh cur = current_mesh(name);
  if (!has_axis_type(cur, AxisType::Explicit)) return std::nullopt;
  return cur;
}

// in_shardings, one per argument (a prefix) or one per leaf, as one per leaf.
std::vector<std::optional<NamedSharding>> expand_in_shardings(
    const std::string& name, const std::vector<std::optional<NamedSharding>>& ins,
    const std::vector<size_t>& arg_leaf_counts, size_t num_leaves) {
  std::vector<std::optional<NamedSharding>> given(num_leaves);
  if (ins.empty()) return given;
  if (ins.size() == 1) {
    given.assign(num_leaves, ins[0]);  // one sharding for every argument (as JAX)
  } else if (ins.size() == arg_leaf_counts.size()) {
    size_t k = 0;
    for (size_t a = 0; a < arg_leaf_counts.size(); ++a) {
      for (size_t j = 0; j < arg_leaf_counts[a]; ++j) given[k++] = ins[a];
    }
  } else if (ins.size() == num_leaves) {
    given = ins;
  } else {
    fail(name, "in_shardings has {} entries; expected one per argument ({}) or per array ({})",
         ins.size(), arg_leaf_counts.size(), num_leaves);
  }
  return given;
}

// Whether a and b place an array of this shape identically: each device holds the same block
// (as JAX's is_equivalent_to), whatever the meshes' axis names or specs say (P('x') over a
// one-device axis is P()). A committed argument so placed meets in_shardings as it is.
bool same_placement(const NamedSharding& a, const NamedSharding& b, const Shape& shape) {
  if (a == b) return true;
  b.check_shape(shape);
  if (a.unreduced() != b.unreduced() || a.mesh().size() != b.mesh().size()) return false;
  auto blocks = [&](const NamedSharding& s) {
    std::map<int, std::vector<Slice>> out;
    const std::vector<int> ids = s.mesh().device_ids();
    for (size_t k = 0; k < ids.size(); ++k) {
      out[ids[k]] = s.device_index(shape, static_cast<int64_t>(k));
    }
    return out;
  };
  return a.shard_shape(shape) == b.shard_shape(shape) && blocks(a) == blocks(b);
}

// Each argument leaf's sharding, where known: in_shardings', else the committed array's; under
// a current mesh with Explicit axes, an uncommitted argument (a host array) enters replicated
// on it and so is typed replicated, as JAX types arrays made under such a mesh (committed
// arguments elsewhere leave it to the usual placement).
std::vector<std::optional<NamedSharding>> given_shardings(
    const std::string& name, const JitOptions& options, const std::vector<Array>& leaves,
    const std::vector<size_t>& arg_leaf_counts, const std::vector<std::string>& paths,
    const std::optional<Mesh>& explicit_current) {
  std::vector<std::optional<NamedSharding>> given =
      expand_in_shardings(name, options.in_shardings, arg_leaf_counts, leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    const auto& impl = leaves[i].impl();
    if (given[i] && impl->committed &&
        !same_placement(*impl->sharding, *given[i], leaves[i].shape())) {
      // As JAX: a committed array is never silently moved to meet in_shardings.
      fail(name,
           "argument {} ({}{}) is committed to {}, which differs from in_shardings' {}; "
           "device_put it first",
           i < paths.size() ? paths[i] : std::to_string(i), dtype_name(impl->dtype),
           shape_to_string(impl->shape), impl->sharding->to_string(), given[i]->to_string());
    }
    if (!given[i] && impl->committed) given[i] = *impl->sharding;
    if (given[i]) {
      given[i]->check_shape(leaves[i].shape());
      check_block_sharding(name, leaves[i].dtype(), leaves[i].shape(), *given[i]);
    }
  }
  if (!explicit_current) return given;
  for (const auto& g : given) {
    if (g && !(g->mesh() == *explicit_current)) return given;
  }
  for (auto& g : given) {
    if (!g) g = NamedSharding(*explicit_current, P());
  }
  return given;
}

// A mesh's devices as a set (sorted ids), and as JAX names them in its device errors
// ("device ids [0, 1] on platform CPU").
std::vector<int> device_set(const Mesh& m) {
  std::vector<int> ids = m.device_ids();
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::string devices_text(const Mesh& m) {
  std::string platform = m.devices().at(0).platform;
  for (char& ch : platform) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return fmt::format("device ids [{}] on platform {}", fmt::join(m.device_ids(), ", "), platform);
}

// As JAX: the meshes that shard_maps and constraints inside the program name have as many
// devices as the program's mesh (`source` says what placed it there, and on which devices).
void check_inner_meshes(const std::string& name, const Mesh& mesh, const std::string& source,
                        const ir::Program& program) {
  for (const ir::Instr& in : program.instrs) {
    if (in.attrs.has("mesh")) {
      const Mesh inner = in.attrs.get<Mesh>("mesh");
      // A mesh of the same size stands for the program's own (as JAX's abstract meshes do).
      if (inner.size() != mesh.size() && device_set(inner) != device_set(mesh)) {
        fail(name,
             "Received incompatible devices for jitted computation. Got {} and {} inside jit "
             "with {}; put the arguments on the mesh the program names, or name their mesh "
             "inside",
             source, in.prim->name(), devices_text(inner));
      }
    }
    for (const auto& r : in.regions) check_inner_meshes(name, mesh, source, *r);
  }
}

// The mesh every argument runs on: the one committed arrays and in_shardings name (all must
// agree), else out_shardings' (as given, then as made for this trace), else the mesh in
// context, else the program's shard_maps' and constraints', else the default device's.
// `describe(i)` names argument i (JAX's words: "argument x of f with shape int32[3]").
Mesh program_mesh(const std::string& name, const std::vector<std::optional<NamedSharding>>& given,
                  const std::function<std::string(size_t)>& describe,
                  const std::vector<std::optional<NamedSharding>>& out_shardings,
                  const std::vector<std::optional<NamedSharding>>& outs_given,
                  const ir::Program& program) {
  std::optional<Mesh> mesh;
  size_t first = 0;
  for (size_t i = 0; i < given.size(); ++i) {
    const auto& g = given[i];
    if (!g) continue;
    if (!mesh) {
      mesh = g->mesh();
      first = i;
      continue;
    }
    if (g->mesh() == *mesh) continue;
    if (device_set(*mesh) != device_set(g->mesh())) {  // other devices, as JAX says it
      fail(name,
           "Received incompatible devices for jitted computation. Got {} and {} and {} and {}; "
           "device_put one of them onto the other's devices, or give in_shardings on one mesh",
           describe(first), devices_text(*mesh), describe(i), devices_text(g->mesh()));
    }
    fail(name,
         "arguments are committed to different meshes over the same devices: {} is on {} ({}) "
         "but {} is on {} ({}); device_put one of them onto the other's mesh, or give "
         "in_shardings on one mesh",
         describe(first), mesh->to_string(), given[first]->to_string(), describe(i),
         g->mesh().to_string(), g->to_string());
  }
  // As JAX: the arguments' devices must be those of the mesh in context, if any.
  if (mesh && has_current_mesh() && device_set(*mesh) != device_set(current_mesh(name))) {
    fail(name,
         "Received incompatible devices for jitted computation. Got {} and {} and the mesh in "
         "context (set_mesh or `with mesh:`) with {}; device_put the argument onto the mesh, or "
         "call outside the mesh's context",
         describe(first), devices_text(*mesh), devices_text(current_mesh(name)));
  }
  // What placed the program, in JAX's words.
  std::string source = mesh ? fmt::format("{} and {}", describe(first), devices_text(*mesh)) : "";
  for (const auto* outs : {&out_shardings, &outs_given}) {
    for (const auto& o : *outs) {
      if (o && !mesh) {
        mesh = o->mesh();
        source = fmt::format("explicit output sharding with {}", devices_text(*mesh));
      }
    }
  }
  if (mesh) check_inner_meshes(name, *mesh, source, program);
  // As JAX: a mesh in context (set_mesh, `with mesh:`) places a program nothing else places;
  // else uncommitted arguments go where the program's shard_maps and constraints name.
  if (!mesh && has_current_mesh()) mesh = current_mesh(name);
  if (!mesh) mesh = ir::named_mesh(program);
  if (!mesh) mesh = single_device_sharding(partix::default_device()).mesh();
  return *mesh;
}

// out_shardings, one for all results or one each, as one per result; a quantized result is
// whole blocks per device and never a partial sum of blocks.
std::vector<std::optional<NamedSharding>> result_shardings(
    const std::string& name, const std::vector<std::optional<NamedSharding>>& outs_given,
    const ir::Program& prog) {
  if (outs_given.empty()) return {};
  std::vector<std::optional<NamedSharding>> outs = outs_given;
  if (outs.size() == 1) outs.assign(prog.results.size(), outs[0]);  // as JAX's prefix
  if (outs.size() != prog.results.size()) {
    fail(name, "out_shardings has {} entries for {} results (give one for all, or one each)",
         outs_given.size(), prog.results.size());
  }
  for (size_t k = 0; k < prog.results.size(); ++k) {
    const ir::Aval& r = prog.aval(prog.results[k]);
    const auto& o = outs[k];
    if (!o || !is_quantized(r.dtype)) continue;
    if (!(o->unreduced().empty())) {
      fail(name,
           "out_shardings asks for result {} ({}) unreduced ({}); quantized blocks cannot be "
           "summed",
           k, r.to_string(), o->to_string());
    }
    check_block_sharding(name, r.dtype, r.shape, *o);
  }
  return outs;
}

// donate_argnums as one flag per argument leaf.
std::vector<bool> donated_leaves(const std::string& name, const std::vector<int>& donate_argnums,
                                 const std::vector<size_t>& arg_leaf_counts, size_t num_leaves) {
  std::vector<bool> donate(num_leaves, false);
  for (int a : donate_argnums) {
    if (a < 0 || static_cast<size_t>(a) >= arg_leaf_counts.size()) {
      fail(name, "donate_argnums names argument {} but the function takes {}", a,
           arg_leaf_counts.size());
    }
    size_t first = 0;
    for (int b = 0; b < a; ++b) first += arg_leaf_counts[static_cast<size_t>(b)];
    for (size_t j = 0; j < arg_leaf_counts[static_cast<size_t>(a)]; ++j) donate[first + j] = true;
  }
  return donate;
}

}  // namespace

std::shared_ptr<JitState::Entry> JitState::get(
    const std::vector<Array>& leaves, const std::vector<size_t>& arg_leaf_counts,
    const std::string& tree_key, const std::function<std::vector<std::string>()>& make_paths,
    const TraceFn& trace) {
  const std::string& name = options_.name;
  for (const Array& a : leaves) {
    if (a.is_tracer()) internal_error(name, "jit called with tracers outside a trace");
    if (!a.is_abstract()) check_alive(a, name);  // abstract arguments lower; run() refuses them
  }
  // The signature: the argument tree, each leaf's type, a current mesh with Explicit axes
  // (it types uncommitted arguments) and the default device (where a program that nothing
  // places runs).
  std::string key = tree_key;
  for (const Array& a : leaves) key += "|" + leaf_key(a);
  const std::optional<Mesh> explicit_current = explicit_current_mesh(name);
  if (explicit_current) key += "|current " + explicit_current->to_string();
  if (!explicit_current && has_current_mesh()) key += "|context " + current_mesh(name).to_string();
  key += "|default " + std::to_string(partix::default_device().id);
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
  std::vector<std::optional<NamedSharding>> given =
      given_shardings(name, options_, leaves, arg_leaf_counts, paths, explicit_current);
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
  ir::Program prog = ts->program();
  const std::vector<std::optional<NamedSharding>> outs_given =
      options_.out_shardings_fn ? options_.out_shardings_fn(proto, prog.results.size())
                                : options_.out_shardings;
  // Also for programs without arguments (created values, constraints).
  auto describe = [&](size_t i) {
    const size_t n = leaves.size();
    const Array& a = i < n ? leaves[i] : traced->captures[i - n];
    const std::string who = i < paths.size() ? "argument " + paths[i]
                            : i < n          ? fmt::format("argument leaf {}", i)
                                             : fmt::format("a captured array (#{})", i - n);
    return fmt::format("{} of {} with shape {}{}", who, name, jax_dtype_name(a.dtype()),
                       shape_to_string(a.shape()));
  };
  prog.mesh = program_mesh(name, given, describe, options_.out_shardings, outs_given, prog);
  spmd::CompileOptions co;
  co.name = name;
  for (auto& g : given) co.in_shardings.push_back(g ? *g : NamedSharding(*prog.mesh, P()));
  co.out_shardings = result_shardings(name, outs_given, prog);
  traced->commit_outputs =
      prog.mesh->size() > 1 || ir::named_mesh(prog).has_value() ||
      std::any_of(given.begin(), given.end(), [](const auto& g) { return g.has_value(); }) ||
      std::any_of(outs_given.begin(), outs_given.end(),
                  [](const auto& o) { return o.has_value(); });
  traced->program = std::move(prog);
  traced->options = std::move(co);
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    cache_->compile_keys.insert(traced->compile_key);
  }
  auto entry = std::make_shared<Entry>();
  entry->compiled = compile_traced(*traced);
  traced->donate = donated_leaves(name, options_.donate_argnums, arg_leaf_counts, leaves.size());
  std::lock_guard<std::mutex> lock(cache_->mu);
  // Two threads that traced one signature at once: the first trace kept stands for it (both
  // traces asked the compile cache for the same key, so it compiled once).
  entry->trace = cache_->traces.emplace(key, std::move(traced)).first->second;
  return entry;
}

namespace {

// Which donated argument leaves a result can take over: as in JAX, a donated buffer is used
// only where a result of the same per-device size needs one (each result once); the others
// stay the caller's, alive.
std::vector<bool> usable_donations(const runtime::Executable& exe, const std::vector<Array>& leaves,
                                   const std::vector<bool>& donate) {
  if (std::find(donate.begin(), donate.end(), true) == donate.end()) return donate;
  std::multiset<int64_t> free_results;
  for (size_t k = 0; k < exe.out_avals().size(); ++k) {
    const ir::Aval& a = exe.out_avals()[k];
    free_results.insert(dtype_nbytes(a.dtype, exe.out_shardings()[k].shard_shape(a.shape)));
  }
  std::vector<bool> usable(donate.size(), false);
  for (size_t i = 0; i < donate.size() && i < leaves.size(); ++i) {
    if (!donate[i]) continue;
    const int64_t bytes =
        dtype_nbytes(leaves[i].dtype(), exe.in_shardings()[i].shard_shape(leaves[i].shape()));
    auto it = free_results.find(bytes);
    if (it == free_results.end()) continue;
    free_results.erase(it);
    usable[i] = true;
  }
  return usable;
}

}  // namespace

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
  std::call_once(traced.usable_once,
                 [&] { traced.usable = usable_donations(exe, leaves, traced.donate); });
  const std::vector<bool>& given = traced.usable;
  for (size_t i = 0; i < leaves.size(); ++i) place(leaves[i], i, given[i]);
  for (size_t i = 0; i < traced.captures.size(); ++i) {
    place(traced.captures[i], leaves.size() + i, false);
  }
  std::vector<Array> outs = exe.run(args, donate);
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (given[i]) mark_donated(*leaves[i].impl());  // the caller's array is gone
  }
  // A current mesh (set_mesh, use_mesh) places the program too, as JAX's context mesh does.
  const bool commit = traced.commit_outputs || has_current_mesh();
  for (Array& o : outs) o.impl()->committed = commit;
  return outs;
}

const std::shared_ptr<void>& JitState::out_proto(const Entry& entry) const {
  return entry.trace->out_proto;
}

Lowered JitState::lower(const Entry& entry) const {
  return Lowered(std::make_shared<LoweredImpl>(
      LoweredImpl{entry.compiled, entry.trace->donate, entry.trace->captures}));
}

}  // namespace detail

Array with_sharding_constraint(const Array& x, const NamedSharding& sharding) {
  return with_sharding_constraint(x, sharding, {});
}

namespace {

// `spec` with each unconstrained dimension split as `x` is, when x lies on the same mesh (the
// axes the constrained dimensions name excepted): what an eager constraint leaves as it is.
PartitionSpec keep_free_dims(const Array& x, const NamedSharding& sharding,
                             const std::vector<int>& free) {
  const auto& own = x.impl()->sharding;
  if (free.empty() || !own || !(own->mesh() == sharding.mesh())) return sharding.spec();
  std::vector<PartitionSpec::Entry> entries;
  for (int d = 0; d < x.ndim(); ++d) entries.push_back(sharding.spec()[d]);
  std::set<std::string> used;
  for (const auto& a : sharding.spec().axes()) used.insert(a);
  for (int d : free) {
    for (const auto& a : own->spec()[d]) {
      if (used.insert(a).second) entries[static_cast<size_t>(d)].push_back(a);
    }
  }
  return PartitionSpec(entries);
}

}  // namespace

Array with_sharding_constraint(const Array& x, const NamedSharding& sharding,
                               std::vector<int> unconstrained_dims) {
  sharding.check_shape(x.shape());
  if (!detail::is_tracing()) {
    // Eagerly a constraint is a one-op program: as JAX's, it runs on a committed operand's
    // devices, in their order, and refuses a sharding over other ones (device_put moves).
    const auto& impl = x.impl();
    if (impl->committed && impl->sharding &&
        impl->sharding->mesh().device_ids() != sharding.mesh().device_ids()) {
      detail::fail("with_sharding_constraint",
                   "Received incompatible devices for jitted computation. Got argument with {} "
                   "and sharding_constraint with {}; device_put moves an array onto other "
                   "devices",
                   detail::devices_text(impl->sharding->mesh()),
                   detail::devices_text(sharding.mesh()));
    }
    return device_put(
        x, NamedSharding(sharding.mesh(), keep_free_dims(x, sharding, unconstrained_dims),
                         sharding.unreduced(), sharding.reduced()));
  }
  // Inside shard_map a value is per device along the manual axes: a constraint may name only
  // the axes the map leaves automatic (as JAX).
  if (const detail::TraceState* t = detail::current_trace(); t != nullptr && t->manual_mesh) {
    std::vector<std::string> manual;
    for (const auto& a : sharding.spec().axes()) {
      if (t->manual_axes.count(a)) manual.push_back(a);
    }
    if (!manual.empty()) {
      detail::fail("with_sharding_constraint",
                   "{} contains a manual axes ('{}') of mesh {}: inside shard_map a constraint "
                   "names only the mesh axes the map leaves automatic (axis_names=)",
                   sharding.spec().to_string(), fmt::join(manual, "', '"),
                   t->manual_mesh->to_string());
    }
  }
  ir::Attrs attrs{{"mesh", sharding.mesh()}, {"spec", sharding.spec()}};
  // Partial sums (the value made one, or kept one) and reduced types, when named.
  if (!sharding.unreduced().empty())
    attrs.set("unreduced", ir::axis_sets_attr({sharding.unreduced()}));
  if (!sharding.reduced().empty()) attrs.set("reduced", ir::axis_sets_attr({sharding.reduced()}));
  if (!unconstrained_dims.empty()) {
    std::sort(unconstrained_dims.begin(), unconstrained_dims.end());
    unconstrained_dims.erase(std::unique(unconstrained_dims.begin(), unconstrained_dims.end()),
                             unconstrained_dims.end());
    for (int d : unconstrained_dims) {
      if (d < 0 || d >= x.ndim() || !sharding.spec()[d].empty()) {
        detail::fail("with_sharding_constraint",
                     "unconstrained dimension {} must be a dimension of the {}-d operand left "
                     "unsplit by {}",
                     d, x.ndim(), sharding.spec().to_string());
      }
    }
    attrs.set("unconstrained", ir::Ints(unconstrained_dims.begin(), unconstrained_dims.end()));
  }
  return detail::bind1("sharding_constraint", {x}, std::move(attrs));
}

}  // namespace partix

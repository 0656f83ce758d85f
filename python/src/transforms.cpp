// jit, grad, shard_map, control flow, checkpoint (remat) and the collectives. Python functions
// are traced by the C++ tracer calling back into them: the GIL is released while C++ works
// (compiling, running, waiting in collectives) and taken again for each callback. A callback
// returns its result leaves and an id for its result tree, which Python keeps.
#include <map>
#include <mutex>

#include "bind.h"
#include "ir/primitive.h"
#include "partix/control.h"
#include "trace/loop_carries.h"
#include "trace/vma_options.h"

namespace partix::python {

namespace {

using Leaves = std::vector<Array>;
using Counts = std::vector<size_t>;

// Calls a Python trace function f(tracers) -> (leaves, tree_id), storing tree_id as the proto.
Leaves trace_into(const nb::callable& f, const Leaves& tracers, std::shared_ptr<void>& proto) {
  nb::gil_scoped_acquire gil;
  auto [leaves, id] = nb::cast<std::pair<Leaves, int64_t>>(f(tracers));
  proto = std::make_shared<int64_t>(id);
  return leaves;
}

int64_t proto_id(const std::shared_ptr<void>& proto) {
  return proto ? *std::static_pointer_cast<int64_t>(proto) : -1;
}

// jit's engine with Python's pytrees: Python flattens, keys and unflattens; C++ caches,
// compiles and runs.
class PyJit {
 public:
  PyJit(std::vector<std::optional<NamedSharding>> in_shardings,
        std::vector<std::optional<NamedSharding>> out_shardings, std::vector<int> donate,
        std::string name, std::optional<nb::callable> out_shardings_fn) {
    JitOptions o{.in_shardings = std::move(in_shardings),
                 .out_shardings = std::move(out_shardings),
                 .donate_argnums = std::move(donate),
                 .name = std::move(name)};
    if (out_shardings_fn) {
      // Held by the shared callable so the Python object dies with the GIL held (~PyJit).
      fn_ = std::make_shared<nb::callable>(*out_shardings_fn);
      std::weak_ptr<nb::callable> w = fn_;
      o.out_shardings_fn = [w](const std::shared_ptr<void>& proto, size_t n) {
        std::vector<std::optional<NamedSharding>> out;
        if (auto f = w.lock()) {
          nb::gil_scoped_acquire gil;
          out = nb::cast<std::vector<std::optional<NamedSharding>>>((*f)(proto_id(proto), n));
        }
        return out;
      };
    }
    state_ = std::make_shared<detail::JitState>(std::move(o));
  }

  std::shared_ptr<detail::JitState::Entry> entry(const Leaves& leaves, const Counts& counts,
                                                 const std::string& key, const nb::callable& paths,
                                                 const nb::callable& trace) {
    // One thread at a time looks up or traces, so concurrent first calls trace once (the
    // others wait without the GIL, then hit the cache); runs are not serialized.
    std::lock_guard<std::mutex> lock(*mu_);
    return state_->get(
        leaves, counts, key, [&] { return call_python<std::vector<std::string>>(paths); },
        [&](const Leaves& t, std::shared_ptr<void>& proto) { return trace_into(trace, t, proto); });
  }

  std::pair<Leaves, int64_t> call(const Leaves& leaves, const Counts& counts,
                                  const std::string& key, const nb::callable& paths,
                                  const nb::callable& trace) {
    return interruptible([&]() -> std::pair<Leaves, int64_t> {
      auto e = entry(leaves, counts, key, paths, trace);
      Leaves outs = state_->run(*e, leaves);
      return {std::move(outs), proto_id(state_->out_proto(*e))};
    });
  }

  std::pair<Lowered, int64_t> lower(const Leaves& leaves, const Counts& counts,
                                    const std::string& key, const nb::callable& paths,
                                    const nb::callable& trace) {
    nb::gil_scoped_release release;
    auto e = entry(leaves, counts, key, paths, trace);
    return {state_->lower(*e), proto_id(state_->out_proto(*e))};
  }

  int trace_count() const { return state_->trace_count(); }

 private:
  std::shared_ptr<nb::callable> fn_;
  std::shared_ptr<detail::JitState> state_;
  std::shared_ptr<std::mutex> mu_ = std::make_shared<std::mutex>();
};

class PyShardMap {
 public:
  PyShardMap(Mesh mesh, std::vector<PartitionSpec> in_specs, std::vector<PartitionSpec> out_specs,
             bool check_vma, std::optional<nb::callable> out_specs_fn,
             std::set<std::string> manual_axes)
      : state_(std::move(mesh), std::move(in_specs), std::move(out_specs), check_vma) {
    state_.set_manual_axes(std::move(manual_axes));
    if (out_specs_fn) {
      fn_ = std::make_shared<nb::callable>(*out_specs_fn);
      std::weak_ptr<nb::callable> w = fn_;
      state_.set_out_specs_fn([w](const std::shared_ptr<void>& proto, size_t n) {
        std::vector<PartitionSpec> out;
        if (auto f = w.lock()) {
          nb::gil_scoped_acquire gil;
          out = nb::cast<std::vector<PartitionSpec>>((*f)(proto_id(proto), n));
        }
        return out;
      });
    }
  }

  void set_function_name(std::string name) { state_.set_function_name(std::move(name)); }
  // JAX's unreduced= and reduced= in the specs: per argument, and per result from
  // `out_fn(tree_id, n)` (called after tracing, as out_specs_fn is).
  void set_unreduced(detail::ShardMapState::AxisSets in, std::optional<nb::callable> out_fn) {
    state_.set_unreduced(std::move(in), {}, axis_sets_fn(out_fn, unreduced_fn_));
  }
  void set_reduced(detail::ShardMapState::AxisSets in, std::optional<nb::callable> out_fn) {
    state_.set_reduced(std::move(in), {}, axis_sets_fn(out_fn, reduced_fn_));
  }

  std::pair<Leaves, int64_t> call(const Leaves& leaves, const Counts& counts,
                                  const nb::callable& trace) {
    return interruptible([&]() -> std::pair<Leaves, int64_t> {
      std::shared_ptr<void> proto;
      Leaves outs = state_.call(
          leaves, counts,
          [&](const Leaves& t, std::shared_ptr<void>& p) { return trace_into(trace, t, p); },
          proto);
      return {std::move(outs), proto_id(proto)};
    });
  }

 private:
  // A Python function of (tree id, n) giving n axis sets, held in `keep` (the state holds it
  // weakly, as out_specs_fn).
  static detail::ShardMapState::AxisSetsFn axis_sets_fn(const std::optional<nb::callable>& out_fn,
                                                        std::shared_ptr<nb::callable>& keep) {
    if (!out_fn) return nullptr;
    keep = std::make_shared<nb::callable>(*out_fn);
    std::weak_ptr<nb::callable> w = keep;
    return [w](const std::shared_ptr<void>& proto, size_t n) {
      detail::ShardMapState::AxisSets out;
      if (auto f = w.lock()) {
        nb::gil_scoped_acquire gil;
        out = nb::cast<detail::ShardMapState::AxisSets>((*f)(proto_id(proto), n));
      }
      return out;
    };
  }

  std::shared_ptr<nb::callable> fn_, unreduced_fn_, reduced_fn_;
  detail::ShardMapState state_;
};

std::map<std::string, double> cost_dict(const CostAnalysis& c) {
  // JAX's keys where it has them ("flops", "bytes accessed"), per device.
  std::map<std::string, double> out{{"flops", c.flops},
                                    {"duplicated_flops_fraction", c.duplicated_flops_fraction},
                                    {"bytes accessed", c.bytes_accessed},
                                    {"instructions", c.instructions}};
  for (const auto& [k, v] : c.bytes_per_device) out["bytes " + k] = v;
  for (const auto& [k, v] : c.collectives_per_device) out["collectives " + k] = v;
  return out;
}

// jit, its lowering and shard_map as classes the Python package drives.
void bind_staged(nb::module_& m) {
  nb::class_<PyJit>(m, "Jit")
      .def(nb::init<std::vector<std::optional<NamedSharding>>,
                    std::vector<std::optional<NamedSharding>>, std::vector<int>, std::string,
                    std::optional<nb::callable>>())
      .def("call", &PyJit::call)
      .def("lower", &PyJit::lower)
      .def_prop_ro("trace_count", &PyJit::trace_count);

  nb::class_<Lowered>(m, "Lowered")
      .def("as_text", &Lowered::as_text)
      .def("hlo_text", &Lowered::hlo_text, nb::arg("print_large_constants") = false)
      .def("global_text", &Lowered::global_text)
      .def("fusions", &Lowered::fusions)
      .def("cost_analysis", [](const Lowered& l) { return cost_dict(l.cost_analysis()); })
      .def("bytes_per_device", [](const Lowered& l) { return l.cost_analysis().bytes_per_device; })
      .def("memory_analysis",
           [](const Lowered& l) {
             MemoryAnalysis a = l.memory_analysis();
             return std::map<std::string, std::vector<int64_t>>{
                 {"argument_bytes", a.argument_bytes},
                 {"output_bytes", a.output_bytes},
                 {"peak_temp_bytes", a.peak_temp_bytes},
                 {"peak_bytes", a.peak_bytes}};
           })
      .def("warnings", &Lowered::warnings)
      .def("in_shardings", &Lowered::in_shardings)
      .def("out_shardings", &Lowered::out_shardings);

  nb::class_<PyShardMap>(m, "ShardMap")
      .def(nb::init<Mesh, std::vector<PartitionSpec>, std::vector<PartitionSpec>, bool,
                    std::optional<nb::callable>, std::set<std::string>>())
      .def("call", &PyShardMap::call)
      .def("set_function_name", &PyShardMap::set_function_name)
      .def("set_unreduced", &PyShardMap::set_unreduced)
      .def("set_reduced", &PyShardMap::set_reduced);
}

// Reverse mode and sharding constraints.
void bind_grad(nb::module_& m) {
  // grad: f(tracers) -> [value, aux...]; returns (value, grads (None where not asked), aux).
  m.def("grad", [](const Leaves& leaves, const std::vector<bool>& wrt, nb::callable f) {
    detail::GradOutput out;
    {
      nb::gil_scoped_release release;
      out = detail::grad_engine_aux(leaves, wrt,
                                    [&](const Leaves& t) { return call_python<Leaves>(f, t); });
    }
    std::vector<std::optional<Array>> grads;
    for (size_t i = 0; i < out.grads.size(); ++i) {
      grads.push_back(wrt[i] ? std::optional<Array>(out.grads[i]) : std::nullopt);
    }
    return std::make_tuple(out.value, grads, out.aux);
  });

  // unconstrained: dimensions left to the compiler (P.UNCONSTRAINED), unsplit in s.
  m.def(
      "with_sharding_constraint",
      [](const Array& x, const NamedSharding& s, std::vector<int> unconstrained) {
        nb::gil_scoped_release release;
        return with_sharding_constraint(x, s, std::move(unconstrained));
      },
      nb::arg("x"), nb::arg("s"), nb::arg("unconstrained") = std::vector<int>{});
  m.def("is_tracing", &detail::is_tracing);
}

// Loops, branches and checkpointing.
void bind_control_flow(nb::module_& m) {
  // Control flow: bodies are Python functions f(tracers) -> (leaves, tree_id).
  m.def("scan", [](const Leaves& init, const Leaves& xs, int64_t length, bool reverse,
                   nb::callable body) {
    return interruptible([&] {
      std::shared_ptr<void> proto;
      Leaves outs = detail::scan_call(
          init, xs, length, reverse,
          [&](const Leaves& t, std::shared_ptr<void>& p) { return trace_into(body, t, p); }, proto);
      return std::make_pair(outs, proto_id(proto));
    });
  });
  m.def("fori_loop", [](int64_t lower, int64_t upper, const Leaves& init, nb::callable body) {
    return interruptible([&] {
      std::shared_ptr<void> proto;
      return detail::fori_call(
          lower, upper, init,
          [&](const Leaves& t, std::shared_ptr<void>& p) { return trace_into(body, t, p); }, proto);
    });
  });
  m.def("while_loop", [](const Leaves& init, nb::callable cond, nb::callable body) {
    return interruptible([&] {
      std::shared_ptr<void> proto;
      return detail::while_call(
          init, [&](const Leaves& t, std::shared_ptr<void>& p) { return trace_into(cond, t, p); },
          [&](const Leaves& t, std::shared_ptr<void>& p) { return trace_into(body, t, p); }, proto);
    });
  });
  // The package's own loops (not the user's) widen their carries' varying axes.
  m.def("set_loose_carries", &detail::set_loose_carries);
  // jax_remove_size_one_mesh_axis_from_type.
  m.def("set_drop_one_device_axes", &detail::set_drop_one_device_axes);
  // jax_auto_pcast.
  m.def("set_auto_pcast", &detail::set_auto_pcast);
  // jax_disable_vmap_shmap_error.
  m.def("set_vmap_shmap_error_disabled", &detail::set_vmap_shmap_error_disabled);
  m.def("cond", [](const Array& pred, const Leaves& operands, nb::callable t, nb::callable f) {
    nb::gil_scoped_release release;
    std::shared_ptr<void> tp, fp;
    Leaves outs = detail::cond_call(
        pred, operands,
        [&](const Leaves& x, std::shared_ptr<void>& p) { return trace_into(t, x, p); },
        [&](const Leaves& x, std::shared_ptr<void>& p) { return trace_into(f, x, p); }, tp, fp);
    return std::make_tuple(outs, proto_id(tp), proto_id(fp));
  });
  // policy: "nothing", "everything", "dots", "dots_no_batch", "names" or "names_except" (with
  // `names`: value names), "primitives" (with `names`: the primitives whose results are saved).
  m.def("checkpoint", [](const Leaves& leaves, nb::callable f, const std::string& policy,
                         const std::vector<std::string>& names) {
    using Kind = SavePolicy::Kind;
    static const std::map<std::string, Kind> kinds{{"nothing", Kind::kNothing},
                                                   {"everything", Kind::kEverything},
                                                   {"dots", Kind::kDots},
                                                   {"dots_no_batch", Kind::kDotsWithNoBatchDims},
                                                   {"names", Kind::kNames},
                                                   {"names_except", Kind::kNamesExcept},
                                                   {"primitives", Kind::kPrimitives}};
    auto it = kinds.find(policy);
    if (it == kinds.end()) throw Error("[checkpoint] unknown save policy '" + policy + "'");
    nb::gil_scoped_release release;
    std::shared_ptr<void> proto;
    Leaves outs = detail::remat_call(
        leaves, [&](const Leaves& t, std::shared_ptr<void>& p) { return trace_into(f, t, p); },
        proto, SavePolicy{it->second, names});
    return std::make_pair(outs, proto_id(proto));
  });
  // The names of partix's primitives (what a checkpoint policy function is asked about).
  m.def("primitive_names", [] { return prim::primitive_names(); });
  m.def("checkpoint_name", [](const Array& x, const std::string& name) {
    nb::gil_scoped_release release;
    return checkpoint_name(x, name);
  });
}

void bind_vmap(nb::module_& m) {
  // vmap: f(tracers) -> (leaves, tree_id) on one example; returns (values, batch dims, tree id).
  m.def("vmap", [](const Leaves& leaves, const std::vector<int>& in_axes,
                   std::optional<int64_t> axis_size, const std::string& axis_name,
                   const std::vector<std::string>& spmd_axis_name, nb::callable f) {
    return interruptible([&] {
      std::shared_ptr<void> proto;
      std::vector<detail::Batched> outs = detail::vmap_call(
          leaves, in_axes, axis_size, axis_name, spmd_axis_name,
          [&](const Leaves& t, std::shared_ptr<void>& p) { return trace_into(f, t, p); }, proto);
      Leaves values;
      std::vector<int> bdims;
      for (const detail::Batched& b : outs) {
        values.push_back(b.value);
        bdims.push_back(b.bdim);
      }
      return std::make_tuple(values, bdims, proto_id(proto));
    });
  });
  m.def("place_batched", [](const Array& v, int bdim, int64_t size, int out_axis) {
    nb::gil_scoped_release release;
    return detail::place_batched({v, bdim}, size, out_axis);
  });
}

void bind_custom_derivatives(nb::module_& m) {
  // Custom derivatives: f, fwd, bwd (or the jvp rule) are Python functions
  // f(tracers) -> (leaves, tree_id); returns (outputs, f's tree id).
  // The rules hold the callables by reference: no Python reference count changes while the
  // GIL is released.
  auto rule = [](const nb::callable& fn) -> detail::CustomRuleFn {
    const nb::callable* f = &fn;
    return [f](const Leaves& t, std::shared_ptr<void>& p) { return trace_into(*f, t, p); };
  };
  m.def("custom_vjp",
        [rule](const Leaves& args, nb::callable f, nb::callable fwd, nb::callable bwd) {
          nb::gil_scoped_release release;
          detail::CustomProtos protos;
          Leaves outs = detail::custom_vjp_call(args, rule(f), rule(fwd), rule(bwd), protos);
          return std::make_pair(outs, proto_id(protos.f));
        });
  m.def("custom_jvp", [rule](const Leaves& args, nb::callable f, nb::callable jvp) {
    nb::gil_scoped_release release;
    detail::CustomProtos protos;
    Leaves outs = detail::custom_jvp_call(args, rule(f), rule(jvp), protos);
    return std::make_pair(outs, proto_id(protos.f));
  });
}

void bind_collectives(nb::module_& m) {
  // Collectives (inside shard_map); axes: one name or several; groups: axis_index_groups
  // (empty: the whole axes).
  using Names = const std::vector<std::string>&;
  using Groups = const IndexGroups&;
  m.def("psum", [](const Array& x, Names a, Groups g) {
    nb::gil_scoped_release r;
    return psum(x, to_axes(a), g);
  });
  m.def("pmean", [](const Array& x, Names a, Groups g) {
    nb::gil_scoped_release r;
    return pmean(x, to_axes(a), g);
  });
  m.def("pmax", [](const Array& x, Names a, Groups g) {
    nb::gil_scoped_release r;
    return pmax(x, to_axes(a), g);
  });
  m.def("pmin", [](const Array& x, Names a, Groups g) {
    nb::gil_scoped_release r;
    return pmin(x, to_axes(a), g);
  });
  m.def("pvary", [](const Array& x, Names a) { return pvary(x, to_axes(a)); });
  m.def("all_gather", [](const Array& x, Names a, int axis, bool tiled, Groups g) {
    nb::gil_scoped_release r;
    return all_gather(x, to_axes(a), axis, tiled, g);
  });
  m.def("psum_scatter", [](const Array& x, Names a, int dim, bool tiled, Groups g) {
    nb::gil_scoped_release r;
    return psum_scatter(x, to_axes(a), dim, tiled, g);
  });
  m.def("ppermute", [](const Array& x, Names a, const std::vector<std::pair<int, int>>& perm) {
    nb::gil_scoped_release r;
    return ppermute(x, to_axes(a), perm);
  });
  m.def("all_to_all", [](const Array& x, Names a, int split, int concat, bool tiled, Groups g) {
    nb::gil_scoped_release r;
    return all_to_all(x, to_axes(a), split, concat, tiled, g);
  });
  m.def("collective_size", [](const std::string& api, Names a, Groups g) {
    return collective_size(api.c_str(), to_axes(a), g);
  });
  m.def("axis_index", [](Names a) { return axis_index(to_axes(a)); });
  m.def("axis_size", [](Names a) { return axis_size(to_axes(a)); });
}

}  // namespace

void bind_transforms(nb::module_& m) {
  bind_staged(m);
  bind_grad(m);
  bind_control_flow(m);
  bind_vmap(m);
  bind_custom_derivatives(m);
  bind_collectives(m);
}

}  // namespace partix::python

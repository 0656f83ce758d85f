// vmap of loops, branches, shard_map and sharding constraints (control_batching.h): each
// batches its regions by evaluating them batched inside a new loop, branch or body, so that
// what was unbatched stays unbatched.
#include "prim/control_batching.h"

#include "core/errors.h"
#include "partix/control.h"
#include "partix/ops.h"
#include "prim/util.h"
#include "trace/loop_carries.h"
#include "trace/trace.h"
#include "trace/vma_options.h"

namespace partix::prim {

namespace {

std::vector<bool> batched_of(const std::vector<Batched>& operands, size_t from, size_t n) {
  std::vector<bool> out;
  for (size_t i = from; i < from + n; ++i) out.push_back(operands[i].bdim >= 0);
  return out;
}

// Marks carries (parameters `off`.. of `body`, results 0..nc) batched until the body keeps
// them so: a carry the body computes from a batched value is batched from the start.
void fix_carries(const ir::Program& body, size_t off, size_t nc, const std::string& axis_name,
                 std::vector<bool>& params) {
  for (size_t round = 0; round <= nc; ++round) {
    const std::vector<bool> res = autodiff::batched_results(body, params, axis_name);
    bool changed = false;
    for (size_t k = 0; k < nc; ++k) {
      if (res[k] && !params[off + k]) params[off + k] = changed = true;
    }
    if (!changed) return;
  }
}

// b as the region's result must be: at the front when `batched`, else unbatched as it is.
Array as_result(const Batched& b, bool batched, int64_t size, std::string_view what) {
  if (batched) return at_front(b, size);
  if (b.bdim >= 0) {
    detail::internal_error("vmap",
                           fmt::format("{}: a result found unbatched came out batched", what));
  }
  return b.value;
}

// The operands as a region receives them: batched ones with their batch in front.
std::vector<Array> fronted(const std::vector<Batched>& operands, size_t from, size_t n,
                           int64_t size) {
  std::vector<Array> out;
  for (size_t i = from; i < from + n; ++i) {
    out.push_back(operands[i].bdim >= 0 ? at_front(operands[i], size) : operands[i].value);
  }
  return out;
}

// Batched values of a region's parameters from what it receives and which are batched.
std::vector<Batched> with_bdims(const std::vector<Array>& values, const std::vector<bool>& on) {
  std::vector<Batched> out;
  for (size_t i = 0; i < values.size(); ++i) out.push_back({values[i], on[i] ? 0 : -1});
  return out;
}

// p (a [size] bool, or its batched form) broadcast over a batched value of `shape`.
Array over_examples(const Array& p, const Shape& shape) {
  std::vector<int> dims{0};
  return broadcast_in_dim(p, shape, dims);
}

}  // namespace

std::vector<Batched> ScanBatching::batch(const BatchArgs& a) const {
  const bool fori = a.attrs.has("lower");
  const ir::Program& body = *a.regions[0];
  const size_t nc = static_cast<size_t>(a.attrs.i("num_carry"));
  const size_t nx = fori ? 0 : static_cast<size_t>(a.attrs.i("num_xs"));
  const size_t nk = a.operands.size() - nc - nx;
  const size_t off = fori ? 1 : 0;  // fori_loop's body takes the index first
  std::vector<bool> on(body.params.size(), false);
  for (size_t i = 0; i < a.operands.size(); ++i) on[off + i] = a.operands[i].bdim >= 0;
  fix_carries(body, off, nc, a.axis.name, on);
  const std::vector<bool> res = autodiff::batched_results(body, on, a.axis.name);

  std::vector<Array> init, xs;
  for (size_t k = 0; k < nc; ++k) {
    init.push_back(on[off + k] ? at_front(a.operands[k], a.size) : a.operands[k].value);
  }
  int64_t length = a.attrs.i_or("length", -1);
  if (fori) {
    length = a.attrs.i("upper") - a.attrs.i("lower");
    xs.push_back(arange(length, DType::I32) + static_cast<double>(a.attrs.i("lower")));
  }
  for (size_t j = 0; j < nx; ++j) {  // the loop's axis first, the batch next
    const Batched& x = a.operands[nc + j];
    xs.push_back(x.bdim < 0 ? x.value : moveaxis(x.value, x.bdim, 1));
  }
  const std::vector<Array> consts = fronted(a.operands, nc + nx, nk, a.size);
  std::shared_ptr<void> proto;
  const detail::LooseCarriesScope loose;  // a loop of its own making: carries widen
  const std::vector<Array> outs = detail::scan_call(
      init, xs, length, a.attrs.b_or("reverse", false),
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        std::vector<Array> params;
        if (fori) params.push_back(t[nc]);
        params.insert(params.end(), t.begin(), t.begin() + static_cast<long>(nc));
        params.insert(params.end(), t.begin() + static_cast<long>(nc + off), t.end());
        params.insert(params.end(), consts.begin(), consts.end());
        const std::vector<Batched> r =
            autodiff::batch_evaluate(body, with_bdims(params, on), a.axis);
        std::vector<Array> out;
        for (size_t k = 0; k < r.size(); ++k)
          out.push_back(as_result(r[k], res[k], a.size, "scan"));
        return out;
      },
      proto);
  std::vector<Batched> results;
  for (size_t k = 0; k < nc; ++k) results.push_back({outs[k], on[off + k] ? 0 : -1});
  for (size_t j = nc; j < outs.size(); ++j) results.push_back({outs[j], res[j] ? 1 : -1});
  return results;
}

std::vector<Batched> WhileBatching::batch(const BatchArgs& a) const {
  const ir::Program& cond = *a.regions[0];
  const ir::Program& body = *a.regions[1];
  const size_t nc = static_cast<size_t>(a.attrs.i("num_carry"));
  std::vector<bool> on = batched_of(a.operands, 0, a.operands.size());
  fix_carries(body, 0, nc, a.axis.name, on);
  const bool per_example = autodiff::batched_results(cond, on, a.axis.name)[0];
  if (per_example) {
    for (size_t k = 0; k < nc; ++k) on[k] = true;
  }
  std::vector<Array> init;
  for (size_t k = 0; k < nc; ++k) {
    init.push_back(on[k] ? at_front(a.operands[k], a.size) : a.operands[k].value);
  }
  const std::vector<Array> consts = fronted(a.operands, nc, a.operands.size() - nc, a.size);
  auto params = [&](const std::vector<Array>& carry) {
    std::vector<Array> p = carry;
    p.insert(p.end(), consts.begin(), consts.end());
    return with_bdims(p, on);
  };
  auto predicate = [&](const std::vector<Array>& carry) {
    return autodiff::batch_evaluate(cond, params(carry), a.axis)[0];
  };
  std::shared_ptr<void> proto;
  const detail::LooseCarriesScope loose;  // a loop of its own making: carries widen
  const std::vector<Array> outs = detail::while_call(
      init,
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        const Batched p = predicate(t);
        if (!per_example) return std::vector<Array>{as_result(p, false, a.size, "while_loop")};
        return std::vector<Array>{sum(astype(at_front(p, a.size), DType::I32)) > 0.0};
      },
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        const std::vector<Batched> r = autodiff::batch_evaluate(body, params(t), a.axis);
        std::vector<Array> out;
        for (size_t k = 0; k < nc; ++k) out.push_back(as_result(r[k], on[k], a.size, "while_loop"));
        if (per_example) {  // an example whose predicate fails keeps its carries
          const Array live = at_front(predicate(t), a.size);
          for (size_t k = 0; k < nc; ++k)
            out[k] = where(over_examples(live, out[k].shape()), out[k], t[k]);
        }
        return out;
      },
      proto);
  std::vector<Batched> results;
  for (size_t k = 0; k < nc; ++k) results.push_back({outs[k], on[k] ? 0 : -1});
  return results;
}

std::vector<Batched> CondBatching::batch(const BatchArgs& a) const {
  const Batched& pred = a.operands[0];
  const size_t n = a.operands.size() - 1;
  const std::vector<bool> on = batched_of(a.operands, 1, n);
  const std::vector<Array> operands = fronted(a.operands, 1, n, a.size);
  if (pred.bdim >= 0) {  // both branches, then a select per example
    const std::vector<Batched> t =
        autodiff::batch_evaluate(*a.regions[0], with_bdims(operands, on), a.axis);
    const std::vector<Batched> f =
        autodiff::batch_evaluate(*a.regions[1], with_bdims(operands, on), a.axis);
    const Array p = at_front(pred, a.size);
    std::vector<Batched> out;
    for (size_t k = 0; k < t.size(); ++k) {
      const Array tk = at_front(t[k], a.size), fk = at_front(f[k], a.size);
      out.push_back({where(over_examples(p, tk.shape()), tk, fk), 0});
    }
    return out;
  }
  std::vector<bool> res = autodiff::batched_results(*a.regions[0], on, a.axis.name);
  const std::vector<bool> res_f = autodiff::batched_results(*a.regions[1], on, a.axis.name);
  for (size_t k = 0; k < res.size(); ++k) res[k] = res[k] || res_f[k];
  auto branch = [&](const ir::Program& prog) {
    return [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
      const std::vector<Batched> r = autodiff::batch_evaluate(prog, with_bdims(t, on), a.axis);
      std::vector<Array> out;
      for (size_t k = 0; k < r.size(); ++k) out.push_back(as_result(r[k], res[k], a.size, "cond"));
      return out;
    };
  };
  std::shared_ptr<void> pt, pf;
  const detail::LooseCarriesScope loose;  // a loop of its own making: carries widen
  const std::vector<Array> outs =
      detail::cond_call(pred.value, operands, branch(*a.regions[0]), branch(*a.regions[1]), pt, pf);
  std::vector<Batched> results;
  for (size_t k = 0; k < outs.size(); ++k) results.push_back({outs[k], res[k] ? 0 : -1});
  return results;
}

namespace {

// spec with `lead` as the entry of a new leading dimension.
PartitionSpec led_by(const std::vector<std::string>& lead, const PartitionSpec& spec) {
  std::vector<PartitionSpec::Entry> e{lead};
  e.insert(e.end(), spec.entries().begin(), spec.entries().end());
  return PartitionSpec(std::move(e));
}

// The number of blocks spmd_axis_name splits the examples into on `mesh` (checked to be its
// axes, dividing the examples).
int64_t spmd_blocks(const Mesh& mesh, const detail::BatchAxis& axis) {
  int64_t k = 1;
  for (const std::string& m : axis.spmd) {
    detail::check(mesh.has_axis(m), "vmap", "spmd_axis_name '{}' is not an axis of {}", m,
                  mesh.to_string());
    k *= mesh.axis_size(m);
  }
  return k;
}

// As JAX: without spmd_axis_name, the Explicit mesh axes that a batched operand's type splits
// its batch dimension over (an even split) keep the examples split over them inside the map,
// as spmd_axis_name would. None: the examples are whole on every device.
std::vector<std::string> explicit_batch_axes(const BatchArgs& a, const Mesh& mesh) {
  for (const Batched& b : a.operands) {
    if (b.bdim < 0 || !b.value.valid() || !b.value.impl()->sharding) continue;
    const NamedSharding& s = *b.value.impl()->sharding;
    if (s.mesh().axis_names() != mesh.axis_names() || b.bdim >= s.spec().size()) continue;
    std::vector<std::string> axes;
    int64_t k = 1;
    for (const auto& ax : s.spec()[b.bdim]) {
      if (s.mesh().axis_type(ax) != AxisType::Explicit) return {};
      axes.push_back(ax);
      k *= mesh.axis_size(ax);
    }
    if (!axes.empty() && a.size % k == 0) return axes;
  }
  return {};
}

}  // namespace

std::vector<Batched> ShardMapBatching::batch(const BatchArgs& a_in) const {
  const Mesh& mesh = a_in.attrs.get<Mesh>("mesh");
  detail::BatchAxis implicit = a_in.axis;
  const std::vector<std::string> explicit_axes = explicit_batch_axes(a_in, mesh);
  if (!explicit_axes.empty() && implicit.spmd != explicit_axes) {
    detail::check(implicit.spmd.empty(), "vmap",
                  "Only one of spmd_axis_name or arrays sharded on `Explicit` mesh axis type is "
                  "allowed: the examples are split over '{}' already",
                  fmt::join(explicit_axes, "', '"));
    implicit.spmd = explicit_axes;
    // The axes the examples are split over are vmap's inside: the map may not name them.
    std::vector<std::string> left;
    for (const auto& n : mesh.axis_names()) {
      if (std::find(explicit_axes.begin(), explicit_axes.end(), n) == explicit_axes.end()) {
        left.push_back(n);
      }
    }
    for (const auto& spec : a_in.attrs.get<ir::Specs>("in_specs")) {
      for (const auto& ax : spec.axes()) {
        detail::check(
            std::find(explicit_axes.begin(), explicit_axes.end(), ax) == explicit_axes.end(),
            "vmap",
            "vmapped away explicit mesh axis '{}' (it splits the examples) cannot "
            "appear in shard_map in_specs ({}): jax.shard_map requires axis_names and "
            "specs to be a subset of the mesh axes vmap leaves, ('{}')",
            ax, spec.to_string(), fmt::join(left, "', '"));
      }
    }
  }
  const BatchArgs a{a_in.operands, a_in.attrs, a_in.regions, a_in.size, implicit};
  const int64_t k = spmd_blocks(mesh, a.axis);
  detail::check(a.size % k == 0, "vmap",
                "{} examples do not split evenly over spmd_axis_name "
                "'{}' ({} blocks) of shard_map's mesh",
                a.size, fmt::join(a.axis.spmd, "', '"), k);
  const ir::Program& body = *a.regions[0];
  if (k > 1) {
    for (const ir::Instr& in : body.instrs) {
      detail::check(!autodiff::mentions_axis(in, a.axis.name), "vmap",
                    "a collective over vmap's axis '{}' inside shard_map whose examples split "
                    "over spmd_axis_name is not supported",
                    a.axis.name);
    }
  }
  const std::vector<bool> on = batched_of(a.operands, 0, a.operands.size());
  ir::Specs in_specs = a.attrs.get<ir::Specs>("in_specs"),
            out_specs = a.attrs.get<ir::Specs>("out_specs");
  // As JAX: the axes the examples split over are vmap's; the map's specs may not name them
  // (unless jax_disable_vmap_shmap_error, vma_options.h).
  for (const ir::Specs* specs : {&in_specs, &out_specs}) {
    if (detail::vmap_shmap_error_disabled()) break;
    for (const auto& spec : *specs) {
      for (const auto& ax : spec.axes()) {
        detail::check(std::find(a.axis.spmd.begin(), a.axis.spmd.end(), ax) == a.axis.spmd.end(),
                      "vmap",
                      "vmap spmd_axis_name cannot appear in shard_map in_specs or out_specs: "
                      "'{}' is in {} (the examples are split over it)",
                      ax, spec.to_string());
      }
    }
  }
  for (size_t i = 0; i < in_specs.size(); ++i) {
    if (on[i]) in_specs[i] = led_by(a.axis.spmd, in_specs[i]);
  }
  for (auto& s : out_specs) s = led_by(a.axis.spmd, s);
  Attrs attrs = a.attrs;
  attrs.set("in_specs", in_specs);
  attrs.set("out_specs", out_specs);
  const detail::BatchAxis local{a.size / k, a.axis.name, a.axis.spmd};
  Regions regions{autodiff::batch_region(body, local, &on, &mesh)};
  std::vector<Batched> out;
  for (const Array& r :
       detail::bind(p_, fronted(a.operands, 0, a.operands.size(), a.size), attrs, regions)) {
    out.push_back({r, 0});
  }
  return out;
}

std::vector<Batched> ConstraintBatching::batch(const BatchArgs& a) const {
  // As JAX: the constraint holds for every example; the examples' dimension is split over
  // spmd_axis_name, else whole (None).
  const Batched& x = a.operands[0];
  const Mesh& mesh = a.attrs.get<Mesh>("mesh");
  spmd_blocks(mesh, a.axis);
  for (const auto& ax : a.attrs.get<PartitionSpec>("spec").axes()) {
    detail::check(std::find(a.axis.spmd.begin(), a.axis.spmd.end(), ax) == a.axis.spmd.end(),
                  "vmap",
                  "vmap spmd_axis_name '{}' cannot appear in with_sharding_constraint's spec {} "
                  "(the examples are split over it)",
                  ax, a.attrs.get<PartitionSpec>("spec").to_string());
  }
  Attrs attrs = a.attrs;
  attrs.set("spec", led_by(a.axis.spmd, a.attrs.get<PartitionSpec>("spec")));
  // The unconstrained dimensions move past the batch dimension, which is itself left to
  // propagation without spmd_axis_name (as JAX's P.UNCONSTRAINED there).
  ir::Ints free;
  if (a.axis.spmd.empty()) free.push_back(0);
  if (a.attrs.has("unconstrained")) {
    for (int64_t d : a.attrs.ints("unconstrained")) free.push_back(d + 1);
  }
  if (free.empty()) {
    attrs.erase("unconstrained");
  } else {
    attrs.set("unconstrained", free);
  }
  return {{detail::bind(p_, {at_front(x, a.size)}, attrs, a.regions)[0], 0}};
}

}  // namespace partix::prim

// vmap's engine: batch_evaluate walks a program traced on one example and gives each
// instruction with a batched operand to its primitive's batching facet; vmap_call traces the
// user's function on one example's avals and evaluates it so.
#include "autodiff/batch.h"

#include <algorithm>
#include <set>

#include "autodiff/vjp.h"
#include "core/errors.h"
#include "partix/ops.h"
#include "partix/transforms.h"
#include "trace/trace.h"

namespace partix::autodiff {

Array at_front(const Batched& b, int64_t size) {
  if (b.bdim < 0) {
    Shape s{size};
    const Shape& in = b.value.shape();
    s.insert(s.end(), in.begin(), in.end());
    std::vector<int> dims;
    for (int d = 0; d < b.value.ndim(); ++d) dims.push_back(d + 1);
    return broadcast_in_dim(b.value, s, dims);
  }
  return b.bdim == 0 ? b.value : moveaxis(b.value, b.bdim, 0);
}

bool mentions_axis(const ir::Instr& in, const std::string& axis_name) {
  if (axis_name.empty()) return false;
  if (in.attrs.has("axes")) {
    const auto* names = std::get_if<ir::Strings>(&in.attrs.items().at("axes"));
    if (names && std::find(names->begin(), names->end(), axis_name) != names->end()) return true;
  }
  for (const auto& r : in.regions) {
    for (const ir::Instr& inner : r->instrs) {
      if (mentions_axis(inner, axis_name)) return true;
    }
  }
  return false;
}

std::vector<bool> batched_values(const ir::Program& p, const std::vector<bool>& params,
                                 const std::string& axis_name) {
  std::vector<bool> on(p.values.size(), false);
  for (size_t i = 0; i < p.params.size() && i < params.size(); ++i) {
    on[static_cast<size_t>(p.params[i])] = params[i];
  }
  for (const ir::Instr& in : p.instrs) {
    bool any = mentions_axis(in, axis_name);
    for (int v : in.inputs) any = any || on[static_cast<size_t>(v)];
    for (int v : in.outputs) on[static_cast<size_t>(v)] = any;
  }
  return on;
}

std::vector<bool> batched_results(const ir::Program& p, const std::vector<bool>& params,
                                  const std::string& axis_name) {
  const std::vector<bool> on = batched_values(p, params, axis_name);
  std::vector<bool> out;
  for (int v : p.results) out.push_back(on[static_cast<size_t>(v)]);
  return out;
}

namespace {

std::vector<Batched> batch_instr(const ir::Instr& in, const std::vector<Batched>& ins,
                                 const BatchAxis& axis) {
  bool any = mentions_axis(in, axis.name);
  for (const Batched& b : ins) any = any || b.bdim >= 0;
  if (!any) {
    std::vector<Array> vals;
    for (const Batched& b : ins) vals.push_back(b.value);
    std::vector<Batched> out;
    for (const Array& r : detail::bind(*in.prim, vals, in.attrs, in.regions)) out.push_back({r, -1});
    return out;
  }
  const prim::Batching* rule = in.prim->batching();
  if (!rule) {
    detail::fail("vmap", "{} has no batching rule yet: vmap cannot batch it{}", in.prim->name(),
                 in.scope.empty() ? "" : fmt::format(" (in scope '{}')", in.scope));
  }
  std::vector<Batched> out = rule->batch({ins, in.attrs, in.regions, axis.size, axis});
  if (out.size() != in.outputs.size()) {
    detail::internal_error("vmap", fmt::format("{}'s batching rule gave {} results for {}",
                                               in.prim->name(), out.size(), in.outputs.size()));
  }
  for (const Batched& b : out) {
    if (b.bdim >= 0 && !(b.bdim < b.value.ndim() && b.value.shape()[static_cast<size_t>(b.bdim)] == axis.size)) {
      detail::internal_error("vmap", fmt::format("{}'s batching rule put the batch of {} at "
                                                 "dimension {} of {}", in.prim->name(), axis.size,
                                                 b.bdim, shape_to_string(b.value.shape())));
    }
  }
  return out;
}

}  // namespace

std::vector<Batched> batch_evaluate(const ir::Program& p, const std::vector<Batched>& args,
                                    const BatchAxis& axis) {
  if (args.size() != p.params.size()) {
    detail::internal_error("vmap", fmt::format("{} arguments for {} parameters", args.size(),
                                               p.params.size()));
  }
  std::vector<Batched> env(p.values.size());
  for (size_t i = 0; i < args.size(); ++i) env[static_cast<size_t>(p.params[i])] = args[i];
  for (const ir::Instr& in : p.instrs) {
    std::vector<Batched> ins;
    for (int v : in.inputs) ins.push_back(env[static_cast<size_t>(v)]);
    std::vector<Batched> outs = batch_instr(in, ins, axis);
    for (size_t k = 0; k < outs.size(); ++k) env[static_cast<size_t>(in.outputs[k])] = outs[k];
  }
  std::vector<Batched> results;
  for (int v : p.results) results.push_back(env[static_cast<size_t>(v)]);
  return results;
}

std::shared_ptr<const ir::Program> batch_region(const ir::Program& p, const BatchAxis& axis,
                                                const std::vector<bool>* params,
                                                const Mesh* manual) {
  std::vector<Array> none, tracers;
  auto ts = detail::nested_trace("vmap", none, tracers);
  if (manual != nullptr) {
    ts->manual_mesh = *manual;
    ts->manual_axes.clear();
    for (const auto& n : manual->axis_names()) ts->manual_axes.insert(n);
  }
  std::vector<Batched> args;
  for (size_t i = 0; i < p.params.size(); ++i) {
    const int v = p.params[i];
    const bool batched = params == nullptr || (i < params->size() && (*params)[i]);
    Shape s = p.aval(v).shape;
    if (batched) s.insert(s.begin(), axis.size);
    args.push_back({ts->add_param(ir::Aval{s, p.aval(v).dtype}, std::nullopt, p.info(v).varying),
                    batched ? 0 : -1});
  }
  {
    detail::TraceScope scope(ts);
    std::vector<Array> results;
    for (const Batched& b : batch_evaluate(p, args, axis)) results.push_back(at_front(b, axis.size));
    ts->set_results(results);
  }
  if (!ts->captures().empty()) {
    detail::internal_error("vmap", "a batched region captured values from outside it");
  }
  return std::make_shared<const ir::Program>(ts->program());
}

}  // namespace partix::autodiff

namespace partix::detail {

std::vector<Batched> vmap_call(const std::vector<Array>& leaves, const std::vector<int>& in_axes,
                               std::optional<int64_t> axis_size, const std::string& axis_name,
                               const std::vector<std::string>& spmd_axis_name,
                               const std::function<std::vector<Array>(const std::vector<Array>&,
                                                                      std::shared_ptr<void>&)>& f,
                               std::shared_ptr<void>& proto) {
  constexpr const char* kApi = "vmap";
  check(leaves.size() == in_axes.size(), kApi, "{} in_axes for {} arguments", in_axes.size(),
        leaves.size());
  std::optional<int64_t> size = axis_size;
  std::vector<Batched> args;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Array& a = leaves[i];
    int ax = in_axes[i];
    if (ax < 0) {
      args.push_back({a, -1});
      continue;
    }
    if (ax >= a.ndim()) {
      fail(kApi, "in_axes {} is out of range for argument {} of shape {}", ax, i,
           shape_to_string(a.shape()));
    }
    const int64_t n = a.shape()[static_cast<size_t>(ax)];
    if (size && *size != n) {
      fail(kApi, "inconsistent sizes for the mapped axes: argument {} has size {} along axis {}, "
                 "but the mapped size is {}", i, n, ax, *size);
    }
    size = n;
    args.push_back({a, ax});
  }
  check(size.has_value(), kApi, "no argument is mapped (all in_axes are None): give axis_size");
  std::set<std::string> seen;
  for (const std::string& m : spmd_axis_name) {
    check(!m.empty() && seen.insert(m).second, kApi,
          "spmd_axis_name names mesh axes, each once; got '{}'", fmt::join(spmd_axis_name, "', '"));
  }
  // Trace f on one example's avals, then evaluate it batched where the call is made.
  std::vector<Array> tracers;
  auto ts = std::make_shared<TraceState>(kApi);
  ts->inherit(current_trace());
  if (!axis_name.empty()) ts->vmap_axes.emplace_back(axis_name, *size);
  for (const Batched& b : args) {
    Shape s = b.value.shape();
    if (b.bdim >= 0) s.erase(s.begin() + b.bdim);
    tracers.push_back(ts->add_param(ir::Aval{s, b.value.dtype()}, std::nullopt,
                                    b.bdim >= 0 ? Vary{} : vary_of(b.value)));
  }
  {
    TraceScope scope(ts);
    ts->set_results(f(tracers, proto));
  }
  for (const Array& c : ts->captures()) args.push_back({c, -1});
  return autodiff::batch_evaluate(ts->program(), args, BatchAxis{*size, axis_name, spmd_axis_name});
}

Array place_batched(const Batched& b, int64_t size, int out_axis) {
  if (out_axis < 0) {
    check(b.bdim < 0, "vmap", "out_axes is None for an output that depends on the mapped axis "
                              "(shape {})", shape_to_string(b.value.shape()));
    return b.value;
  }
  Array front = autodiff::at_front(b, size);
  check(out_axis < front.ndim(), "vmap", "out_axes {} is out of range for an output of rank {}",
        out_axis, front.ndim() - 1);
  return out_axis == 0 ? front : moveaxis(front, 0, out_axis);
}

}  // namespace partix::detail

namespace partix {

ArraysFn vmap(ArraysFn f, std::vector<int> in_axes, std::vector<int> out_axes,
              std::optional<int64_t> axis_size, std::string axis_name,
              std::vector<std::string> spmd_axis_name) {
  return [f, in_axes, out_axes, axis_size, axis_name, spmd_axis_name](const std::vector<Array>& args) {
    std::vector<int> axes = in_axes.size() == 1 ? std::vector<int>(args.size(), in_axes[0]) : in_axes;
    std::shared_ptr<void> proto;
    std::vector<detail::Batched> outs = detail::vmap_call(
        args, axes, axis_size, axis_name, spmd_axis_name, [&](const std::vector<Array>& t, std::shared_ptr<void>&) { return f(t); },
        proto);
    int64_t size = axis_size.value_or(0);
    for (size_t i = 0; i < args.size() && size == 0; ++i) {
      if (axes[i] >= 0) size = args[i].shape()[static_cast<size_t>(axes[i])];
    }
    detail::check(out_axes.size() == 1 || out_axes.size() == outs.size(), "vmap",
                  "{} out_axes for {} results", out_axes.size(), outs.size());
    std::vector<Array> res;
    for (size_t k = 0; k < outs.size(); ++k) {
      res.push_back(detail::place_batched(outs[k], size, out_axes.size() == 1 ? out_axes[0] : out_axes[k]));
    }
    return res;
  };
}

ArraysFn vmap(ArraysFn f, VmapOptions o) {
  return vmap(std::move(f), std::move(o.in_axes), std::move(o.out_axes), o.axis_size,
              std::move(o.axis_name), std::move(o.spmd_axis_name));
}

}  // namespace partix

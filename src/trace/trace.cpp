#include "trace/trace.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <tuple>

#include "core/errors.h"
#include "core/scalar.h"
#include "trace/loop_carries.h"
#include "trace/vma_options.h"

namespace partix::detail {

namespace {
thread_local std::vector<std::shared_ptr<TraceState>> g_stack;
thread_local std::vector<std::string> g_scopes;

bool on_stack(const TraceState* t) {
  for (const auto& s : g_stack) {
    if (s.get() == t) return true;
  }
  return false;
}
}  // namespace

TraceState::TraceState(std::string name) { program_.name = std::move(name); }

namespace {
std::atomic<bool> g_drop_one_device_axes{false};
}

bool drop_one_device_axes() { return g_drop_one_device_axes.load(); }
bool set_drop_one_device_axes(bool on) { return g_drop_one_device_axes.exchange(on); }

namespace {
std::atomic<bool> g_auto_pcast{true};
}

bool auto_pcast() { return g_auto_pcast.load(); }
bool set_auto_pcast(bool on) { return g_auto_pcast.exchange(on); }

namespace {
std::atomic<bool> g_vmap_shmap_error_disabled{false};
}

bool vmap_shmap_error_disabled() { return g_vmap_shmap_error_disabled.load(); }
bool set_vmap_shmap_error_disabled(bool on) { return g_vmap_shmap_error_disabled.exchange(on); }

static bool one_device(const TraceState& t, const std::string& axis) {
  return t.manual_mesh && t.manual_mesh->has_axis(axis) && t.manual_mesh->axis_size(axis) == 1;
}

void TraceState::inherit(const TraceState* outer) {
  if (outer == nullptr) return;
  manual_mesh = outer->manual_mesh;
  manual_axes = outer->manual_axes;
  vmap_axes = outer->vmap_axes;
}

Array TraceState::add_param(const ir::Aval& aval, std::optional<NamedSharding> sharding,
                            std::set<std::string> varying) {
  if (!captures_.empty()) internal_error("TraceState", "parameter added after a capture");
  int v = program_.add_value(aval);
  program_.info(v).sharding = std::move(sharding);
  program_.info(v).varying = std::move(varying);
  program_.params.push_back(v);
  num_user_params_++;
  return tracer(v);
}

Array TraceState::tracer(int value) {
  auto impl = std::make_shared<ArrayImpl>();
  const ir::ValueInfo& info = program_.info(value);
  impl->shape = info.aval.shape;
  impl->dtype = info.aval.dtype;
  impl->sharding = info.sharding;
  impl->tracer = std::make_shared<TracerRef>(TracerRef{weak_from_this(), value});
  return Array(std::move(impl));
}

int TraceState::value_of(const Array& a) {
  const auto& impl = a.impl();
  if (impl->tracer) {
    TraceState* owner = trace_of(a, "trace");
    if (owner == this) return impl->tracer->value;
  }
  auto it = capture_ids_.find(impl.get());
  if (it != capture_ids_.end()) return it->second;
  // A concrete array, or a tracer of an outer trace: an extra parameter. Inside a
  // shard_map body a captured value is the whole (invariant) value on every device.
  int v = program_.add_value(ir::Aval{impl->shape, impl->dtype});
  if (impl->sharding && !manual_mesh) program_.info(v).sharding = impl->sharding;
  // A region nested in a shard_map body (a loop, a branch) sees an outer value with the axes
  // it varies over.
  if (manual_mesh && impl->tracer) {
    TraceState* owner = trace_of(a, "trace");
    if (owner->manual_mesh)
      program_.info(v).varying = owner->program().info(owner->value_of(a)).varying;
  }
  if (manual_mesh) {
    program_.info(v).varying.insert(capture_vary_floor.begin(), capture_vary_floor.end());
  }
  program_.params.push_back(v);
  captures_.push_back(a);
  capture_ids_[impl.get()] = v;
  return v;
}

void TraceState::set_results(const std::vector<Array>& results) {
  program_.results.clear();
  for (const Array& r : results) program_.results.push_back(value_of(r));
}

TraceScope::TraceScope(std::shared_ptr<TraceState> trace) : trace_(std::move(trace)) {
  g_stack.push_back(trace_);
}

TraceScope::~TraceScope() {
  if (!g_stack.empty() && g_stack.back() == trace_) g_stack.pop_back();
}

TraceState* current_trace() { return g_stack.empty() ? nullptr : g_stack.back().get(); }
bool is_tracing() { return !g_stack.empty(); }

TraceState* trace_of(const Array& a, const char* api) {
  std::shared_ptr<TraceState> t = a.impl()->tracer->trace.lock();
  if (!t || !on_stack(t.get())) {
    fail(api,
         "a traced value ({}{}) escaped the function that traced it; return it from the "
         "function instead of storing it",
         dtype_name(a.dtype()), shape_to_string(a.shape()));
  }
  return t.get();
}

namespace {
// Quantized arrays are storage for weights: the primitive says whether it takes
// them (Primitive::accepts_quantized).
void check_quantized_operands(const prim::Primitive& p, const std::vector<Array>& inputs) {
  if (p.typing().accepts_quantized()) return;
  for (const Array& a : inputs) {
    if (a.valid() && is_quantized(a.dtype())) {
      fail(p.name(),
           "got a quantized array ({}{}); quantized dtypes are weight storage for matmul: "
           "astype it to a float dtype first",
           dtype_name(a.dtype()), shape_to_string(a.shape()));
    }
  }
}
}  // namespace

namespace {
// Explicit sharding: the operands' types, or empty when none has one (the common, Auto case
// costs one look at each operand's mesh).
std::vector<std::optional<NamedSharding>> operand_types(const std::vector<Array>& inputs) {
  std::vector<std::optional<NamedSharding>> types;
  bool any = false;
  for (const Array& a : inputs) {
    types.push_back(a.valid() ? explicit_type(a.impl()->sharding) : std::nullopt);
    any = any || types.back();
  }
  if (!any) types.clear();
  return types;
}

// Inside a shard_map body, the partial-sum (unreduced) and reduced types of an op's results, by
// JAX's rules: a linear op keeps the partial sums all its operands share, a multilinear one (mul,
// dot) those of its one unreduced operand, a collective ends them over the axes it sums;
// anything else is refused. A reduced type stays over the axes no result varies over.
using AxisSets = std::vector<std::set<std::string>>;
std::pair<AxisSets, AxisSets> sum_types(const prim::Primitive& p, const ir::Attrs& attrs,
                                        const ir::Program& prog, const std::vector<int>& inputs,
                                        const AxisSets& out_vary) {
  AxisSets unreduced(out_vary.size()), reduced(out_vary.size());
  std::set<std::string> red;
  std::vector<size_t> with;  // the operands holding partial sums
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::ValueInfo& info = prog.info(inputs[i]);
    red.insert(info.reduced.begin(), info.reduced.end());
    if (!info.unreduced.empty()) with.push_back(i);
  }
  for (size_t k = 0; k < out_vary.size(); ++k) {
    for (const auto& a : red) {
      if (!out_vary[k].count(a)) reduced[k].insert(a);
    }
  }
  if (with.empty()) return {unreduced, reduced};
  const std::set<std::string>& u = prog.info(inputs[with[0]]).unreduced;
  std::set<std::string> keep = u;
  bool ok = with.size() == 1;
  if (p.is_collective()) {
    if (attrs.has("axes")) {
      for (const auto& a : attrs.get<ir::Strings>("axes")) keep.erase(a);
    }
  } else if (p.partitioning().linearity(attrs) == prim::Linearity::kLinear) {
    ok = std::all_of(inputs.begin(), inputs.end(),
                     [&](int v) { return prog.info(v).unreduced == u; });
  } else if (p.partitioning().linearity(attrs) != prim::Linearity::kMultilinear) {
    ok = false;
  }
  if (!ok) {
    std::vector<std::string> q;
    for (const auto& a : u) q.push_back("'" + a + "'");
    fail(p.name(),
         "unreduced rule for {} is not implemented: operand {} holds partial sums over {{{}}} "
         "(unreduced), which this op cannot take as they are; psum them first",
         p.name(), with[0], fmt::join(q, ", "));
  }
  for (size_t k = 0; k < out_vary.size(); ++k) {
    for (const auto& a : keep) {
      if (out_vary[k].count(a)) unreduced[k].insert(a);
    }
  }
  return {unreduced, reduced};
}
}  // namespace

std::vector<Array> bind(const prim::Primitive& p, const std::vector<Array>& inputs, ir::Attrs attrs,
                        prim::Regions regions) {
  check_quantized_operands(p, inputs);
  TraceState* t = current_trace();
  // Inside shard_map bodies values are per-device blocks: typed only along the Explicit axes
  // the map leaves automatic (axis_names=).
  const std::vector<std::optional<NamedSharding>> in_types =
      t && t->manual_mesh && !has_free_explicit_axes(*t)
          ? std::vector<std::optional<NamedSharding>>{}
          : operand_types(inputs);
  if (t == nullptr) {
    for (const Array& a : inputs) {
      if (a.is_tracer()) trace_of(a, std::string(p.name()).c_str());
    }
    std::vector<std::optional<NamedSharding>> out_types;
    if (!in_types.empty()) {
      std::vector<ir::Aval> in_avals;
      for (const Array& a : inputs) in_avals.push_back(ir::Aval{a.shape(), a.dtype()});
      out_types = explicit_result_types(p, in_types, in_avals,
                                        p.typing().infer(in_avals, attrs, regions), attrs, regions);
    }
    return execute_eager(p, inputs, attrs, regions, out_types);
  }
  ir::Program& prog = t->program();
  ir::Instr instr;
  instr.prim = &p;
  std::vector<ir::Aval> in_avals;
  for (const Array& a : inputs) {
    int v = t->value_of(a);
    instr.inputs.push_back(v);
    in_avals.push_back(prog.aval(v));
  }
  std::vector<ir::Aval> out_avals = p.typing().infer(in_avals, attrs, regions);
  for (const ir::Aval& av : out_avals) checked_size(p.name(), av.shape, av.dtype);
  instr.scope = current_scope();
  // Inside shard_map: operands that vary over fewer axes than the others are marked varying
  // with an explicit pvary where the primitive joins its operands' varying axes,
  // and results get their sets.
  std::vector<std::set<std::string>> out_vary, out_unreduced, out_reduced;
  if (t->manual_mesh) {
    std::vector<std::set<std::string>> in_vary;
    for (int v : instr.inputs) in_vary.push_back(prog.info(v).varying);
    if (p.typing().joins_operand_varying() && instr.inputs.size() > 1) {
      std::set<std::string> all;
      for (const auto& s : in_vary) all.insert(s.begin(), s.end());
      if (!auto_pcast() && !loose_carries() &&
          std::any_of(in_vary.begin(), in_vary.end(), [&](const auto& v) { return v != all; })) {
        std::vector<std::string> sets;
        for (const auto& v : in_vary)
          sets.push_back("{" + fmt::format("{}", fmt::join(v, ", ")) + "}");
        fail(p.name(),
             "Primitive {} requires varying manual axes to match, but got [{}] (jax_auto_pcast "
             "is off: make them match with lax.pcast(..., to='varying'), or pass check_vma=False "
             "to shard_map)",
             p.name(), fmt::join(sets, ", "));
      }
      for (size_t k = 0; k < instr.inputs.size(); ++k) {
        if (in_vary[k] == all) continue;
        ir::Strings missing;
        for (const auto& a : all) {
          if (!in_vary[k].count(a)) missing.push_back(a);
        }
        ir::Instr pv;
        pv.prim = &prim::get_primitive("pvary");
        pv.inputs = {instr.inputs[k]};
        pv.attrs.set("axes", missing);
        pv.scope = instr.scope;
        int nv = prog.add_value(prog.aval(instr.inputs[k]));
        prog.info(nv).varying = all;
        prog.info(nv).unreduced = prog.info(instr.inputs[k]).unreduced;  // still partial sums
        pv.outputs = {nv};
        prog.instrs.push_back(std::move(pv));
        instr.inputs[k] = nv;
        in_vary[k] = all;
      }
    }
    out_vary = p.typing().varying(in_vary, attrs, regions, out_avals.size());
    // vmap's axes are no mesh axes: nothing varies over them (a collective over one is batched
    // away by vmap; autodiff/batch.cpp).
    for (const auto& [axis, size] : t->vmap_axes) {
      for (auto& s : out_vary) s.erase(axis);
    }
    // An axis of one device: nothing differs over it; with the option on, nothing varies over
    // it either (vma_options.h).
    if (drop_one_device_axes()) {
      for (auto& s : out_vary) std::erase_if(s, [&](const auto& a) { return one_device(*t, a); });
    }
    std::tie(out_unreduced, out_reduced) = sum_types(p, attrs, prog, instr.inputs, out_vary);
  }
  std::vector<std::optional<NamedSharding>> out_types;
  if (!in_types.empty()) {
    out_types = explicit_result_types(p, in_types, in_avals, out_avals, attrs, regions);
  }
  instr.attrs = std::move(attrs);
  instr.regions = std::move(regions);
  std::vector<Array> outs;
  for (size_t k = 0; k < out_avals.size(); ++k) {
    int v = prog.add_value(std::move(out_avals[k]));
    if (!out_vary.empty()) {
      prog.info(v).varying = out_vary[k];
      prog.info(v).unreduced = out_unreduced[k];
      prog.info(v).reduced = out_reduced[k];
    }
    if (k < out_types.size() && out_types[k]) {
      prog.info(v).sharding = out_types[k];
      prog.info(v).typed = true;
    }
    instr.outputs.push_back(v);
  }
  prog.instrs.push_back(std::move(instr));
  for (int v : prog.instrs.back().outputs) outs.push_back(t->tracer(v));
  return outs;
}

Array bind1(const prim::Primitive& p, const std::vector<Array>& inputs, ir::Attrs attrs,
            prim::Regions regions) {
  std::vector<Array> outs = bind(p, inputs, std::move(attrs), std::move(regions));
  if (outs.size() != 1) internal_error("bind1", std::string(p.name()) + " has several results");
  return outs[0];
}

Array bind1(std::string_view prim, const std::vector<Array>& inputs, ir::Attrs attrs) {
  return bind1(prim::get_primitive(prim), inputs, std::move(attrs));
}

Array literal(const ir::Literal& lit) {
  if (is_tracing()) {
    ir::Attrs attrs;
    attrs.set("value", std::make_shared<const ir::Literal>(lit));
    return bind1(prim::get_primitive("constant"), {}, std::move(attrs));
  }
  return scatter_from_host(lit.bytes.data(), lit.shape, lit.dtype,
                           single_device_sharding(partix::default_device()));
}

Array literal(double value, DType dtype) {
  ir::Literal lit{{}, dtype, std::vector<char>(static_cast<size_t>(dtype_size(dtype)))};
  store_scalar(lit.bytes.data(), dtype, value);
  return literal(lit);
}

std::string current_scope() {
  std::string s;
  for (const std::string& n : g_scopes) s += (s.empty() ? "" : "/") + n;
  return s;
}
void push_scope(std::string name) { g_scopes.push_back(std::move(name)); }
void pop_scope() {
  if (!g_scopes.empty()) g_scopes.pop_back();
}

}  // namespace partix::detail

// Eager ops: an op on concrete arrays is a one-op program, compiled through the same pipeline
// as jit and cached (in the shared compile cache) by (primitive, attributes, avals, shardings).
#include "core/errors.h"
#include "dispatch/compile_cache.h"
#include "dispatch/hooks.h"
#include "partix/transforms.h"
#include "spmd/compile.h"
#include "trace/trace.h"

namespace partix::detail {

std::vector<Array> dispatch_execute_eager(
    const prim::Primitive& p, const std::vector<Array>& inputs, const ir::Attrs& attrs,
    const prim::Regions& regions, const std::vector<std::optional<NamedSharding>>& out_types) {
  const std::string op(p.name());
  // Placement: committed inputs fix the mesh; uncommitted ones follow them.
  std::optional<NamedSharding> anchor;
  bool committed = false;
  for (const Array& a : inputs) {
    const auto& impl = a.impl();
    if (!impl->committed) continue;
    if (!committed) {
      anchor = *impl->sharding;
      committed = true;
    } else if (impl->sharding->mesh() != anchor->mesh()) {
      fail(op, "operands are committed to different meshes: {} and {}; device_put them onto one",
           anchor->mesh().to_string(), impl->sharding->mesh().to_string());
    }
  }
  // An op that names a mesh (shard_map, sharding_constraint) runs there unless committed
  // operands say otherwise.
  std::optional<Mesh> named;
  if (attrs.has("mesh")) named = attrs.get<Mesh>("mesh");
  for (size_t k = 0; k < regions.size() && !named; ++k) named = ir::named_mesh(*regions[k]);
  if (!anchor && named) anchor = NamedSharding(*named, P());
  if (!anchor && !inputs.empty()) anchor = *inputs[0].impl()->sharding;
  Mesh mesh = anchor ? anchor->mesh() : single_device_sharding(partix::default_device()).mesh();
  std::vector<Array> args;
  for (const Array& a : inputs) {
    const auto& impl = a.impl();
    check_alive(a, op);
    if (impl->sharding->mesh() == mesh) {
      args.push_back(a);
    } else {
      Array moved = device_put(a, NamedSharding(mesh, P()));
      moved.impl()->committed = false;
      args.push_back(moved);
    }
  }
  std::string key = "eager|" + op + attrs.key();
  for (const Array& a : args) {
    key += "|" + std::string(dtype_name(a.dtype())) + shape_to_string(a.shape()) +
           a.impl()->sharding->to_string();
  }
  if (inputs.empty()) key += "|" + mesh.to_string();
  auto compile = [&] {
    ir::Program prog;
    prog.name = op;
    ir::Instr instr;
    instr.prim = &p;
    std::vector<ir::Aval> avals;
    spmd::CompileOptions options;
    options.name = op;
    for (const Array& a : args) {
      int v = prog.add_value(ir::Aval{a.shape(), a.dtype()});
      prog.params.push_back(v);
      instr.inputs.push_back(v);
      avals.push_back(prog.aval(v));
      options.in_shardings.push_back(*a.impl()->sharding);
    }
    for (ir::Aval& av : p.typing().infer(avals, attrs, regions)) {
      checked_size(p.name(), av.shape, av.dtype);
      int v = prog.add_value(std::move(av));
      instr.outputs.push_back(v);
      prog.results.push_back(v);
    }
    instr.attrs = attrs;
    instr.regions = regions;
    prog.instrs.push_back(std::move(instr));
    // Explicit sharding: typed results are placed as their types say (the operands' shardings,
    // which the key holds, determine them).
    bool typed = false;
    for (const auto& t : out_types) typed = typed || t;
    if (typed) {
      options.out_shardings = out_types;
      options.out_shardings.resize(prog.results.size());
      for (auto& o : options.out_shardings) {
        if (o && !(o->mesh() == mesh)) o = NamedSharding(mesh, o->spec(), o->unreduced());
      }
    }
    if (inputs.empty()) {
      // No operand says where to run: the default device.
      prog.mesh = mesh;
    }
    return spmd::compile(prog, options);
  };
  // Regions are not in the key (their programs are not part of attrs): compiled each time.
  std::shared_ptr<spmd::Compiled> compiled =
      regions.empty() ? compile_cache().get_or_compile(key, compile) : compile();
  std::vector<Array> outs = compiled->executable->run(args);
  for (Array& o : outs) o.impl()->committed = committed;
  return outs;
}

Array dispatch_execute_created(const char* api, const NamedSharding& sharding,
                               const std::function<Array()>& make) {
  if (!(sharding.unreduced().empty())) {
    fail(api, "an Array cannot be unreduced; got {}", sharding.to_string());
  }
  // Under a trace: a constraint; on a mesh with Explicit axes also the result's type.
  if (is_tracing()) return reshard(make(), sharding);
  auto trace = std::make_shared<TraceState>(api);
  {
    TraceScope scope(trace);
    Array r = make();
    sharding.check_shape(r.shape());
    trace->set_results({r});
  }
  ir::Program prog = trace->program();
  prog.mesh = sharding.mesh();
  // Values the creation reads (a random key) enter replicated: they are small.
  const NamedSharding replicated(sharding.mesh(), P());
  std::vector<Array> args;
  std::string key =
      std::string("created|") + ir::to_text(prog, ir::PrintOptions{}) + "|" + sharding.to_string();
  for (const Array& c : trace->captures()) {
    args.push_back(*c.impl()->sharding == replicated ? c : device_put(c, replicated));
  }
  std::shared_ptr<spmd::Compiled> compiled = compile_cache().get_or_compile(key, [&] {
    spmd::CompileOptions options;
    options.name = api;
    options.in_shardings.assign(args.size(), replicated);
    options.out_shardings = {sharding};
    return spmd::compile(prog, options);
  });
  Array out = compiled->executable->run(args)[0];
  out.impl()->committed = true;
  return out;
}

}  // namespace partix::detail

#include "spmd/compile.h"

#include "core/errors.h"

namespace partix::spmd {

std::shared_ptr<Compiled> compile(const ir::Program& program, const CompileOptions& options) {
  if (options.in_shardings.size() != program.params.size()) {
    detail::internal_error("compile", "one input sharding per parameter is required");
  }
  std::optional<Mesh> mesh;
  for (const auto& s : options.in_shardings) {
    if (!s) detail::internal_error("compile", "missing input sharding");
    if (!mesh) mesh = s->mesh();
    if (!(s->mesh() == *mesh)) {
      detail::fail(options.name, "arguments live on different meshes: {} and {}",
                   mesh->to_string(), s->mesh().to_string());
    }
  }
  if (!mesh) mesh = single_device_sharding(partix::devices()[0]).mesh();
  for (size_t i = 0; i < options.in_shardings.size(); ++i) {
    if (!options.in_shardings[i]->is_fully_replicated()) {
      detail::fail(options.name,
                   "argument {} is sharded ({}); sharded execution needs the SPMD partitioner",
                   i, options.in_shardings[i]->to_string());
    }
  }
  auto out = std::make_shared<Compiled>();
  out->global = program;
  out->global.mesh = mesh;
  NamedSharding replicated(*mesh, P());
  for (auto& v : out->global.values) v.sharding = replicated;
  ir::Program local = out->global;
  std::vector<NamedSharding> in(program.params.size(), replicated);
  std::vector<NamedSharding> outs(program.results.size(), replicated);
  std::vector<ir::Aval> avals;
  for (int v : program.results) avals.push_back(program.aval(v));
  out->executable = std::make_shared<runtime::Executable>(std::move(local), *mesh, in, outs, avals);
  return out;
}

}  // namespace partix::spmd

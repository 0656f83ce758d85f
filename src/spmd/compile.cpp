#include "spmd/compile.h"

#include "core/errors.h"
#include "spmd/partition.h"
#include "spmd/propagate.h"

namespace partix::spmd {

std::shared_ptr<Compiled> compile(const ir::Program& program, const CompileOptions& options) {
  if (options.in_shardings.size() != program.params.size()) {
    detail::internal_error("compile", "one input sharding per parameter is required");
  }
  std::optional<Mesh> mesh = program.mesh;
  for (const auto& s : options.in_shardings) {
    if (!s) detail::internal_error("compile", "missing input sharding");
    if (!mesh) mesh = s->mesh();
    if (!(s->mesh() == *mesh)) {
      detail::fail(options.name, "arguments live on different meshes: {} and {}",
                   mesh->to_string(), s->mesh().to_string());
    }
  }
  for (const auto& s : options.out_shardings) {
    if (s && !mesh) mesh = s->mesh();
    if (s && !(s->mesh() == *mesh)) {
      detail::fail(options.name, "out_shardings mesh {} differs from the arguments' {}",
                   s->mesh().to_string(), mesh->to_string());
    }
  }
  if (!mesh) mesh = single_device_sharding(partix::devices()[0]).mesh();
  auto out = std::make_shared<Compiled>();
  out->global = program;
  out->global.mesh = mesh;
  std::vector<NamedSharding> in;
  for (const auto& s : options.in_shardings) in.push_back(*s);
  propagate(out->global, *mesh, in, options.out_shardings);
  Partitioned part = partition(out->global, *mesh, options.out_shardings);
  out->warnings = std::move(part.warnings);
  std::vector<ir::Aval> avals;
  for (int v : program.results) avals.push_back(program.aval(v));
  ir::verify(part.local);
  out->executable = std::make_shared<runtime::Executable>(std::move(part.local), *mesh, in,
                                                          part.out_shardings, avals);
  return out;
}

}  // namespace partix::spmd

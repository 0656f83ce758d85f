#include "spmd/compile.h"

#include <algorithm>
#include <set>

#include "comm/mpi/mpi_runtime.h"
#include "core/errors.h"
#include "ir/primitive.h"
#include "sharding/axes.h"
#include "spmd/partition.h"
#include "spmd/propagate.h"
#include "spmd/simplify.h"

namespace partix::spmd {

namespace {

// The seed's pitfall: a large op whose operands are replicated over some mesh axes is computed
// identically on every device of those axes (e.g. the batch split on the axis the weights use).
void lint_redundant_compute(const ir::Program& local, const Mesh& mesh,
                            std::vector<std::string>& warnings) {
  if (mesh.size() == 1) return;
  double total = 0;
  std::vector<double> flops(local.instrs.size());
  for (size_t i = 0; i < local.instrs.size(); ++i) {
    const ir::Instr& in = local.instrs[i];
    std::vector<ir::Aval> ia, oa;
    for (int v : in.inputs) ia.push_back(local.aval(v));
    for (int v : in.outputs) oa.push_back(local.aval(v));
    flops[i] = in.prim->cost().flops(ia, oa, in.attrs);
    total += flops[i];
  }
  for (size_t i = 0; i < local.instrs.size(); ++i) {
    const ir::Instr& in = local.instrs[i];
    if (in.outputs.empty() || flops[i] < 1e6 || flops[i] < 0.1 * total) continue;
    const auto& s = local.info(in.outputs[0]).sharding;
    if (!s || s->num_replicas() <= 1) continue;
    std::vector<std::string> idle;
    auto used = s->spec().axes();
    used.insert(used.end(), s->unreduced().begin(), s->unreduced().end());
    for (const auto& a : mesh.axis_names()) {
      if (!detail::overlaps_any(mesh, a, used) && mesh.axis_size(a) > 1) {
        idle.push_back("'" + a + "'");
      }
    }
    warnings.push_back(fmt::format(
        "{} %{}{} ({:.3g} flops per device) is computed identically on {} devices: nothing splits "
        "it over mesh axis {}; shard an operand over {} (e.g. the batch over an axis the weights "
        "do not use)",
        in.prim->name(), in.outputs[0], in.scope.empty() ? "" : " in " + in.scope, flops[i],
        s->num_replicas(), fmt::join(idle, ", "), idle.size() == 1 ? "it" : "them"));
  }
}

// Every process of a mesh that spans several must run the same per-device program: a process
// whose program differs (another function traced, or the same in another order) would send
// its collectives' bytes where no one expects them. Compares a fingerprint of the program.
void check_same_program_everywhere(const std::string& name, const ir::Program& local,
                                   const Mesh& mesh) {
  if (process_count() == 1) return;
  std::set<int> procs;
  for (const Device& d : mesh.devices()) procs.insert(d.process_index);
  if (procs.size() == 1) return;
  uint64_t h = 1469598103934665603ull;  // FNV-1a of the program text
  for (unsigned char c : ir::to_text(local)) {
    h ^= c;
    h *= 1099511628211ull;
  }
  const std::vector<int> ps(procs.begin(), procs.end());
  const std::string mine = fmt::format("{:016x} {}", h, name);
  const std::vector<std::string> all = comm::mpi::exchange_control(ps, mine, name.c_str());
  for (size_t i = 0; i < ps.size(); ++i) {
    if (all[i] != mine) {
      detail::fail(name,
                   "process {} and process {} compiled different programs ({} against {}): "
                   "every process must trace the same functions with the same shapes, in the "
                   "same order",
                   process_index(), ps[i], mine, all[i]);
    }
  }
}

// Replaces every instruction inlined when compiled (remat) by its region's instructions (values
// renumbered). The recomputation a remat's VJP emitted is already ordinary instructions.
ir::Program inline_regions(const ir::Program& p, int* blocks) {
  bool any = false;
  for (const ir::Instr& in : p.instrs) {
    any = any || in.prim->partitioning().inlined_when_compiled() || !in.regions.empty();
  }
  if (!any) return p;
  ir::Program out = p;
  out.instrs.clear();
  for (const ir::Instr& in : p.instrs) {
    if (!in.prim->partitioning().inlined_when_compiled() && !in.regions.empty()) {
      // Loop and branch bodies are partitioned on their own, and a shard_map's body is copied
      // per device: their remat blocks inline there.
      ir::Instr c = in;
      for (auto& r : c.regions) r = std::make_shared<const ir::Program>(inline_regions(*r, blocks));
      out.instrs.push_back(std::move(c));
      continue;
    }
    if (!in.prim->partitioning().inlined_when_compiled()) {
      out.instrs.push_back(in);
      continue;
    }
    ir::Program body = inline_regions(*in.regions[0], blocks);
    const int block = ++*blocks;
    std::vector<int> map(body.values.size(), -1);
    for (size_t i = 0; i < body.params.size(); ++i)
      map[static_cast<size_t>(body.params[i])] = in.inputs[i];
    for (const ir::Instr& bi : body.instrs) {
      ir::Instr c = bi;
      c.remat_block = block;
      for (int& v : c.inputs) v = map[static_cast<size_t>(v)];
      for (int& v : c.outputs) {
        int nv = out.add_value(body.aval(v));
        map[static_cast<size_t>(v)] = nv;
        v = nv;
      }
      out.instrs.push_back(std::move(c));
    }
    // The remat's results alias the region's results.
    for (size_t k = 0; k < in.outputs.size(); ++k) {
      int src = map[static_cast<size_t>(body.results[k])];
      ir::Instr copy;
      copy.prim = &prim::get_primitive("copy");
      copy.inputs = {src};
      copy.outputs = {in.outputs[k]};
      out.instrs.push_back(std::move(copy));
    }
  }
  return out;
}

}  // namespace

std::shared_ptr<Compiled> compile(const ir::Program& program, const CompileOptions& options) {
  if (options.in_shardings.size() != program.params.size()) {
    detail::internal_error("compile", "one input sharding per parameter is required");
  }
  std::optional<Mesh> mesh = program.mesh;
  for (const auto& s : options.in_shardings) {
    if (!s) detail::internal_error("compile", "missing input sharding");
    if (!mesh) mesh = s->mesh();
    if (!(s->mesh() == *mesh)) {
      detail::fail(options.name, "arguments live on different meshes: {} and {}", mesh->to_string(),
                   s->mesh().to_string());
    }
  }
  for (const auto& s : options.out_shardings) {
    if (s && !mesh) mesh = s->mesh();
    if (s && !(s->mesh() == *mesh)) {
      detail::fail(options.name, "out_shardings mesh {} differs from the arguments' {}",
                   s->mesh().to_string(), mesh->to_string());
    }
  }
  if (!mesh) mesh = single_device_sharding(partix::default_device()).mesh();
  auto out = std::make_shared<Compiled>();
  int remat_blocks = 0;
  out->global = inline_regions(program, &remat_blocks);
  out->global.mesh = mesh;
  std::vector<NamedSharding> in;
  for (const auto& s : options.in_shardings) in.push_back(*s);
  propagate(out->global, *mesh, in, options.out_shardings);
  Partitioned part = partition(out->global, *mesh, options.out_shardings);
  drop_trivial_collectives(part.local);
  out->warnings = std::move(part.warnings);
  lint_redundant_compute(part.local, *mesh, out->warnings);
  std::vector<ir::Aval> avals;
  for (int v : program.results) avals.push_back(program.aval(v));
  ir::verify(part.local);
  check_same_program_everywhere(options.name, part.local, *mesh);
  out->executable = std::make_shared<runtime::Executable>(std::move(part.local), *mesh, in,
                                                          part.out_shardings, avals);
  return out;
}

}  // namespace partix::spmd

#include "spmd/analysis.h"

#include <set>

#include "core/errors.h"
#include "spmd/cost.h"

namespace partix {

namespace spmd {

CostAnalysis cost_analysis(const Compiled& c) {
  CostAnalysis out;
  const ir::Program& p = c.executable->program();
  for (const char* k : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"}) {
    out.bytes_per_device[k] = 0;
  }
  double duplicated = 0;
  for (const ir::Instr& in : p.instrs) {
    std::vector<ir::Aval> ia, oa;
    for (int v : in.inputs) ia.push_back(p.aval(v));
    for (int v : in.outputs) oa.push_back(p.aval(v));
    double f = in.prim->flops(ia, oa, in.attrs);
    out.flops += f;
    auto [kind, bytes] = collective_bytes(p, in);
    if (!kind.empty()) out.bytes_per_device[kind] += bytes;
    // A result replicated over mesh axes was computed identically on each of those devices.
    if (!in.outputs.empty()) {
      const auto& s = p.info(in.outputs[0]).sharding;
      if (s) {
        double reps = static_cast<double>(s->num_replicas());
        if (reps > 1) duplicated += f * (reps - 1) / reps;
      }
    }
  }
  out.duplicated_flops_fraction = out.flops > 0 ? duplicated / out.flops : 0;
  return out;
}

MemoryAnalysis memory_analysis(const Compiled& c) {
  const runtime::Executable& exe = *c.executable;
  const ir::Program& p = exe.program();
  int64_t args = 0, outs = 0;
  for (int v : p.params) args += p.aval(v).nbytes();
  std::set<int> param_set(p.params.begin(), p.params.end());
  for (int v : p.results) outs += p.aval(v).nbytes();
  // Replay the interpreter's allocation order: results allocate, values die after last use.
  runtime::Plan plan = runtime::make_plan(p);
  int64_t live = 0, peak = 0;
  std::vector<bool> alive(p.values.size(), false);
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const ir::Instr& in = p.instrs[i];
    int reuse = plan.reuse_input[i];
    for (size_t k = 0; k < in.outputs.size(); ++k) {
      int v = in.outputs[k];
      bool in_place = k == 0 && reuse >= 0 && !param_set.count(in.inputs[static_cast<size_t>(reuse)]);
      if (!in_place) live += p.aval(v).nbytes();
      alive[static_cast<size_t>(v)] = true;
    }
    peak = std::max(peak, live);
    for (int v : plan.release_after[i]) {
      if (param_set.count(v) || !alive[static_cast<size_t>(v)]) continue;
      bool handed_over = reuse >= 0 && in.inputs[static_cast<size_t>(reuse)] == v;
      if (!handed_over) live -= p.aval(v).nbytes();
      alive[static_cast<size_t>(v)] = false;
    }
  }
  // Temporaries: the peak of live intermediate buffers beyond the outputs.
  int64_t temp = std::max<int64_t>(0, peak - outs);
  size_t n = static_cast<size_t>(exe.mesh().size());
  MemoryAnalysis m;
  m.argument_bytes.assign(n, args);
  m.output_bytes.assign(n, outs);
  m.peak_temp_bytes.assign(n, temp);
  return m;
}

}  // namespace spmd

std::string Lowered::as_text() const {
  const auto& c = *impl_->compiled;
  ir::PrintOptions o;
  o.full_literals = false;
  return ir::to_text(c.executable->program(), o);
}

std::string Lowered::global_text() const {
  ir::PrintOptions o;
  o.full_literals = false;
  return ir::to_text(impl_->compiled->global, o);
}

CostAnalysis Lowered::cost_analysis() const { return spmd::cost_analysis(*impl_->compiled); }
MemoryAnalysis Lowered::memory_analysis() const { return spmd::memory_analysis(*impl_->compiled); }
std::vector<std::string> Lowered::warnings() const { return impl_->compiled->warnings; }
std::vector<NamedSharding> Lowered::in_shardings() const {
  return impl_->compiled->executable->in_shardings();
}
std::vector<NamedSharding> Lowered::out_shardings() const {
  return impl_->compiled->executable->out_shardings();
}

}  // namespace partix

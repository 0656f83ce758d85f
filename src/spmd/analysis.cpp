#include "spmd/analysis.h"

#include <map>
#include <set>

#include "core/errors.h"
#include "runtime/fusion.h"
#include "spmd/cost.h"

namespace partix {

namespace spmd {

namespace {
std::vector<TextNote>& text_notes() {
  static std::vector<TextNote> notes;  // registered while the library loads
  return notes;
}
}  // namespace

void register_text_note(TextNote note) { text_notes().push_back(std::move(note)); }

namespace {

// Adds `times` executions of p to out; a region counts as often as it runs where that is static
// (a scan's trip count), a while_loop's body once, and of branches the costliest.
void add_costs(const ir::Program& p, double times, CostAnalysis& out, double& duplicated) {
  for (const ir::Instr& in : p.instrs) {
    std::vector<ir::Aval> ia, oa;
    for (int v : in.inputs) ia.push_back(p.aval(v));
    for (int v : in.outputs) oa.push_back(p.aval(v));
    double f = times * in.prim->flops(ia, oa, in.attrs);
    out.flops += f;
    auto [kind, bytes] = collective_bytes(p, in);
    if (!kind.empty()) out.bytes_per_device[kind] += times * bytes;
    // A result replicated over mesh axes was computed identically on each of those devices.
    if (!in.outputs.empty()) {
      const auto& s = p.info(in.outputs[0]).sharding;
      if (s) {
        double reps = static_cast<double>(s->num_replicas());
        if (reps > 1) duplicated += f * (reps - 1) / reps;
      }
    }
    if (!in.prim->runs_regions()) continue;
    if (in.prim->region_layout(in.attrs).one_region_runs) {
      CostAnalysis best;
      double best_dup = 0;
      for (const auto& r : in.regions) {
        CostAnalysis branch;
        double dup = 0;
        add_costs(*r, times, branch, dup);
        if (branch.flops >= best.flops) {
          best = branch;
          best_dup = dup;
        }
      }
      out.flops += best.flops;
      for (const auto& [k, b] : best.bytes_per_device) out.bytes_per_device[k] += b;
      duplicated += best_dup;
      continue;
    }
    for (size_t k = 0; k < in.regions.size(); ++k) {
      add_costs(*in.regions[k], times * in.prim->trip_count(in.attrs, k), out, duplicated);
    }
  }
}

}  // namespace

CostAnalysis cost_analysis(const Compiled& c) {
  CostAnalysis out;
  const ir::Program& p = c.executable->program();
  for (const std::string& n : prim::primitive_names()) {
    const std::string_view k = prim::get_primitive(n).comm_kind();
    if (!k.empty()) out.bytes_per_device[std::string(k)] = 0;
  }
  double duplicated = 0;
  add_costs(p, 1.0, out, duplicated);
  out.duplicated_flops_fraction = out.flops > 0 ? duplicated / out.flops : 0;
  return out;
}

MemoryAnalysis memory_analysis(const Compiled& c, const std::vector<bool>& donated) {
  const runtime::Executable& exe = *c.executable;
  const ir::Program& p = exe.program();
  int64_t args = 0, outs = 0;
  for (int v : p.params) args += p.aval(v).nbytes();
  for (int v : p.results) outs += p.aval(v).nbytes();
  const int64_t peak = exe.peak_bytes();
  // Temporaries: the peak of live intermediate buffers beyond the outputs.
  int64_t temp = std::max<int64_t>(0, peak - outs);
  size_t n = static_cast<size_t>(exe.mesh().size());
  MemoryAnalysis m;
  m.argument_bytes.assign(n, args);
  m.output_bytes.assign(n, outs);
  m.peak_temp_bytes.assign(n, temp);
  m.peak_bytes.assign(n, exe.peak_bytes_with_arguments(donated));
  // Live bytes when each output is ready: after its producing instruction, or at the start for
  // an output that is an argument.
  const std::vector<int64_t> live = exe.live_bytes_after(donated);
  std::map<int, size_t> producer;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    for (int v : p.instrs[i].outputs) producer[v] = i;
  }
  std::vector<int64_t> at_output;
  for (int v : p.results) {
    auto it = producer.find(v);
    at_output.push_back(it == producer.end() ? args : live[it->second]);
  }
  m.live_bytes_at_output.assign(n, at_output);
  return m;
}

}  // namespace spmd

std::string Lowered::as_text() const {
  const auto& c = *impl_->compiled;
  ir::PrintOptions o;
  o.full_literals = false;
  std::string notes;
  for (const auto& note : spmd::text_notes()) notes += note(c.executable->program());
  return notes + ir::to_text(c.executable->program(), o);
}

std::vector<std::string> Lowered::fusions() const {
  const auto& e = *impl_->compiled->executable;
  return runtime::describe_fusion(e.program(), e.plan().fused);
}

std::string Lowered::global_text() const {
  ir::PrintOptions o;
  o.full_literals = false;
  return ir::to_text(impl_->compiled->global, o);
}

CostAnalysis Lowered::cost_analysis() const { return spmd::cost_analysis(*impl_->compiled); }
MemoryAnalysis Lowered::memory_analysis() const {
  return spmd::memory_analysis(*impl_->compiled, impl_->donated);
}
std::vector<std::string> Lowered::warnings() const { return impl_->compiled->warnings; }
std::vector<NamedSharding> Lowered::in_shardings() const {
  return impl_->compiled->executable->in_shardings();
}
std::vector<NamedSharding> Lowered::out_shardings() const {
  return impl_->compiled->executable->out_shardings();
}

}  // namespace partix

#include "spmd/analysis.h"

#include <cctype>
#include <map>
#include <set>

#include "core/errors.h"
#include "ir/hlo.h"
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
std::vector<BranchWeights>& branch_weights() {
  static std::vector<BranchWeights> hooks;  // registered while the library loads
  return hooks;
}

std::optional<std::vector<double>> weights_of(const ir::Program& p, const ir::Instr& in) {
  for (const auto& hook : branch_weights()) {
    auto w = hook(p, in);
    if (w && w->size() == in.regions.size()) return w;
  }
  return std::nullopt;
}
}  // namespace

void register_branch_weights(BranchWeights weights) {
  branch_weights().push_back(std::move(weights));
}

namespace {

// Adds `times` executions of p to out; a region counts as often as it runs where that is static
// (a scan's trip count), a while_loop's body once, and of branches the costliest.
// Bytes accessed count what a kernel reads from and writes to memory: a value made and used
// inside one fused loop is not counted.
void add_costs(const ir::Program& p, double times, CostAnalysis& out, double& duplicated) {
  // The fused loops the runtime will run (runtime/fusion.h): a group reads each value from
  // outside it once and writes only its root's result.
  const prim::FusedKernel* fk =
      runtime::fusion_enabled() ? prim::find_fused_kernel("cpu") : nullptr;
  runtime::Fusion fusion;
  if (fk != nullptr) fusion = runtime::plan_fusion(p, *fk);
  auto root = [&](size_t i) { return fk != nullptr ? fusion.root_of[i] : -1; };
  std::vector<int> producer(p.values.size(), -1);
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    for (int v : p.instrs[i].outputs) producer[static_cast<size_t>(v)] = static_cast<int>(i);
  }
  std::map<int, std::set<int>> group_reads;  // per group root: the outside values read
  size_t index = 0;
  for (const ir::Instr& in : p.instrs) {
    const size_t i = index++;
    std::vector<ir::Aval> ia, oa;
    for (int v : in.inputs) ia.push_back(p.aval(v));
    for (int v : in.outputs) oa.push_back(p.aval(v));
    double f = times * in.prim->cost().flops(ia, oa, in.attrs);
    out.flops += f;
    out.instructions += times;
    auto [kind, bytes] = collective_bytes(p, in);
    if (!kind.empty()) {
      out.bytes_per_device[kind] += times * bytes;
      out.collectives_per_device[kind] += times;
    } else if (!in.prim->execution().runs_regions() &&
               in.prim->execution().constant_value(in.attrs) == nullptr &&
               !(ia.size() == 1 && oa.size() == 1 &&
                 in.prim->execution().is_view(ia[0], oa[0], in.attrs))) {
      // A fused op reads what its group takes from outside, once per group, and only the
      // root writes; any other kernel reads its operands and writes its results.
      const int r = root(i);
      double moved = 0;
      for (size_t k = 0; k < ia.size(); ++k) {
        const int v = in.inputs[k];
        if (r < 0) {
          moved += static_cast<double>(ia[k].nbytes());
          continue;
        }
        const int from = producer[static_cast<size_t>(v)];
        const bool outside = from < 0 || root(static_cast<size_t>(from)) != r;
        if (outside && group_reads[r].insert(v).second)
          moved += static_cast<double>(ia[k].nbytes());
      }
      if (r < 0 || r == static_cast<int>(i)) {
        for (const auto& a : oa) moved += static_cast<double>(a.nbytes());
      }
      out.bytes_accessed += times * moved;
    }
    // A result replicated over mesh axes was computed identically on each of those devices.
    if (!in.outputs.empty()) {
      const auto& s = p.info(in.outputs[0]).sharding;
      if (s) {
        double reps = static_cast<double>(s->num_replicas());
        if (reps > 1) duplicated += f * (reps - 1) / reps;
      }
    }
    if (!in.prim->execution().runs_regions()) continue;
    if (!in.prim->region_layout(in.attrs).one_region_runs) {
      // A loop's operands and results count once: a scan stacks its ys (its aligned xs slices
      // are views, read by the body's kernels; the model keeps them as one pass).
      double moved = 0;
      for (const auto& a : ia) moved += static_cast<double>(a.nbytes());
      for (const auto& a : oa) moved += static_cast<double>(a.nbytes());
      out.bytes_accessed += times * moved;
    }
    if (in.prim->region_layout(in.attrs).one_region_runs) {
      if (const auto w = weights_of(p, in)) {
        for (size_t k = 0; k < in.regions.size(); ++k) {
          if ((*w)[k] > 0) add_costs(*in.regions[k], times * (*w)[k], out, duplicated);
        }
        continue;
      }
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
      out.bytes_accessed += best.bytes_accessed;
      out.instructions += best.instructions;
      for (const auto& [k, b] : best.bytes_per_device) out.bytes_per_device[k] += b;
      for (const auto& [k, n] : best.collectives_per_device) out.collectives_per_device[k] += n;
      duplicated += best_dup;
      continue;
    }
    for (size_t k = 0; k < in.regions.size(); ++k) {
      add_costs(*in.regions[k], times * in.prim->cost().trip_count(in.attrs, k), out, duplicated);
    }
  }
}

}  // namespace

CostAnalysis cost_analysis(const Compiled& c) {
  CostAnalysis out;
  const ir::Program& p = c.executable->program();
  for (const std::string& n : prim::primitive_names()) {
    const std::string_view k = prim::get_primitive(n).cost().comm_kind();
    if (!k.empty()) {
      out.bytes_per_device[std::string(k)] = 0;
      out.collectives_per_device[std::string(k)] = 0;
    }
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

std::string Lowered::hlo_text(bool print_large_constants) const {
  const ir::Program& g = impl_->compiled->global;
  std::vector<std::shared_ptr<const ir::Literal>> constants;
  for (const Array& a : impl_->captures) {
    auto lit = std::make_shared<ir::Literal>();
    lit->shape = a.shape();
    lit->dtype = a.dtype();
    lit->bytes.resize(static_cast<size_t>(a.nbytes()));
    a.copy_to(lit->bytes.data(), "Lowered.compiler_ir");
    constants.push_back(std::move(lit));
  }
  std::string name = "jit_" + g.name;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
  }
  return ir::to_hlo_text(g, name, constants, print_large_constants);
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

#include "runtime/interpreter.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <set>

#include "core/errors.h"
#include "core/fault_injection.h"
#include "prim/collective.h"
#include "runtime/fusion.h"
#include "runtime/profiler_hooks.h"

namespace partix::runtime {

namespace {
std::atomic<KernelMode> g_mode{KernelMode::kFast};
}

void set_kernel_mode(KernelMode mode) { g_mode.store(mode); }
KernelMode kernel_mode() { return g_mode.load(); }

namespace {

// Whether instruction `in` only relabels its operand's bytes (the primitive says, for these
// avals and attrs): its result aliases the operand's buffer.
bool is_view(const ir::Instr& in, const ir::Program& p) {
  if (in.inputs.size() != 1 || in.outputs.size() != 1) return false;
  return in.prim->execution().is_view(p.aval(in.inputs[0]), p.aval(in.outputs[0]), in.attrs);
}

// The mesh positions on which every result of instruction `i` is all padding (see
// Plan::padding_on), or empty: never for collectives (every device takes part), instructions
// with regions or their own allocation, or a fused member (its root decides).
std::vector<bool> padding_positions(const ir::Program& p, const ir::Instr& in, bool member) {
  if (member || in.outputs.empty() || in.prim->is_collective() ||
      in.prim->execution().runs_regions() || in.prim->execution().allocates_outputs()) {
    return {};
  }
  std::vector<bool> on;
  for (int v : in.outputs) {
    const ir::ValueInfo& info = p.info(v);
    if (info.global_shape.empty() || !info.sharding) return {};
    const NamedSharding& s = *info.sharding;
    if (s.mesh().is_abstract()) return {};
    const auto n = static_cast<size_t>(s.mesh().size());
    if (on.empty()) on.assign(n, true);
    if (on.size() != n) return {};
    for (size_t k = 0; k < n; ++k) {
      if (!on[k]) continue;
      bool empty = false;
      for (const Slice& sl : s.device_index(info.global_shape, static_cast<int64_t>(k))) {
        empty |= sl.start >= sl.stop;
      }
      on[k] = empty;
    }
  }
  if (std::find(on.begin(), on.end(), true) == on.end()) return {};
  return on;
}

}  // namespace

Plan make_plan(const ir::Program& p, const char* platform) {
  Plan plan;
  const size_t n = p.instrs.size();
  plan.fused_root.assign(n, -1);
  plan.fused.resize(n);
  plan.fused_reuse.assign(n, -1);
  if (fusion_enabled()) plan.fused_kernel = prim::find_fused_kernel(platform);
  if (plan.fused_kernel) {
    Fusion f = plan_fusion(p, *plan.fused_kernel);
    plan.fused_root = std::move(f.root_of);
    plan.fused = std::move(f.group);
  }
  // A fused member's operands are read when its root runs.
  auto at = [&](size_t i) {
    return plan.fused_root[i] >= 0 ? plan.fused_root[i] : static_cast<int>(i);
  };
  std::vector<int> last_use(p.values.size(), -1);
  for (size_t i = 0; i < n; ++i) {
    for (int v : p.instrs[i].inputs) {
      last_use[static_cast<size_t>(v)] = std::max(last_use[static_cast<size_t>(v)], at(i));
    }
  }
  for (int v : p.results) last_use[static_cast<size_t>(v)] = static_cast<int>(n);  // never freed
  plan.release_after.resize(n);
  for (size_t v = 0; v < last_use.size(); ++v) {
    int u = last_use[v];
    if (u >= 0 && u < static_cast<int>(n))
      plan.release_after[static_cast<size_t>(u)].push_back(static_cast<int>(v));
  }
  // Values never used: free right after definition.
  for (size_t i = 0; i < n; ++i) {
    for (int v : p.instrs[i].outputs) {
      if (last_use[static_cast<size_t>(v)] < 0) plan.release_after[i].push_back(v);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const ir::Instr& in = p.instrs[i];
    plan.fast.push_back(prim::find_kernel(in.prim->name(), platform));
    std::vector<const ir::Aval*> ia, oa;
    for (int v : in.inputs) ia.push_back(&p.aval(v));
    for (int v : in.outputs) oa.push_back(&p.aval(v));
    int reuse = -1;
    const int only = in.prim->execution().in_place_operand();
    const bool fused = plan.fused_root[i] >= 0;  // a fused root allocates its result
    const bool view = !fused && is_view(in, p);
    if (fused) {
      if (const prim::FusedLoop* g = plan.fused[i].get()) {
        const ir::Aval& out = p.aval(in.outputs[0]);
        for (int v : g->inputs) {
          if (last_use[static_cast<size_t>(v)] == static_cast<int>(i) &&
              p.aval(v).nbytes() == out.nbytes()) {
            plan.fused_reuse[i] = v;
            break;
          }
        }
      }
    } else if (view) {
      // Shares its input's buffer whether or not the input dies here (no reuse to plan).
    } else if ((in.prim->execution().is_elementwise() || only >= 0) && in.outputs.size() == 1) {
      const ir::Aval& out = p.aval(in.outputs[0]);
      for (size_t k = 0; k < in.inputs.size() && reuse < 0; ++k) {
        if (only >= 0 && static_cast<int>(k) != only) continue;
        int v = in.inputs[k];
        bool dies = last_use[static_cast<size_t>(v)] == static_cast<int>(i);
        bool used_twice = false;
        for (size_t j = 0; j < in.inputs.size(); ++j) used_twice |= j != k && in.inputs[j] == v;
        if (dies && !used_twice && p.aval(v).nbytes() == out.nbytes() &&
            p.aval(v).shape == out.shape) {
          reuse = static_cast<int>(k);
        }
      }
    }
    std::vector<std::shared_ptr<const Plan>> regions;
    if (in.prim->execution().runs_regions()) {
      for (const auto& r : in.regions)
        regions.push_back(std::make_shared<const Plan>(make_plan(*r, platform)));
    }
    plan.region_plans.push_back(std::move(regions));
    const prim::KernelPrepareFn* prepare =
        plan.fast.back() ? prim::find_kernel_prepare(in.prim->name(), platform) : nullptr;
    plan.prepared.push_back(prepare ? (*prepare)(in.attrs, ia, oa) : nullptr);
    std::vector<int64_t> bytes;
    for (const ir::Aval* a : oa) bytes.push_back(a->nbytes());
    plan.out_bytes.push_back(std::move(bytes));
    plan.in_avals.push_back(std::move(ia));
    plan.out_avals.push_back(std::move(oa));
    plan.reuse_input.push_back(reuse);
    plan.view.push_back(view);
    plan.may_share.push_back(!fused && in.outputs.size() == 1 &&
                             in.prim->execution().may_share_result(in.attrs));
    plan.padding_on.push_back(padding_positions(p, in, plan.member(i)));
  }
  for (size_t i = 0; i < n; ++i) {
    plan.max_inputs = std::max(plan.max_inputs, p.instrs[i].inputs.size());
    plan.max_outputs = std::max(plan.max_outputs, p.instrs[i].outputs.size());
    if (const prim::FusedLoop* g = plan.fused[i].get())
      plan.max_inputs = std::max(plan.max_inputs, g->inputs.size());
  }
  // Which skipped results are read where they are skipped: by a consumer (a fused member's
  // reads happen at its root) that is not skipped at that position, or as program results.
  plan.padding_read.resize(n);
  std::vector<int> producer(p.values.size(), -1);
  for (size_t i = 0; i < n; ++i) {
    if (!plan.padding_on[i].empty()) {
      plan.padding_read[i].assign(plan.padding_on[i].size(), false);
      for (int v : p.instrs[i].outputs) producer[static_cast<size_t>(v)] = static_cast<int>(i);
    }
  }
  auto read_where_runs = [&](int v, const std::vector<bool>* skipped_at) {
    const int i = producer[static_cast<size_t>(v)];
    if (i < 0) return;
    std::vector<bool>& read = plan.padding_read[static_cast<size_t>(i)];
    for (size_t k = 0; k < read.size(); ++k) {
      if (!(skipped_at && k < skipped_at->size() && (*skipped_at)[k])) read[k] = true;
    }
  };
  for (size_t j = 0; j < n; ++j) {
    const std::vector<bool>& skipped = plan.padding_on[static_cast<size_t>(at(j))];
    for (int v : p.instrs[j].inputs) read_where_runs(v, skipped.empty() ? nullptr : &skipped);
  }
  for (int v : p.results) read_where_runs(v, nullptr);
  return plan;
}

namespace {

// One run of a planned program on one device: the values' buffers (`env`) and the steps that
// run an instruction, by its kind.
class Interpreter {
 public:
  Interpreter(const ir::Program& p, const Plan& plan, const prim::ExecContext& ctx,
              std::vector<detail::Buffer> args)
      : p_(p),
        plan_(plan),
        ctx_(ctx),
        env_(p.values.size()),
        fast_ok_(kernel_mode() == KernelMode::kFast),
        profile_(profiling()) {
    if (args.size() != p.params.size()) {
      detail::internal_error(
          "interpret", fmt::format("{} arguments for {} parameters", args.size(), p.params.size()));
    }
    for (size_t k = 0; k < args.size(); ++k)
      env_[static_cast<size_t>(p.params[k])] = std::move(args[k]);
    in_ptrs_.reserve(plan.max_inputs);
    out_ptrs_.reserve(plan.max_outputs);
    if (plan.fused_kernel) group_in_.reserve(plan.max_inputs);
  }

  std::vector<detail::Buffer> run() {
    for (size_t i = 0; i < p_.instrs.size(); ++i) {
      if (plan_.member(i)) continue;  // runs with its group's root
      if (ctx_.cancel && ctx_.cancel->load(std::memory_order_relaxed)) {
        throw Cancelled("[run] cancelled by the caller (interrupt)");
      }
      if (all_padding_here(i)) {
        skip_padding(i);
        release(i);
        continue;
      }
      const ir::Instr& in = p_.instrs[i];
      const prim::FusedLoop* group = plan_.fused[i].get();
      const double t0 = profile_ ? now_us() : 0.0;
      if (group) {
        run_group(i, *group);
      } else if (in.prim->execution().runs_regions()) {
        run_regions(i);
      } else if (in.prim->execution().allocates_outputs()) {
        run_allocating(i);
      } else {
        run_plain(i);
      }
      release(i);
      if (profile_) {
        std::string name = group ? group->name : std::string(in.prim->name());
        if (!in.scope.empty()) name = in.scope + "/" + name;
        record_span(ctx_.device, std::move(name), in.prim->is_collective(), t0, now_us());
      }
    }
    std::vector<detail::Buffer> out;
    out.reserve(p_.results.size());
    for (int v : p_.results) out.push_back(env_[static_cast<size_t>(v)]);
    return out;
  }

 private:
  detail::Buffer& value(int v) { return env_[static_cast<size_t>(v)]; }

  // An operand's bytes. Every operand has a buffer (padding left empty is never read:
  // Plan::padding_read); a missing one is a bug of the plan, never a read of null.
  const void* operand(int v) {
    const detail::Buffer& b = value(v);
    if (!b.valid()) [[unlikely]] {
      detail::internal_error("interpret",
                             fmt::format("value %{} of '{}' has no buffer", v, p_.name));
    }
    return b.data();
  }
  void gather_operands(const ir::Instr& in) {
    in_ptrs_.clear();
    out_ptrs_.clear();
    for (int v : in.inputs) in_ptrs_.push_back(operand(v));
  }
  // Values whose last use is instruction i.
  void release(size_t i) {
    for (int v : plan_.release_after[i]) value(v) = detail::Buffer();
  }
  // Results a kernel handed back, checked against the plan's sizes.
  void store_results(size_t i, std::vector<detail::Buffer>& results) {
    const ir::Instr& in = p_.instrs[i];
    for (size_t k = 0; k < in.outputs.size(); ++k) {
      if (k >= results.size() || results[k].nbytes() != plan_.out_bytes[i][k]) {
        detail::internal_error(
            "interpret", std::string(in.prim->name()) + " returned a buffer of the wrong size");
      }
      value(in.outputs[k]) = std::move(results[k]);
    }
  }

  // Whether every result of instruction i is padding on this device: nothing runs.
  bool all_padding_here(size_t i) const {
    const std::vector<bool>& pad = plan_.padding_on[i];
    return !pad.empty() && ctx_.mesh_position >= 0 &&
           static_cast<size_t>(ctx_.mesh_position) < pad.size() &&
           pad[static_cast<size_t>(ctx_.mesh_position)];
  }
  // Zeros stand for the results where something reads them; elsewhere they stay empty
  // (nothing reads them).
  void skip_padding(size_t i) {
    const ir::Instr& in = p_.instrs[i];
    const bool read = plan_.padding_read[i][static_cast<size_t>(ctx_.mesh_position)];
    for (size_t k = 0; read && k < in.outputs.size(); ++k) {
      detail::Buffer zeros = prim::filled_block(*plan_.out_avals[i][k], 0.0);
      value(in.outputs[k]) = zeros.valid()
                                 ? zeros.alias_for(ctx_.device)
                                 : detail::Buffer::zeros(ctx_.device, plan_.out_bytes[i][k]);
    }
  }

  // A fused group: one pass over it; with the reference kernels (or when the backend
  // declines), its members one by one.
  void run_group(size_t i, const prim::FusedLoop& group) {
    if (fast_ok_) {
      group_in_.clear();
      for (int v : group.inputs) group_in_.push_back(operand(v));
      detail::Buffer& b = value(p_.instrs[i].outputs[0]);
      const int r = plan_.fused_reuse[i];
      if (r >= 0 && value(r).unique()) {
        b = value(r);  // in place: the input dies here
      } else {
        b = detail::Buffer::allocate(ctx_.device, plan_.out_bytes[i][0]);
      }
      if (plan_.fused_kernel->run(group, group_in_, b.data(), ctx_)) return;
    }
    for (int j : group.members) run_plain(static_cast<size_t>(j));
  }

  // Control flow: operands that die here are handed over (a loop then updates its carries in
  // place), and the regions run on this device through the interpreter.
  void run_regions(size_t i) {
    const ir::Instr& in = p_.instrs[i];
    gather_operands(in);
    std::vector<detail::Buffer> ins;
    ins.reserve(in.inputs.size());
    const auto& dead = plan_.release_after[i];
    for (int v : in.inputs) {
      const bool once = std::count(in.inputs.begin(), in.inputs.end(), v) == 1;
      const bool dies = std::find(dead.begin(), dead.end(), v) != dead.end();
      ins.push_back(once && dies ? std::move(value(v)) : value(v));
    }
    prim::KernelCall call{in.attrs, plan_.in_avals[i], plan_.out_avals[i], in_ptrs_, out_ptrs_,
                          ctx_,     in.regions};
    const auto& plans = plan_.region_plans[i];
    prim::RegionRunner run = [&](size_t k, std::vector<detail::Buffer> a) {
      return interpret(*in.regions[k], *plans[k], ctx_, std::move(a));
    };
    std::vector<detail::Buffer> results = in.prim->execution().execute(call, std::move(ins), run);
    store_results(i, results);
  }

  // A kernel that hands back its own result buffers.
  void run_allocating(size_t i) {
    const ir::Instr& in = p_.instrs[i];
    gather_operands(in);
    std::vector<detail::Buffer> results(in.outputs.size());
    out_ptrs_.assign(in.outputs.size(), nullptr);
    prim::KernelCall call{in.attrs,   plan_.in_avals[i], plan_.out_avals[i],
                          in_ptrs_,   out_ptrs_,         ctx_,
                          in.regions, &results};
    in.prim->execution().reference(call);
    store_results(i, results);
  }

  // Allocates instruction j's results (taking over a dying input where the plan says so) and
  // runs its kernel, unless its result is existing bytes (a shared result or a view).
  void run_plain(size_t j) {
    const ir::Instr& in = p_.instrs[j];
    gather_operands(in);
    if (plan_.may_share[j]) {
      prim::KernelCall probe{in.attrs, plan_.in_avals[j], plan_.out_avals[j], in_ptrs_, out_ptrs_,
                             ctx_,     in.regions};
      share_operands_.clear();
      for (int v : in.inputs) share_operands_.push_back(&value(v));
      if (in.prim->execution().shares_result(probe, share_operands_, &value(in.outputs[0]))) {
        return;
      }
    }
    if (plan_.view[j]) {
      // The input's bytes under another shape: the result holds the same buffer (counted once;
      // neither is then written in place while the other lives: Buffer::unique()).
      value(in.outputs[0]) = value(in.inputs[0]);
      return;
    }
    for (size_t k = 0; k < in.outputs.size(); ++k) {
      detail::Buffer& b = value(in.outputs[k]);
      const int r = k == 0 ? plan_.reuse_input[j] : -1;
      detail::Buffer* src = r >= 0 ? &value(in.inputs[static_cast<size_t>(r)]) : nullptr;
      if (src && src->unique()) {
        b = *src;  // in place: the input dies here and nobody else holds it
      } else {
        b = detail::Buffer::allocate(ctx_.device, plan_.out_bytes[j][k]);
      }
      out_ptrs_.push_back(b.data());
    }
    prim::KernelCall call{in.attrs, plan_.in_avals[j], plan_.out_avals[j], in_ptrs_, out_ptrs_,
                          ctx_,     in.regions};
    call.prepared = plan_.prepared[j].get();
    const prim::KernelFn* fast = plan_.fast[j];
    if (!(fast_ok_ && fast && (*fast)(call))) in.prim->execution().reference(call);
  }

  const ir::Program& p_;
  const Plan& plan_;
  const prim::ExecContext& ctx_;
  std::vector<detail::Buffer> env_;
  const bool fast_ok_, profile_;
  std::vector<const void*> in_ptrs_, group_in_;
  std::vector<void*> out_ptrs_;
  std::vector<const detail::Buffer*> share_operands_;
};

}  // namespace

std::vector<detail::Buffer> interpret(const ir::Program& p, const Plan& plan,
                                      const prim::ExecContext& ctx,
                                      std::vector<detail::Buffer> args) {
  detail::ProgramScope scope(p.name);
  return Interpreter(p, plan, ctx, std::move(args)).run();
}

namespace {

// Replays the interpreter's allocations: results allocate unless they take over an input that
// dies at that instruction; values die after their last use; nested programs run on top.
// Parameters are counted only when `donated` is given: all live at the start, the donated ones
// dying (and reusable in place) like any value; with `only_donated`, the others are not counted
// (a region's parameters that live outside it).
// Byte counts of live buffers: a sum past int64 (shapes each within range, too many or too
// large together) is an error, never a wrapped figure in a memory analysis or check.
int64_t add_bytes(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    detail::fail("jit",
                 "the buffers a program keeps live at once on one device exceed 2^63 bytes: "
                 "its shapes are too large to run or to plan");
  }
  return r;
}

int64_t replay_peak(const ir::Program& p, const Plan& plan, const std::vector<bool>* donated,
                    std::vector<int64_t>* live_after = nullptr, bool only_donated = false,
                    const std::vector<bool>* handed = nullptr) {
  std::map<int, size_t> param_index;
  for (size_t i = 0; i < p.params.size(); ++i) param_index.emplace(p.params[i], i);
  int64_t live = 0, peak = 0;
  std::vector<bool> alive(p.values.size(), false);
  // Buffers, as the interpreter shares them: a view's result holds its input's buffer, an
  // in-place result the one it took over. buffer[v] names the value that brought v's buffer
  // (allocated it, or a parameter); holders[b] counts the live values holding b (and a caller
  // still holding an argument); counted[b]: b's bytes are in `live` (or, for a handed-over
  // parameter, in the enclosing program's, so that freeing it here subtracts them). A buffer
  // is freed when its last holder dies, and updated in place only when one value holds it.
  std::vector<int> buffer(p.values.size(), -1), holders(p.values.size(), 0);
  std::vector<bool> counted(p.values.size(), false);
  // Whose buffer the program may free or update in place: its own values, arguments donated to
  // it, and (a region's) parameters handed over by its instruction, counted where they live.
  auto owned = [&](int v) {
    auto it = param_index.find(v);
    return it == param_index.end() ||
           (donated && it->second < donated->size() && (*donated)[it->second]) ||
           (handed && it->second < handed->size() && (*handed)[it->second]);
  };
  if (handed) {
    for (size_t i = 0; i < p.params.size() && i < handed->size(); ++i) {
      if ((*handed)[i]) alive[static_cast<size_t>(p.params[i])] = true;
    }
  }
  for (int v : p.params) {
    const auto u = static_cast<size_t>(v);
    buffer[u] = v;
    holders[u] = owned(v) ? 1 : 2;  // the caller keeps an argument it did not give up
    counted[u] = alive[u];          // handed over (donated ones are added below)
    alive[u] = true;
  }
  if (donated) {
    for (size_t i = 0; i < p.params.size(); ++i) {
      if (only_donated && !(i < donated->size() && (*donated)[i])) continue;
      const int v = p.params[i];
      live = add_bytes(live, p.aval(v).nbytes());
      counted[static_cast<size_t>(v)] = true;
    }
    peak = live;
  }
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    if (plan.member(i)) {  // computed within its root: nothing allocated, nothing freed
      if (live_after) live_after->push_back(live);
      continue;
    }
    const ir::Instr& in = p.instrs[i];
    const int reuse = plan.reuse_input[i];
    // The value whose buffer the result takes over, if any.
    const int taken = plan.fused[i] ? plan.fused_reuse[i]
                      : reuse >= 0  ? in.inputs[static_cast<size_t>(reuse)]
                                    : -1;
    auto sole_holder = [&](int v) {
      const int b = buffer[static_cast<size_t>(v)];
      return b >= 0 && holders[static_cast<size_t>(b)] == 1;
    };
    const bool in_place = taken >= 0 && owned(taken) && sole_holder(taken);
    // A view shares its input's buffer (the interpreter runs no kernel for it).
    const bool view =
        !plan.fused[i] && plan.view[i] && buffer[static_cast<size_t>(in.inputs[0])] >= 0;
    // A nested program (a rematerialised block, a branch, a loop body) runs inside the
    // instruction: its own peak, results included, sits on top of what is live (the largest one,
    // if several), with what the instruction holds meanwhile (a scan's stacked outputs).
    int64_t nested = 0;
    const prim::Primitive::RegionLayout layout = in.prim->region_layout(in.attrs);
    // A loop's carry handed over comes out as the same buffer, or as one made in the body
    // after the handed one was freed there: either way the result takes the operand's place
    // (it is never live beside it), as the loop's execute() passes carries through.
    std::vector<int> carry_taken(in.outputs.size(), -1);
    for (size_t k = 0; k < in.regions.size(); ++k) {
      const ir::Program& region = *in.regions[k];
      // Buffers the instruction makes for each run of the region (a slice of each scanned
      // input) live from its start to their last use there.
      const std::vector<bool> made = in.prim->execution().region_params_made_per_run(in.attrs, k);
      // Operands that die here are handed over (the interpreter moves them in): a loop body's
      // carries and a branch's operands, which the region may then update in place.
      std::vector<bool> handed(region.params.size(), false);
      if (layout.one_region_runs || k == layout.body) {
        for (size_t j = 0; layout.param_offset + j < region.params.size(); ++j) {
          const size_t op = layout.first_operand + j;
          if (op >= in.inputs.size() || (!layout.one_region_runs && j >= layout.num_carry)) break;
          const int v = in.inputs[op];
          const bool once = std::count(in.inputs.begin(), in.inputs.end(), v) == 1;
          const auto& dead = plan.release_after[i];
          const bool dies = std::find(dead.begin(), dead.end(), v) != dead.end();
          handed[layout.param_offset + j] = once && dies && owned(v) && sole_holder(v);
          if (!layout.one_region_runs && handed[layout.param_offset + j] &&
              j < carry_taken.size()) {
            carry_taken[j] = v;
          }
        }
      }
      nested = std::max(nested, replay_peak(region, make_plan(region), &made, nullptr,
                                            /*only_donated=*/true, &handed));
    }
    // The kernel's own staging, live with its results.
    std::vector<ir::Aval> ia, oa;
    for (int v : in.inputs) ia.push_back(p.aval(v));
    for (int v : in.outputs) oa.push_back(p.aval(v));
    const int64_t scratch = in.prim->execution().scratch_bytes(ia, oa, in.attrs);
    if (!in.regions.empty()) {
      nested = add_bytes(nested, in.prim->execution().bytes_held_around_regions(ia, oa, in.attrs));
    }
    peak = std::max(peak, add_bytes(live, nested));
    for (size_t k = 0; k < in.outputs.size(); ++k) {
      const auto v = static_cast<size_t>(in.outputs[k]);
      if (k == 0 && (view || in_place)) {
        buffer[v] = buffer[static_cast<size_t>(view ? in.inputs[0] : taken)];
      } else if (carry_taken[k] >= 0) {
        buffer[v] = buffer[static_cast<size_t>(carry_taken[k])];
      } else {
        buffer[v] = static_cast<int>(v);
        counted[v] = true;
        live = add_bytes(live, p.aval(static_cast<int>(v)).nbytes());
      }
      holders[static_cast<size_t>(buffer[v])]++;
      alive[v] = true;
    }
    peak = std::max(peak, add_bytes(live, scratch));
    for (int v : plan.release_after[i]) {
      const auto u = static_cast<size_t>(v);
      if (!alive[u]) continue;
      alive[u] = false;
      const auto b = static_cast<size_t>(buffer[u]);
      if (--holders[b] == 0 && counted[b]) live -= p.aval(static_cast<int>(b)).nbytes();
    }
    if (live_after) live_after->push_back(live);
  }
  return peak;
}

}  // namespace

int64_t peak_live_bytes(const ir::Program& p, const Plan& plan) {
  return replay_peak(p, plan, nullptr);
}

int64_t peak_bytes_with_arguments(const ir::Program& p, const Plan& plan,
                                  const std::vector<bool>& donated) {
  return replay_peak(p, plan, &donated);
}

std::vector<int64_t> live_bytes_after(const ir::Program& p, const Plan& plan,
                                      const std::vector<bool>& donated) {
  std::vector<int64_t> out;
  out.reserve(p.instrs.size());
  replay_peak(p, plan, &donated, &out);
  return out;
}

}  // namespace partix::runtime

// VJPs of scan, fori_loop and cond, written with the control-flow ops themselves, so that the
// backward pass is one loop (one branch) whatever the trip count.
#include <map>
#include <mutex>

#include "autodiff/vjp.h"
#include "core/errors.h"
#include "partix/control.h"
#include "partix/ops.h"
#include "trace/trace.h"

namespace partix::autodiff {

namespace {

Array or_zeros(const Array& ct, const Array& like) { return ct.valid() ? ct : zeros_like(like); }

std::vector<Array> part(const std::vector<Array>& xs, size_t from, size_t n) {
  return std::vector<Array>(xs.begin() + static_cast<long>(from),
                            xs.begin() + static_cast<long>(from + n));
}

}  // namespace

namespace {

// A scan or fori_loop seen as one scan: fori_loop's index enters as the first scanned input.
struct ScanView {
  ScanView(const ir::Attrs& attrs, const prim::Regions& regions, const std::vector<Array>& primals)
      : fori(attrs.has("lower")),
        body(*regions[0]),
        nc(static_cast<size_t>(attrs.i("num_carry"))),
        nx(fori ? 0 : static_cast<size_t>(attrs.i("num_xs"))),
        reverse(attrs.b_or("reverse", false)),
        length(fori ? attrs.i("upper") - attrs.i("lower") : attrs.i("length")) {
    init = part(primals, 0, nc);
    xs = part(primals, nc, nx);
    consts = part(primals, nc + nx, primals.size() - nc - nx);
    if (fori) {
      xs.insert(xs.begin(), arange(length, DType::I32) + static_cast<double>(attrs.i("lower")));
    }
    ny = body.results.size() - nc;
  }
  // The body's arguments from (carries, scanned slices): fori_loop's are (i, carries, consts).
  std::vector<Array> body_args(const std::vector<Array>& carry, const std::vector<Array>& x) const {
    std::vector<Array> args;
    if (fori) args.push_back(x[0]);
    args.insert(args.end(), carry.begin(), carry.end());
    args.insert(args.end(), x.begin() + (fori ? 1 : 0), x.end());
    args.insert(args.end(), consts.begin(), consts.end());
    return args;
  }

  // Which of the body's parameters a gradient flows through, given which operands do (null:
  // all): a carry is active when its initial value is or when the body makes it so.
  std::vector<bool> body_active(const std::vector<bool>* operands) const {
    const size_t off = fori ? 1 : 0;
    std::vector<bool> on(body.params.size(), true);
    if (fori) on[0] = false;
    if (!operands) return on;
    for (size_t i = 0; i < operands->size() && off + i < on.size(); ++i)
      on[off + i] = (*operands)[i];
    for (size_t round = 0; round <= nc; ++round) {
      const std::vector<bool> values = active_values(body, &on);
      bool changed = false;
      for (size_t k = 0; k < nc; ++k) {
        if (!on[off + k] && values[static_cast<size_t>(body.results[k])]) {
          on[off + k] = true;
          changed = true;
        }
      }
      if (!changed) break;
    }
    return on;
  }

  bool fori;
  const ir::Program& body;
  size_t nc, nx, ny = 0;
  bool reverse;
  int64_t length;
  std::vector<Array> init, xs, consts;
};

}  // namespace

namespace {

// The body's computed values that its backward pass reads, in value order. Found once per body
// by tracing, into a program nothing runs, the body's evaluation followed by its backward pass
// (every cotangent given), and keeping the evaluated values the backward's instructions use.
// What a VJP reads only for its shape is not counted: the backward scan recomputes the body
// anyway and the unused recomputation is dead code, so a value missing here costs time, never
// correctness.
std::vector<int> values_backward_reads(const ScanView& s, const std::vector<detail::Vary>& vary,
                                       const std::vector<bool>& active) {
  std::vector<ir::Aval> avals;
  for (int v : s.body.params) avals.push_back(s.body.aval(v));
  const size_t n_args = avals.size();
  for (int v : s.body.results) avals.push_back(s.body.aval(v));
  // Candidates: values computed from the body's arguments. What depends on none of them (a
  // causal mask from iota, a broadcast constant) costs less to recompute than to keep per
  // iteration.
  std::vector<bool> depends(s.body.values.size(), false);
  for (int v : s.body.params) depends[static_cast<size_t>(v)] = true;
  std::vector<int> candidates;
  for (const ir::Instr& in : s.body.instrs) {
    bool d = false;
    for (int v : in.inputs) d = d || depends[static_cast<size_t>(v)];
    for (int v : in.outputs) {
      depends[static_cast<size_t>(v)] = d;
      if (d) candidates.push_back(v);
    }
  }
  std::vector<int> traced(s.body.values.size(), -1);
  size_t first_backward = 0;
  ir::Program probe;
  try {
    probe = detail::trace_probe(
        avals, vary, [&](const std::vector<Array>& t, detail::TraceState& ts) {
          const std::vector<Array> args = part(t, 0, n_args), cts = part(t, n_args, t.size() - n_args);
          Residuals inner;
          std::vector<Array> env = evaluate(s.body, args, &inner, &active);
          for (int v : candidates) {
            const Array& a = env[static_cast<size_t>(v)];
            if (a.valid() && a.is_tracer()) traced[static_cast<size_t>(v)] = ts.value_of(a);
          }
          first_backward = ts.program().instrs.size();
          std::vector<Array> g = backward(s.body, env, cts, &inner, &active);
          std::vector<Array> out;
          for (size_t i = 0; i < g.size(); ++i) out.push_back(or_zeros(g[i], args[i]));
          return out;
        });
  } catch (const Error&) {
    return {};  // not analysable: the backward scan recomputes everything
  }
  std::vector<bool> read(probe.values.size(), false);
  for (size_t i = first_backward; i < probe.instrs.size(); ++i) {
    for (int v : probe.instrs[i].inputs) read[static_cast<size_t>(v)] = true;
  }
  for (int v : probe.results) read[static_cast<size_t>(v)] = true;
  std::vector<int> out;
  for (int v : candidates) {
    const int t = traced[static_cast<size_t>(v)];
    if (t >= 0 && read[static_cast<size_t>(t)]) out.push_back(v);
  }
  return out;
}

// values_backward_reads, once per body program and active parameters (a scan differentiated
// twice, or in a jit traced again, is analysed once).
std::vector<int> saved_values(const ScanView& s, const prim::Regions& regions,
                              const std::vector<detail::Vary>& vary,
                              const std::vector<bool>& active) {
  static std::mutex mu;
  static std::map<std::pair<const ir::Program*, std::vector<bool>>,
                  std::pair<std::weak_ptr<const ir::Program>, std::vector<int>>>
      cache;
  const auto key = std::make_pair(regions[0].get(), active);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end() && !it->second.first.expired()) return it->second.second;
  }
  std::vector<int> found = values_backward_reads(s, vary, active);
  std::lock_guard<std::mutex> lock(mu);
  std::erase_if(cache, [](const auto& e) { return e.second.first.expired(); });
  cache[key] = {regions[0], found};
  return found;
}

// The varying axes of the body's arguments inside shard_map (none elsewhere).
std::vector<detail::Vary> body_vary(const ScanView& s) {
  std::vector<detail::Vary> out;
  for (const Array& a : s.body_args(s.init, s.xs)) out.push_back(detail::vary_of(a));
  return out;
}

}  // namespace

std::vector<Array> scan_forward_saving(const ir::Attrs& attrs, const prim::Regions& regions,
                                       const std::vector<Array>& operands,
                                       std::vector<Array>* residuals,
                                       const std::vector<bool>* active) {
  const ScanView s(attrs, regions, operands);
  const std::vector<int> keep = saved_values(s, regions, body_vary(s), s.body_active(active));
  // Results: the final carries, the incoming carries stacked, the body's ys, then the values
  // the backward pass reads, stacked.
  std::shared_ptr<void> proto;
  std::vector<Array> out = detail::scan_call(
      s.init, s.xs, s.length, s.reverse,
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        const std::vector<Array> carry = part(t, 0, s.nc), x = part(t, s.nc, s.xs.size());
        std::vector<Array> env = evaluate(s.body, s.body_args(carry, x));
        std::vector<Array> r;
        for (size_t k = 0; k < s.nc; ++k) r.push_back(env[static_cast<size_t>(s.body.results[k])]);
        r.insert(r.end(), carry.begin(), carry.end());
        for (size_t j = 0; j < s.ny; ++j) {
          r.push_back(env[static_cast<size_t>(s.body.results[s.nc + j])]);
        }
        for (int v : keep) r.push_back(env[static_cast<size_t>(v)]);
        return r;
      },
      proto);
  *residuals = part(out, s.nc, s.nc);
  const std::vector<Array> kept = part(out, 2 * s.nc + s.ny, keep.size());
  residuals->insert(residuals->end(), kept.begin(), kept.end());
  std::vector<Array> results = part(out, 0, s.nc);
  for (size_t j = 0; j < s.ny; ++j) results.push_back(out[2 * s.nc + j]);
  return results;
}

std::vector<Array> scan_vjp(const prim::VjpArgs& a) {
  const ScanView s(a.attrs, a.regions, a.primals);
  const size_t nc = s.nc, nx = s.nx, ny = s.ny, sx = s.xs.size();
  // 1. The carries entering each iteration and the values the backward reads, stacked: saved by
  // the forward evaluation, or computed here.
  std::vector<Array> saved;
  if (a.residuals) {
    saved = *a.residuals;
  } else {
    scan_forward_saving(a.attrs, a.regions, a.primals, &saved, a.active);
  }
  const std::vector<bool> active = s.body_active(a.active);
  const std::vector<int> keep = saved_values(s, a.regions, body_vary(s), active);
  if (saved.size() != nc + keep.size()) {
    detail::internal_error("grad", fmt::format("scan saved {} residuals for {} carries and {} values",
                                               saved.size(), nc, keep.size()));
  }
  const size_t nk = keep.size();

  // 2. Backward: a scan in the other direction over (saved carries, xs, ys' cotangents), carrying
  // the carries' cotangents and the sums of the consts' cotangents. Each step recomputes its
  // iteration from the saved carry and goes backward through it.
  const size_t off = s.fori ? 1 : 0;  // the body's parameters: (index), carries, xs, consts
  std::vector<size_t> float_consts;
  for (size_t j = 0; j < s.consts.size(); ++j) {
    if (is_floating(s.consts[j].dtype()) && active[off + nc + nx + j]) float_consts.push_back(j);
  }
  const size_t nf = float_consts.size();
  std::vector<Array> bwd_init;
  for (size_t k = 0; k < nc; ++k) bwd_init.push_back(or_zeros(a.cotangents[k], a.outputs[k]));
  for (size_t j : float_consts) bwd_init.push_back(zeros_like(s.consts[j]));
  std::vector<Array> bwd_xs = part(saved, 0, nc);
  bwd_xs.insert(bwd_xs.end(), s.xs.begin(), s.xs.end());
  for (size_t j = 0; j < ny; ++j)
    bwd_xs.push_back(or_zeros(a.cotangents[nc + j], a.outputs[nc + j]));
  for (size_t k = 0; k < nk; ++k) bwd_xs.push_back(saved[nc + k]);
  std::shared_ptr<void> proto;
  std::vector<Array> bwd = detail::scan_call(
      bwd_init, bwd_xs, s.length, !s.reverse,
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        const std::vector<Array> ct_carry = part(t, 0, nc), acc = part(t, nc, nf);
        const std::vector<Array> carry = part(t, nc + nf, nc), x = part(t, nc + nf + nc, sx);
        const std::vector<Array> ct_y = part(t, nc + nf + nc + sx, ny);
        const std::vector<Array> kept = part(t, nc + nf + nc + sx + ny, nk);
        // The iteration recomputed, then its saved values put in place: what the backward reads
        // comes from the forward pass, and the recomputation nothing reads is dead code.
        Residuals inner;
        std::vector<Array> env = evaluate(s.body, s.body_args(carry, x), &inner, &active);
        for (size_t k = 0; k < nk; ++k) env[static_cast<size_t>(keep[k])] = kept[k];
        std::vector<Array> cts = ct_carry;
        cts.insert(cts.end(), ct_y.begin(), ct_y.end());
        std::vector<Array> g = backward(s.body, env, cts, &inner, &active);
        // g: the body's parameters, (index), carries, scanned slices, consts.
        std::vector<Array> out;
        for (size_t k = 0; k < nc; ++k) out.push_back(or_zeros(g[off + k], carry[k]));
        for (size_t f = 0; f < nf; ++f) {
          const Array& gc = g[off + nc + nx + float_consts[f]];
          out.push_back(gc.valid() ? acc[f] + gc : acc[f]);
        }
        for (size_t j = 0; j < nx; ++j) out.push_back(or_zeros(g[off + nc + j], x[off + j]));
        return out;
      },
      proto);

  std::vector<Array> grads(a.primals.size());
  for (size_t k = 0; k < nc; ++k) grads[k] = bwd[k];
  for (size_t j = 0; j < nx; ++j) grads[nc + j] = bwd[nc + nf + j];
  for (size_t f = 0; f < nf; ++f) grads[nc + nx + float_consts[f]] = bwd[nc + f];
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!is_floating(a.primals[i].dtype())) grads[i] = Array();
  }
  return grads;
}

std::vector<Array> cond_vjp(const prim::VjpArgs& a) {
  const std::vector<Array> args = part(a.primals, 1, a.primals.size() - 1);
  std::vector<Array> cts;
  for (size_t k = 0; k < a.outputs.size(); ++k)
    cts.push_back(or_zeros(a.cotangents[k], a.outputs[k]));
  // The branches' parameters are the operands after the predicate.
  std::vector<bool> active(args.size(), true);
  if (a.active) active.assign(a.active->begin() + 1, a.active->end());
  std::vector<size_t> diff;
  for (size_t i = 0; i < args.size(); ++i) {
    if (is_floating(args[i].dtype()) && active[i]) diff.push_back(i);
  }
  auto branch = [&](const ir::Program& prog) {
    return [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
      const std::vector<Array> primals = part(t, 0, args.size());
      const std::vector<Array> ct = part(t, args.size(), cts.size());
      Residuals inner;
      std::vector<Array> env = evaluate(prog, primals, &inner, &active);
      std::vector<Array> g = backward(prog, env, ct, &inner, &active);
      std::vector<Array> out;
      for (size_t i : diff) out.push_back(or_zeros(g[i], primals[i]));
      return out;
    };
  };
  std::vector<Array> operands = args;
  operands.insert(operands.end(), cts.begin(), cts.end());
  std::shared_ptr<void> pt, pf;
  std::vector<Array> g = detail::cond_call(a.primals[0], operands, branch(*a.regions[0]),
                                           branch(*a.regions[1]), pt, pf);
  std::vector<Array> grads(a.primals.size());
  for (size_t d = 0; d < diff.size(); ++d) grads[1 + diff[d]] = g[d];
  return grads;
}

}  // namespace partix::autodiff

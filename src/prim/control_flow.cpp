// Control flow with regions:
//   scan{length, reverse, num_carry, num_xs}: body (carries, x slices, consts) -> (carries, ys)
//   fori_loop{lower, upper, num_carry}:       body (i32 index, carries, consts) -> carries
//   while_loop{num_carry}: regions cond, body, each (carries, consts) -> bool[] / carries
//   cond: operands (pred, args); regions true, false, each (args) -> results
// Bodies run on the device's worker through the interpreter's region runner, carries moved
// from one iteration into the next so that unique buffers are updated in place. The VJPs are
// written with the control-flow ops themselves, so that the backward pass is one loop (one
// branch) whatever the trip count.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "autodiff/vjp.h"
#include "core/errors.h"
#include "core/scalar.h"
#include "ir/primitive.h"
#include "partix/control.h"
#include "partix/ops.h"
#include "prim/control_batching.h"
#include "prim/util.h"
#include "trace/loop_carries.h"
#include "trace/trace.h"

namespace partix::prim {

namespace {

std::vector<Aval> result_avals(const ir::Program& p) {
  std::vector<Aval> out;
  for (int v : p.results) out.push_back(p.aval(v));
  return out;
}

// Region parameter k must take operand `in` as it is.
void check_param(std::string_view op, const ir::Program& body, size_t k, const Aval& want,
                 const std::string& what) {
  const Aval& got = body.aval(body.params[k]);
  if (got != want) {
    detail::fail(op, "the body takes {} as {} where the operand is {}", what, got.to_string(),
                 want.to_string());
  }
}

// Carries keep their type: result k of `body` must equal the initial value's aval.
void check_carries(std::string_view op, const ir::Program& body, const std::vector<Aval>& init,
                   size_t param_offset) {
  detail::check(body.results.size() >= init.size(), op, "the body returns {} values for {} carries",
                body.results.size(), init.size());
  for (size_t k = 0; k < init.size(); ++k) {
    check_param(op, body, param_offset + k, init[k], fmt::format("carry {}", k));
    const Aval& out = body.aval(body.results[k]);
    if (out != init[k]) {
      detail::fail(op, "body returns carry {} {} where init is {}", k, out.to_string(),
                   init[k].to_string());
    }
  }
}

std::vector<detail::Buffer> slice_out(std::vector<detail::Buffer>& xs, size_t from, size_t n) {
  std::vector<detail::Buffer> out;
  out.reserve(n);
  for (size_t k = from; k < from + n; ++k) out.push_back(std::move(xs[k]));
  return out;
}

bool read_pred(const detail::Buffer& b, DType dt) { return detail::load_scalar(b.data(), dt) != 0; }

// A count attribute (carries, scanned inputs) of a parsed program: within [0, limit].
size_t count_attr(std::string_view op, const Attrs& attrs, const char* name, size_t limit) {
  const int64_t n = attrs.i(name);
  detail::check(n >= 0 && static_cast<uint64_t>(n) <= limit, op, "{}={} is out of range [0, {}]",
                name, n, limit);
  return static_cast<size_t>(n);
}

// Carries' factors are shared between operand and result (one sharding across iterations);
// scanned dimensions need replication; every other dimension is a free factor.
FactorRule loop_rule(const std::vector<Aval>& in, const std::vector<Aval>& out, size_t first_carry,
                     size_t num_carry, size_t num_xs, size_t num_ys) {
  FactorRuleBuilder b;
  auto free_dims = [&](const Aval& a, bool scanned) {
    std::vector<DimFactors> dims;
    for (size_t d = 0; d < a.shape.size(); ++d) {
      dims.push_back({b.add(a.shape[d], scanned && d == 0 ? FactorKind::kNeedReplication
                                                          : FactorKind::kPassThrough)});
    }
    return dims;
  };
  std::vector<std::vector<DimFactors>> carry;
  for (size_t i = 0; i < in.size(); ++i) {
    const bool is_carry = i >= first_carry && i < first_carry + num_carry;
    const bool is_xs = i >= first_carry + num_carry && i < first_carry + num_carry + num_xs;
    b.rule().operands.push_back(free_dims(in[i], is_xs));
    if (is_carry) carry.push_back(b.rule().operands.back());
  }
  for (size_t k = 0; k < out.size(); ++k) {
    if (k < num_carry) {
      b.rule().results.push_back(carry[k]);
    } else {
      b.rule().results.push_back(free_dims(out[k], k - num_carry < num_ys));
    }
  }
  return b.rule();
}

// ---- reverse mode ----

Array or_zeros(const Array& ct, const Array& like) {
  return ct.valid() ? ct : autodiff::zeros_like(like);
}

std::vector<Array> part(const std::vector<Array>& xs, size_t from, size_t n) {
  return std::vector<Array>(xs.begin() + static_cast<long>(from),
                            xs.begin() + static_cast<long>(from + n));
}

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
      const std::vector<bool> values = autodiff::active_values(body, &on);
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
    probe =
        detail::trace_probe(avals, vary, [&](const std::vector<Array>& t, detail::TraceState& ts) {
          const std::vector<Array> args = part(t, 0, n_args),
                                   cts = part(t, n_args, t.size() - n_args);
          autodiff::Residuals inner;
          std::vector<Array> env = autodiff::evaluate(s.body, args, &inner, &active);
          for (int v : candidates) {
            const Array& a = env[static_cast<size_t>(v)];
            if (a.valid() && a.is_tracer()) traced[static_cast<size_t>(v)] = ts.value_of(a);
          }
          first_backward = ts.program().instrs.size();
          std::vector<Array> g = autodiff::backward(s.body, env, cts, &inner, &active);
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

// scan or fori_loop evaluated so that it also stacks the carries entering each iteration and the
// values the backward pass reads: returns the instruction's results and sets `residuals`, for a
// VJP given the same `active` operands (null: all).
std::vector<Array> scan_forward_saving(const ir::Attrs& attrs, const prim::Regions& regions,
                                       const std::vector<Array>& operands,
                                       std::vector<Array>* residuals,
                                       const std::vector<bool>* active) {
  const ScanView s(attrs, regions, operands);
  const std::vector<int> keep = saved_values(s, regions, body_vary(s), s.body_active(active));
  // Results: the final carries, the incoming carries stacked, the body's ys, then the values
  // the backward pass reads, stacked.
  std::shared_ptr<void> proto;
  const detail::LooseCarriesScope loose;  // a loop of its own making: carries widen
  std::vector<Array> out = detail::scan_call(
      s.init, s.xs, s.length, s.reverse,
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        const std::vector<Array> carry = part(t, 0, s.nc), x = part(t, s.nc, s.xs.size());
        std::vector<Array> env = autodiff::evaluate(s.body, s.body_args(carry, x));
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

// ---- scan and fori_loop: a loop with a static trip count ----
class Scan final : public Primitive {
 public:
  explicit Scan(bool fori) : fori_(fori) {}
  std::string_view name() const override { return fori_ ? "fori_loop" : "scan"; }
  const Batching* batching() const override {
    static const ScanBatching b;
    return &b;
  }
  bool accepts_quantized() const override { return true; }

  int64_t length(const Attrs& a) const {
    if (!fori_) return a.i("length");
    // Checked in infer to fit int32, so the difference cannot overflow.
    const int64_t lo = std::clamp<int64_t>(a.i("lower"), INT32_MIN, INT32_MAX);
    const int64_t hi = std::clamp<int64_t>(a.i("upper"), INT32_MIN, INT32_MAX);
    return hi - lo;
  }

  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions& regions) const override {
    detail::check(regions.size() == 1, name(), "needs exactly one body, got {}", regions.size());
    const ir::Program& body = *regions[0];
    const int64_t n = length(attrs);
    detail::check(n >= 0, name(), "the trip count {} is negative", n);
    const size_t nc = count_attr(name(), attrs, "num_carry", in.size());
    const size_t nx = fori_ ? 0 : count_attr(name(), attrs, "num_xs", in.size() - nc);
    const size_t off = fori_ ? 1 : 0;  // fori_loop's body takes the index first
    if (fori_) {
      detail::check(attrs.i("lower") >= INT32_MIN && attrs.i("upper") <= INT32_MAX, name(),
                    "bounds [{}, {}) do not fit the int32 index", attrs.i("lower"),
                    attrs.i("upper"));
    }
    detail::check(nc + nx <= in.size() && body.params.size() == in.size() + off, name(),
                  "{} operands ({} carries, {} scanned) for a body of {} parameters", in.size(), nc,
                  nx, body.params.size());
    if (fori_) {
      check_param(name(), body, 0, Aval{{}, DType::I32}, "the index");
    }
    check_carries(name(), body, std::vector<Aval>(in.begin(), in.begin() + static_cast<long>(nc)),
                  off);
    const size_t ny = body.results.size() - nc;
    detail::check(!fori_ || ny == 0, name(), "the body returns {} values for {} carries",
                  body.results.size(), nc);
    for (size_t j = 0; j < nx; ++j) {
      const Aval& xs = in[nc + j];
      if (!(xs.ndim() >= 1 && xs.shape[0] == n)) {
        detail::fail(name(), "scanned input {} is {}: it needs a leading axis of length {}", j,
                     xs.to_string(), n);
      }
      check_param(name(), body, off + nc + j,
                  Aval{Shape(xs.shape.begin() + 1, xs.shape.end()), xs.dtype},
                  fmt::format("a slice of scanned input {}", j));
    }
    for (size_t i = nc + nx; i < in.size(); ++i) {
      check_param(name(), body, off + i, in[i], fmt::format("operand {}", i));
    }
    std::vector<Aval> out(in.begin(), in.begin() + static_cast<long>(nc));
    for (size_t j = 0; j < ny; ++j) {
      Aval y = body.aval(body.results[nc + j]);
      y.shape.insert(y.shape.begin(), n);
      detail::checked_size(name(), y.shape, y.dtype);
      out.push_back(y);
    }
    return out;
  }

  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs& attrs) const override {
    const size_t nc = static_cast<size_t>(attrs.i("num_carry"));
    const size_t nx = fori_ ? 0 : static_cast<size_t>(attrs.i("num_xs"));
    return loop_rule(in, out, 0, nc, nx, out.size() - nc);
  }

  std::vector<std::set<std::string>> varying(const std::vector<std::set<std::string>>& in,
                                             const Attrs& attrs, const Regions& regions,
                                             size_t) const override {
    const ir::Program& body = *regions[0];
    const size_t nc = static_cast<size_t>(attrs.i("num_carry"));
    std::vector<std::set<std::string>> out;
    for (size_t k = 0; k < body.results.size(); ++k) {
      std::set<std::string> s = body.info(body.results[k]).varying;
      if (k < nc) s.insert(in[k].begin(), in[k].end());
      out.push_back(std::move(s));
    }
    return out;
  }

  // A forward scan that stacks each iteration's incoming carries, then a reverse scan that
  // recomputes one iteration from them and goes backward through it.
  std::vector<Array> vjp(const VjpArgs& a) const override;
  bool evaluate_saving(const std::vector<Array>& operands, const Attrs& attrs,
                       const Regions& regions, const std::vector<bool>* active,
                       std::vector<Array>* results, std::vector<Array>* residuals) const override {
    *results = scan_forward_saving(attrs, regions, operands, residuals, active);
    return true;
  }

  void reference(const KernelCall&) const override {
    detail::internal_error(name(), "runs through execute()");
  }
  bool runs_regions() const override { return true; }
  RegionLayout region_layout(const Attrs& attrs) const override {
    RegionLayout l;
    l.param_offset = fori_ ? 1 : 0;
    l.num_carry = static_cast<size_t>(attrs.i("num_carry"));
    l.num_xs = fori_ ? 0 : static_cast<size_t>(attrs.i("num_xs"));
    l.stacks_results = true;
    return l;
  }
  // Operands are carries, scanned inputs and captures, each passed to its own region parameter
  // under the per-carry rule of varying(): joining them would make every carry vary as soon as
  // one capture does (a trip counter beside a varying buffer).
  bool joins_operand_varying() const override { return false; }
  double trip_count(const Attrs& attrs, size_t) const override {
    return static_cast<double>(length(attrs));
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  // execute(): the stacked ys from the start.
  int64_t bytes_held_around_regions(const std::vector<Aval>&, const std::vector<Aval>& out,
                                    const Attrs& attrs) const override {
    const size_t nc = static_cast<size_t>(attrs.i("num_carry"));
    int64_t held = 0;
    for (size_t k = nc; k < out.size(); ++k) held += out[k].nbytes();
    return held;
  }
  // Each iteration's slices of the scanned inputs (fori_loop: its index) are fresh buffers
  // (a slice that is a view of the stacked input is counted as one too).
  std::vector<bool> region_params_made_per_run(const Attrs& attrs, size_t) const override {
    const size_t nc = static_cast<size_t>(attrs.i("num_carry"));
    if (fori_) return {true};
    std::vector<bool> made(nc, false);
    made.resize(nc + static_cast<size_t>(attrs.i("num_xs")), true);
    return made;
  }

  std::vector<detail::Buffer> execute(const KernelCall& c, std::vector<detail::Buffer> args,
                                      const RegionRunner& run) const override {
    const int64_t n = length(c.attrs);
    const bool reverse = !fori_ && c.attrs.b_or("reverse", false);
    const size_t nc = static_cast<size_t>(c.attrs.i("num_carry"));
    const size_t nx = fori_ ? 0 : static_cast<size_t>(c.attrs.i("num_xs"));
    const int64_t lower = fori_ ? c.attrs.i("lower") : 0;
    std::vector<detail::Buffer> carry = slice_out(args, 0, nc);
    std::vector<detail::Buffer> xs = slice_out(args, nc, nx);
    std::vector<detail::Buffer> consts = slice_out(args, nc + nx, args.size() - nc - nx);
    std::vector<int64_t> x_bytes;
    for (size_t j = 0; j < nx; ++j) {
      x_bytes.push_back(n == 0 ? 0 : c.in_aval(nc + j).nbytes() / n);
    }
    std::vector<detail::Buffer> ys;
    std::vector<int64_t> y_bytes;
    for (size_t k = nc; k < c.out_avals.size(); ++k) {
      ys.push_back(detail::Buffer::allocate(c.ctx.device, c.out_aval(k).nbytes()));
      y_bytes.push_back(n == 0 ? 0 : c.out_aval(k).nbytes() / n);
    }
    for (int64_t t = 0; t < n; ++t) {
      const int64_t i = reverse ? n - 1 - t : t;
      std::vector<detail::Buffer> body_args;
      body_args.reserve((fori_ ? 1 : 0) + nc + nx + consts.size());
      if (fori_) {
        detail::Buffer idx = detail::Buffer::allocate(c.ctx.device, 4);
        const int32_t value = static_cast<int32_t>(lower + i);
        std::memcpy(idx.data(), &value, 4);
        body_args.push_back(std::move(idx));
      }
      for (auto& b : carry) body_args.push_back(std::move(b));
      for (size_t j = 0; j < nx; ++j) {
        // A slice that starts on the allocator's alignment is a view of the stacked input (the
        // layers of a scanned model are not copied per step); another is copied.
        const int64_t offset = i * x_bytes[j];
        if (offset % 64 == 0) {
          body_args.push_back(xs[j].view(offset, x_bytes[j]));
          continue;
        }
        detail::Buffer x = detail::Buffer::allocate(c.ctx.device, x_bytes[j]);
        std::memcpy(x.data(), static_cast<const char*>(xs[j].data()) + offset,
                    static_cast<size_t>(x_bytes[j]));
        body_args.push_back(std::move(x));
      }
      for (const auto& b : consts) body_args.push_back(b);
      std::vector<detail::Buffer> outs = run(0, std::move(body_args));
      carry = slice_out(outs, 0, nc);
      for (size_t k = 0; k < ys.size(); ++k) {
        std::memcpy(static_cast<char*>(ys[k].data()) + i * y_bytes[k], outs[nc + k].data(),
                    static_cast<size_t>(y_bytes[k]));
      }
    }
    for (auto& y : ys) carry.push_back(std::move(y));
    return carry;
  }

 private:
  bool fori_;
};

std::vector<Array> Scan::vjp(const VjpArgs& a) const {
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
    detail::internal_error(
        "grad", fmt::format("scan saved {} residuals for {} carries and {} values", saved.size(),
                            nc, keep.size()));
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
  for (size_t j : float_consts) bwd_init.push_back(autodiff::zeros_like(s.consts[j]));
  std::vector<Array> bwd_xs = part(saved, 0, nc);
  bwd_xs.insert(bwd_xs.end(), s.xs.begin(), s.xs.end());
  for (size_t j = 0; j < ny; ++j)
    bwd_xs.push_back(or_zeros(a.cotangents[nc + j], a.outputs[nc + j]));
  for (size_t k = 0; k < nk; ++k) bwd_xs.push_back(saved[nc + k]);
  std::shared_ptr<void> proto;
  const detail::LooseCarriesScope loose;  // a loop of its own making: carries widen
  std::vector<Array> bwd = detail::scan_call(
      bwd_init, bwd_xs, s.length, !s.reverse,
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        const std::vector<Array> ct_carry = part(t, 0, nc), acc = part(t, nc, nf);
        const std::vector<Array> carry = part(t, nc + nf, nc), x = part(t, nc + nf + nc, sx);
        const std::vector<Array> ct_y = part(t, nc + nf + nc + sx, ny);
        const std::vector<Array> kept = part(t, nc + nf + nc + sx + ny, nk);
        // The iteration recomputed, then its saved values put in place: what the backward reads
        // comes from the forward pass, and the recomputation nothing reads is dead code.
        autodiff::Residuals inner;
        std::vector<Array> env = autodiff::evaluate(s.body, s.body_args(carry, x), &inner, &active);
        for (size_t k = 0; k < nk; ++k) env[static_cast<size_t>(keep[k])] = kept[k];
        std::vector<Array> cts = ct_carry;
        cts.insert(cts.end(), ct_y.begin(), ct_y.end());
        std::vector<Array> g = autodiff::backward(s.body, env, cts, &inner, &active);
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

// ---- while_loop: cond and body regions over the same parameters ----
class WhileLoop final : public Primitive {
 public:
  std::string_view name() const override { return "while_loop"; }
  const Batching* batching() const override {
    static const WhileBatching b;
    return &b;
  }
  bool accepts_quantized() const override { return true; }

  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions& regions) const override {
    detail::check(regions.size() == 2, name(), "needs a cond and a body, got {} regions",
                  regions.size());
    const ir::Program& cond = *regions[0];
    const ir::Program& body = *regions[1];
    const size_t nc = count_attr(name(), attrs, "num_carry", in.size());
    detail::check(body.params.size() == in.size() && cond.params.size() == in.size(), name(),
                  "{} operands ({} carries) for a cond of {} and a body of {} parameters",
                  in.size(), nc, cond.params.size(), body.params.size());
    std::vector<Aval> init(in.begin(), in.begin() + static_cast<long>(nc));
    check_carries(name(), body, init, 0);
    detail::check(body.results.size() == nc, name(), "the body returns {} values for {} carries",
                  body.results.size(), nc);
    for (size_t i = 0; i < in.size(); ++i) {
      check_param(name(), cond, i, in[i], fmt::format("operand {}", i));
      if (i >= nc) check_param(name(), body, i, in[i], fmt::format("operand {}", i));
    }
    if (!(cond.results.size() == 1 && cond.aval(cond.results[0]) == Aval{{}, DType::Bool})) {
      detail::fail(name(), "cond must return a bool scalar, got {}",
                   avals_to_string(result_avals(cond)));
    }
    return init;
  }

  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs& attrs) const override {
    return loop_rule(in, out, 0, static_cast<size_t>(attrs.i("num_carry")), 0, 0);
  }

  std::vector<std::set<std::string>> varying(const std::vector<std::set<std::string>>& in,
                                             const Attrs&, const Regions& regions,
                                             size_t) const override {
    const ir::Program& body = *regions[1];
    // A predicate that varies gives devices different trip counts: every carry varies with it.
    const std::set<std::string>& pred = regions[0]->info(regions[0]->results[0]).varying;
    std::vector<std::set<std::string>> out;
    for (size_t k = 0; k < body.results.size(); ++k) {
      std::set<std::string> s = body.info(body.results[k]).varying;
      s.insert(in[k].begin(), in[k].end());
      s.insert(pred.begin(), pred.end());
      out.push_back(std::move(s));
    }
    return out;
  }

  // Gradients reach the results through the carries and what the body reads, never through
  // what only the condition reads.
  std::vector<bool> operands_with_gradient_path(const Attrs& attrs, const Regions& regions,
                                                size_t num_operands) const override {
    const ir::Program& body = *regions[1];
    std::vector<bool> read(body.values.size(), false);
    for (const ir::Instr& b : body.instrs) {
      for (int v : b.inputs) read[static_cast<size_t>(v)] = true;
    }
    for (int v : body.results) read[static_cast<size_t>(v)] = true;
    const size_t nc = static_cast<size_t>(attrs.i("num_carry"));
    std::vector<bool> path(num_operands, false);
    for (size_t k = 0; k < num_operands && k < body.params.size(); ++k) {
      path[k] = k < nc || read[static_cast<size_t>(body.params[k])];
    }
    return path;
  }

  std::vector<Array> vjp(const VjpArgs&) const override {
    detail::fail("while_loop",
                 "reverse-mode differentiation through a while_loop is not supported: the "
                 "differentiated input reaches its carries (or what its body reads) and its trip "
                 "count is not static; use fori_loop or scan with static bounds");
  }

  void reference(const KernelCall&) const override {
    detail::internal_error(name(), "runs through execute()");
  }
  bool runs_regions() const override { return true; }
  RegionLayout region_layout(const Attrs& attrs) const override {
    RegionLayout l;
    l.num_carry = static_cast<size_t>(attrs.i("num_carry"));
    l.body = 1;
    l.predicate_region = 0;
    return l;
  }
  // Operands feed their own region parameters under a per-carry rule (as for scan).
  bool joins_operand_varying() const override { return false; }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }

  std::vector<detail::Buffer> execute(const KernelCall& c, std::vector<detail::Buffer> args,
                                      const RegionRunner& run) const override {
    const size_t nc = static_cast<size_t>(c.attrs.i("num_carry"));
    std::vector<detail::Buffer> carry = slice_out(args, 0, nc);
    std::vector<detail::Buffer> consts = slice_out(args, nc, args.size() - nc);
    while (true) {
      // The cond sees shared handles: it reads the carries and never writes them.
      std::vector<detail::Buffer> cond_args = carry;
      for (const auto& b : consts) cond_args.push_back(b);
      std::vector<detail::Buffer> pred = run(0, std::move(cond_args));
      if (!read_pred(pred[0], DType::Bool)) break;
      std::vector<detail::Buffer> body_args = std::move(carry);
      for (const auto& b : consts) body_args.push_back(b);
      carry = run(1, std::move(body_args));
    }
    return carry;
  }
};

// ---- cond: one of two branches over the same operands ----
class Cond final : public Primitive {
 public:
  std::string_view name() const override { return "cond"; }
  const Batching* batching() const override {
    static const CondBatching b;
    return &b;
  }
  bool accepts_quantized() const override { return true; }

  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs&,
                          const Regions& regions) const override {
    detail::check(regions.size() == 2, name(), "needs a true and a false branch, got {} regions",
                  regions.size());
    detail::check(!in.empty(), name(), "needs a predicate operand");
    if (in[0] != Aval{{}, DType::Bool}) {
      detail::fail(name(), "the predicate must be a bool scalar, got {}", in[0].to_string());
    }
    const ir::Program& t = *regions[0];
    const ir::Program& f = *regions[1];
    const std::vector<Aval> args(in.begin() + 1, in.end());
    detail::check(t.params.size() == args.size() && f.params.size() == args.size(), name(),
                  "{} operands for branches of {} and {} parameters", args.size(), t.params.size(),
                  f.params.size());
    for (size_t i = 0; i < args.size(); ++i) {
      check_param(name(), t, i, args[i], fmt::format("operand {}", i));
      check_param(name(), f, i, args[i], fmt::format("operand {}", i));
    }
    std::vector<Aval> rt = result_avals(t), rf = result_avals(f);
    if (rt != rf) {
      detail::fail(name(), "true_fn returns ({}) but false_fn returns ({})", avals_to_string(rt),
                   avals_to_string(rf));
    }
    return rt;
  }

  FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                         const Attrs&) const override {
    return loop_rule(in, out, 0, 0, 0, 0);
  }

  std::vector<std::set<std::string>> varying(const std::vector<std::set<std::string>>& in,
                                             const Attrs&, const Regions& regions,
                                             size_t) const override {
    std::vector<std::set<std::string>> out;
    for (size_t k = 0; k < regions[0]->results.size(); ++k) {
      std::set<std::string> s = in[0];
      for (const auto& r : regions) {
        const auto& v = r->info(r->results[k]).varying;
        s.insert(v.begin(), v.end());
      }
      out.push_back(std::move(s));
    }
    return out;
  }

  // A cond over the same predicate whose branches are the branches' VJPs.
  std::vector<Array> vjp(const VjpArgs& a) const override;

  void reference(const KernelCall&) const override {
    detail::internal_error(name(), "runs through execute()");
  }
  bool runs_regions() const override { return true; }
  // The predicate stays outside the branches. Its operands are not joined at the bind: cond()
  // widens each by the predicate's axes before tracing the branches (trace/control_flow.cpp),
  // so that a branch sees them as they arrive.
  bool joins_operand_varying() const override { return false; }
  RegionLayout region_layout(const Attrs&) const override {
    RegionLayout l;
    l.first_operand = 1;
    l.one_region_runs = true;
    return l;
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }

  std::vector<detail::Buffer> execute(const KernelCall&, std::vector<detail::Buffer> args,
                                      const RegionRunner& run) const override {
    const bool taken = read_pred(args[0], DType::Bool);
    std::vector<detail::Buffer> operands = slice_out(args, 1, args.size() - 1);
    return run(taken ? 0 : 1, std::move(operands));
  }
};

std::vector<Array> Cond::vjp(const VjpArgs& a) const {
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
      autodiff::Residuals inner;
      std::vector<Array> env = autodiff::evaluate(prog, primals, &inner, &active);
      std::vector<Array> g = autodiff::backward(prog, env, ct, &inner, &active);
      std::vector<Array> out;
      for (size_t i : diff) out.push_back(or_zeros(g[i], primals[i]));
      return out;
    };
  };
  std::vector<Array> operands = args;
  operands.insert(operands.end(), cts.begin(), cts.end());
  std::shared_ptr<void> pt, pf;
  const detail::LooseCarriesScope loose;  // a loop of its own making: carries widen
  std::vector<Array> g = detail::cond_call(a.primals[0], operands, branch(*a.regions[0]),
                                           branch(*a.regions[1]), pt, pf);
  std::vector<Array> grads(a.primals.size());
  for (size_t d = 0; d < diff.size(); ++d) grads[1 + diff[d]] = g[d];
  return grads;
}

struct RegisterScan {
  RegisterScan() {
    static Scan scan(false), fori(true);
    register_primitive(&scan);
    register_primitive(&fori);
  }
};

RegisterScan r_scan;
Register<WhileLoop> r_while;
Register<Cond> r_cond;

}  // namespace
}  // namespace partix::prim

// Control flow with regions (DESIGN §6.3):
//   scan{length, reverse, num_carry, num_xs}: body (carries, x slices, consts) -> (carries, ys)
//   fori_loop{lower, upper, num_carry}:       body (i32 index, carries, consts) -> carries
//   while_loop{num_carry}: regions cond, body, each (carries, consts) -> bool[] / carries
//   cond: operands (pred, args); regions true, false, each (args) -> results
// Bodies run on the device's worker through the interpreter's region runner, carries moved
// from one iteration into the next so that unique buffers are updated in place.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "autodiff/vjp.h"
#include "core/errors.h"
#include "core/scalar.h"
#include "ir/primitive.h"
#include "prim/util.h"

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
  detail::check(got == want, op, "the body takes {} as {} where the operand is {}", what,
                got.to_string(), want.to_string());
}

// Carries keep their type: result k of `body` must equal the initial value's aval.
void check_carries(std::string_view op, const ir::Program& body, const std::vector<Aval>& init,
                   size_t param_offset) {
  detail::check(body.results.size() >= init.size(), op, "the body returns {} values for {} carries",
                body.results.size(), init.size());
  for (size_t k = 0; k < init.size(); ++k) {
    check_param(op, body, param_offset + k, init[k], fmt::format("carry {}", k));
    const Aval& out = body.aval(body.results[k]);
    detail::check(out == init[k], op, "body returns carry {} {} where init is {}", k,
                  out.to_string(), init[k].to_string());
  }
}

std::vector<detail::Buffer> slice_out(std::vector<detail::Buffer>& xs, size_t from, size_t n) {
  std::vector<detail::Buffer> out;
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

// ---- scan and fori_loop: a loop with a static trip count ----
class Scan final : public Primitive {
 public:
  explicit Scan(bool fori) : fori_(fori) {}
  std::string_view name() const override { return fori_ ? "fori_loop" : "scan"; }

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
      detail::check(xs.ndim() >= 1 && xs.shape[0] == n, name(),
                    "scanned input {} is {}: it needs a leading axis of length {}", j,
                    xs.to_string(), n);
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

  std::vector<Array> vjp(const VjpArgs& a) const override { return autodiff::scan_vjp(a); }

  void reference(const KernelCall&) const override {
    detail::internal_error(name(), "runs through execute()");
  }
  bool runs_regions() const override { return true; }
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
  // Each iteration's slices of the scanned inputs (fori_loop: its index) are fresh buffers.
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
      if (fori_) {
        detail::Buffer idx = detail::Buffer::allocate(c.ctx.device, 4);
        const int32_t value = static_cast<int32_t>(lower + i);
        std::memcpy(idx.data(), &value, 4);
        body_args.push_back(std::move(idx));
      }
      for (auto& b : carry) body_args.push_back(std::move(b));
      for (size_t j = 0; j < nx; ++j) {
        detail::Buffer x = detail::Buffer::allocate(c.ctx.device, x_bytes[j]);
        std::memcpy(x.data(), static_cast<const char*>(xs[j].data()) + i * x_bytes[j],
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

// ---- while_loop: cond and body regions over the same parameters ----
class WhileLoop final : public Primitive {
 public:
  std::string_view name() const override { return "while_loop"; }

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
    detail::check(cond.results.size() == 1 && cond.aval(cond.results[0]) == Aval{{}, DType::Bool},
                  name(), "cond must return a bool scalar, got {}",
                  avals_to_string(result_avals(cond)));
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

  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs&,
                          const Regions& regions) const override {
    detail::check(regions.size() == 2, name(), "needs a true and a false branch, got {} regions",
                  regions.size());
    detail::check(!in.empty(), name(), "needs a predicate operand");
    detail::check(in[0] == Aval{{}, DType::Bool}, name(),
                  "the predicate must be a bool scalar, got {}", in[0].to_string());
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
    detail::check(rt == rf, name(), "true_fn returns ({}) but false_fn returns ({})",
                  avals_to_string(rt), avals_to_string(rf));
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

  std::vector<Array> vjp(const VjpArgs& a) const override { return autodiff::cond_vjp(a); }

  void reference(const KernelCall&) const override {
    detail::internal_error(name(), "runs through execute()");
  }
  bool runs_regions() const override { return true; }
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

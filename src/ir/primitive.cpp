#include "ir/primitive.h"

#include <map>
#include <mutex>

#include "core/errors.h"

namespace partix::prim {

namespace {
struct Registry {
  std::map<std::string, const Primitive*, std::less<>> prims;
  std::map<std::pair<std::string, std::string>, KernelFn> kernels;
  std::map<std::pair<std::string, std::string>, KernelPrepareFn> prepares;
};
Registry& registry() {
  static Registry r;
  return r;
}
}  // namespace

void register_primitive(const Primitive* p) {
  auto [it, inserted] = registry().prims.emplace(std::string(p->name()), p);
  if (!inserted)
    detail::internal_error("register_primitive", "duplicate " + std::string(p->name()));
}

const Primitive* find_primitive(std::string_view name) {
  auto it = registry().prims.find(name);
  return it == registry().prims.end() ? nullptr : it->second;
}

const Primitive& get_primitive(std::string_view name) {
  const Primitive* p = find_primitive(name);
  if (!p) detail::internal_error("get_primitive", "no primitive '" + std::string(name) + "'");
  return *p;
}

std::vector<std::string> primitive_names() {
  std::vector<std::string> out;
  for (const auto& [n, p] : registry().prims) out.push_back(n);
  return out;
}

void register_kernel(std::string_view prim, std::string_view platform, KernelFn fn) {
  registry().kernels[{std::string(prim), std::string(platform)}] = std::move(fn);
}

const KernelFn* find_kernel(std::string_view prim, std::string_view platform) {
  auto it = registry().kernels.find({std::string(prim), std::string(platform)});
  return it == registry().kernels.end() ? nullptr : &it->second;
}

void register_kernel_prepare(std::string_view prim, std::string_view platform, KernelPrepareFn fn) {
  registry().prepares[{std::string(prim), std::string(platform)}] = std::move(fn);
}

const KernelPrepareFn* find_kernel_prepare(std::string_view prim, std::string_view platform) {
  auto it = registry().prepares.find({std::string(prim), std::string(platform)});
  return it == registry().prepares.end() ? nullptr : &it->second;
}

int FactorRuleBuilder::add(int64_t size, FactorKind kind, ReduceKind reduce) {
  rule_.factors.push_back(Factor{size, kind, reduce, false});
  return static_cast<int>(rule_.factors.size()) - 1;
}

FactorRule FactorRuleBuilder::elementwise(const std::vector<Aval>& in, const Aval& out) {
  FactorRuleBuilder b;
  std::vector<DimFactors> dims;
  for (int64_t d : out.shape) dims.push_back({b.add(d)});
  for (const Aval& a : in) {
    // Rank-0 operands (scalars) have no dimensions; others match the result.
    b.rule_.operands.push_back(a.shape.empty() ? std::vector<DimFactors>{} : dims);
  }
  b.rule_.results.push_back(dims);
  return b.rule_;
}

FactorRule FactorRuleBuilder::whole_dims(const Aval& in, const Aval& out, size_t scalars) {
  FactorRuleBuilder b;
  std::vector<DimFactors> op, res;
  for (size_t d = 0; d < in.shape.size(); ++d) {
    if (in.shape[d] == out.shape[d]) {
      int f = b.add(in.shape[d]);
      op.push_back({f});
      res.push_back({f});
    } else {
      op.push_back({b.add(in.shape[d], FactorKind::kNeedReplication)});
      res.push_back({b.add(out.shape[d], FactorKind::kNeedReplication)});
    }
  }
  b.rule_.operands.push_back(op);
  for (size_t i = 0; i < scalars; ++i) b.rule_.operands.push_back({});
  b.rule_.results = {res};
  return b.rule_;
}

FactorRule FactorRuleBuilder::created(const std::vector<Aval>& in, const Aval& out,
                                      bool positional) {
  FactorRuleBuilder b;
  for (const Aval& a : in) {
    std::vector<DimFactors> dims;
    for (int64_t d : a.shape) dims.push_back({b.add(d, FactorKind::kNeedReplication)});
    b.rule_.operands.push_back(dims);
  }
  std::vector<DimFactors> res;
  for (int64_t d : out.shape) {
    int f = b.add(d);
    b.rule_.factors[static_cast<size_t>(f)].positional = positional;
    res.push_back({f});
  }
  b.rule_.results = {res};
  return b.rule_;
}

std::string FactorRule::to_string() const {
  auto name = [](int f) {
    return std::string(1, static_cast<char>('i' + f % 18)) +
           (f >= 18 ? std::to_string(f / 18) : "");
  };
  auto side = [&](const std::vector<std::vector<DimFactors>>& xs) {
    std::vector<std::string> parts;
    for (const auto& dims : xs) {
      std::vector<std::string> ds;
      for (const DimFactors& fs : dims) {
        std::string d;
        for (int f : fs) d += name(f);
        ds.push_back(d.empty() ? "1" : d);
      }
      parts.push_back(fmt::format("[{}]", fmt::join(ds, ",")));
    }
    return fmt::format("({})", fmt::join(parts, ","));
  };
  std::string s = side(operands) + "->" + side(results);
  for (size_t f = 0; f < factors.size(); ++f) {
    const Factor& fa = factors[f];
    if (fa.kind == FactorKind::kReduction) {
      const char* k = fa.reduce == ReduceKind::kSum   ? "sum"
                      : fa.reduce == ReduceKind::kMax ? "max"
                                                      : "min";
      s += fmt::format(" {}=reduction({})", name(static_cast<int>(f)), k);
    } else if (fa.kind == FactorKind::kNeedReplication) {
      s += fmt::format(" {}=replicated", name(static_cast<int>(f)));
    }
  }
  return s;
}

FactorRule Partitioning::factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                                     const Attrs&) const {
  FactorRuleBuilder b;
  for (const Aval& a : in) {
    std::vector<DimFactors> dims;
    for (int64_t d : a.shape) dims.push_back({b.add(d, FactorKind::kNeedReplication)});
    b.rule().operands.push_back(dims);
  }
  for (const Aval& a : out) {
    std::vector<DimFactors> dims;
    for (int64_t d : a.shape) dims.push_back({b.add(d, FactorKind::kNeedReplication)});
    b.rule().results.push_back(dims);
  }
  return b.rule();
}

std::vector<Array> Differentiation::vjp(const VjpArgs&) const {
  detail::fail("grad", "the primitive '{}' is not differentiable", name());
}

std::vector<std::set<std::string>> Typing::varying(const std::vector<std::set<std::string>>& in,
                                                   const Attrs&, const Regions&,
                                                   size_t num_outputs) const {
  std::set<std::string> u;
  for (const auto& s : in) u.insert(s.begin(), s.end());
  return std::vector<std::set<std::string>>(num_outputs, u);
}

std::vector<detail::Buffer> Execution::execute(const KernelCall&, std::vector<detail::Buffer>,
                                               const RegionRunner&) const {
  detail::internal_error("execute", std::string(name()) + " does not run regions");
}

double Cost::flops(const std::vector<Aval>&, const std::vector<Aval>& out, const Attrs&) const {
  double n = 0;
  for (const Aval& a : out) n += static_cast<double>(a.size());
  return n;
}

}  // namespace partix::prim

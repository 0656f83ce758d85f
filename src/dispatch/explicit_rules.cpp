// Explicit sharding rules: each op's result types from its operands' types at
// trace time. The rule is the primitive's factor rule, the one sharding propagation uses:
// per factor, the operands' Explicit axes must agree (None agrees with anything); a factor
// that reaches the results shards them, a reduction factor split in one operand is reduced
// (the result is replicated over it), one split in several is ambiguous, and a factor that
// needs replication cannot stay split. Control flow takes its regions' result types.
#include <algorithm>
#include <set>

#include "core/errors.h"
#include "dispatch/hooks.h"
#include "partix/array.h"
#include "sharding/axes.h"
#include "spmd/factors.h"
#include "trace/trace.h"

namespace partix::detail {

namespace {

std::string whole_axis(const std::string& name) { return name.substr(0, name.find(':')); }

// Thrown inside the rule; explicit_result_types turns it into the user's error (or, in a
// lenient scope, into untyped results).
struct Ambiguous {
  std::string what;
  std::string hint;
};

std::string type_text(const ir::Aval& a, const std::optional<NamedSharding>& t) {
  return ArrayType(a.shape, a.dtype, t).to_string();
}

// The common spec of two types, comparing absent types as replicated.
bool same_type(const std::optional<NamedSharding>& a, const std::optional<NamedSharding>& b,
               int rank) {
  for (int d = 0; d < rank; ++d) {
    if ((a ? a->spec()[d] : PartitionSpec::Entry{}) !=
        (b ? b->spec()[d] : PartitionSpec::Entry{})) {
      return false;
    }
  }
  const std::set<std::string> none;
  return (a ? a->unreduced() : none) == (b ? b->unreduced() : none);
}

// Control flow: carries keep their types, results are the body's (a scan's stacked results
// gain an unsplit leading dimension), and every branch must agree.
std::vector<std::optional<NamedSharding>> region_result_types(
    const prim::Primitive& p, const std::vector<std::optional<NamedSharding>>& in_types,
    const std::vector<ir::Aval>& in, const std::vector<ir::Aval>& out, const ir::Attrs& attrs,
    const prim::Regions& regions, const Mesh& mesh) {
  const prim::Primitive::RegionLayout lay = p.region_layout(attrs);
  auto result_type = [&](const ir::Program& r, size_t k) -> std::optional<NamedSharding> {
    const ir::ValueInfo& info = r.info(r.results[k]);
    return explicit_type(info.sharding);
  };
  std::vector<std::optional<NamedSharding>> types(out.size());
  if (lay.body >= regions.size() || !regions[lay.body]) return types;
  const ir::Program& body = *regions[lay.body];
  for (size_t k = 0; k < out.size() && k < body.results.size(); ++k) {
    std::optional<NamedSharding> t = result_type(body, k);
    if (lay.stacks_results && k >= lay.num_carry && t) {
      std::vector<PartitionSpec::Entry> entries{{}};
      for (int d = 0; d < out[k].ndim() - 1; ++d) entries.push_back(t->spec()[d]);
      t = NamedSharding(t->mesh(), PartitionSpec(entries), t->unreduced());
    }
    types[k] = t;
  }
  const std::string op = p.user_name(attrs);
  for (size_t k = 0; k < lay.num_carry && k < out.size(); ++k) {
    const size_t i = lay.first_operand + k;
    if (i >= in_types.size()) break;
    if (!same_type(in_types[i], types[k], out[k].ndim())) {
      throw Ambiguous{fmt::format("carry {} enters as {} but the body returns it as {}", k,
                                  type_text(in[i], in_types[i]), type_text(out[k], types[k])),
                      "Reshard the carry inside the body (or before the loop) so both agree"};
    }
    types[k] = in_types[i];
  }
  if (lay.one_region_runs) {
    for (size_t r = 0; r < regions.size(); ++r) {
      if (r == lay.body || !regions[r]) continue;
      for (size_t k = 0; k < out.size() && k < regions[r]->results.size(); ++k) {
        std::optional<NamedSharding> t = result_type(*regions[r], k);
        if (!same_type(types[k], t, out[k].ndim())) {
          throw Ambiguous{
              fmt::format("result {} is {} in branch {} but {} in branch {}", k,
                          type_text(out[k], types[k]), lay.body, type_text(out[k], t), r),
              "Reshard the result in the branches so that they agree"};
        }
      }
    }
  }
  (void)mesh;
  return types;
}

// Empty results (a slice past the end) hold nothing to split: unsplit, whatever the operands.
std::optional<std::vector<std::optional<NamedSharding>>> empty_result_types(
    const std::vector<std::optional<NamedSharding>>& in_types, const std::vector<ir::Aval>& out) {
  if (!std::all_of(out.begin(), out.end(), [](const ir::Aval& a) { return a.size() == 0; })) {
    return std::nullopt;
  }
  for (const auto& t : in_types) {
    if (t)
      return std::vector<std::optional<NamedSharding>>(out.size(), NamedSharding(t->mesh(), P()));
  }
  return std::nullopt;
}

std::vector<std::optional<NamedSharding>> factor_result_types(
    const prim::Primitive& p, const std::vector<std::optional<NamedSharding>>& in_types,
    const std::vector<ir::Aval>& in, const std::vector<ir::Aval>& out, const ir::Attrs& attrs,
    const Mesh& mesh) {
  if (auto empty = empty_result_types(in_types, out)) return *empty;
  const prim::FactorRule rule = p.partitioning().factor_rule(in, out, attrs);
  const size_t nf = rule.factors.size();
  std::vector<spmd::AxisList> axes(nf);
  std::vector<int> first(nf, -1), count(nf, 0);
  auto operand = [&](size_t i) {
    return fmt::format("operand {} ({})", i, type_text(in[i], in_types[i]));
  };
  for (size_t i = 0; i < in_types.size() && i < rule.operands.size(); ++i) {
    if (!in_types[i]) continue;
    const NamedSharding& t = *in_types[i];
    const std::map<int, spmd::AxisList> proj = spmd::project(t, rule.operands[i], rule);
    // Every split of the operand must land on a factor; a split project() cannot place (an
    // axis that does not divide the factors of a merged dimension) cannot be kept.
    int64_t split = 1, placed = 1;
    for (int d = 0; d < in[i].ndim(); ++d) split *= spmd::axes_product(mesh, t.spec()[d]);
    for (const auto& [f, ax] : proj) placed *= spmd::axes_product(mesh, ax);
    if (placed != split) {
      throw Ambiguous{fmt::format("it cannot keep the split of {}", operand(i)),
                      "Reshard the operand so that the split dimensions are kept whole by the op, "
                      "or give out_sharding="};
    }
    for (const auto& [f, ax] : proj) {
      const size_t fi = static_cast<size_t>(f);
      if (ax.empty()) continue;
      ++count[fi];
      if (first[fi] < 0) {
        axes[fi] = ax;
        first[fi] = static_cast<int>(i);
      } else if (axes[fi] != ax) {
        throw Ambiguous{
            fmt::format("{} and {} are split differently along one dimension ({} against {})",
                        operand(static_cast<size_t>(first[fi])), operand(i),
                        fmt::join(axes[fi], ","), fmt::join(ax, ",")),
            "Reshard one operand to match the other, or give out_sharding="};
      }
    }
  }
  // Factors that reach a result.
  std::vector<bool> in_result(nf, false);
  for (const auto& r : rule.results) {
    for (const prim::DimFactors& fs : r) {
      for (int f : fs) in_result[static_cast<size_t>(f)] = true;
    }
  }
  for (size_t f = 0; f < nf; ++f) {
    if (axes[f].empty()) continue;
    const prim::Factor& fac = rule.factors[f];
    if (fac.kind == prim::FactorKind::kNeedReplication) {
      // The op needs the dimension whole. Where the op consumes it (argmax's axis), the result
      // is simply not split there and the partitioner gathers the operand; otherwise (a sort
      // axis, a resized window) the split cannot be kept.
      if (!in_result[f] && p.partitioning().consumes_replicated_factors()) {
        axes[f].clear();
        continue;
      }
      throw Ambiguous{fmt::format("{} is split along a dimension the op needs whole",
                                  operand(static_cast<size_t>(first[f]))),
                      "Reshard that dimension to None first, or give out_sharding="};
    }
    if (fac.kind == prim::FactorKind::kReduction && count[f] > 1) {
      throw Ambiguous{
          fmt::format("the contracted dimension is split over {} in every operand, so the result "
                      "could be left unreduced or reduced in several ways",
                      fmt::join(axes[f], ",")),
          "Give out_sharding= (with unreduced= to keep partial sums)"};
    }
    // A reduction factor split in one operand: that operand is reduced over it, and the
    // result is replicated there (the partitioner reduces the partial results).
    if (fac.kind == prim::FactorKind::kReduction) axes[f].clear();
  }
  // Unreduced operands: jointly linear ops keep a common unreduced set; multilinear ones
  // (mul, dot) take one unreduced operand; other ops need reduced values.
  std::set<std::string> unreduced;
  {
    std::vector<size_t> with;
    for (size_t i = 0; i < in_types.size(); ++i) {
      if (in_types[i] && !in_types[i]->unreduced().empty()) with.push_back(i);
    }
    if (!with.empty()) {
      const prim::Linearity lin = p.partitioning().linearity(attrs);
      unreduced = in_types[with[0]]->unreduced();
      bool ok = false;
      if (lin == prim::Linearity::kLinear) {
        ok = true;
        for (size_t i = 0; i < in_types.size(); ++i) {
          const std::set<std::string> none;
          if ((in_types[i] ? in_types[i]->unreduced() : none) != unreduced) ok = false;
        }
      } else if (lin == prim::Linearity::kMultilinear) {
        ok = with.size() == 1;
      }
      if (!ok) {
        // JAX's words first ("unreduced rule for sin is not implemented").
        throw Ambiguous{
            fmt::format("unreduced rule for {} is not implemented: {} is unreduced, which this op "
                        "cannot take as it is",
                        p.user_name(attrs), operand(with[0])),
            "Reshard it to a reduced sharding first"};
      }
    }
  }
  std::vector<std::optional<NamedSharding>> types;
  for (size_t k = 0; k < out.size() && k < rule.results.size(); ++k) {
    std::vector<PartitionSpec::Entry> entries;
    std::vector<std::string> used;
    for (const prim::DimFactors& fs : rule.results[k]) {
      PartitionSpec::Entry e;
      // A dimension made of several factors keeps a split only as one layout can state it:
      // a factor may be split only when every more-major factor of the dimension is split
      // completely, and evenly (a reshape merging [2@x,2,2@y] into [8] cannot keep y).
      if (fs.size() > 1) {
        bool whole_so_far = true;
        for (int f : fs) {
          const spmd::AxisList& ax = axes[static_cast<size_t>(f)];
          const int64_t size = rule.factors[static_cast<size_t>(f)].size;
          const int64_t n = spmd::axes_product(mesh, ax);
          if (!ax.empty() && (!whole_so_far || size % n != 0)) {
            throw Ambiguous{
                fmt::format("result {} cannot keep the split over {} of a dimension it merges "
                            "with others",
                            k, fmt::join(ax, ",")),
                "Reshard so that only the major merged dimension is split, or give "
                "out_sharding="};
          }
          whole_so_far = whole_so_far && n == size;
        }
      }
      for (int f : fs) {
        for (const std::string& a : axes[static_cast<size_t>(f)]) {
          if (overlaps_any(mesh, a, used) || unreduced.count(whole_axis(a))) {
            throw Ambiguous{
                fmt::format("the result would be split over mesh axis '{}' twice", whole_axis(a)),
                "Give out_sharding= for the result, or reshard an operand"};
          }
          used.push_back(a);
          e.push_back(a);
        }
      }
      entries.push_back(canonical_entry(mesh, e));
    }
    while (!entries.empty() && entries.back().empty()) entries.pop_back();
    types.emplace_back(NamedSharding(mesh, PartitionSpec(entries), unreduced));
  }
  types.resize(out.size());
  return types;
}

}  // namespace

std::vector<std::optional<NamedSharding>> dispatch_explicit_result_types(
    const prim::Primitive& p, const std::vector<std::optional<NamedSharding>>& in_types,
    const std::vector<ir::Aval>& in, const std::vector<ir::Aval>& out, const ir::Attrs& attrs,
    const prim::Regions& regions) {
  const Mesh* mesh = nullptr;
  size_t first = 0;
  for (size_t i = 0; i < in_types.size(); ++i) {
    if (!in_types[i]) continue;
    if (!mesh) {
      mesh = &in_types[i]->mesh();
      first = i;
    } else if (!(in_types[i]->mesh() == *mesh)) {
      fail(p.user_name(attrs),
           "operand {} is typed on {} but operand {} on {}; reshard them onto one mesh", first,
           mesh->to_string(), i, in_types[i]->mesh().to_string());
    }
  }
  if (!mesh) return {};
  try {
    if (auto pin = p.partitioning().pinned_shardings(attrs)) {
      // The op states its results' shardings (a constraint, shard_map's out_specs): their
      // Explicit part is the type.
      std::vector<std::optional<NamedSharding>> types;
      for (size_t k = 0; k < out.size(); ++k) {
        types.push_back(k < pin->results.size() ? explicit_type(pin->result(*mesh, k))
                                                : std::nullopt);
      }
      // A constraint's unconstrained dimensions keep the operand's type there.
      if (!pin->unconstrained.empty() && types.size() == 1 && types[0] && !in_types.empty() &&
          in_types[0]) {
        std::vector<PartitionSpec::Entry> entries;
        for (int d = 0; d < out[0].ndim(); ++d) entries.push_back(types[0]->spec()[d]);
        std::vector<std::string> used = types[0]->spec().axes();
        for (int d : pin->unconstrained) {
          for (const auto& a : in_types[0]->spec()[d]) {
            if (!overlaps_any(*mesh, a, used)) {
              entries[static_cast<size_t>(d)].push_back(a);
              used.push_back(a);
            }
          }
        }
        types[0] = NamedSharding(*mesh, PartitionSpec(entries));
      }
      return types;
    }
    // Control flow, and remat (whose region is inlined): the results are the region's.
    if (p.execution().runs_regions() || p.partitioning().inlined_when_compiled()) {
      return region_result_types(p, in_types, in, out, attrs, regions, *mesh);
    }
    return factor_result_types(p, in_types, in, out, attrs, *mesh);
  } catch (const Ambiguous& a) {
    if (explicit_lenient()) return std::vector<std::optional<NamedSharding>>(out.size());
    std::string where = user_location();
    const std::string scope = current_scope();
    if (!scope.empty()) where += (where.empty() ? "" : ", ") + fmt::format("scope '{}'", scope);
    std::vector<std::string> operands;
    for (size_t i = 0; i < in.size(); ++i) operands.push_back(type_text(in[i], in_types[i]));
    fail(p.user_name(attrs), "explicit sharding: {}. Operands: {}. {}{}", a.what,
         fmt::join(operands, ", "), a.hint,
         where.empty() ? std::string() : fmt::format(" (at {})", where));
  }
}

}  // namespace partix::detail

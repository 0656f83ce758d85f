// shard_map{mesh, in_specs, out_specs, check_vma, in_/out_unreduced?, in_/out_reduced?} with one
// region (the body, traced on local blocks). Operands are split by in_specs, the body runs on
// every device, results are assembled by out_specs. The partitioner inlines the body
// (src/spmd/partition.cpp).
#include "autodiff/vjp.h"
#include "core/errors.h"
#include "ir/primitive.h"
#include "prim/control_batching.h"
#include "prim/util.h"

namespace partix::prim {

namespace {

class ShardMap final : public Primitive {
 public:
  std::string_view name() const override { return "shard_map"; }
  const Batching* batching() const override {
    static const ShardMapBatching b(*this);
    return &b;
  }
  // Operands arrive split by in_specs and results leave by out_specs; the body runs per device.
  std::optional<PinnedShardings> pinned_shardings(const Attrs& attrs) const override {
    PinnedShardings p{attrs.get<ir::Specs>("in_specs"), attrs.get<ir::Specs>("out_specs")};
    p.per_device_body = true;
    // Partial sums in and out (in_unreduced / out_unreduced): operands are made partial sums
    // on the way in, results stay partial sums.
    p.operand_unreduced = ir::axis_sets(attrs, "in_unreduced", p.operands.size());
    p.result_unreduced = ir::axis_sets(attrs, "out_unreduced", p.results.size());
    p.operand_reduced = ir::axis_sets(attrs, "in_reduced", p.operands.size());
    p.result_reduced = ir::axis_sets(attrs, "out_reduced", p.results.size());
    return p;
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions& regions) const override {
    detail::check(regions.size() == 1, name(), "needs exactly one body");
    const ir::Program& body = *regions[0];
    const Mesh& mesh = attrs.get<Mesh>("mesh");
    const auto& in_specs = attrs.get<ir::Specs>("in_specs");
    const auto& out_specs = attrs.get<ir::Specs>("out_specs");
    detail::check(in.size() == in_specs.size() && in.size() == body.params.size(), name(),
                  "{} operands, {} in_specs, {} body parameters", in.size(), in_specs.size(),
                  body.params.size());
    for (size_t i = 0; i < in.size(); ++i) {
      Shape local = NamedSharding(mesh, in_specs[i]).shard_shape(in[i].shape);
      const Aval& p = body.aval(body.params[i]);
      if (!(p.shape == local && p.dtype == in[i].dtype)) {
        detail::fail(name(), "operand {} is {} so its block is {}{}, but the body takes {}", i,
                     in[i].to_string(), dtype_name(in[i].dtype), shape_to_string(local),
                     p.to_string());
      }
    }
    detail::check(out_specs.size() == body.results.size(), name(), "{} out_specs for {} results",
                  out_specs.size(), body.results.size());
    std::vector<Aval> out;
    for (size_t k = 0; k < body.results.size(); ++k) {
      Aval a = body.aval(body.results[k]);
      NamedSharding s(mesh, out_specs[k]);
      s.check_shape(a.shape);
      for (int d = 0; d < a.ndim(); ++d) a.shape[static_cast<size_t>(d)] *= s.num_blocks(d);
      out.push_back(a);
    }
    return out;
  }
  // Nested in another shard_map's body (manual_axes= names this map's axes): each result varies
  // over the enclosing map's axes its body's result varies over; this map's own axes are
  // automatic outside it.
  std::vector<std::set<std::string>> varying(const std::vector<std::set<std::string>>& in,
                                             const Attrs& attrs, const Regions& regions,
                                             size_t num_outputs) const override {
    if (!attrs.has("manual_axes")) return Typing::varying(in, attrs, regions, num_outputs);
    const auto& own = attrs.get<ir::Strings>("manual_axes");
    std::vector<std::set<std::string>> out;
    for (int r : regions[0]->results) {
      std::set<std::string> v = regions[0]->info(r).varying;
      for (const auto& a : own) v.erase(a);
      out.push_back(std::move(v));
    }
    return out;
  }
  // Operands keep their own varying axes: the body's parameters were typed with them.
  bool joins_operand_varying() const override { return false; }
  std::vector<Array> vjp(const VjpArgs& a) const override;
  void reference(const KernelCall&) const override {
    detail::internal_error("shard_map", "a shard_map reached the interpreter unpartitioned");
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
};

std::vector<Array> ShardMap::vjp(const VjpArgs& a) const { return autodiff::shard_map_vjp(a); }

Register<ShardMap> r_shard_map;

}  // namespace
}  // namespace partix::prim

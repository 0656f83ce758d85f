#include "spmd/partition.h"

#include <map>

#include "core/errors.h"
#include "prim/primitive.h"
#include "spmd/reshard.h"

namespace partix::spmd {

namespace {

class Partitioner {
 public:
  Partitioner(const ir::Program& g, const Mesh& mesh)
      : g_(g), mesh_(mesh), builder_(out_.local, mesh), local_of_(g.values.size(), -1) {
    out_.local.name = g.name;
    out_.local.mesh = mesh;
  }

  Partitioned run(const std::vector<std::optional<NamedSharding>>& out_shardings) {
    for (int v : g_.params) {
      const NamedSharding& s = sharding(v);
      local_of_[static_cast<size_t>(v)] =
          builder_.param(ir::Aval{s.shard_shape(g_.aval(v).shape), g_.aval(v).dtype}, s);
    }
    for (const ir::Instr& in : g_.instrs) partition(in);
    for (size_t k = 0; k < g_.results.size(); ++k) {
      int v = g_.results[k];
      NamedSharding want = k < out_shardings.size() && out_shardings[k]
                               ? *out_shardings[k]
                               : NamedSharding(mesh_, sharding(v).spec());  // reduced
      out_.local.results.push_back(local(v, want));
      out_.out_shardings.push_back(want);
    }
    return std::move(out_);
  }

 private:
  const NamedSharding& sharding(int v) const {
    const auto& s = g_.info(v).sharding;
    if (!s) detail::internal_error("partition", fmt::format("%{} has no sharding", v));
    return *s;
  }

  std::string describe(int v) const {
    for (const ir::Instr& in : g_.instrs) {
      for (int o : in.outputs) {
        if (o == v) {
          std::string s = fmt::format("%{} ({}", v, in.prim->name());
          if (!in.scope.empty()) s += " in " + in.scope;
          return s + ")";
        }
      }
    }
    return fmt::format("%{} (argument)", v);
  }

  // The local value holding v's block in sharding `want` (resharding once per target).
  int local(int v, const NamedSharding& want) {
    const NamedSharding& have = sharding(v);
    int lv = local_of_[static_cast<size_t>(v)];
    if (have == want) return lv;
    auto key = std::make_pair(v, want.to_string());
    auto it = resharded_.find(key);
    if (it != resharded_.end()) return it->second;
    ReshardContext ctx{builder_, &out_.warnings, describe(v)};
    int r = reshard(ctx, lv, g_.aval(v).shape, have, want);
    resharded_[key] = r;
    return r;
  }

  void partition(const ir::Instr& in) {
    std::string_view n = in.prim->name();
    if (n == "shard_map") return shard_map(in);
    if (n == "sharding_constraint") {
      local_of_[static_cast<size_t>(in.outputs[0])] = local(in.inputs[0], sharding(in.outputs[0]));
      return;
    }
    // Replicated execution: every operand whole and reduced on every device.
    NamedSharding replicated(mesh_, P());
    std::vector<int> ins;
    for (int v : in.inputs) ins.push_back(local(v, replicated));
    for (int o : in.outputs) {
      if (!(sharding(o) == replicated)) {
        detail::internal_error("partition", fmt::format("%{} is sharded but its op runs replicated", o));
      }
    }
    auto outs = builder_.emit(in.prim->name(), ins, in.attrs, replicated, in.scope, in.regions);
    for (size_t k = 0; k < outs.size(); ++k) local_of_[static_cast<size_t>(in.outputs[k])] = outs[k];
  }

  // Reshards operands to in_specs and inlines the body; results are in out_specs.
  void shard_map(const ir::Instr& in) {
    const Mesh& m = in.attrs.get<Mesh>("mesh");
    if (!(m == mesh_)) {
      detail::fail("shard_map", "its mesh {} differs from the program's {}", m.to_string(),
                   mesh_.to_string());
    }
    const auto& in_specs = in.attrs.get<ir::Specs>("in_specs");
    const ir::Program& body = *in.regions[0];
    std::vector<int> map(body.values.size(), -1);
    for (size_t i = 0; i < in.inputs.size(); ++i) {
      map[static_cast<size_t>(body.params[i])] = local(in.inputs[i], NamedSharding(mesh_, in_specs[i]));
    }
    for (const ir::Instr& bi : body.instrs) {
      std::vector<int> ins;
      for (int v : bi.inputs) ins.push_back(map[static_cast<size_t>(v)]);
      auto outs = builder_.emit(bi.prim->name(), ins, bi.attrs, std::nullopt, bi.scope, bi.regions);
      for (size_t k = 0; k < outs.size(); ++k) {
        map[static_cast<size_t>(bi.outputs[k])] = outs[k];
        out_.local.info(outs[k]).varying = body.info(bi.outputs[k]).varying;
      }
    }
    for (size_t k = 0; k < in.outputs.size(); ++k) {
      int lv = map[static_cast<size_t>(body.results[k])];
      local_of_[static_cast<size_t>(in.outputs[k])] = lv;
    }
  }

  const ir::Program& g_;
  Mesh mesh_;
  Partitioned out_;
  LocalBuilder builder_;
  std::vector<int> local_of_;
  std::map<std::pair<int, std::string>, int> resharded_;
};

}  // namespace

Partitioned partition(const ir::Program& global, const Mesh& mesh,
                      const std::vector<std::optional<NamedSharding>>& out_shardings) {
  return Partitioner(global, mesh).run(out_shardings);
}

}  // namespace partix::spmd

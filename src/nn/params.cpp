// Logical axis rules and sharded parameter initialisation.
#include <set>

#include "core/errors.h"
#include "partix/nn.h"
#include "partix/ops.h"
#include "partix/random.h"
#include "partix/transforms.h"

namespace partix::nn {

PartitionSpec logical_to_spec(const LogicalAxes& axes, const LogicalRules& rules,
                              const Mesh& mesh) {
  std::set<std::string> used;
  std::vector<PartitionSpec::Entry> entries;
  for (const std::string& name : axes) {
    PartitionSpec::Entry e;
    if (!name.empty()) {
      for (const auto& [logical, mesh_axes] : rules.rules) {
        if (logical != name) continue;
        if (!mesh_axes) break;  // explicitly replicated
        bool ok = true;
        for (const auto& a : mesh_axes->names()) ok = ok && mesh.has_axis(a) && !used.count(a);
        if (!ok) continue;
        e = mesh_axes->names();
        break;
      }
    }
    for (const auto& a : e) used.insert(a);
    entries.push_back(e);
  }
  while (!entries.empty() && entries.back().empty()) entries.pop_back();
  return PartitionSpec(entries);
}

NamedSharding logical_sharding(const LogicalAxes& axes, const LogicalRules& rules,
                               const Mesh& mesh) {
  return NamedSharding(mesh, logical_to_spec(axes, rules, mesh));
}

Array logical_constraint(const Array& x, const LogicalAxes& axes, const LogicalRules& rules,
                         const Mesh& mesh) {
  detail::check(static_cast<int>(axes.size()) == x.ndim(), "logical_constraint",
                "{} logical names for an array of rank {}", axes.size(), x.ndim());
  return with_sharding_constraint(x, logical_sharding(axes, rules, mesh));
}

std::string to_string(const LogicalRules& rules) {
  std::string out;
  for (const auto& [logical, mesh_axes] : rules.rules) {
    out += fmt::format("  {:<10} -> {}\n", logical,
                       mesh_axes ? mesh_axes->to_string() : std::string("replicated"));
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const LogicalRules& rules) {
  return os << to_string(rules);
}

int64_t name_hash(const std::string& name) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : name) {
    h ^= c;
    h *= 16777619u;
  }
  return static_cast<int64_t>(h & 0x7fffffffu);
}

std::map<std::string, NamedSharding> param_shardings(const ParamSpecs& specs,
                                                     const LogicalRules& rules, const Mesh& mesh) {
  std::map<std::string, NamedSharding> out;
  for (const auto& [name, s] : specs) {
    if (s.axes.size() != s.shape.size()) {
      detail::fail("init_params", "parameter '{}' has shape {} but {} logical axes", name,
                   shape_to_string(s.shape), s.axes.size());
    }
    for (int64_t d : s.shape) {
      if (d < 0) {
        detail::fail("init_params", "parameter '{}' has a negative dimension in shape {}", name,
                     shape_to_string(s.shape));
      }
    }
    out.emplace(name, logical_sharding(s.axes, rules, mesh));
  }
  return out;
}

Params init_params(const ParamSpecs& specs, const Array& key, const Mesh& mesh,
                   const LogicalRules& rules) {
  auto shardings = param_shardings(specs, rules, mesh);
  if (!(key.dtype() == DType::I32 && key.shape() == Shape{2})) {
    detail::fail("init_params", "key must be an i32[2] key (from random::key), got {}{}",
                 dtype_name(key.dtype()), shape_to_string(key.shape()));
  }
  for (const auto& [name, s] : specs) {
    const bool random = s.init != Init::kZeros && s.init != Init::kOnes;
    detail::check(!random || is_floating(s.dtype), "init_params",
                  "parameter '{}' is {} but its random initialiser needs a floating dtype", name,
                  dtype_name(s.dtype));
  }
  JitOptions o;
  o.name = "init_params";
  for (const auto& [name, s] : shardings) o.out_shardings.push_back(s);
  auto init = jit(
      [&](const Array& k) {
        Params p;
        for (const auto& [name, s] : specs) {
          Array pk = random::fold_in(k, name_hash(name));
          Array v;
          switch (s.init) {
            case Init::kNormal: v = random::normal(pk, s.shape, DType::F32) * s.scale; break;
            case Init::kTruncatedNormal:
              v = random::truncated_normal(pk, -2.0, 2.0, s.shape, DType::F32) * s.scale;
              break;
            case Init::kUniform: v = random::uniform(pk, s.shape, DType::F32, -s.scale, s.scale); break;
            case Init::kZeros: v = broadcast_to(zeros({}), s.shape); break;
            case Init::kOnes: v = broadcast_to(ones({}), s.shape); break;
          }
          // Drawn in its sharding: each device generates only its block.
          p[name] = with_sharding_constraint(astype(v, s.dtype), shardings.at(name));
        }
        return p;
      },
      o);
  return init(device_put(key, NamedSharding(mesh, P())));
}

std::string describe(const ParamSpecs& specs, const LogicalRules& rules, const Mesh& mesh) {
  std::string out;
  for (const auto& [name, s] : specs) {
    out += fmt::format("{:<48} {}{:<14} ({}) -> {}\n", name, dtype_name(s.dtype),
                       shape_to_string(s.shape), fmt::join(s.axes, ", "),
                       logical_to_spec(s.axes, rules, mesh).to_string());
  }
  return out;
}

}  // namespace partix::nn

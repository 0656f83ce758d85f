// Parameter trees with sharding metadata: logical axis names per parameter dimension and
// logical-to-mesh rules (as Flax's sharding rules), and sharded initialisation that never
// materialises a whole parameter on one device.
#pragma once

#include <map>
#include <ostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "partix/array.h"
#include "partix/sharding.h"
#include "partix/tree.h"

namespace partix::nn {

// One logical name per dimension ("" for a dimension no rule shards), e.g. {"embed", "mlp"}.
using LogicalAxes = std::vector<std::string>;

// Ordered rules from logical names to mesh axes (none: replicated), e.g.
// {{"batch", Axes{"data"}}, {"mlp", Axes{"model"}}, {"embed", std::nullopt}}. A name may appear
// in several rules: the first whose mesh axes exist in the mesh and are still unused wins.
struct LogicalRules {
  std::vector<std::pair<std::string, std::optional<Axes>>> rules;
};
// One rule per line, in order: "  heads -> model", "  embed -> (replicated)".
std::string to_string(const LogicalRules& rules);
std::ostream& operator<<(std::ostream& os, const LogicalRules& rules);

PartitionSpec logical_to_spec(const LogicalAxes& axes, const LogicalRules& rules, const Mesh& mesh);
NamedSharding logical_sharding(const LogicalAxes& axes, const LogicalRules& rules, const Mesh& mesh);
// with_sharding_constraint by logical names (for activations inside jit).
Array logical_constraint(const Array& x, const LogicalAxes& axes, const LogicalRules& rules,
                         const Mesh& mesh);

enum class Init { kNormal, kTruncatedNormal, kUniform, kZeros, kOnes };

struct ParamSpec {
  Shape shape;
  LogicalAxes axes;  // one per dimension
  Init init = Init::kNormal;
  double scale = 0.02;  // stddev (normal), half-width (uniform)
  DType dtype = DType::F32;
};
using ParamSpecs = std::map<std::string, ParamSpec>;

std::map<std::string, NamedSharding> param_shardings(const ParamSpecs& specs,
                                                     const LogicalRules& rules, const Mesh& mesh);

// Every parameter drawn directly in its sharding: a parameter's values depend only on the key
// and its name, so every mesh gets bit-identical parameters.
Params init_params(const ParamSpecs& specs, const Array& key, const Mesh& mesh,
                   const LogicalRules& rules);

// A stable 31-bit hash of a parameter name (its random stream).
int64_t name_hash(const std::string& name);

// One line per parameter: name, shape, dtype, logical axes, sharding.
std::string describe(const ParamSpecs& specs, const LogicalRules& rules, const Mesh& mesh);

}  // namespace partix::nn

// The partitioner: turns a global program whose values all carry shardings (after
// propagation) into the per-device program, inserting the collectives.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/program.h"

namespace partix::spmd {

struct Partitioned {
  ir::Program local;
  std::vector<NamedSharding> out_shardings;  // of the local program's results
  std::vector<std::string> warnings;
};

// out_shardings: empty, or one per result (nullopt: keep the propagated sharding). A result
// left unreduced is reduced.
Partitioned partition(const ir::Program& global, const Mesh& mesh,
                      const std::vector<std::optional<NamedSharding>>& out_shardings);

}  // namespace partix::spmd

// The lowering pipeline: a traced global Program with some shardings given
// -> propagate shardings -> partition into the per-device program with collectives
// -> optimise -> an Executable.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ir/program.h"
#include "runtime/executable.h"

namespace partix::spmd {

struct CompileOptions {
  std::vector<std::optional<NamedSharding>> in_shardings;   // one per parameter
  std::vector<std::optional<NamedSharding>> out_shardings;  // empty, or one per result
  std::string name = "main";
};

struct Compiled {
  ir::Program global;  // the traced program with every value's sharding
  std::shared_ptr<runtime::Executable> executable;
  std::vector<std::string> warnings;  // e.g. resharding that fell back to gather-then-slice
};

// Precondition: every in_sharding is given (jit fills them from the arguments).
std::shared_ptr<Compiled> compile(const ir::Program& program, const CompileOptions& options);

}  // namespace partix::spmd

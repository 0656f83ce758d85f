// What a compiled program will do, per device: its text, flops, bytes moved by collectives,
// memory (DESIGN §2 Lowered).
#pragma once

#include <memory>

#include "partix/transforms.h"
#include "spmd/compile.h"

namespace partix::detail {

struct LoweredImpl {
  std::shared_ptr<spmd::Compiled> compiled;
  std::vector<bool> donated{};  // per program argument: given up by the caller (donate_argnums)
};

}  // namespace partix::detail

namespace partix::spmd {

CostAnalysis cost_analysis(const Compiled& c);
MemoryAnalysis memory_analysis(const Compiled& c, const std::vector<bool>& donated = {});

}  // namespace partix::spmd

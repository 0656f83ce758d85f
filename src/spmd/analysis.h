// What a compiled program will do, per device: its text, flops, bytes moved by collectives,
// memory (DESIGN §2 Lowered).
#pragma once

#include <memory>

#include "partix/transforms.h"
#include "spmd/compile.h"

namespace partix::detail {

struct LoweredImpl {
  std::shared_ptr<spmd::Compiled> compiled;
};

}  // namespace partix::detail

namespace partix::spmd {

CostAnalysis cost_analysis(const Compiled& c);
MemoryAnalysis memory_analysis(const Compiled& c);

}  // namespace partix::spmd

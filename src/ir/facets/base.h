// What every facet of a primitive (ir/primitive.h) speaks of: avals, attributes and regions.
#pragma once

#include <memory>
#include <vector>

#include "ir/program.h"

namespace partix::prim {

using ir::Attrs;
using ir::Aval;
using Regions = std::vector<std::shared_ptr<const ir::Program>>;

}  // namespace partix::prim

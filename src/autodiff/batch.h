// vmap over Programs: a program traced on one example is evaluated on batched values, each
// instruction through its primitive's batching facet (ir::Batching). ARCHITECTURE.md,
// "Transformations".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/primitive.h"
#include "ir/program.h"

namespace partix::autodiff {

using detail::Batched;

// b's value with its batch dimension at 0; an unbatched value broadcast to [size, ...].
Array at_front(const Batched& b, int64_t size);

// p evaluated on `args` (one per parameter, batched or not) in the current context (eagerly,
// or into the enclosing trace): instructions whose operands are all unbatched (and that name no
// vmapped axis) are bound as they are, the others batched by their primitive's rule; a
// primitive without one is refused by name.
std::vector<Batched> batch_evaluate(const ir::Program& p, const std::vector<Batched>& args,
                                    int64_t size, const std::string& axis_name);

// A program that computes `p` on `size` examples at once: every parameter and result has the
// batch dimension in front (the regions of loops, remat and custom derivatives, batched).
std::shared_ptr<const ir::Program> batch_region(const ir::Program& p, int64_t size,
                                                const std::string& axis_name);

}  // namespace partix::autodiff

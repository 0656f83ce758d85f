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

using detail::BatchAxis;
using detail::Batched;

// b's value with its batch dimension at 0; an unbatched value broadcast to [size, ...].
Array at_front(const Batched& b, int64_t size);

// Whether the instruction, or any instruction in its regions, names `axis_name` (a collective
// over vmap's axis): it is batched even when no operand is.
bool mentions_axis(const ir::Instr& in, const std::string& axis_name);

// Which values of p carry the batch dimension when the parameters marked in `params` do: those
// computed from a batched value or by an instruction that mentions the axis. A sound
// over-approximation of what batch_evaluate gives (loops use it to fix their carries).
std::vector<bool> batched_values(const ir::Program& p, const std::vector<bool>& params,
                                 const std::string& axis_name);
// The same for p's results.
std::vector<bool> batched_results(const ir::Program& p, const std::vector<bool>& params,
                                  const std::string& axis_name);

// p evaluated on `args` (one per parameter, batched or not) in the current context (eagerly,
// or into the enclosing trace): instructions whose operands are all unbatched (and that mention
// no vmapped axis) are bound as they are, the others batched by their primitive's rule; a
// primitive without one is refused by name.
std::vector<Batched> batch_evaluate(const ir::Program& p, const std::vector<Batched>& args,
                                    const BatchAxis& axis);

// A program that computes `p` on `axis.size` examples at once: every parameter marked in
// `params` (null: every parameter) and every result has the batch dimension in front (the
// regions of loops, remat, shard_map and custom derivatives, batched). `manual`: the mesh of the
// shard_map whose body p is (its axes manual inside).
std::shared_ptr<const ir::Program> batch_region(const ir::Program& p, const BatchAxis& axis,
                                                const std::vector<bool>* params = nullptr,
                                                const Mesh* manual = nullptr);

}  // namespace partix::autodiff

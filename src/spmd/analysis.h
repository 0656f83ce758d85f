// What a compiled program will do, per device: its text, flops, bytes moved by collectives,
// memory.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "partix/transforms.h"
#include "spmd/compile.h"

namespace partix::detail {

struct LoweredImpl {
  std::shared_ptr<spmd::Compiled> compiled;
  std::vector<bool> donated{};  // per program argument: given up by the caller (donate_argnums)
  // The values the trace captured (the program's last parameters): HLO text writes them as
  // constants, as JAX embeds a jitted function's captured arrays.
  std::vector<Array> captures{};
};

}  // namespace partix::detail

namespace partix::spmd {

// A note that a layer above adds to Lowered::as_text for programs it recognises (the pipeline
// prints each device's schedule): given the per-device program, comment lines ("# ...\n") or
// "". Notes print before the program, in the order registered.
using TextNote = std::function<std::string(const ir::Program& per_device)>;
void register_text_note(TextNote note);

// How often each branch of a conditional runs, for conditionals a layer above recognises (the
// pipeline's halves run their work branch in M*V of their ticks): one weight per region,
// summing to 1, or nullopt. Cost analysis weighs such a conditional's branches by them; others
// count as their costliest branch.
using BranchWeights =
    std::function<std::optional<std::vector<double>>(const ir::Program& p, const ir::Instr& cond)>;
void register_branch_weights(BranchWeights weights);

CostAnalysis cost_analysis(const Compiled& c);
MemoryAnalysis memory_analysis(const Compiled& c, const std::vector<bool>& donated = {});

}  // namespace partix::spmd

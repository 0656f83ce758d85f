// A primitive states its whole contract in one class, in facets each owned by the part of
// the system that asks it (ARCHITECTURE.md, "Primitives and their facets"):
//   typing           infer, varying                          trace/ (binding), the printer
//   partitioning     factor rule, linearity, pinned shardings spmd/, explicit sharding
//   differentiation  VJP, gradient paths, saved residuals     autodiff/vjp.cpp
//   batching         the vmap rule                            autodiff/batch.cpp
//   execution        reference kernel, regions, views, memory runtime/, backends
//   cost             flops, communication, trip counts       cost analysis
//   hlo              the op as XLA HLO instructions          ir/hlo.cpp (compiler_ir)
// A primitive class derives from Primitive and overrides what it needs of every facet in one
// place; the parts of the system see only the facet they ask for (typing(), partitioning(),
// ...), never the whole interface. Fast kernels live in src/backend/<platform> and are looked
// up by (primitive, platform).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/facets/base.h"
#include "ir/facets/batching.h"
#include "ir/facets/cost.h"
#include "ir/facets/differentiation.h"
#include "ir/facets/execution.h"
#include "ir/facets/hlo.h"
#include "ir/facets/partitioning.h"
#include "ir/facets/typing.h"

namespace partix::prim {

class Primitive : protected Typing,
                  protected Partitioning,
                  protected Differentiation,
                  protected Execution,
                  protected Cost,
                  protected HloExport {
 public:
  ~Primitive() override = default;
  std::string_view name() const override = 0;

  // The facets, each for the part of the system that asks it.
  const Typing& typing() const { return *this; }
  const Partitioning& partitioning() const { return *this; }
  const Differentiation& differentiation() const { return *this; }
  const Execution& execution() const { return *this; }
  const Cost& cost() const { return *this; }
  const HloExport& hlo() const { return *this; }
  // The batching facet (vmap), or null: the primitive cannot be batched.
  virtual const Batching* batching() const { return nullptr; }

  // ---- what every part asks ----
  // The name the user wrote for this instruction (psum for all_reduce{kind=sum}): messages
  // about a traced program speak it.
  virtual std::string user_name(const Attrs& attrs) const {
    (void)attrs;
    return std::string(name());
  }
  // Communicates between devices: typed per mesh axis inside shard_map, never fused, never
  // run ahead of the other devices' instructions.
  virtual bool is_collective() const { return false; }
  // Has an effect beyond its results (a host callback: a print, a write): dead-code elimination
  // keeps it though nothing uses its results, and nothing merges or reorders two of them.
  virtual bool has_effects() const { return false; }
  // Where the operands and results of an op that runs_regions() meet its regions' parameters
  // and results: sharding propagation, partitioning and cost analysis see through control flow
  // with it alone. Operands are [leading..., carries..., scanned..., the rest]; every region
  // takes [param_offset parameters made per run..., one per operand from first_operand on].
  struct RegionLayout {
    size_t first_operand = 0;  // operands before it feed no region (cond's predicate): replicated
    size_t param_offset = 0;   // region parameters before the operands' (fori_loop's index)
    size_t num_carry = 0;      // carries: operand, region parameter, body result and op result k
                               // are one value across runs, so they share a sharding
    size_t num_xs = 0;         // scanned operands after the carries: each run takes an axis-0 slice
    size_t body = 0;           // the region whose results are the op's results (any branch: cond)
    int predicate_region = -1;     // a region whose bool scalar decides whether to run again
    bool stacks_results = false;   // results after the carries stack one slice per run (scan ys)
    bool one_region_runs = false;  // each execution runs one of the regions (cond's branches)
  };
  virtual RegionLayout region_layout(const Attrs& attrs) const {
    (void)attrs;
    return {};
  }
};

// Registry of primitives by name (for the parser) and of fast kernels by platform.
void register_primitive(const Primitive* p);
const Primitive* find_primitive(std::string_view name);  // nullptr if unknown
const Primitive& get_primitive(std::string_view name);   // internal error if unknown
std::vector<std::string> primitive_names();

void register_kernel(std::string_view prim, std::string_view platform, KernelFn fn);
const KernelFn* find_kernel(std::string_view prim, std::string_view platform);
void register_kernel_prepare(std::string_view prim, std::string_view platform, KernelPrepareFn fn);
const KernelPrepareFn* find_kernel_prepare(std::string_view prim, std::string_view platform);

// Registers a primitive object at load time: `static Register<ExpPrim> reg;`.
template <class P>
struct Register {
  Register() {
    static P instance;
    register_primitive(&instance);
  }
};

}  // namespace partix::prim

// The typing facet of a primitive (ir/primitive.h): what its results are, given its operands'
// avals and, inside shard_map, the mesh axes they vary over. Asked by the tracer (trace/) when
// it binds an instruction, and by the printer's checks.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "ir/facets/base.h"

namespace partix::prim {

class Typing {
 public:
  virtual ~Typing() = default;
  // Result avals; throws partix::Error naming the op and the shapes on bad input.
  virtual std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                                  const Regions& regions) const = 0;
  // Inside shard_map: the mesh axes each result varies over, given the operands'.
  // The default: the union of the operands' sets.
  virtual std::vector<std::set<std::string>> varying(const std::vector<std::set<std::string>>& in,
                                                     const Attrs& attrs, const Regions& regions,
                                                     size_t num_outputs) const;
  // Inside shard_map, whether operands that vary over fewer mesh axes than the others first get
  // an explicit pvary, so that all vary alike (its transpose, psum, brings an invariant operand's
  // gradient back). Not for collectives, whose rules are per axis, nor for loops, whose operands
  // each feed their own region parameter under a per-carry rule, nor for cond, whose operands
  // are widened by its predicate's axes before its branches are traced.
  virtual bool joins_operand_varying() const { return true; }
  // Quantized arrays are storage for weights: only ops that keep blocks whole
  // take them (their infer checks which operand and which dimensions), and ops that hand them
  // to regions whose own ops are checked as they are traced. The tracer refuses the rest.
  virtual bool accepts_quantized() const { return false; }
};

}  // namespace partix::prim

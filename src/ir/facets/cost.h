// The cost facet of a primitive (ir/primitive.h): the work and traffic of one execution, as
// cost analysis (spmd/analysis.cpp, spmd/cost.cpp) counts them.
#pragma once

#include <string_view>
#include <vector>

#include "ir/facets/base.h"

namespace partix::prim {

class Cost {
 public:
  virtual ~Cost() = default;
  // Floating-point operations of one execution; the default counts one per result element.
  virtual double flops(const std::vector<Aval>& in, const std::vector<Aval>& out,
                       const Attrs& attrs) const;
  // Collectives: the kind cost analysis files the op's traffic under (XLA's names, so
  // "collective_permute" for ppermute; empty for ops that communicate nothing), and the bytes
  // one device sends for it.
  virtual std::string_view comm_kind() const { return {}; }
  virtual double comm_bytes(const std::vector<Aval>& in, const std::vector<Aval>& out,
                            const Attrs& attrs) const {
    (void)in, (void)out, (void)attrs;
    return 0;
  }
  // How many times region `k` runs per execution, where static; scan and fori_loop: the trip
  // count; a while_loop body counts once.
  virtual double trip_count(const Attrs& attrs, size_t k) const {
    (void)attrs, (void)k;
    return 1;
  }
};

}  // namespace partix::prim

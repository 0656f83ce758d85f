// The partitioning facet of a primitive (ir/primitive.h): how its instruction may be split over
// a mesh. Asked by sharding propagation, the partitioner and explicit sharding (spmd/,
// dispatch/explicit_rules.cpp) instead of switching on the op's name.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/reduce_kind.h"
#include "ir/facets/base.h"
#include "partix/array.h"

namespace partix::prim {

// ---- factor sharding rules ----

enum class FactorKind {
  kPassThrough,      // appears in the results; sharding it shards the results
  kReduction,        // absent from the results; sharding it leaves the results unreduced
  kNeedReplication,  // cannot be sharded (sort axis, unaligned reshape dims, ...)
};
using ReduceKind = detail::ReduceKind;

struct Factor {
  int64_t size = 1;
  FactorKind kind = FactorKind::kPassThrough;
  ReduceKind reduce = ReduceKind::kSum;  // for kReduction
  // The factor's values depend on the global position (iota, random bits): a sharded
  // kernel needs its block's offset.
  bool positional = false;
};

using DimFactors = std::vector<int>;  // factor ids of one dimension, major to minor

struct FactorRule {
  std::vector<Factor> factors;
  std::vector<std::vector<DimFactors>> operands;  // [operand][dim]
  std::vector<std::vector<DimFactors>> results;   // [result][dim]
  std::string to_string() const;                  // "([i,j],[j,k])->([i,k]) j=reduction(sum)"
};

// Builds factor rules: add factors, then attach them to dimensions.
class FactorRuleBuilder {
 public:
  int add(int64_t size, FactorKind kind = FactorKind::kPassThrough,
          ReduceKind reduce = ReduceKind::kSum);
  FactorRule& rule() { return rule_; }
  // The common rule of elementwise ops: one factor per result dimension, operands (already
  // broadcast to the result shape) share them.
  static FactorRule elementwise(const std::vector<Aval>& in, const Aval& out);
  // Window ops (slice, pad, dynamic_slice): a dimension kept whole passes through; a resized
  // one needs replication. `scalars` trailing rank-0 operands (start indices) have no dims.
  static FactorRule whole_dims(const Aval& in, const Aval& out, size_t scalars = 0);
  // Ops that create their result (constants, iota, random draws): operands (keys) stay
  // replicated; each result dimension is a free factor. `positional`: each element depends on
  // its global position, so a device computes its block from its offset (iota, random);
  // otherwise the block is sliced from replicated data (a literal).
  static FactorRule created(const std::vector<Aval>& in, const Aval& out, bool positional);

 private:
  FactorRule rule_;
};

// How an op may consume unreduced (partial-sum) operands.
enum class Linearity {
  kNone,         // every operand must be reduced first
  kLinear,       // jointly linear in all operands (add, sub, neg, reshape, slice, ...)
  kMultilinear,  // linear in each operand separately (mul, dot): at most one unreduced
};

class Partitioning {
 public:
  virtual ~Partitioning() = default;
  // The factor rule; the default makes every dimension need replication.
  virtual FactorRule factor_rule(const std::vector<Aval>& in, const std::vector<Aval>& out,
                                 const Attrs& attrs) const;
  virtual Linearity linearity() const { return Linearity::kNone; }
  // Linearity of one instance (pad is linear only when it pads with zero).
  virtual Linearity linearity(const Attrs&) const { return linearity(); }

  // A device's block of the op, as the partitioner emits it: attributes that name global sizes
  // (a target shape, slice bounds, the extent of a positional draw) become the block's.
  // The default keeps them: most ops infer their block's shape from their operands' blocks.
  struct LocalizeArgs {
    const std::vector<Aval>& in;                               // global operands
    const std::vector<Aval>& out;                              // global results
    const std::vector<Aval>& local_in;                         // this device's operand blocks
    const std::vector<NamedSharding>& out_shardings;           // how the results are split
    const std::vector<NamedSharding>* in_shardings = nullptr;  // how the operands are split
    Shape local_out(size_t k) const { return out_shardings[k].shard_shape(out[k].shape); }
  };
  virtual Attrs localize_attrs(const Attrs& attrs, const LocalizeArgs& args) const {
    (void)args;
    return attrs;
  }
  // Shardings the op fixes for its operands and results instead of its factor rule (shard_map's
  // specs, a constraint's spec, a literal's replication): propagation starts from them and
  // never overrides them. Ops with neither flag below run on those blocks like any other.
  struct PinnedShardings {
    std::vector<PartitionSpec> operands;
    std::vector<PartitionSpec> results;
    // The op is the identity on its operand and exists to state its sharding: it partitions to
    // a reshard, and propagation also starts the operand in that sharding (as GSPMD does).
    bool constrains_operand = false;
    // Region 0 is the program every device runs on its blocks: the partitioner inlines it.
    bool per_device_body = false;
    // Dimensions of the results the op leaves to propagation (a constraint's P.UNCONSTRAINED
    // entries, empty in `results`): they take the split of the values around the op.
    std::vector<int> unconstrained;
    // Per operand / result (empty: none anywhere): the axes it is unreduced over (a shard_map's
    // partial sums in and out).
    std::vector<std::set<std::string>> operand_unreduced, result_unreduced;
    // Likewise the axes it is reduced over (a type over replicated storage).
    std::vector<std::set<std::string>> operand_reduced, result_reduced;
    NamedSharding operand(const Mesh& mesh, size_t i) const {
      return NamedSharding(mesh, operands[i], at(operand_unreduced, i), at(operand_reduced, i));
    }
    NamedSharding result(const Mesh& mesh, size_t k) const {
      return NamedSharding(mesh, results[k], at(result_unreduced, k), at(result_reduced, k));
    }
    static std::set<std::string> at(const std::vector<std::set<std::string>>& v, size_t i) {
      return i < v.size() ? v[i] : std::set<std::string>{};
    }
  };
  virtual std::optional<PinnedShardings> pinned_shardings(const Attrs& attrs) const {
    (void)attrs;
    return std::nullopt;
  }
  // The result repeats the operand's elements into a bigger shape: propagation lets the users'
  // shardings reach the result before the operand's does, so that a mismatch is fixed on the
  // small operand rather than by moving the big result (XLA gives broadcasts low priority too).
  virtual bool is_broadcast() const { return false; }
  // Gathers and scatters that index operand 0 along one axis with integer operand 1. When that
  // axis is split, each device looks up (or adds into) its own block with masked local indices
  // instead of gathering the table: a plan a factor rule cannot state.
  struct AxisIndexing {
    int axis = 0;              // the indexed axis of operand 0, normalised
    bool scatter = false;      // adds operand 2 at the indices (else reads operand 0 there)
    bool elementwise = false;  // one index per element, operand 0's rank (else whole slices)
  };
  virtual std::optional<AxisIndexing> axis_indexing(const std::vector<Aval>& in,
                                                    const Attrs& attrs) const {
    (void)in, (void)attrs;
    return std::nullopt;
  }
  // Dimensions the op reverses (rev): a split one stays split, each device reversing its block
  // and the blocks trading places (block i of the result is block n-1-i of the operand reversed),
  // so the factor rule passes them through and the partitioner adds the exchange.
  virtual std::vector<int> mirrored_dims(const std::vector<Aval>& in, const Attrs& attrs) const {
    (void)in, (void)attrs;
    return {};
  }
  // Over a group of one device the op returns its operand's values (perhaps reshaped): the
  // partitioner drops it from the per-device program.
  virtual bool identity_on_one_device(const Attrs& attrs) const {
    (void)attrs;
    return false;
  }
  // Explicit sharding: the factors that need replication and reach no result are
  // consumed by the op (argmax's axis), so a split there types the result unsplit (the
  // partitioner gathers), as a reduction's does; otherwise (a sliced or padded dimension, whose
  // resized result dimension is another factor) such a split cannot be kept and is an error.
  virtual bool consumes_replicated_factors() const { return false; }
  // The compiler replaces the instruction by its one region's instructions before propagation,
  // its results becoming copies of the region's: remat marks what autodiff recomputes, and
  // partitioning has nothing to keep of the boundary.
  virtual bool inlined_when_compiled() const { return false; }
};

}  // namespace partix::prim

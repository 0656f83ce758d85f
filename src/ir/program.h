// Program: the SSA intermediate representation. Values have a shape, a dtype and, once
// propagation has run, a NamedSharding (global view) or, in a per-device program, the
// sharding they stand for. Instructions apply a primitive with attributes to values and
// may own nested Programs (regions: a shard_map body, a rematerialised block).
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/attrs.h"
#include "partix/dtype.h"
#include "partix/sharding.h"

namespace partix::prim {
class Primitive;
}

namespace partix::ir {

struct Aval {
  Shape shape;
  DType dtype = DType::F32;
  int64_t size() const { return shape_size(shape); }
  int64_t nbytes() const { return dtype_nbytes(dtype, shape); }
  int ndim() const { return static_cast<int>(shape.size()); }
  std::string to_string() const;  // f32[8,32]
  friend bool operator==(const Aval& a, const Aval& b) {
    return a.shape == b.shape && a.dtype == b.dtype;
  }
};

struct ValueInfo {
  Aval aval;
  std::optional<NamedSharding> sharding;
  // Inside a shard_map body: the mesh axes this value varies over.
  std::set<std::string> varying;
  std::string name;  // optional: where the value came from (named scope / op)
  // Explicit sharding: `sharding` is the value's type, fixed at trace time along
  // the mesh's Explicit axes; propagation may not change it there.
  bool typed = false;
  // In a per-device program, for a value whose sharding splits some dimension unevenly: the
  // global shape its blocks come from (empty otherwise). On a device whose block of it is all
  // padding, nothing observable depends on its bytes (the partitioner masks padding before
  // every contraction and reduction), so the runtime does not compute it there.
  Shape global_shape;
  // Inside a shard_map body: of the varying axes, those over which the value is partial sums
  // (JAX's unreduced: the blocks sum to the value); and the invariant axes over which it is
  // reduced (its cotangent comes back unreduced).
  std::set<std::string> unreduced, reduced;
};

struct Program;

struct Instr {
  const prim::Primitive* prim = nullptr;
  std::vector<int> inputs;
  std::vector<int> outputs;
  Attrs attrs;
  std::vector<std::shared_ptr<const Program>> regions;
  std::string scope;  // the user's named scope when traced, for messages
  // Nonzero for an instruction inlined from a rematerialised block (one number per block): the
  // partitioner shares a resharded value only among instructions of the same block, so a
  // block's gathered weights die with it instead of living until the backward pass.
  int remat_block = 0;
};

struct Program {
  std::string name = "main";
  std::optional<Mesh> mesh;  // the mesh shardings refer to
  std::vector<ValueInfo> values;
  std::vector<int> params;
  std::vector<int> results;
  std::vector<Instr> instrs;

  int add_value(Aval aval) {
    values.push_back(ValueInfo{std::move(aval), std::nullopt, {}, {}, false});
    return static_cast<int>(values.size()) - 1;
  }
  const Aval& aval(int v) const { return values[static_cast<size_t>(v)].aval; }
  ValueInfo& info(int v) { return values[static_cast<size_t>(v)]; }
  const ValueInfo& info(int v) const { return values[static_cast<size_t>(v)]; }
};

// Text form. Example:
//   program @main mesh<'x': 4, 'y': 2> (%0: f32[8,16] P('x', 'y')) -> (f32[8,16]) {
//     %1 = exp(%0) : f32[8,16] P('x', 'y')
//     return %1
//   }
struct PrintOptions {
  bool full_literals = true;
  bool shardings = true;
};
std::string to_text(const Program& p, const PrintOptions& options = {});
// Parses to_text's output (throws partix::Error with line and column on bad text).
Program parse_program(std::string_view text);

// Structural checks: SSA (each value defined once, before use), avals agree with the
// primitives' inference. Throws an internal error naming the instruction.
void verify(const Program& p);

// The mesh the first instruction naming one (shard_map, a sharding constraint) runs on,
// looking inside regions too (a shard_map in a loop body); none if no instruction names one.
std::optional<Mesh> named_mesh(const Program& p);

// Drops instructions none of whose results is used (regions are kept or dropped whole), except
// those with effects (Primitive::has_effects, or an effect in one of their regions). Every
// other primitive is pure, and every device runs the same program, so a dead collective is
// dead on all of them.
void eliminate_dead_code(Program& p);
// Whether instruction `in` or any instruction in its regions has effects.
bool has_effects(const Instr& in);

}  // namespace partix::ir

// The HLO facet of a primitive (ir/primitive.h): how Lowered.compiler_ir(dialect="hlo") writes
// one op of the traced program as XLA HLO instructions (ir/hlo.h; ARCHITECTURE.md "HLO text").
#pragma once

namespace partix::ir {
class HloEmitter;
}

namespace partix::prim {

class HloExport {
 public:
  virtual ~HloExport() = default;
  // Writes the op through `e` (its operands, attributes and result types) and names each result
  // with e.result(k, ...). False when the op has no HLO form here: the exporter then refuses the
  // program, naming the op.
  virtual bool to_hlo(ir::HloEmitter& e) const {
    (void)e;
    return false;
  }
};

}  // namespace partix::prim

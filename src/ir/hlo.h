// A traced program written as XLA HLO text (ARCHITECTURE.md "HLO text"): what
// Lowered.compiler_ir(dialect="hlo") returns. Each op writes itself through its HLO facet
// (ir/facets/hlo.h) with the emitter below; an op without an HLO form makes the export fail
// with partix::Error naming it. The text is the format XLA's HloModule parser reads: typed
// instructions with layouts, parameters with their shardings (tile assignments listing device
// ids), reductions with their reducer computations.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ir/program.h"

namespace partix::ir {

// The HLO module of program `p` (global shapes, as traced), named `module_name`. Its last
// constants.size() parameters are captured values: written as constants holding them.
// Constants of more than kLargeConstant elements print as {...} unless print_large_constants.
constexpr int64_t kLargeConstant = 1000;
std::string to_hlo_text(const Program& p, std::string_view module_name,
                        const std::vector<std::shared_ptr<const Literal>>& constants = {},
                        bool print_large_constants = true);

// XLA's text of a sharding: {replicated} or {devices=[2,1,4]0,1,... last_tile_dim_replicate}.
// Unreduced axes have no HLO form: partix::Error naming `api`.
std::string hlo_sharding(const NamedSharding& s, std::string_view api);

class HloEmitter {
 public:
  HloEmitter(const Program& program, std::vector<std::string>& names, bool large_constants);

  // The op being written (set by the exporter for each instruction).
  void begin(const Instr& instr);
  const Attrs& attrs() const { return instr_->attrs; }
  size_t num_operands() const { return instr_->inputs.size(); }
  const Aval& in(size_t k) const;
  const Aval& out(size_t k) const;
  const std::string& operand(size_t k) const;

  // Appends `name = type opcode(args), extra` and returns the new name.
  std::string emit(const Aval& type, std::string_view opcode, const std::vector<std::string>& args,
                   std::string_view extra = {});
  // A scalar constant of `dtype`.
  std::string scalar(DType dtype, double value);
  // A constant holding the literal's data.
  std::string literal(const Literal& lit);
  // `v` (of type `from`) broadcast to `to` as numpy broadcasts: trailing dimensions aligned,
  // dimensions of size 1 stretched.
  std::string broadcast(const std::string& v, const Aval& from, const Aval& to);
  // The name of a computation (a, b) -> opcode(a, b) over scalars of `dtype`.
  std::string reducer(DType dtype, std::string_view opcode);
  // Names result k of the op.
  void result(size_t k, const std::string& name);
  // Appends an instruction line as given (after the exporter's checks).
  void raw_line(std::string line) { lines_.push_back(std::move(line)); }

  static std::string type(const Aval& a);                  // f32[2,3]{1,0}
  static std::string dims(const std::vector<int64_t>& d);  // {0,2}
  static std::string element(DType dtype);                 // f32, s32, pred, ...

  const std::vector<std::string>& lines() const { return lines_; }
  const std::vector<std::string>& computations() const { return computations_; }
  std::string fresh(std::string_view stem);

 private:
  const Program& program_;
  std::vector<std::string>& names_;  // per value of the program: its HLO name
  const Instr* instr_ = nullptr;
  std::vector<std::string> lines_;
  std::vector<std::string> computations_;
  std::map<std::string, std::string> reducers_;
  int counter_ = 0;
  bool large_constants_ = true;
};

}  // namespace partix::ir

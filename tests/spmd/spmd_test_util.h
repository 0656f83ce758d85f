// Golden partitioner tests: a global program's text (with argument shardings) in, the
// per-device program out.
#pragma once

#include <string>

#include "ir/program.h"
#include "spmd/compile.h"
#include "test_util.h"

namespace partix::testing_util {

// Parses `text`, takes the argument shardings from its parameters, compiles and returns the
// per-device program's text. out_specs: one per result, or empty (propagated).
inline std::string partition_text(const std::string& text,
                                  const std::vector<std::optional<PartitionSpec>>& out_specs = {},
                                  std::vector<std::string>* warnings = nullptr) {
  ir::Program p = ir::parse_program(text);
  spmd::CompileOptions o;
  for (int v : p.params) o.in_shardings.push_back(p.info(v).sharding);
  for (const auto& s : out_specs) {
    o.out_shardings.push_back(s ? std::optional<NamedSharding>(NamedSharding(*p.mesh, *s)) : std::nullopt);
  }
  auto c = spmd::compile(p, o);
  if (warnings) *warnings = c->warnings;
  ir::PrintOptions po;
  return ir::to_text(c->executable->program(), po);
}

// Instruction names of a program text, in order (e.g. to count collectives).
inline int count_op(const std::string& text, const std::string& op) {
  int n = 0;
  for (size_t pos = text.find("= " + op + "("); pos != std::string::npos; pos = text.find("= " + op + "(", pos + 1)) n++;
  return n;
}

}  // namespace partix::testing_util

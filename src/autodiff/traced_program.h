// make_jaxpr's traced program as a value (JAX's ClosedJaxpr): the program, the arrays it
// captured (its consts) and its text; eval runs it op by op (eagerly, or recorded into an
// enclosing trace), on the user's arguments followed by the captures.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ir/program.h"
#include "partix/array.h"
#include "partix/transforms.h"

namespace partix::detail {

struct TracedProgram {
  std::shared_ptr<const ir::Program> program;
  std::vector<Array> captures;
  std::string text;
};

TracedProgram trace_program(const std::vector<Array>& leaves, const LeavesFn& f);

// The program's results for `args` (its parameters in order: the traced arguments, then the
// captures). Refuses a wrong count or a type that differs from a parameter's.
std::vector<Array> eval_program(const TracedProgram& p, const std::vector<Array>& args);

}  // namespace partix::detail

// vjp's pullback, forward mode (jvp, linearize) and make_jaxpr's program text. Python functions
// are traced by the C++ tracer calling back into them with the GIL taken again; each returns
// its result leaves (Python keeps the result tree).
#include "autodiff/traced_program.h"
#include "bind.h"

namespace partix::python {

namespace {

using Leaves = std::vector<Array>;

detail::LeavesFn python_fn(const nb::callable& f) {
  return [&f](const Leaves& t) { return call_python<Leaves>(f, t); };
}

// An empty Array where Python passes None (a zero cotangent).
Leaves or_empty(const std::vector<std::optional<Array>>& xs) {
  Leaves out;
  for (const auto& x : xs) out.push_back(x ? *x : Array());
  return out;
}

}  // namespace

void bind_forward(nb::module_& m) {
  nb::class_<detail::Pullback>(m, "Pullback")
      .def("__call__",
           [](const detail::Pullback& pb, const std::vector<std::optional<Array>>& cts) {
             return interruptible([&] { return pb(or_empty(cts)); });
           })
      .def("jvp", [](const detail::Pullback& pb, const Leaves& tangents, const std::string& api) {
        return interruptible([&] { return detail::jvp_of_pullback(pb, tangents, api); });
      });

  // vjp(leaves, f) -> (result leaves, pullback); f(tracers) -> result leaves.
  m.def("vjp", [](const Leaves& leaves, nb::callable f) {
    detail::VjpOutput out;
    {
      nb::gil_scoped_release release;
      out = detail::vjp_engine(leaves, python_fn(f));
    }
    return std::make_pair(out.outputs, out.pullback);
  });

  // jvp(primals, tangents, f) -> (result leaves, their tangents).
  m.def("jvp", [](const Leaves& primals, const Leaves& tangents, nb::callable f) {
    nb::gil_scoped_release release;
    detail::JvpOutput out = detail::jvp_engine(primals, tangents, python_fn(f));
    return std::make_pair(out.outputs, out.tangents);
  });

  // make_jaxpr's program as a value: text, captured arrays (consts) and evaluation.
  nb::class_<detail::TracedProgram>(m, "TracedProgram")
      .def_ro("text", &detail::TracedProgram::text)
      .def_ro("captures", &detail::TracedProgram::captures)
      .def("eval", [](const detail::TracedProgram& p, const Leaves& args) {
        return interruptible([&] { return detail::eval_program(p, args); });
      });
  m.def("trace_program", [](const Leaves& leaves, nb::callable f) {
    nb::gil_scoped_release release;
    return detail::trace_program(leaves, python_fn(f));
  });

  m.def("trace_text", [](const Leaves& leaves, nb::callable f) {
    nb::gil_scoped_release release;
    return detail::trace_text(leaves, python_fn(f));
  });
}

}  // namespace partix::python

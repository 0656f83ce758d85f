// partix._core: the C++ library as seen from Python. partix::Error becomes
// partix.PartixError (a ValueError); no C++ exception crosses into the interpreter untranslated.
#include "bind.h"

namespace partix::python {

DType to_dtype(const std::string& name) { return dtype_from_name(name); }

Axes to_axes(const std::vector<std::string>& names) {
  if (names.empty()) throw Error("[axis_name] needs at least one mesh axis name");
  if (names.size() == 1) return Axes(names[0]);
  return Axes(names);
}

}  // namespace partix::python

NB_MODULE(_core, m) {
  namespace nb = nanobind;
  using namespace partix::python;
  m.doc() = "partix's C++ core; use the package partix";
  // partix::Error and its subclasses (timeouts, cancelled collectives) raise this.
  nb::exception<partix::Error>(m, "PartixError", PyExc_ValueError);
  bind_sharding(m);
  bind_array(m);
  bind_ops(m);
  bind_transforms(m);
  bind_runtime(m);
  bind_models(m);
  bind_checkpoint(m);
  bind_forward(m);
  bind_callbacks(m);
}

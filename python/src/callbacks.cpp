// Host callbacks: Python functions that a program calls on its devices (jax.pure_callback,
// experimental.io_callback, debug.callback and debug.print; prim/callback.h). The package's
// trampoline (partix/_src/callbacks.py) turns the raw views into numpy arrays and back.
#include <nanobind/ndarray.h>

#include "bind.h"
#include "prim/callback.h"

namespace partix::python {

namespace {

using InView = nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>>;
using OutView = nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>;

// (bytes view, shape, dtype name) per buffer: views valid only during the call.
template <class View, class Ptr>
nb::list views(const std::vector<const ir::Aval*>& avals, const std::vector<Ptr>& ptrs) {
  nb::list out;
  for (size_t i = 0; i < avals.size(); ++i) {
    const ir::Aval& a = *avals[i];
    View v(const_cast<uint8_t*>(static_cast<const uint8_t*>(ptrs[i])),
           {static_cast<size_t>(a.nbytes())}, nb::handle());
    out.append(nb::make_tuple(nb::cast(v, nb::rv_policy::reference), nb::cast(a.shape),
                              nb::str(std::string(dtype_name(a.dtype)).c_str())));
  }
  return out;
}

// The kernel's function: calls `fn(device, mesh_position, inputs, outputs)` with the GIL held;
// a Python exception becomes partix::Error with its text.
std::shared_ptr<const prim::HostCallbackFn> trampoline(nb::callable fn) {
  std::shared_ptr<nb::callable> held(new nb::callable(std::move(fn)), [](nb::callable* p) {
    nb::gil_scoped_acquire gil;
    delete p;
  });
  return std::make_shared<const prim::HostCallbackFn>([held](const prim::HostCallbackCall& c) {
    nb::gil_scoped_acquire gil;
    std::string message;
    try {
      (*held)(c.device, c.mesh_position, views<InView>(c.in_avals, c.in),
              views<OutView>(c.out_avals, c.out));
      return;
    } catch (nb::python_error& e) {
      // The exception's own text (the package's trampoline names the API in it), without
      // Python's traceback.
      message = nb::str(e.value()).c_str();
      if (!e.matches(nb::handle(PyExc_ValueError))) {
        message = std::string(nb::str(e.type().attr("__name__")).c_str()) + ": " + message;
      }
    }
    throw Error(message);
  });
}

}  // namespace

void bind_callbacks(nb::module_& m) {
  m.def("register_host_callback",
        [](nb::callable fn) { return prim::register_host_callback(trampoline(std::move(fn))); });
  m.def("clear_host_callbacks", &prim::clear_host_callbacks);
  m.def("host_callback", [](const std::string& api, int64_t id, const std::vector<Array>& operands,
                            const std::vector<std::pair<Shape, std::string>>& out, bool effect,
                            const std::string& vmap_method) {
    std::vector<ir::Aval> avals;
    for (const auto& [shape, dtype] : out) avals.push_back(ir::Aval{shape, to_dtype(dtype)});
    return prim::host_callback(api.c_str(), id, operands, avals, effect, vmap_method);
  });
}

}  // namespace partix::python

// Shared pieces of the extension module partix._core: one bind_* per concern (one file each),
// and the conversions they share. The Python package (python/partix) gives the JAX names.
#pragma once

#include <memory>

#include <nanobind/nanobind.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/set.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <partix/partix.h>

namespace partix::python {

namespace nb = nanobind;

void bind_array(nb::module_& m);       // array.cpp: Array, host data, creation, device_put
void bind_sharding(nb::module_& m);    // sharding.cpp: Device, Mesh, PartitionSpec, NamedSharding
void bind_ops(nb::module_& m);         // ops.cpp: the numpy-like and lax ops
void bind_transforms(nb::module_& m);  // transforms.cpp: jit, grad, shard_map, control flow
void bind_runtime(nb::module_& m);     // runtime.cpp: devices, profiler, distributed, memory
void bind_models(nb::module_& m);      // models.cpp: llama, gpt2, optimizers
void bind_checkpoint(nb::module_& m);  // checkpoint.cpp: save and restore pytrees
void bind_forward(nb::module_& m);     // forward.cpp: vjp's pullback, jvp, make_jaxpr
void bind_callbacks(nb::module_& m);   // callbacks.cpp: host callbacks (pure_callback, print)

DType to_dtype(const std::string& name);
Axes to_axes(const std::vector<std::string>& names);

// Runs a Python callable from C++ code that released the GIL (trace callbacks).
template <class R, class... A>
R call_python(const nb::callable& f, A&&... args) {
  nb::gil_scoped_acquire gil;
  return nb::cast<R>(f(std::forward<A>(args)...));
}

// Ctrl-C while C++ runs programs: on the main thread, the outermost guard chains a SIGINT
// handler in front of Python's that also sets the flag its programs check (CancelScope), so a
// long run stops between instructions; Python's own handler still records the signal, and the
// caller raises KeyboardInterrupt once the GIL is back. Other threads never see SIGINT in Python.
class InterruptGuard {
 public:
  InterruptGuard();  // with the GIL
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  // With the GIL: throws nb::python_error (KeyboardInterrupt) if a signal handler raised.
  void raise_pending() const;

 private:
  bool installed_ = false;
  std::unique_ptr<detail::CancelScope> scope_;
};

// Runs f with the GIL released under an InterruptGuard: an interrupt raises KeyboardInterrupt
// (the program's own Cancelled error, or whatever it threw meanwhile, is dropped).
template <class F>
auto interruptible(F&& f) -> decltype(f()) {
  InterruptGuard guard;
  std::exception_ptr err;
  {
    nb::gil_scoped_release release;
    try {
      return f();
    } catch (...) {
      err = std::current_exception();
    }
  }
  guard.raise_pending();
  std::rethrow_exception(err);
}

}  // namespace partix::python

// Shared pieces of the extension module partix._core: one bind_* per concern (one file each),
// and the conversions they share. The Python package (python/partix) gives the JAX names.
#pragma once

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
void bind_models(nb::module_& m);      // models.cpp: llama, gpt2, optimizers, checkpoints

DType to_dtype(const std::string& name);
Axes to_axes(const std::vector<std::string>& names);

// Runs a Python callable from C++ code that released the GIL (trace callbacks).
template <class R, class... A>
R call_python(const nb::callable& f, A&&... args) {
  nb::gil_scoped_acquire gil;
  return nb::cast<R>(f(std::forward<A>(args)...));
}

}  // namespace partix::python

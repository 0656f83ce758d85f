// Device, Mesh, PartitionSpec and NamedSharding. A PartitionSpec crosses as a list of entries,
// each a list of mesh axis names (empty: None).
#include "bind.h"

namespace partix::python {

namespace {

// The partix package's folder: frames there are partix's own, not the user's.
std::string& location_skip() {
  static std::string dir;
  return dir;
}

// The innermost Python frame outside the partix package, as "file:line": where the user wrote
// the op an error is about. Called on the thread that runs the op (which may have released the
// GIL); frames exist only on threads that run Python.
std::string python_location() {
  if (!Py_IsInitialized()) return {};
  PyGILState_STATE g = PyGILState_Ensure();
  std::string out;
  PyFrameObject* f = PyEval_GetFrame();
  Py_XINCREF(f);
  while (f && out.empty()) {
    PyCodeObject* code = PyFrame_GetCode(f);
    PyObject* name = PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_filename");
    const char* file = name ? PyUnicode_AsUTF8(name) : nullptr;
    if (file && (location_skip().empty() || std::string_view(file).rfind(location_skip(), 0) != 0)) {
      out = std::string(file) + ":" + std::to_string(PyFrame_GetLineNumber(f));
    }
    Py_XDECREF(name);
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(f);
    Py_DECREF(f);
    f = back;
  }
  Py_XDECREF(f);
  if (PyErr_Occurred()) PyErr_Clear();
  PyGILState_Release(g);
  return out;
}

}  // namespace

void bind_sharding(nb::module_& m) {
  nb::class_<Device>(m, "Device")
      .def_ro("id", &Device::id)
      .def_ro("process_index", &Device::process_index)
      .def_ro("platform", &Device::platform)
      .def("__eq__", [](const Device& a, const Device& b) { return a.id == b.id; })
      .def("__hash__", [](const Device& a) { return a.id; });

  nb::enum_<AxisType>(m, "AxisType")
      .value("Auto", AxisType::Auto)
      .value("Explicit", AxisType::Explicit)
      .value("Manual", AxisType::Manual);

  nb::class_<Mesh>(m, "Mesh")
      .def(nb::init<Shape, std::vector<std::string>, std::vector<Device>>(), nb::arg("axis_sizes"),
           nb::arg("axis_names"), nb::arg("devices") = std::vector<Device>{})
      .def_prop_ro("axis_sizes", &Mesh::axis_sizes)
      .def_prop_ro("axis_names", &Mesh::axis_names)
      .def_prop_ro("size", &Mesh::size)
      .def_prop_ro("devices", &Mesh::devices)
      .def_prop_ro("axis_types", &Mesh::axis_types)
      .def("with_axis_types", &Mesh::with_axis_types)
      .def("axis_size", [](const Mesh& m, const std::string& n) { return m.axis_size(n); })
      .def("is_abstract", &Mesh::is_abstract)
      .def("to_string", &Mesh::to_string)
      .def("__eq__", [](const Mesh& a, const Mesh& b) { return a == b; })
      .def("__hash__", [](const Mesh& a) { return std::hash<std::string>()(a.to_string()); });
  m.def("make_abstract_mesh", &make_abstract_mesh);
  m.def("set_mesh", &set_mesh);
  m.def("clear_mesh", &clear_mesh);
  m.def("set_thread_mesh", &set_thread_mesh);
  m.def("clear_thread_mesh", &clear_thread_mesh);
  m.def("has_current_mesh", &has_current_mesh);
  m.def("current_mesh", [] { return current_mesh("get_abstract_mesh"); });

  nb::class_<PartitionSpec>(m, "PartitionSpec")
      .def(nb::init<std::vector<PartitionSpec::Entry>>())
      .def_prop_ro("entries", &PartitionSpec::entries)
      .def("to_string", &PartitionSpec::to_string);

  nb::class_<NamedSharding>(m, "NamedSharding")
      .def(nb::init<Mesh, PartitionSpec>())
      .def(nb::init<Mesh, PartitionSpec, std::set<std::string>>())
      .def(nb::init<Mesh, PartitionSpec, std::set<std::string>, std::set<std::string>>())
      .def_prop_ro("mesh", &NamedSharding::mesh)
      .def_prop_ro("spec", &NamedSharding::spec)
      .def_prop_ro("unreduced", &NamedSharding::unreduced)
      .def_prop_ro("reduced", &NamedSharding::reduced)
      .def("shard_shape", &NamedSharding::shard_shape)
      .def("check_shape", &NamedSharding::check_shape)
      .def("devices_indices_map",
           [](const NamedSharding& s, const Shape& g) {
             std::vector<std::vector<std::pair<int64_t, int64_t>>> out;
             for (const auto& dev : s.devices_indices_map(g)) {
               auto& o = out.emplace_back();
               for (const Slice& sl : dev) o.emplace_back(sl.start, sl.stop);
             }
             return out;
           })
      .def("replica_id", &NamedSharding::replica_id)
      .def("is_fully_replicated", &NamedSharding::is_fully_replicated)
      .def("to_string", &NamedSharding::to_string)
      .def("__eq__", [](const NamedSharding& a, const NamedSharding& b) { return a == b; })
      .def("__hash__",
           [](const NamedSharding& a) { return std::hash<std::string>()(a.to_string()); });
  m.def("single_device_sharding", &single_device_sharding);

  nb::class_<ArrayType>(m, "ArrayType")
      .def_prop_ro("shape", &ArrayType::shape)
      .def_prop_ro("dtype", [](const ArrayType& t) { return std::string(dtype_name(t.dtype())); })
      .def_prop_ro("sharding", &ArrayType::sharding)
      .def_prop_ro("unreduced", &ArrayType::unreduced)
      .def("to_string", &ArrayType::to_string);
  m.def("type_of", &type_of);
  m.def("reshard", [](const Array& x, const NamedSharding& s) {
    nb::gil_scoped_release release;
    return reshard(x, s);
  });
  m.def("reshard_spec", [](const Array& x, const PartitionSpec& s) {
    nb::gil_scoped_release release;
    return reshard(x, s);
  });
  // out_sharding= of an op Python composes: fn() computes it (returning the core array); its
  // result then has the type out_sharding says (explicit sharding).
  m.def("out_sharding_call", [](const std::string& api, const std::vector<Array>& operands,
                                const PartitionSpec& spec, std::vector<std::string> unreduced,
                                const nb::callable& fn) {
    OutSharding out{spec, std::set<std::string>(unreduced.begin(), unreduced.end())};
    nb::gil_scoped_release release;
    return with_out_sharding(api, operands, out, [&] {
      nb::gil_scoped_acquire gil;
      return nb::cast<Array>(fn());
    });
  });
  auto call_leaves = [](const nb::callable& fn, const std::vector<Array>& a) {
    nb::gil_scoped_acquire gil;
    return nb::cast<std::vector<Array>>(fn(a));
  };
  m.def("auto_axes", [call_leaves](const nb::callable& fn, const std::vector<Array>& args,
                                   std::vector<PartitionSpec> outs, std::vector<std::string> axes) {
    nb::gil_scoped_release release;
    return auto_axes([&](const std::vector<Array>& a) { return call_leaves(fn, a); }, args,
                     std::move(outs), std::move(axes));
  });
  m.def("explicit_axes", [call_leaves](const nb::callable& fn, const std::vector<Array>& args,
                                       std::vector<PartitionSpec> ins,
                                       std::vector<std::string> axes) {
    nb::gil_scoped_release release;
    return explicit_axes([&](const std::vector<Array>& a) { return call_leaves(fn, a); }, args,
                         std::move(ins), std::move(axes));
  });
  m.def("set_location_skip", [](std::string dir) {
    location_skip() = std::move(dir);
    set_location_provider(&python_location);
  });
}

}  // namespace partix::python

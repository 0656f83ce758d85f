// Checkpoints: save the named leaves of a pytree asynchronously, restore them in
// any sharding on any mesh. Python names the leaves from their pytree paths.
#include "bind.h"

namespace partix::python {

void bind_checkpoint(nb::module_& m) {
  m.def("ckpt_save", [](const std::string& dir, int64_t step, const std::vector<std::string>& names,
                        const std::vector<Array>& leaves,
                        const std::map<std::string, std::string>& metadata, bool overwrite) {
    nb::gil_scoped_release release;
    ckpt::default_checkpointer().save_leaves(
        dir, step, names, leaves, ckpt::SaveOptions{.metadata = metadata, .overwrite = overwrite});
  });
  m.def("ckpt_wait", [] {
    nb::gil_scoped_release release;
    ckpt::wait();
  });
  m.def("ckpt_restore", [](const std::string& dir, int64_t step,
                           const std::vector<std::string>& names, const std::vector<Shape>& shapes,
                           const std::vector<std::string>& dtypes,
                           const std::vector<NamedSharding>& shardings, bool partial) {
    std::vector<ckpt::ArraySpec> specs;
    for (size_t i = 0; i < names.size(); ++i) {
      specs.push_back({shapes.at(i), to_dtype(dtypes.at(i)), shardings.at(i)});
    }
    nb::gil_scoped_release release;
    return ckpt::restore_leaves(dir, step, names, specs, ckpt::RestoreOptions{.partial = partial});
  });
  m.def("ckpt_latest_step", &ckpt::latest_step);
  m.def("ckpt_all_steps", &ckpt::all_steps);
  m.def("ckpt_metadata", [](const std::string& dir, int64_t step) {
    return ckpt::info(dir, step).metadata;
  });
}

}  // namespace partix::python

// Devices, memory statistics, the profiler and multi-process start-up.
#include "bind.h"

namespace partix::python {

void bind_runtime(nb::module_& m) {
  m.def("init", [](int num_cpu_devices, int64_t device_memory_bytes) {
    init(InitOptions{.num_cpu_devices = num_cpu_devices, .device_memory_bytes = device_memory_bytes});
  });
  m.def("is_initialized", &is_initialized);
  m.def("devices", [] { return devices(); });
  m.def("local_devices", &local_devices);
  m.def("device_count", &device_count);
  m.def("local_device_count", &local_device_count);
  m.def("process_index", &process_index);
  m.def("process_count", &process_count);
  m.def("default_device", [] { return default_device(); });
  m.def("memory_stats", [](int id) {
    MemoryStats s = memory_stats(id);
    return std::map<std::string, int64_t>{{"bytes_in_use", s.bytes_in_use},
                                          {"peak_bytes_in_use", s.peak_bytes_in_use},
                                          {"num_allocs", s.num_allocs},
                                          {"bytes_limit", s.bytes_limit}};
  });
  m.def("reset_peak_memory_stats", &reset_peak_memory_stats);

  m.def("profiler_start", &profiler::start);
  m.def("profiler_stop", &profiler::stop);
  m.def("profiler_recording", &profiler::recording);
  m.def("profiler_write_chrome_trace", &profiler::write_chrome_trace);
  m.def("profiler_spans", [] {
    std::vector<std::tuple<int, std::string, std::string, double, double>> out;
    for (const auto& s : profiler::spans()) {
      out.emplace_back(s.device, s.name, s.category, s.start_us, s.duration_us);
    }
    return out;
  });

  m.def("distributed_initialize", [] {
    nb::gil_scoped_release r;
    distributed::initialize();
  });
  m.def("is_multi_process", &distributed::is_multi_process);
}

}  // namespace partix::python

// Devices, memory statistics, the profiler and multi-process start-up.
#include <signal.h>

#include <chrono>

#include "bind.h"

namespace partix::python {

namespace {

// Main-thread state of InterruptGuard (Python delivers SIGINT only to its main thread, so the
// guard does nothing elsewhere and these need no lock).
unsigned long g_main_thread = 0;
int g_depth = 0;
struct sigaction g_python_handler;  // the handler ours chains to while installed
std::atomic<bool> g_cancel{false};  // lock-free, so setting it is async-signal-safe
// signal.getsignal and signal.default_int_handler: programs are cancelled only while Ctrl-C
// means KeyboardInterrupt (a handler of the user's own may choose to carry on).
PyObject* g_getsignal = nullptr;
PyObject* g_default_int_handler = nullptr;

void on_sigint(int sig, siginfo_t* info, void* context) {
  g_cancel.store(true, std::memory_order_relaxed);
  if (g_python_handler.sa_flags & SA_SIGINFO) {
    g_python_handler.sa_sigaction(sig, info, context);
  } else if (g_python_handler.sa_handler != SIG_DFL && g_python_handler.sa_handler != SIG_IGN) {
    g_python_handler.sa_handler(sig);
  }
}

// Whether SIGINT's Python handler is default_int_handler. signal.getsignal costs about as much
// as a whole small jit call, so its answer is reused for 50 ms: a handler installed just before
// a run may be noticed late (Ctrl-C then cancels that run, and the handler still runs).
bool default_handler_installed() {
  static bool cached = false;
  static std::chrono::steady_clock::time_point checked{};
  const auto now = std::chrono::steady_clock::now();
  if (checked != std::chrono::steady_clock::time_point{} &&
      now - checked < std::chrono::milliseconds(50)) {
    return cached;
  }
  PyObject* h = PyObject_CallFunction(g_getsignal, "i", SIGINT);
  if (!h) {
    PyErr_Clear();
    return false;
  }
  cached = h == g_default_int_handler;
  Py_DECREF(h);
  checked = now;
  return cached;
}

}  // namespace

InterruptGuard::InterruptGuard() {
  if (PyThread_get_thread_ident() != g_main_thread || g_depth++ > 0) return;
  if (!default_handler_installed()) return;
  struct sigaction ours {};
  ours.sa_sigaction = on_sigint;
  ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&ours.sa_mask);
  struct sigaction prev {};
  if (sigaction(SIGINT, &ours, &prev) != 0) return;
  if (!(prev.sa_flags & SA_SIGINFO) && (prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN)) {
    sigaction(SIGINT, &prev, nullptr);  // nobody handles Ctrl-C: leave it alone
    return;
  }
  g_python_handler = prev;
  g_cancel.store(false, std::memory_order_relaxed);
  installed_ = true;
  scope_ = std::make_unique<detail::CancelScope>(&g_cancel);
}

InterruptGuard::~InterruptGuard() {
  if (PyThread_get_thread_ident() != g_main_thread) return;
  --g_depth;
  if (installed_) {
    sigaction(SIGINT, &g_python_handler, nullptr);
    g_cancel.store(false, std::memory_order_relaxed);
  }
}

void InterruptGuard::raise_pending() const {
  if (PyErr_CheckSignals() != 0) throw nb::python_error();
}

void bind_runtime(nb::module_& m) {
  g_main_thread = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  nb::module_ signal = nb::module_::import_("signal");
  g_getsignal = signal.attr("getsignal").inc_ref().ptr();  // kept for the process's life
  g_default_int_handler = signal.attr("default_int_handler").inc_ref().ptr();
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
  m.def("set_default_device", &set_default_device, nb::arg("device").none());
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
  m.def("profiler_write_chrome_trace",
        static_cast<void (*)(const std::string&)>(&profiler::write_chrome_trace));
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
  // Tells the job's other processes that this one stops (no-op unless MPI started).
  m.def("distributed_notify_failure", [](const std::string& cause) {
    nb::gil_scoped_release r;
    distributed::notify_failure(cause);
  });
}

}  // namespace partix::python

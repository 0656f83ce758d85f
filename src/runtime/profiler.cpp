#include "partix/profiler.h"

#include <atomic>
#include <chrono>
#include <mutex>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "io/atomic_file.h"
#include "runtime/profiler_hooks.h"

namespace partix {

namespace {

struct Recorder {
  std::atomic<bool> on{false};
  std::mutex mu;
  std::vector<profiler::Span> spans;
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
};

Recorder& recorder() {
  static Recorder r;
  return r;
}

}  // namespace

namespace runtime {

bool profiling() { return recorder().on.load(std::memory_order_relaxed); }

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - recorder().origin).count();
}

void record_span(int device, std::string name, bool collective, double start_us, double end_us) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.spans.push_back({device, std::move(name), collective ? "collective" : "compute", start_us,
                     end_us - start_us});
}

}  // namespace runtime

namespace profiler {

void start() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.spans.clear();
  r.on.store(true);
}

void stop() { recorder().on.store(false); }
bool recording() { return recorder().on.load(); }

std::vector<Span> spans() {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.spans;
}

void write_chrome_trace(const std::string& path) {
  nlohmann::json events = nlohmann::json::array();
  std::vector<int> devices;
  for (const Span& s : spans()) {
    events.push_back({{"name", s.name}, {"cat", s.category}, {"ph", "X"}, {"ts", s.start_us},
                      {"dur", s.duration_us}, {"pid", 0}, {"tid", s.device}});
    if (std::find(devices.begin(), devices.end(), s.device) == devices.end()) devices.push_back(s.device);
  }
  for (int d : devices) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", d},
                      {"args", {{"name", "device " + std::to_string(d)}}}});
  }
  // Checked, fsynced and renamed into place: a full disk is an error, not a truncated trace.
  detail::write_file_atomic(
      path, "profiler", nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump());
}

}  // namespace profiler
}  // namespace partix

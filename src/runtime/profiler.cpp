#include "partix/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>

#include <nlohmann/json.hpp>

#include "comm/mpi/mpi_runtime.h"
#include "core/errors.h"
#include "partix/device.h"
#include "files/atomic_file.h"
#include "runtime/profiler_hooks.h"

namespace partix {

namespace {

struct Recorder {
  std::atomic<bool> on{false};
  std::mutex mu;
  std::vector<profiler::Span> spans;
  std::chrono::steady_clock::time_point origin = std::chrono::steady_clock::now();
  // The origin on the wall clock, which processes on different hosts share (NTP), to line
  // their timelines up.
  int64_t origin_wall_us = std::chrono::duration_cast<std::chrono::microseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
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

namespace {

// This process's spans as trace events: one process ("pid") per partix process, one track
// ("tid") per device; times shifted by `shift_us`.
void append_events(nlohmann::json& events, const std::vector<Span>& spans, int process,
                   double shift_us) {
  std::vector<int> devices;
  for (const Span& s : spans) {
    events.push_back({{"name", s.name}, {"cat", s.category}, {"ph", "X"},
                      {"ts", s.start_us + shift_us}, {"dur", s.duration_us}, {"pid", process},
                      {"tid", s.device}});
    if (std::find(devices.begin(), devices.end(), s.device) == devices.end()) devices.push_back(s.device);
  }
  for (int d : devices) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", process}, {"tid", d},
                      {"args", {{"name", "device " + std::to_string(d)}}}});
  }
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", process},
                    {"args", {{"name", "process " + std::to_string(process)}}}});
}

}  // namespace

void write_chrome_trace(const std::string& path) { write_chrome_trace(path, {}); }

void write_chrome_trace(const std::string& path,
                        const std::function<void(std::vector<Span>&)>& edit) {
  std::vector<Span> local = spans();
  if (edit) edit(local);
  nlohmann::json events = nlohmann::json::array();
  if (process_count() == 1) {
    append_events(events, local, 0, 0);
  } else {
    // Every process sends its spans and its clock's origin; process 0 writes them all.
    nlohmann::json mine = nlohmann::json::array();
    for (const Span& s : local) {
      mine.push_back({s.device, s.name, s.category, s.start_us, s.duration_us});
    }
    std::vector<int> all;
    for (int p = 0; p < process_count(); ++p) all.push_back(p);
    const std::vector<std::string> got = comm::mpi::exchange_control(
        all, nlohmann::json{{"origin_us", recorder().origin_wall_us}, {"spans", mine}}.dump(),
        "profiler.write_chrome_trace");
    if (process_index() != 0) return;
    std::vector<nlohmann::json> parts;
    int64_t first = 0;
    for (size_t p = 0; p < got.size(); ++p) {
      parts.push_back(nlohmann::json::parse(got[p]));
      const int64_t o = parts.back().at("origin_us").get<int64_t>();
      first = p == 0 ? o : std::min(first, o);
    }
    for (size_t p = 0; p < parts.size(); ++p) {
      std::vector<Span> theirs;
      for (const auto& e : parts[p].at("spans")) {
        theirs.push_back(Span{e[0].get<int>(), e[1].get<std::string>(), e[2].get<std::string>(),
                              e[3].get<double>(), e[4].get<double>()});
      }
      const double shift = static_cast<double>(parts[p].at("origin_us").get<int64_t>() - first);
      append_events(events, theirs, static_cast<int>(p), shift);
    }
  }
  // Checked, fsynced and renamed into place: a full disk is an error, not a truncated trace.
  detail::write_file_atomic(
      path, "profiler", nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump());
}

}  // namespace profiler
}  // namespace partix

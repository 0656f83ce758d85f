// A timeline per device: while recording, every instruction a device runs becomes a span
// (compute or collective), written as a Chrome / Perfetto trace with one track per device.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace partix::profiler {

struct Span {
  int device = 0;
  std::string name;      // the primitive, with the user's named scope
  std::string category;  // "compute" or "collective"
  double start_us = 0, duration_us = 0;
};

void start();  // clears earlier spans and begins recording
void stop();
bool recording();
std::vector<Span> spans();
// Chrome trace event JSON (open in chrome://tracing or ui.perfetto.dev). With several
// processes every process calls it; process 0 writes one trace holding every process's
// devices (one trace process per partix process, timelines aligned on the wall clock).
void write_chrome_trace(const std::string& path);
// The same with this process's spans edited first (renamed, e.g. a pipeline's halves labelled
// with their microbatches by pipeline::label_spans).
void write_chrome_trace(const std::string& path,
                        const std::function<void(std::vector<Span>&)>& edit);

}  // namespace partix::profiler

// What the interpreter calls to record spans (src/runtime/profiler.cpp).
#pragma once

#include <string>

namespace partix::runtime {

bool profiling();
double now_us();
void record_span(int device, std::string name, bool collective, double start_us, double end_us);

}  // namespace partix::runtime

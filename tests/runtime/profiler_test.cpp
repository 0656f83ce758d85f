// The per-device timeline: spans for compute and collectives, one Chrome trace track per device.
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "test_util.h"

using namespace partix;

TEST(Profiler, RecordsComputeAndCollectivesPerDevice) {
  Mesh mesh({4}, {"x"});
  Array a = device_put(random::normal(random::key(0), {64, 32}), NamedSharding(mesh, P("x")));
  auto f = jit([](const Array& v) { return sum(tanh(v)); });
  f(a);  // compile outside the recording
  profiler::start();
  f(a);
  profiler::stop();
  auto spans = profiler::spans();
  std::set<int> compute_devices, collective_devices;
  for (const auto& s : spans) {
    EXPECT_GE(s.duration_us, 0.0);
    if (s.category == "collective") collective_devices.insert(s.device);
    if (s.name.find("tanh") != std::string::npos) compute_devices.insert(s.device);
  }
  EXPECT_EQ(compute_devices, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(collective_devices, (std::set<int>{0, 1, 2, 3}));  // the all_reduce of the sum
  std::string path = ::testing::TempDir() + "/trace.json";
  profiler::write_chrome_trace(path);
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  std::set<int> tracks;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") tracks.insert(e["tid"].get<int>());
  }
  EXPECT_EQ(tracks.size(), 4u);
  // Not recording: nothing new.
  size_t n = profiler::spans().size();
  f(a);
  EXPECT_EQ(profiler::spans().size(), n);
}

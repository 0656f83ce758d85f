// What the safetensors harnesses do with a checkpoint that opened: every accessor, and a few
// tensors loaded whole, converted, and split over two devices.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fuzz_util.h"

namespace partix::fuzz {

inline void exercise_safetensors(const Safetensors& s) {
  constexpr size_t kMaxTensorsLoaded = 3;  // loading is the slow part
  const Mesh mesh({2}, {"x"});
  (void)s.metadata();
  size_t loaded = 0;
  for (const std::string& name : s.names()) {
    if (!s.contains(name))
      die("Safetensors::names() lists '" + name + "' but contains() denies it");
    Shape shape = s.shape(name);
    (void)s.stored_dtype(name);
    expect_partix_error([&] { (void)s.dtype(name); });
    if (loaded == kMaxTensorsLoaded) continue;
    ++loaded;
    expect_partix_error([&] { (void)s.load(name); });
    expect_partix_error([&] { (void)s.load(name, DType::F32).to_vector<float>(); });
    expect_partix_error([&] { (void)s.load(name, DType::I32); });
    if (shape.empty()) continue;
    // The last dimension split in two: each device reads part of every row.
    std::vector<PartitionSpec::Entry> spec(shape.size() - 1);
    spec.push_back({"x"});
    expect_partix_error(
        [&] { (void)s.load(name, NamedSharding(mesh, PartitionSpec(spec)), DType::BF16); });
  }
  expect_partix_error([&] { (void)s.load("no such tensor"); });
}

}  // namespace partix::fuzz

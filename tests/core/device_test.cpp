#include <thread>

#include "core/array_impl.h"
#include "core/device_registry.h"
#include "test_util.h"

using namespace partix;

TEST(Devices, EightVirtualCpuDevices) {
  ASSERT_EQ(device_count(), 8);
  EXPECT_EQ(process_index(), 0);
  EXPECT_EQ(process_count(), 1);
  const auto& devs = devices();
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(devs[static_cast<size_t>(i)].id, i);
    EXPECT_EQ(devs[static_cast<size_t>(i)].platform, "cpu");
  }
  EXPECT_EQ(local_devices().size(), 8u);
}

TEST(Devices, InitTwiceWithSameCountIsFineOtherCountIsAnError) {
  init({.num_cpu_devices = 8});
  EXPECT_PARTIX_ERROR(init({.num_cpu_devices = 4}), "[init]", "8", "4");
  EXPECT_PARTIX_ERROR(init({.num_cpu_devices = -3}), "[init]", "-3");
}

TEST(Devices, EnvironmentVariableMustBeAPositiveInteger) {
  EXPECT_EQ(detail::parse_num_cpu_devices(nullptr), std::nullopt);
  EXPECT_EQ(detail::parse_num_cpu_devices("8"), 8);
  EXPECT_EQ(detail::parse_num_cpu_devices("1"), 1);
  for (const char* bad : {"0", "-2", "abc", "", "8x", " 8", "2.5", "99999999999"}) {
    EXPECT_PARTIX_ERROR(detail::parse_num_cpu_devices(bad), "[PARTIX_NUM_CPU_DEVICES]",
                        std::string("'") + bad + "'");
  }
}

TEST(Devices, AllocatorRecordsCurrentAndPeakBytes) {
  MemoryStats before = memory_stats(3);
  {
    Array a = device_put(zeros({1024}, DType::F32), Device{3});
    MemoryStats during = memory_stats(3);
    EXPECT_EQ(during.bytes_in_use - before.bytes_in_use, 4096);
    EXPECT_GE(during.peak_bytes_in_use, during.bytes_in_use);
  }
  EXPECT_EQ(memory_stats(3).bytes_in_use, before.bytes_in_use);
  reset_peak_memory_stats();
  EXPECT_EQ(memory_stats(3).peak_bytes_in_use, memory_stats(3).bytes_in_use);
  EXPECT_PARTIX_ERROR(memory_stats(8), "[memory_stats]", "8");
}

// JAX's jax.default_device: uncommitted work goes to the chosen device inside the scope, on
// this thread only, and the choice is restored when the scope ends.
TEST(Devices, DefaultDeviceScopeChoosesWhereUncommittedWorkRuns) {
  EXPECT_EQ(default_device().id, 0);
  auto on = [](const Array& a) { return a.sharding().mesh().device_ids(); };
  auto f = jit([](const Array& x) { return x * 2.0f; });
  Array here = f(ones({3}));
  EXPECT_EQ(on(here), std::vector<int>{0});
  {
    DefaultDeviceScope scope(Device{5});
    EXPECT_EQ(default_device().id, 5);
    Array a = ones({3});
    EXPECT_EQ(on(a), std::vector<int>{5});
    Array b = f(a);  // the same jit, now compiled for device 5
    EXPECT_EQ(on(b), std::vector<int>{5});
    EXPECT_FALSE(b.impl()->committed);
    EXPECT_EQ(b.to_vector<float>(), std::vector<float>(3, 2.0f));
    {
      DefaultDeviceScope inner(Device{2});
      EXPECT_EQ(on(f(ones({3}))), std::vector<int>{2});
    }
    EXPECT_EQ(default_device().id, 5);
    int other = -1;
    std::thread([&] { other = default_device().id; }).join();
    EXPECT_EQ(other, 0);  // another thread keeps its own default
  }
  EXPECT_EQ(default_device().id, 0);
  EXPECT_EQ(on(f(ones({3}))), std::vector<int>{0});
  EXPECT_PARTIX_ERROR(set_default_device(Device{8}), "[default_device]", "no device 8");
  EXPECT_PARTIX_ERROR(set_default_device(Device{-1}), "[default_device]", "no device -1");
  EXPECT_EQ(default_device().id, 0);
}

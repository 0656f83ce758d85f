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

// Test entry point: 8 virtual CPU devices, as XLA's forced host device count.
#include <gtest/gtest.h>

#include "partix/partix.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  partix::init({.num_cpu_devices = 8});
  return RUN_ALL_TESTS();
}

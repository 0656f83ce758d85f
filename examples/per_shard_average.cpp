// Per-shard average: each device averages its block, then pmean averages the averages.
#include <partix/partix.h>

#include <cstdio>

#include "example_check.h"

using namespace partix;

int main() {
  init({.num_cpu_devices = 8});
  Mesh mesh = make_mesh({8}, {"x"});
  Array x = device_put(random::normal(random::key(0), {64, 16}), NamedSharding(mesh, P("x")));
  auto avg = shard_map([](const Array& block) { return pmean(mean(block), "x"); }, mesh, {P("x")},
                       {P()});
  float got = avg(x).item<float>();
  float want = mean(x).item<float>();
  std::printf("per-shard average %.6f, global mean %.6f\n", got, want);
  return close_to({got}, {want}) ? 0 : 1;
}

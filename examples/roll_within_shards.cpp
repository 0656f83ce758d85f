// Roll by one within each shard: purely local, no communication.
#include <partix/partix.h>

#include <cstdio>

#include "example_check.h"

using namespace partix;

int main() {
  init({.num_cpu_devices = 8});
  Mesh mesh = make_mesh({4, 2}, {"x", "y"});
  Array x = device_put(arange(16, DType::F32), NamedSharding(mesh, P("x")));
  auto roll = shard_map(
      [](const Array& b) {
        int64_t n = b.shape()[0];
        return concatenate({slice_axis(b, 0, n - 1, n), slice_axis(b, 0, 0, n - 1)}, 0);
      },
      mesh, {P("x")}, {P("x")});
  Array r = roll(x);
  std::string text = jit([&](const Array& a) { return roll(a); }).lower(x).as_text();
  bool local = text.find("all_") == std::string::npos && text.find("ppermute") == std::string::npos;
  std::vector<float> want;
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < 4; ++i) want.push_back(static_cast<float>(s * 4 + (i + 3) % 4));
  }
  std::printf("rolled: %s (no communication: %s)\n", r.to_string().c_str(), local ? "yes" : "no");
  return close_to(r.to_vector<float>(), want) && local ? 0 : 1;
}

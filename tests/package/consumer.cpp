// Uses the installed/exported partix package: shards an array and checks it.
#include <partix/partix.h>

#include <iostream>

int main() {
  partix::init({.num_cpu_devices = 4});
  partix::Mesh mesh = partix::make_mesh({2, 2}, {"x", "y"});
  partix::Array a = partix::device_put(partix::arange(8, partix::DType::F32),
                                       partix::NamedSharding(mesh, partix::P("x")));
  std::vector<float> v = a.to_vector<float>();
  for (int i = 0; i < 8; ++i) {
    if (v[static_cast<size_t>(i)] != static_cast<float>(i)) return 1;
  }
  std::cout << partix::visualize_sharding(a);
  return a.addressable_shards().size() == 4 ? 0 : 1;
}

// A checkpoint step's index.json: the reader validates it (info), then restores through it
// (restore_all), every device reading only the byte ranges the index names. The input is the
// index; the step folder holds the data file of a real save (a split f32 leaf, a replicated
// bf16 leaf, an int32 scalar), so the fuzzer varies only what the index claims about it.
#include <filesystem>

#include "fuzz_util.h"

namespace {

constexpr int64_t kStep = 7;

// Saves a small checkpoint once per process and keeps the data file's bytes; returns the
// checkpoint folder.
std::string write_checkpoint(const partix::fuzz::ScratchDir& dir) {
  using namespace partix;
  const std::string root = dir.file("ckpt");
  Mesh mesh({2}, {"x"});
  std::map<std::string, Array> tree;
  tree["w"] = device_put(reshape(arange(24, DType::F32), {4, 6}), NamedSharding(mesh, P("x")));
  tree["b"] = device_put(arange(6, DType::BF16), NamedSharding(mesh, P()));
  tree["step"] = full({}, 3.0, DType::I32);
  ckpt::Checkpointer writer;
  writer.save(root, kStep, tree);
  writer.wait();
  return root;
}

// Splits dimension 0 over both devices where it divides, else replicates.
partix::NamedSharding sharding_for(const std::string&, const partix::Shape& shape) {
  using namespace partix;
  static const Mesh mesh({2}, {"x"});
  if (!shape.empty() && shape[0] > 0 && shape[0] % 2 == 0) {
    return NamedSharding(mesh, P("x"));
  }
  return NamedSharding(mesh, P());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  partix::fuzz::init_devices(2);
  const auto& dir = partix::fuzz::ScratchDir::get();
  static const std::string root = write_checkpoint(dir);
  const std::string step_dir = partix::ckpt::step_path(root, kStep);
  dir.write(std::filesystem::relative(step_dir + "/index.json", dir.path()).string(), data, size);
  partix::ckpt::Info info;
  if (!partix::fuzz::expect_partix_error([&] { info = partix::ckpt::info(root, kStep); })) {
    return 0;
  }
  partix::fuzz::expect_partix_error([&] {
    for (auto& [name, array] : partix::ckpt::restore_all(root, kStep, sharding_for)) {
      (void)name;
      (void)astype(array, partix::DType::F32).to_vector<float>();
    }
  });
  return 0;
}

// model.safetensors.index.json: the weight_map naming the shard files beside it, and loading
// through it. The input is the index; the folder holds fixed shards (two valid ones, a broken
// one and a folder with a shard's name), so the fuzzer varies only the index.
#include <cstring>
#include <filesystem>

#include "safetensors_util.h"

namespace {

std::string safetensors_bytes(std::string_view header, std::string_view data) {
  const uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out.append(header).append(data);
}

// Written once per process, before the first input.
void write_shards(const partix::fuzz::ScratchDir& dir) {
  const float a[6] = {1, 2, 3, -4, 0.5f, 1e30f};
  const uint16_t b[4] = {0x3f80, 0xbf80, 0x7f80, 0x0001};  // bf16 1, -1, inf, a subnormal
  std::string data1(reinterpret_cast<const char*>(a), sizeof a);
  data1.append(reinterpret_cast<const char*>(b), sizeof b);
  dir.write("model-00001-of-00002.safetensors",
            safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                              R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})",
                              data1));
  const int32_t c[2] = {1, -2};
  std::string data2(reinterpret_cast<const char*>(c), sizeof c);
  data2.append("\x00\x01\x01", 3);
  dir.write("model-00002-of-00002.safetensors",
            safetensors_bytes(R"({"__metadata__":{"format":"pt"},)"
                              R"("c":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                              R"("d":{"dtype":"BOOL","shape":[3],"data_offsets":[8,11]}})",
                              data2));
  dir.write("broken.safetensors", safetensors_bytes(R"({"e":{"dtype":"F32"}})", ""));
  std::filesystem::create_directories(dir.file("folder.safetensors"));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  partix::fuzz::init_devices(2);
  const auto& dir = partix::fuzz::ScratchDir::get();
  static const bool shards_written = (write_shards(dir), true);
  (void)shards_written;
  const std::string path = dir.write("model.safetensors.index.json", data, size);
  partix::Safetensors s;
  if (partix::fuzz::expect_partix_error([&] { s = partix::Safetensors::open(path); })) {
    partix::fuzz::exercise_safetensors(s);
  }
  return 0;
}

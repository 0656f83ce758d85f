// A checkpoint step's data file, corrupted, restored onto another sharding. The step is a real
// save on 2 devices (a row-split f32 leaf, a column-split bf16 leaf, a replicated i32 leaf, a
// Q8_0 leaf split by rows, an f32 scalar); the index stays valid, the data file is spoiled by
// the input, and every leaf is restored onto 4 devices in the sharding the input picks, so
// devices read parts of chunks. Input: byte 0 picks the sharding; then edits of 3 bytes each:
// a 16-bit position (scaled to the file's size) and a byte XORed there, or a 0 byte, which
// truncates the file at that position.
//
// Beyond the readers' contract (succeed or throw partix::Error), a restore that succeeds must
// give back exactly the saved values: a corrupted byte that a restore uses and does not report
// is silently wrong data, and aborts.
#include <filesystem>
#include <map>

#include "fuzz_util.h"

namespace {

constexpr int64_t kStep = 3;
constexpr const char* kDataFile = "data-00000-of-00001.safetensors";

std::map<std::string, partix::Array> tree() {
  using namespace partix;
  static const Mesh two({2}, {"x"});
  std::map<std::string, Array> t;
  t["w"] = device_put(reshape(arange(96, DType::F32), {8, 12}), NamedSharding(two, P("x")));
  t["b"] = device_put(reshape(arange(64, DType::BF16), {4, 16}), NamedSharding(two, P(None, "x")));
  t["ids"] = device_put(arange(10, DType::I32), NamedSharding(two, P()));
  std::vector<uint8_t> blocks(4 * 4 * 34);
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t b = 0; b < blocks.size(); b += 34) blocks[b + 1] = 0x3c;  // finite f16 scales
  t["q"] = device_put(
      from_blocks(blocks.data(), static_cast<int64_t>(blocks.size()), DType::Q8_0, {4, 128}),
      NamedSharding(two, P("x")));
  t["s"] = full({}, 2.5, DType::F32);
  return t;
}

// The shardings a restore may pick, on 4 devices: replicated, rows split, columns split (where
// the shape allows; quantized columns split on block boundaries).
partix::NamedSharding sharding_for(int mode, const partix::Shape& shape) {
  using namespace partix;
  static const Mesh four({4}, {"x"});
  if (mode == 1 && !shape.empty() && shape[0] % 4 == 0) return NamedSharding(four, P("x"));
  if (mode == 2 && shape.size() == 2 && shape[1] % 4 == 0) return NamedSharding(four, P(None, "x"));
  if (mode == 3 && shape.size() == 2 && shape[0] % 2 == 0 && shape[1] % 2 == 0) {
    static const Mesh grid({2, 2}, {"a", "b"});
    return NamedSharding(grid, P("b", "a"));
  }
  return NamedSharding(four, P());
}

// Every leaf's values as f32 bytes (quantized leaves dequantized), for bitwise comparison.
std::map<std::string, std::string> values(const std::map<std::string, partix::Array>& t) {
  using namespace partix;
  std::map<std::string, std::string> out;
  for (const auto& [name, a] : t) {
    const std::vector<float> v = astype(device_put(a, Device{0}), DType::F32).to_vector<float>();
    out[name].assign(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  return out;
}

struct Saved {
  std::string root;
  std::string data;  // the data file's bytes
  std::map<std::string, std::string> values;
};

const Saved& saved(const partix::fuzz::ScratchDir& dir) {
  static const Saved s = [&] {
    Saved out;
    out.root = dir.file("ckpt");
    const auto t = tree();
    partix::ckpt::Checkpointer writer;
    writer.save(out.root, kStep, t);
    writer.wait();
    const std::string path = partix::ckpt::step_path(out.root, kStep) + "/" + kDataFile;
    out.data.resize(std::filesystem::file_size(path));
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f || std::fread(out.data.data(), 1, out.data.size(), f) != out.data.size()) {
      partix::fuzz::die("cannot read back " + path);
    }
    std::fclose(f);
    for (auto& [name, v] : values(t)) out.values["['" + name + "']"] = std::move(v);  // leaf paths
    return out;
  }();
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  partix::fuzz::init_devices(4);
  const auto& dir = partix::fuzz::ScratchDir::get();
  const Saved& s = saved(dir);
  if (size == 0) return 0;
  const int mode = data[0] % 4;
  std::string file = s.data;
  for (size_t i = 1; i + 3 <= size; i += 3) {
    if (file.empty()) break;
    const size_t at = (static_cast<size_t>(data[i]) | static_cast<size_t>(data[i + 1]) << 8) *
                      file.size() / 65536;
    if (data[i + 2] == 0) {
      file.resize(at);
    } else {
      file[at] = static_cast<char>(file[at] ^ data[i + 2]);
    }
  }
  const std::string step_dir = partix::ckpt::step_path(s.root, kStep);
  dir.write(std::filesystem::relative(step_dir + "/" + kDataFile, dir.path()).string(), file);
  std::map<std::string, partix::Array> back;
  if (!partix::fuzz::expect_partix_error([&] {
        back = partix::ckpt::restore_all(s.root, kStep,
                                         [mode](const std::string&, const partix::Shape& shape) {
                                           return sharding_for(mode, shape);
                                         });
      })) {
    return 0;
  }
  if (values(back) != s.values) {
    partix::fuzz::die("a corrupted data file restored without error to other values");
  }
  return 0;
}

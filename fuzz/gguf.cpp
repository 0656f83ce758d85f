// GGUF reader: header, metadata, tensor table, and dequantizing a few tensors whole and split
// over two devices (so the per-device block ranges of quantized rows are exercised).
#include <span>

#include "fuzz_util.h"
#include "formats/gguf.h"

namespace {

using partix::fuzz::expect_partix_error;

// Loading is the slow part; a few tensors cover every type the corpus holds.
constexpr size_t kMaxTensorsLoaded = 3;

void read_metadata(const partix::GgufFile& f) {
  for (const std::string& key : f.keys()) {
    std::string type;
    expect_partix_error([&] { type = f.type_name(key); });
    expect_partix_error([&] {
      if (type == "string") {
        (void)f.get_string(key);
      } else if (type == "bool") {
        (void)f.get_bool(key);
      } else if (type == "float32" || type == "float64") {
        (void)f.get_float(key);
      } else if (type == "array[string]") {
        (void)f.get_strings(key);
      } else if (type == "array[float32]" || type == "array[float64]") {
        (void)f.get_floats(key);
      } else if (type.starts_with("array[")) {
        (void)f.get_ints(key);
      } else {
        (void)f.get_int(key);
      }
    });
  }
  // The typed getters' fallbacks and wrong-type errors.
  expect_partix_error([&] { (void)f.get_int("general.alignment", 32); });
  expect_partix_error([&] { (void)f.get_string("general.architecture", ""); });
  expect_partix_error([&] { (void)f.get_float("general.architecture", 0.0); });
}

void load_tensors(const partix::GgufFile& f) {
  const partix::Mesh mesh({2}, {"x"});
  size_t loaded = 0;
  for (const std::string& name : f.tensor_names()) {
    partix::Shape shape;
    expect_partix_error([&] {
      shape = f.tensor_shape(name);
      (void)f.tensor_type(name);
    });
    if (loaded == kMaxTensorsLoaded) continue;
    ++loaded;
    expect_partix_error([&] { (void)f.load(name).to_vector<float>(); });
    if (shape.empty()) continue;
    // The last (fastest) dimension split in two: each device decodes part of every row.
    std::vector<partix::PartitionSpec::Entry> spec(shape.size() - 1);
    spec.push_back({"x"});
    expect_partix_error([&] {
      (void)f.load(name, partix::NamedSharding(mesh, partix::PartitionSpec(spec)),
                   partix::DType::BF16);
    });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  partix::fuzz::init_devices(2);
  const std::string path = partix::fuzz::ScratchDir::get().write("input.gguf", data, size);
  // The parser reads from memory or from the file on demand; both must reach the same verdict.
  const std::string in_memory = partix::fuzz::error_message(
      [&] { (void)partix::detail::parse_gguf(std::span<const uint8_t>(data, size), path); });
  partix::GgufFile f;
  const std::string from_file =
      partix::fuzz::error_message([&] { f = partix::GgufFile::open(path); });
  if (in_memory != from_file) {
    partix::fuzz::die("parse_gguf from memory and from the file disagree:\n  memory: " +
                      (in_memory.empty() ? "ok" : in_memory) +
                      "\n  file: " + (from_file.empty() ? "ok" : from_file));
  }
  if (!from_file.empty()) return 0;
  expect_partix_error([&] {
    (void)f.version();
    (void)f.alignment();
  });
  read_metadata(f);
  load_tensors(f);
  return 0;
}

// index.json: writing, parsing and validating it, and finding the committed steps of a folder.
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/errors.h"
#include "checkpoint/checkpoint.h"
#include "files/checksum.h"
#include "files/input_file.h"
#include "files/json_util.h"
#include "formats/safetensors.h"

namespace partix {

namespace detail {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// An index lists every chunk of every leaf; a model of a billion parameters on thousands of
// devices stays far below this.
constexpr uint64_t kMaxIndexBytes = uint64_t{1} << 30;
constexpr size_t kMaxRank = 32;

// Errors inside the index name its path and the leaf (and chunk) they concern.
struct Where {
  std::string_view api;
  const std::string& path;
  std::string what;  // "", "leaf 'w'", "leaf 'w' chunk 3"
  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    const std::string msg = fmt::format(f, std::forward<Args>(args)...);
    if (what.empty()) detail::fail(api, "'{}': {}", path, msg);
    detail::fail(api, "'{}': {}: {}", path, what, msg);
  }
};

const json& field(const json& obj, std::string_view key, const Where& w) {
  auto it = obj.find(key);
  if (it == obj.end()) w.fail("missing '{}'", key);
  return *it;
}

std::string get_string(const json& obj, std::string_view key, const Where& w) {
  const json& v = field(obj, key, w);
  if (!v.is_string()) w.fail("'{}' is a {}, not a string", key, json_kind(v));
  return v.get<std::string>();
}

int64_t as_int(const json& v, std::string_view key, const Where& w) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) w.fail("'{}' is too large", key);
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (!v.is_number_integer()) w.fail("'{}' is a {}, not an integer", key, json_kind(v));
  return v.get<int64_t>();
}

int64_t get_count(const json& obj, std::string_view key, const Where& w) {
  const int64_t v = as_int(field(obj, key, w), key, w);
  if (v < 0) w.fail("'{}' is {}, not a non-negative integer", key, v);
  return v;
}

Shape get_dims(const json& obj, std::string_view key, const Where& w) {
  const json& v = field(obj, key, w);
  if (!v.is_array()) w.fail("'{}' is a {}, not an array", key, json_kind(v));
  if (v.size() > kMaxRank) w.fail("'{}' has {} entries (at most {})", key, v.size(), kMaxRank);
  Shape out;
  for (const json& d : v) {
    const int64_t n = as_int(d, key, w);
    if (n < 0) w.fail("'{}' holds {}, not a non-negative integer", key, d.dump());
    out.push_back(n);
  }
  return out;
}

// The bytes of `dims` in `dtype`, or fails when it does not fit. A quantized dtype stores
// whole blocks of the last dimension, which must be a multiple of the block.
uint64_t checked_bytes(const Shape& dims, DType dtype, std::string_view what, const Where& w) {
  const int64_t per_block = dtype_block_elems(dtype);
  if (per_block > 1 && (dims.empty() || dims.back() % per_block != 0)) {
    w.fail("{} {} of {} does not hold whole blocks of {} elements in its last dimension", what,
           shape_to_string(dims), dtype_name(dtype), per_block);
  }
  uint64_t n = static_cast<uint64_t>(dtype_size(dtype));
  for (size_t i = 0; i < dims.size(); ++i) {
    uint64_t d = static_cast<uint64_t>(dims[i]);
    if (i + 1 == dims.size()) d /= static_cast<uint64_t>(per_block);
    if (__builtin_mul_overflow(n, d, &n) || n > uint64_t{1} << 62) {
      w.fail("{} {} has too many elements", what, shape_to_string(dims));
    }
  }
  return n;
}

// A file name the index may use: a plain name inside the step's folder.
bool plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos && name.find('\0') == std::string::npos;
}

constexpr DType kLeafDtypes[] = {DType::Bool, DType::I8,   DType::I16,  DType::I32,
                                 DType::I64,  DType::U8,   DType::U16,  DType::U32,
                                 DType::F16,  DType::BF16, DType::F32,  DType::F64,
                                 DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K,
                                 DType::Q6_K};

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType d : kLeafDtypes) {
    if (checkpoint_dtype_name(d) == name) return d;
  }
  return std::nullopt;
}

bool boxes_overlap(const CheckpointChunk& a, const CheckpointChunk& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    if (a.offsets[d] >= b.offsets[d] + b.extent[d] || b.offsets[d] >= a.offsets[d] + a.extent[d]) {
      return false;
    }
  }
  return true;
}

std::string box_string(const CheckpointChunk& c) {
  std::vector<std::string> parts;
  for (size_t d = 0; d < c.offsets.size(); ++d) {
    parts.push_back(fmt::format("{}:{}", c.offsets[d], c.offsets[d] + c.extent[d]));
  }
  return "[" + fmt::format("{}", fmt::join(parts, ", ")) + "]";
}

CheckpointChunk parse_chunk(const json& j, const CheckpointLeaf& leaf,
                            const std::set<std::string>& files, int64_t version, const Where& w) {
  if (!j.is_object()) w.fail("is a {}, not an object", json_kind(j));
  CheckpointChunk c;
  c.offsets = get_dims(j, "offsets", w);
  c.extent = get_dims(j, "extent", w);
  if (c.offsets.size() != leaf.shape.size() || c.extent.size() != leaf.shape.size()) {
    w.fail("offsets {} and extent {} do not have the rank of the shape {}",
           shape_to_string(c.offsets), shape_to_string(c.extent), shape_to_string(leaf.shape));
  }
  for (size_t d = 0; d < c.extent.size(); ++d) {
    if (c.offsets[d] >= leaf.shape[d] || c.extent[d] == 0 ||
        c.extent[d] > leaf.shape[d] - c.offsets[d]) {
      w.fail("the box {} is empty or outside the shape {}", box_string(c),
             shape_to_string(leaf.shape));
    }
  }
  if (const int64_t b = dtype_block_elems(leaf.dtype); b > 1 && c.offsets.back() % b != 0) {
    w.fail("the box {} splits a block of {} elements of {}", box_string(c), b,
           dtype_name(leaf.dtype));
  }
  c.file = get_string(j, "file", w);
  if (!files.count(c.file)) w.fail("file '{}' is not among the index's files", c.file);
  c.tensor = get_string(j, "tensor", w);
  const json& range = field(j, "byte_range", w);
  if (!range.is_array() || range.size() != 2) w.fail("'byte_range' is not a pair [begin, end]");
  const int64_t begin = as_int(range[0], "byte_range", w), end = as_int(range[1], "byte_range", w);
  if (begin < 0 || end < begin) w.fail("byte_range [{}, {}] is not a range", begin, end);
  c.begin = static_cast<uint64_t>(begin);
  c.end = static_cast<uint64_t>(end);
  const uint64_t need = checked_bytes(c.extent, leaf.dtype, "extent", w);
  if (c.end - c.begin != need) {
    w.fail("byte_range [{}, {}] holds {} bytes but {}{} needs {}", c.begin, c.end, c.end - c.begin,
           dtype_name(leaf.dtype), shape_to_string(c.extent), need);
  }
  // Version 1: one checksum of the range; version 2: one per block of `xxh64_block` bytes,
  // concatenated.
  c.block = need;
  if (version >= 2) {
    const int64_t block = get_count(j, "xxh64_block", w);
    if (block < 8 || block % 8 != 0) {
      w.fail("xxh64_block {} is not a positive multiple of 8 bytes", block);
    }
    c.block = std::min(need, static_cast<uint64_t>(block));
  }
  const uint64_t blocks = need / c.block + (need % c.block != 0);
  const std::string hash = get_string(j, "xxh64", w);
  if (hash.size() % 16 != 0 || hash.size() / 16 != blocks) {
    w.fail("xxh64 holds {} characters, not 16 hex digits for each of the {} blocks of {} bytes",
           hash.size(), blocks, c.block);
  }
  c.xxh64.resize(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    if (!parse_hex64(std::string_view(hash).substr(16 * b, 16), &c.xxh64[b])) {
      w.fail("xxh64 '{}' of block {} is not 16 hex digits", hash.substr(16 * b, 16), b);
    }
  }
  return c;
}

CheckpointLeaf parse_leaf(const json& j, size_t i, const std::set<std::string>& files,
                          int64_t version, const std::string& path, std::string_view api) {
  Where w{api, path, fmt::format("leaf {}", i)};
  if (!j.is_object()) w.fail("is a {}, not an object", json_kind(j));
  CheckpointLeaf leaf;
  leaf.name = get_string(j, "name", w);
  w.what = fmt::format("leaf '{}'", leaf.name);
  leaf.shape = get_dims(j, "shape", w);
  const std::string dtype = get_string(j, "dtype", w);
  auto dt = dtype_from_name(dtype);
  if (!dt || (version < 2 && is_quantized(*dt))) {
    w.fail("unknown dtype '{}' (known: BOOL, I32, I64, F16, BF16, F32, F64{})", dtype,
           version < 2 ? "" : ", Q8_0, Q4_0, Q4_1, Q4_K, Q6_K");
  }
  leaf.dtype = *dt;
  const uint64_t bytes = checked_bytes(leaf.shape, leaf.dtype, "shape", w);
  const json& sh = field(j, "sharding", w);
  if (!sh.is_object()) w.fail("'sharding' is a {}, not an object", json_kind(sh));
  leaf.sharding = get_string(sh, "text", w);
  const json& axes = field(sh, "mesh_axes", w);
  if (!axes.is_array()) w.fail("'mesh_axes' is not an array");
  for (const json& a : axes) {
    if (!a.is_string()) w.fail("'mesh_axes' holds a {}, not a name", json_kind(a));
    leaf.mesh_axes.push_back(a.get<std::string>());
  }
  leaf.mesh_shape = get_dims(sh, "mesh_shape", w);
  if (leaf.mesh_shape.size() != leaf.mesh_axes.size()) w.fail("mesh_axes and mesh_shape differ");
  const json& spec = field(sh, "spec", w);
  if (!spec.is_array() || spec.size() > leaf.shape.size()) {
    w.fail("'spec' is not an array of at most {} entries", leaf.shape.size());
  }
  for (const json& e : spec) {
    if (!e.is_array()) w.fail("'spec' holds a {}, not a list of axes", json_kind(e));
    std::vector<std::string> names;
    for (const json& a : e) {
      if (!a.is_string()) w.fail("'spec' holds a {}, not an axis name", json_kind(a));
      names.push_back(a.get<std::string>());
    }
    leaf.spec.push_back(std::move(names));
  }

  const json& chunks = field(j, "chunks", w);
  if (!chunks.is_array()) w.fail("'chunks' is a {}, not an array", json_kind(chunks));
  uint64_t covered = 0;
  for (size_t k = 0; k < chunks.size(); ++k) {
    Where wc{api, path, fmt::format("leaf '{}' chunk {}", leaf.name, k)};
    leaf.chunks.push_back(parse_chunk(chunks[k], leaf, files, version, wc));
    covered += leaf.chunks.back().end - leaf.chunks.back().begin;  // each below 2^62
    if (covered > bytes) break;  // reported below; the sum must not overflow
  }
  // The boxes tile the shape: as many bytes as the leaf holds, and no two overlap.
  if (covered != bytes) {
    w.fail("its chunks hold {} bytes but {}{} is {} bytes", covered, dtype_name(leaf.dtype),
           shape_to_string(leaf.shape), bytes);
  }
  std::vector<const CheckpointChunk*> sorted;
  for (const CheckpointChunk& c : leaf.chunks) sorted.push_back(&c);
  if (!leaf.shape.empty()) {
    std::sort(sorted.begin(), sorted.end(),
              [](const auto* a, const auto* b) { return a->offsets[0] < b->offsets[0]; });
    for (size_t a = 0; a < sorted.size(); ++a) {
      for (size_t b = a + 1; b < sorted.size(); ++b) {
        if (sorted[b]->offsets[0] >= sorted[a]->offsets[0] + sorted[a]->extent[0]) break;
        if (boxes_overlap(*sorted[a], *sorted[b])) {
          w.fail("chunks {} and {} overlap", box_string(*sorted[a]), box_string(*sorted[b]));
        }
      }
    }
  } else if (leaf.chunks.size() != 1) {
    w.fail("a scalar needs exactly one chunk, got {}", leaf.chunks.size());
  }
  return leaf;
}

json dims_json(const Shape& s) { return json(std::vector<int64_t>(s.begin(), s.end())); }

}  // namespace

std::string_view checkpoint_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Q8_0:
      return "Q8_0";
    case DType::Q4_0:
      return "Q4_0";
    case DType::Q4_1:
      return "Q4_1";
    case DType::Q4_K:
      return "Q4_K";
    case DType::Q6_K:
      return "Q6_K";
    default:
      return safetensors_dtype_name(dtype);
  }
}

std::string_view checkpoint_stored_dtype(DType dtype) {
  return is_quantized(dtype) ? "U8" : safetensors_dtype_name(dtype);
}

Shape checkpoint_stored_shape(DType dtype, const Shape& extent) {
  if (!is_quantized(dtype) || extent.empty()) return extent;
  Shape out = extent;
  out.back() = extent.back() / dtype_block_elems(dtype) * dtype_size(dtype);
  return out;
}

std::string checkpoint_data_file(int process, int process_count) {
  return fmt::format("data-{:05d}-of-{:05d}.safetensors", process, process_count);
}

std::string checkpoint_tensor_name(const std::string& leaf, const Shape& offsets) {
  return fmt::format("{}@{}", leaf, fmt::join(offsets, ","));
}

std::string index_to_json(const CheckpointIndex& index) {
  json j = json::object();
  j["format"] = kCheckpointFormat;
  j["version"] = kCheckpointVersion;
  j["step"] = index.step;
  j["process_count"] = index.process_count;
  j["files"] = index.files;
  j["metadata"] = index.metadata;
  json leaves = json::array();
  for (const CheckpointLeaf& l : index.leaves) {
    json chunks = json::array();
    for (const CheckpointChunk& c : l.chunks) {
      std::string hashes;
      for (uint64_t h : c.xxh64) hashes += hex64(h);
      chunks.push_back({{"offsets", dims_json(c.offsets)},
                        {"extent", dims_json(c.extent)},
                        {"file", c.file},
                        {"tensor", c.tensor},
                        {"byte_range", {c.begin, c.end}},
                        {"xxh64_block", kChecksumBlock},
                        {"xxh64", std::move(hashes)}});
    }
    leaves.push_back({{"name", l.name},
                      {"shape", dims_json(l.shape)},
                      {"dtype", checkpoint_dtype_name(l.dtype)},
                      {"sharding",
                       {{"text", l.sharding},
                        {"mesh_axes", l.mesh_axes},
                        {"mesh_shape", dims_json(l.mesh_shape)},
                        {"spec", l.spec}}},
                      {"chunks", std::move(chunks)}});
  }
  j["leaves"] = std::move(leaves);
  try {
    return j.dump(1) + "\n";
  } catch (const json::exception& e) {
    fail("ckpt.save", "leaf names and metadata must be UTF-8: {}", e.what());
  }
}

CheckpointIndex parse_index(std::string_view text, const std::string& path, std::string_view api) {
  const json j = parse_untrusted_json(text, api, path);
  Where w{api, path, ""};
  if (!j.is_object()) w.fail("the index is a JSON {}, not an object", json_kind(j));
  const std::string format = get_string(j, "format", w);
  if (format != kCheckpointFormat) {
    w.fail("format '{}' is not '{}' (not a partix checkpoint)", format, kCheckpointFormat);
  }
  const int64_t version = as_int(field(j, "version", w), "version", w);
  if (version < 1 || version > kCheckpointVersion) {
    w.fail("format version {} is not one this partix reads (1 to {})", version, kCheckpointVersion);
  }
  CheckpointIndex index;
  index.step = get_count(j, "step", w);
  const int64_t processes = get_count(j, "process_count", w);
  if (processes < 1 || processes > (1 << 20)) w.fail("process_count {} is out of range", processes);
  index.process_count = static_cast<int>(processes);
  const json& files = field(j, "files", w);
  if (!files.is_array()) w.fail("'files' is a {}, not an array", json_kind(files));
  std::set<std::string> file_set;
  for (const json& f : files) {
    if (!f.is_string()) w.fail("'files' holds a {}, not a file name", json_kind(f));
    std::string name = f.get<std::string>();
    if (!plain_name(name) || name == kIndexName) {
      w.fail("'files' names '{}', which is not a plain data file name in the step's folder", name);
    }
    if (!file_set.insert(name).second) w.fail("'files' names '{}' twice", name);
    index.files.push_back(std::move(name));
  }
  if (auto md = j.find("metadata"); md != j.end()) {
    if (!md->is_object()) w.fail("'metadata' is a {}, not an object", json_kind(*md));
    for (const auto& [k, v] : md->items()) {
      if (!v.is_string()) w.fail("metadata '{}' is a {}, not a string", k, json_kind(v));
      index.metadata[k] = v.get<std::string>();
    }
  }
  const json& leaves = field(j, "leaves", w);
  if (!leaves.is_array()) w.fail("'leaves' is a {}, not an array", json_kind(leaves));
  std::set<std::string> names;
  for (size_t i = 0; i < leaves.size(); ++i) {
    index.leaves.push_back(parse_leaf(leaves[i], i, file_set, version, path, api));
    if (!names.insert(index.leaves.back().name).second) {
      w.fail("leaf '{}' appears twice", index.leaves.back().name);
    }
  }
  return index;
}

CheckpointIndex read_index(const std::string& step_dir, int64_t step, std::string_view api) {
  const std::string path = (fs::path(step_dir) / kIndexName).string();
  CheckpointIndex index = parse_index(read_text_file(path, api, kMaxIndexBytes), path, api);
  if (index.step != step) {
    fail(api, "'{}': the index is of step {}, but its folder is that of step {}", path, index.step,
         step);
  }
  return index;
}

}  // namespace detail

namespace ckpt {

namespace {

namespace fs = std::filesystem;

// "step_<N>" with N written as it would be printed (no sign, no leading zeros).
std::optional<int64_t> parse_step_name(const std::string& name) {
  if (!name.starts_with("step_")) return std::nullopt;
  const std::string digits = name.substr(5);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size() || v < 0 ||
      std::to_string(v) != digits) {
    return std::nullopt;
  }
  return v;
}

}  // namespace

std::string step_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) / fmt::format("step_{}", step)).string();
}

std::vector<int64_t> all_steps(const std::string& dir) {
  std::vector<int64_t> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  if (!fs::is_directory(dir, ec)) {
    detail::fail("ckpt", "'{}' is not a folder", dir);
  }
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    auto step = parse_step_name(e.path().filename().string());
    // A committed step is a folder with its index; the index is written last, before the
    // rename that commits.
    std::error_code probe;
    if (step && e.is_directory(probe) &&
        fs::is_regular_file(e.path() / detail::kIndexName, probe)) {
      out.push_back(*step);
    }
  }
  if (ec) detail::fail("ckpt", "cannot list '{}': {}", dir, ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<int64_t> latest_step(const std::string& dir) {
  std::vector<int64_t> steps = all_steps(dir);
  if (steps.empty()) return std::nullopt;
  return steps.back();
}

Info info(const std::string& dir, int64_t step) {
  detail::check(step >= 0, "ckpt.info", "step {} is negative", step);
  const std::string path = step_path(dir, step);
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    std::vector<int64_t> steps = all_steps(dir);
    detail::fail("ckpt.info", "'{}' has no committed step {} (steps: {})", dir, step,
                 steps.empty() ? std::string("none") : fmt::format("{}", fmt::join(steps, ", ")));
  }
  detail::CheckpointIndex index = detail::read_index(path, step, "ckpt.info");
  Info out;
  out.path = path;
  out.step = index.step;
  out.metadata = index.metadata;
  for (const detail::CheckpointLeaf& l : index.leaves) {
    out.leaves.push_back({l.name, l.shape, l.dtype, l.sharding});
  }
  return out;
}

}  // namespace ckpt

}  // namespace partix

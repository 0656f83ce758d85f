#include "formats/gguf.h"
#include "core/array_impl.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "core/errors.h"
#include "formats/convert.h"
#include "files/input_file.h"
#include "core/quants.h"
#include "partix/io.h"

namespace partix {
namespace detail {
namespace {

constexpr std::string_view kApi = "gguf";
constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32

std::string_view scalar_name(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "?";
}

bool is_int_type(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

// The smallest encoding of one value of type t, to bound element counts by the bytes left.
uint64_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
      return 8;  // the length
    case GgufType::kArray:
      return 4 + 8;  // element type and count
  }
  return 1;
}

class Parser {
 public:
  Parser(std::span<const uint8_t> file, std::string_view name)
      : r_(file, kApi, name), name_(name) {}
  explicit Parser(const InputFile& file) : r_(file, kApi), name_(file.path()) {}

  GgufParsed parse();

 private:
  GgufType read_type(std::string_view what) {
    uint32_t t = r_.read<uint32_t>(what);
    if (t > static_cast<uint32_t>(GgufType::kFloat64)) {
      r_.fail_here(fmt::format("{} has unknown value type {}", what, t));
    }
    return static_cast<GgufType>(t);
  }

  std::string read_string(std::string_view what) {
    uint64_t n = r_.read<uint64_t>(what);
    return std::string(r_.read_bytes(n, what));  // read_bytes bounds n by the bytes left
  }

  // A scalar integer (or bool) of type t, as int64 (uint64 as its bit pattern).
  int64_t read_int(GgufType t, std::string_view what) {
    switch (t) {
      case GgufType::kUint8:
        return r_.read<uint8_t>(what);
      case GgufType::kInt8:
        return r_.read<int8_t>(what);
      case GgufType::kUint16:
        return r_.read<uint16_t>(what);
      case GgufType::kInt16:
        return r_.read<int16_t>(what);
      case GgufType::kUint32:
        return r_.read<uint32_t>(what);
      case GgufType::kInt32:
        return r_.read<int32_t>(what);
      case GgufType::kUint64:
        return static_cast<int64_t>(r_.read<uint64_t>(what));
      case GgufType::kInt64:
        return r_.read<int64_t>(what);
      case GgufType::kBool: {
        uint8_t b = r_.read<uint8_t>(what);
        if (b > 1) r_.fail_here(fmt::format("{} is a bool holding {} (not 0 or 1)", what, b));
        return b;
      }
      default:
        internal_error("gguf", "read_int of a non-integer type");
    }
  }

  GgufValue read_value(GgufType t, const std::string& key, int depth) {
    GgufValue v;
    v.type = t;
    if (is_int_type(t) || t == GgufType::kBool) {
      v.i = read_int(t, key);
    } else if (t == GgufType::kFloat32) {
      v.f = r_.read<float>(key);
    } else if (t == GgufType::kFloat64) {
      v.f = r_.read<double>(key);
    } else if (t == GgufType::kString) {
      v.s = read_string(key);
    } else {
      if (depth >= kGgufMaxArrayDepth) {
        r_.fail_here(
            fmt::format("metadata '{}' nests arrays deeper than {}", key, kGgufMaxArrayDepth));
      }
      v.elem = read_type(fmt::format("the element type of metadata '{}'", key));
      uint64_t n = r_.read<uint64_t>(key);
      if (n > r_.remaining() / min_value_bytes(v.elem)) {
        r_.fail_here(
            fmt::format("metadata '{}' claims {} elements of {}, more than the {} "
                        "bytes left can hold",
                        key, n, scalar_name(v.elem), r_.remaining()));
      }
      const size_t count = static_cast<size_t>(n);
      if (is_int_type(v.elem) || v.elem == GgufType::kBool) {
        v.ints.reserve(count);
        for (size_t k = 0; k < count; ++k) v.ints.push_back(read_int(v.elem, key));
      } else if (v.elem == GgufType::kFloat32) {
        v.floats.reserve(count);
        for (size_t k = 0; k < count; ++k) v.floats.push_back(r_.read<float>(key));
      } else if (v.elem == GgufType::kFloat64) {
        v.floats.reserve(count);
        for (size_t k = 0; k < count; ++k) v.floats.push_back(r_.read<double>(key));
      } else if (v.elem == GgufType::kString) {
        v.strings.reserve(count);
        for (size_t k = 0; k < count; ++k) v.strings.push_back(read_string(key));
      } else {
        v.arrays.reserve(count);
        for (size_t k = 0; k < count; ++k) v.arrays.push_back(read_value(v.elem, key, depth + 1));
      }
    }
    return v;
  }

  GgufTensorInfo read_tensor_info(uint64_t index);

  ByteReader r_;
  std::string_view name_;
};

GgufTensorInfo Parser::read_tensor_info(uint64_t index) {
  GgufTensorInfo t;
  const std::string what = fmt::format("the name of tensor #{}", index);
  t.name = read_string(what);
  if (t.name.size() > kGgufMaxNameLength) {
    r_.fail_here(fmt::format("tensor #{} has a name of {} bytes (the format allows {})", index,
                             t.name.size(), kGgufMaxNameLength));
  }
  uint32_t n_dims = r_.read<uint32_t>(t.name);
  if (n_dims > 4) {
    r_.fail_here(
        fmt::format("tensor '{}' has {} dimensions (GGUF allows at most 4)", t.name, n_dims));
  }
  uint64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t n = r_.read<uint64_t>(t.name);
    t.dims.push_back(n);
    if (n > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(elements, n, &elements) ||
        elements > static_cast<uint64_t>(INT64_MAX)) {
      r_.fail_here(fmt::format("tensor '{}' has dims [{}] with too many elements", t.name,
                               fmt::join(t.dims, ", ")));
    }
  }
  for (auto it = t.dims.rbegin(); it != t.dims.rend(); ++it)
    t.shape.push_back(static_cast<int64_t>(*it));
  t.type = r_.read<uint32_t>(t.name);
  auto info = ggml_type_info(t.type);
  if (!info) r_.fail_here(fmt::format("tensor '{}' has unknown ggml type {}", t.name, t.type));
  const uint64_t row = t.dims.empty() ? 1 : t.dims[0];
  if (row % static_cast<uint64_t>(info->block_elems) != 0) {
    r_.fail_here(
        fmt::format("tensor '{}' of type {} has rows of {} elements, not a multiple "
                    "of its block size {}",
                    t.name, info->name, row, info->block_elems));
  }
  // elements / block_elems blocks of block_bytes; no overflow since block_bytes <= 292.
  uint64_t blocks = elements / static_cast<uint64_t>(info->block_elems);
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(info->block_bytes), &t.nbytes)) {
    r_.fail_here(fmt::format("tensor '{}' is too large", t.name));
  }
  t.offset = r_.read<uint64_t>(t.name);
  return t;
}

GgufParsed Parser::parse() {
  GgufParsed g;
  uint32_t magic = r_.read<uint32_t>("the magic");
  if (magic != kMagic) fail(kApi, "'{}': not a GGUF file (the magic is not 'GGUF')", name_);
  g.version = r_.read<uint32_t>("the version");
  if (g.version == 1) {
    fail(kApi, "'{}': GGUF version 1 is not supported (versions 2 and 3 are)", name_);
  }
  if (g.version != 2 && g.version != 3) {
    // A byte-swapped small number means a big-endian file.
    const bool swapped = (g.version & 0xFFFF) == 0 && (g.version >> 24) <= 3;
    fail(kApi, "'{}': GGUF version {} is not supported (versions 2 and 3 are){}", name_, g.version,
         swapped ? "; this looks like a big-endian file" : "");
  }
  const uint64_t n_tensors = r_.read<uint64_t>("the tensor count");
  const uint64_t n_kv = r_.read<uint64_t>("the metadata count");
  if (n_kv > r_.remaining() / (8 + 4 + 1)) {
    fail(kApi, "'{}': claims {} metadata entries, more than the file can hold", name_, n_kv);
  }
  std::set<std::string, std::less<>> keys;
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = read_string(fmt::format("the key of metadata entry #{}", k));
    if (key.empty() || key.size() > 65535) {
      r_.fail_here(fmt::format("metadata entry #{} has a key of {} bytes (1..65535 allowed)", k,
                               key.size()));
    }
    if (!keys.insert(key).second) r_.fail_here(fmt::format("metadata key '{}' appears twice", key));
    GgufType t = read_type(fmt::format("metadata '{}'", key));
    GgufValue v = read_value(t, key, 0);
    g.kv.emplace_back(std::move(key), std::move(v));
  }
  for (const auto& [key, v] : g.kv) {
    if (key != "general.alignment") continue;
    if (v.type != GgufType::kUint32) {
      fail(kApi, "'{}': general.alignment is a {}, not a uint32", name_, scalar_name(v.type));
    }
    if (v.i == 0 || (v.i & (v.i - 1)) != 0) {
      fail(kApi, "'{}': general.alignment {} is not a power of two", name_, v.i);
    }
    g.alignment = static_cast<uint64_t>(v.i);
  }
  if (n_tensors > r_.remaining() / (8 + 4 + 4 + 8)) {
    fail(kApi, "'{}': claims {} tensors, more than the file can hold", name_, n_tensors);
  }
  std::set<std::string, std::less<>> names;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t = read_tensor_info(k);
    if (!names.insert(t.name).second) {
      r_.fail_here(fmt::format("tensor name '{}' appears twice", t.name));
    }
    g.tensors.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment.
  const uint64_t file_size = r_.size();
  g.data_start = (r_.pos() + g.alignment - 1) / g.alignment * g.alignment;
  if (g.data_start > file_size) g.data_start = file_size;  // only valid with no tensor data
  const uint64_t data_size = file_size - g.data_start;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : g.tensors) {
    if (t.offset % g.alignment != 0) {
      fail(kApi, "'{}': tensor '{}' has offset {}, not a multiple of the alignment {}", name_,
           t.name, t.offset, g.alignment);
    }
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      fail(kApi,
           "'{}': tensor '{}' ({} bytes at data offset {}) ends past the end of the file "
           "({} bytes of data; truncated?)",
           name_, t.name, t.nbytes, t.offset, data_size);
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  // The tensors tile the data section as writers lay it out (each at the next aligned offset
  // after the previous one): a byte range that differs from what the declared type and shape
  // need (a changed quantization type, a wrong dim) shows up as an overlap or a hole.
  const GgufTensorInfo* prev = nullptr;
  uint64_t expected = 0;
  for (const GgufTensorInfo* t : by_offset) {
    if (t->offset < expected) {
      fail(kApi,
           "'{}': tensors '{}' and '{}' overlap (data offsets {} + {} bytes and {}; does a "
           "tensor's type or shape not match its data?)",
           name_, prev->name, t->name, prev->offset, prev->nbytes, t->offset);
    }
    if (t->offset > expected) {
      fail(kApi,
           "'{}': {} bytes of data before tensor '{}' (at data offset {}) belong to no tensor: "
           "{} ends at {} (does a tensor's type or shape not match its data?)",
           name_, t->offset - expected, t->name, t->offset,
           prev ? fmt::format("tensor '{}' ({} bytes of {})", prev->name, prev->nbytes,
                              ggml_type_info(prev->type)->name)
                : std::string("the previous tensor"),
           prev ? prev->offset + prev->nbytes : 0);
    }
    expected = (t->offset + t->nbytes + g.alignment - 1) / g.alignment * g.alignment;
    prev = t;
  }
  const uint64_t used = prev ? prev->offset + prev->nbytes : 0;
  if (data_size > expected) {
    fail(kApi, "'{}': {} bytes after the last tensor's data belong to no tensor", name_,
         data_size - used);
  }
  return g;
}

}  // namespace

std::string_view gguf_type_name(GgufType t) { return scalar_name(t); }

uint64_t GgufValue::size() const {
  return ints.size() + floats.size() + strings.size() + arrays.size();
}

GgufParsed parse_gguf(std::span<const uint8_t> file, std::string_view name) {
  return Parser(file, name).parse();
}

GgufParsed parse_gguf(const InputFile& file) { return Parser(file).parse(); }

// The state behind a GgufFile handle.
struct GgufState {
  std::shared_ptr<const InputFile> file;
  GgufParsed parsed;
  std::map<std::string, size_t, std::less<>> kv_index, tensor_index;

  const GgufValue* find(std::string_view key) const {
    auto it = kv_index.find(key);
    return it == kv_index.end() ? nullptr : &parsed.kv[it->second].second;
  }
  const GgufValue& get(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) fail(kApi, "'{}' has no metadata key '{}'", file->path(), key);
    return *v;
  }
  [[noreturn]] void wrong_type(std::string_view key, const GgufValue& v,
                               std::string_view expected) const {
    fail(kApi, "'{}': metadata '{}' is a {}, not {}", file->path(), key, type_string(v), expected);
  }
  static std::string type_string(const GgufValue& v) {
    if (v.type != GgufType::kArray) return std::string(scalar_name(v.type));
    return fmt::format("array[{}]", scalar_name(v.elem));
  }
  const GgufTensorInfo& tensor(std::string_view name) const {
    auto it = tensor_index.find(name);
    if (it == tensor_index.end()) {
      fail(kApi, "'{}' has no tensor '{}' ({} tensors)", file->path(), name, parsed.tensors.size());
    }
    return parsed.tensors[it->second];
  }
  int64_t as_int(std::string_view key, GgufType t, int64_t raw) const {
    if (t == GgufType::kUint64 && raw < 0) {
      fail(kApi, "'{}': metadata '{}' holds uint64 {}, beyond int64", file->path(), key,
           static_cast<uint64_t>(raw));
    }
    return raw;
  }
};

}  // namespace detail

struct GgufFile::Impl : detail::GgufState {};

namespace {
const GgufFile::Impl& checked(const std::shared_ptr<const GgufFile::Impl>& impl) {
  if (!impl) detail::fail("GgufFile", "use of an empty GgufFile handle (default-constructed)");
  return *impl;
}
}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  impl->file = detail::InputFile::open(path, detail::kApi);
  impl->parsed = detail::parse_gguf(*impl->file);
  for (size_t k = 0; k < impl->parsed.kv.size(); ++k) impl->kv_index[impl->parsed.kv[k].first] = k;
  for (size_t k = 0; k < impl->parsed.tensors.size(); ++k) {
    impl->tensor_index[impl->parsed.tensors[k].name] = k;
  }
  GgufFile f;
  f.impl_ = std::move(impl);
  return f;
}

const std::string& GgufFile::path() const { return checked(impl_).file->path(); }
uint32_t GgufFile::version() const { return checked(impl_).parsed.version; }
int64_t GgufFile::alignment() const {
  return static_cast<int64_t>(checked(impl_).parsed.alignment);
}

std::vector<std::string> GgufFile::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, _] : checked(impl_).parsed.kv) out.push_back(k);
  return out;
}

bool GgufFile::has(std::string_view key) const { return checked(impl_).find(key) != nullptr; }

std::string GgufFile::type_name(std::string_view key) const {
  return detail::GgufState::type_string(checked(impl_).get(key));
}

std::string GgufFile::get_string(std::string_view key) const {
  const detail::GgufValue& v = checked(impl_).get(key);
  if (v.type != detail::GgufType::kString) checked(impl_).wrong_type(key, v, "a string");
  return v.s;
}

int64_t GgufFile::get_int(std::string_view key) const {
  const detail::GgufValue& v = checked(impl_).get(key);
  if (!detail::is_int_type(v.type)) checked(impl_).wrong_type(key, v, "an integer");
  return checked(impl_).as_int(key, v.type, v.i);
}

double GgufFile::get_float(std::string_view key) const {
  const detail::GgufValue& v = checked(impl_).get(key);
  if (v.type != detail::GgufType::kFloat32 && v.type != detail::GgufType::kFloat64) {
    checked(impl_).wrong_type(key, v, "a float");
  }
  return v.f;
}

bool GgufFile::get_bool(std::string_view key) const {
  const detail::GgufValue& v = checked(impl_).get(key);
  if (v.type != detail::GgufType::kBool) checked(impl_).wrong_type(key, v, "a bool");
  return v.i != 0;
}

std::vector<std::string> GgufFile::get_strings(std::string_view key) const {
  const detail::GgufValue& v = checked(impl_).get(key);
  if (v.type != detail::GgufType::kArray || v.elem != detail::GgufType::kString) {
    checked(impl_).wrong_type(key, v, "an array of strings");
  }
  return v.strings;
}

std::vector<int64_t> GgufFile::get_ints(std::string_view key) const {
  const detail::GgufValue& v = checked(impl_).get(key);
  if (v.type != detail::GgufType::kArray || !detail::is_int_type(v.elem)) {
    checked(impl_).wrong_type(key, v, "an array of integers");
  }
  for (int64_t x : v.ints) checked(impl_).as_int(key, v.elem, x);
  return v.ints;
}

std::vector<double> GgufFile::get_floats(std::string_view key) const {
  const detail::GgufValue& v = checked(impl_).get(key);
  if (v.type != detail::GgufType::kArray ||
      (v.elem != detail::GgufType::kFloat32 && v.elem != detail::GgufType::kFloat64)) {
    checked(impl_).wrong_type(key, v, "an array of floats");
  }
  return v.floats;
}

std::string GgufFile::get_string(std::string_view key, std::string_view fallback) const {
  return has(key) ? get_string(key) : std::string(fallback);
}
int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}
double GgufFile::get_float(std::string_view key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}
bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}

std::vector<std::string> GgufFile::tensor_names() const {
  std::vector<std::string> out;
  for (const auto& t : checked(impl_).parsed.tensors) out.push_back(t.name);
  return out;
}

bool GgufFile::has_tensor(std::string_view name) const {
  return checked(impl_).tensor_index.find(name) != checked(impl_).tensor_index.end();
}

Shape GgufFile::tensor_shape(std::string_view name) const {
  return checked(impl_).tensor(name).shape;
}

std::string GgufFile::tensor_type(std::string_view name) const {
  return std::string(detail::ggml_type_info(checked(impl_).tensor(name).type)->name);
}

namespace {
// The tensor's blocks as they are in the file, each device reading the rows and block columns
// of its shard (a sharding that would split a block is refused by build_sharded).
Array load_blocks(const GgufFile& f, const GgufFile::Impl& im, const detail::GgufTensorInfo& t,
                  std::string_view name, const NamedSharding& sharding, DType dtype) {
  const std::string& path = f.path();
  if (f.tensor_dtype(name) != dtype) {
    detail::fail(detail::kApi, "'{}': tensor '{}' is stored as {}, so it cannot load as {}",
                 path, name, detail::ggml_type_info(t.type)->name, dtype_name(dtype));
  }
  if (sharding.spec().size() > static_cast<int>(t.shape.size()) || t.shape.empty()) {
    detail::fail(detail::kApi, "'{}': tensor '{}' of shape {} cannot take sharding {}", path,
                 name, shape_to_string(t.shape), sharding.to_string());
  }
  const detail::InputFile& file = *im.file;
  const uint64_t base = im.parsed.data_start + t.offset;
  const int64_t be = dtype_block_elems(dtype), bb = dtype_size(dtype);
  return detail::build_sharded(
      t.shape, dtype, sharding, /*committed=*/true,
      [&](void* block, const std::vector<Slice>& idx, const Shape& local) {
        if (shape_size(local) == 0) return;
        // Computed only now: a tensor with rows lies within the file, so its row's bytes fit,
        // while an empty one's width is unbounded (found by fuzzing: the product overflowed).
        const int64_t row_bytes = t.shape.back() / be * bb;
        const int64_t c0 = idx.back().start, c1 = idx.back().stop;
        const uint64_t bytes = static_cast<uint64_t>((c1 - c0) / be * bb);
        detail::FileWindow window(file, base, base + t.nbytes, detail::kApi);
        detail::for_each_box_row(t.shape, idx, local, [&](int64_t row, int64_t dst_off) {
          const uint8_t* src =
              window.at(base + static_cast<uint64_t>(row * row_bytes + c0 / be * bb), bytes);
          std::memcpy(static_cast<char*>(block) + dst_off / be * bb, src, bytes);
        });
      });
}

}  // namespace

std::optional<DType> GgufFile::tensor_dtype(std::string_view name) const {
  return detail::dtype_of_ggml(checked(impl_).tensor(name).type);
}

Array GgufFile::load(std::string_view name, const NamedSharding& sharding, DType dtype) const {
  const detail::GgufTensorInfo& t = checked(impl_).tensor(name);
  const detail::GgmlTypeInfo info = *detail::ggml_type_info(t.type);
  if (!info.supported) {
    detail::fail(detail::kApi,
                 "'{}': tensor '{}' has type {}, which partix does not dequantize "
                 "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)",
                 path(), name, info.name);
  }
  if (is_quantized(dtype)) return load_blocks(*this, checked(impl_), t, name, sharding, dtype);
  if (!is_floating(dtype)) {
    detail::fail(detail::kApi, "'{}': tensor '{}' can only load as a floating dtype, not {}",
                 path(), name, dtype_name(dtype));
  }
  if (sharding.spec().size() > static_cast<int>(t.shape.size())) {
    detail::fail(detail::kApi, "'{}': tensor '{}' of shape {} cannot take sharding {}", path(),
                 name, shape_to_string(t.shape), sharding.to_string());
  }
  const detail::InputFile& file = *checked(impl_).file;
  const uint64_t base = checked(impl_).parsed.data_start + t.offset;
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  const int ds = dtype_size(dtype);
  return detail::build_sharded(
      t.shape, dtype, sharding, /*committed=*/true,
      [&](void* block, const std::vector<Slice>& idx, const Shape& local) {
        // No rows to decode: the row width alone (unbounded by the file when there are no
        // rows) must not size the scratch buffer.
        if (shape_size(local) == 0) return;
        // As in load_blocks: only a tensor with rows bounds its row's bytes.
        const int64_t row_bytes = cols / info.block_elems * info.block_bytes;
        const int64_t c0 = idx.empty() ? 0 : idx.back().start;
        const int64_t c1 = idx.empty() ? 1 : idx.back().stop;
        // Only the quantization blocks covering this device's columns are decoded.
        const int64_t b0 = c0 / info.block_elems;
        const int64_t b1 = (c1 + info.block_elems - 1) / info.block_elems;
        const int64_t skip = c0 - b0 * info.block_elems;
        std::vector<float> scratch(static_cast<size_t>((b1 - b0) * info.block_elems));
        detail::FileWindow window(file, base, base + t.nbytes, detail::kApi);
        detail::for_each_box_row(t.shape, idx, local, [&](int64_t row, int64_t dst_off) {
          const uint8_t* src =
              window.at(base + static_cast<uint64_t>(row * row_bytes + b0 * info.block_bytes),
                        static_cast<uint64_t>((b1 - b0) * info.block_bytes));
          char* dst = static_cast<char*>(block) + dst_off * ds;
          const bool direct =
              dtype == DType::F32 && skip == 0 && c1 - c0 == (b1 - b0) * info.block_elems;
          float* out = direct ? reinterpret_cast<float*>(dst) : scratch.data();
          detail::dequantize_blocks(t.type, src, b1 - b0, out);
          if (!direct) {
            detail::convert_elements(reinterpret_cast<const uint8_t*>(scratch.data() + skip),
                                     detail::StoredType::F32, dst, dtype, c1 - c0);
          }
        });
      });
}

Array GgufFile::load(std::string_view name, DType dtype) const {
  // Like from_vector: on the default device, free to move to a computation's devices.
  Array a = load(name, single_device_sharding(default_device()), dtype);
  a.impl()->committed = false;
  return a;
}

}  // namespace partix

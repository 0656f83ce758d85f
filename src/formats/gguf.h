// GGUF (v2, v3) parser behind partix::GgufFile. Layout: magic "GGUF", u32 version, u64
// tensor count, u64 metadata count, the metadata (key, u32 type, value), the tensor infos
// (name, u32 n_dims, u64 dims fastest-first, u32 ggml type, u64 offset), padding to
// general.alignment (default 32), then the tensor data. Everything is little-endian.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "partix/dtype.h"

namespace partix::detail {

enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view gguf_type_name(GgufType t);  // "uint32", "string", ...

// One metadata value. Scalars: integers (and bools) in `i` (uint64 as its bit pattern),
// floats in `f`, strings in `s`. Arrays keep their elements by kind, compactly: a hostile
// array of a billion uint8 must cost 8 bytes per file byte at most, not a struct each.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  int64_t i = 0;
  double f = 0;
  std::string s;
  GgufType elem = GgufType::kUint8;  // arrays: the element type
  std::vector<int64_t> ints;         // integer and bool elements
  std::vector<double> floats;        // float elements
  std::vector<std::string> strings;  // string elements
  std::vector<GgufValue> arrays;     // nested array elements
  uint64_t size() const;             // arrays: the element count
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // as stored, fastest-varying first
  Shape shape;                 // row-major: dims reversed
  uint32_t type = 0;
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;
};

struct GgufParsed {
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_start = 0;                            // absolute offset of the data section
  std::vector<std::pair<std::string, GgufValue>> kv;  // file order
  std::vector<GgufTensorInfo> tensors;                // file order
};

inline constexpr int kGgufMaxArrayDepth = 8;
inline constexpr uint64_t kGgufMaxNameLength = 64;  // tensor names, per the spec

// Parses and validates `file` (its bytes); `name` is the path for messages. Throws
// partix::Error "[gguf] '<name>': <problem>".
GgufParsed parse_gguf(std::span<const uint8_t> file, std::string_view name);
// The same, reading the header from the file as far as it goes (never its tensor data).
class InputFile;
GgufParsed parse_gguf(const InputFile& file);

}  // namespace partix::detail

// safetensors: the header parser (validated like Hugging Face's reference reader) behind
// partix::Safetensors and save_safetensors.
//
// Layout: u64 LE header length N, N bytes of JSON {"name": {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the data buffer; offsets
// are relative to the buffer, tensors are contiguous and cover it exactly.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/convert.h"
#include "partix/dtype.h"

namespace partix::detail {

// Hugging Face refuses larger headers; so do we (a hostile length must not allocate).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;                 // as written: "BF16", "I8", ...
  std::optional<StoredType> stored;  // set when partix can load this dtype
  Shape shape;
  uint64_t begin = 0, end = 0;  // relative to the data buffer
};

struct SafetensorsHeader {
  uint64_t data_start = 0;                // absolute offset of the data buffer in the file
  std::vector<SafetensorsEntry> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
};

// Parses and validates the whole layout of `file` (its bytes); `name` is the path used in
// messages. Throws partix::Error "[safetensors] '<name>': <problem>".
SafetensorsHeader parse_safetensors(std::span<const uint8_t> file, std::string_view name);
// The same, reading only the header from the file.
class InputFile;
SafetensorsHeader parse_safetensors(const InputFile& file);

// The dtype name partix writes for `dtype` ("F32", "BF16", "BOOL", ...).
std::string_view safetensors_dtype_name(DType dtype);

}  // namespace partix::detail

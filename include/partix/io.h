// Model files: safetensors (Hugging Face).
//
// Files are untrusted input: a malformed file raises partix::Error naming the file and the
// problem, never a crash. Tensors load straight into their sharding: every device copies (or
// dequantizes) only its own slice from the memory-mapped file, so no device, and no host
// buffer, ever holds a whole sharded tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "partix/array.h"
#include "partix/dtype.h"
#include "partix/sharding.h"
#include "partix/tree.h"

namespace partix {

// ---------------------------------------------------------------------------------------
// safetensors

// A safetensors checkpoint: one file, or several listed by a model.safetensors.index.json.
// Cheap to copy (the mapped files are shared); thread-safe for concurrent loads.
class Safetensors {
 public:
  // path: a .safetensors file, a *.safetensors.index.json (its weight_map's files are
  // opened from the index's folder), or a folder holding model.safetensors or
  // model.safetensors.index.json. Every file is mapped and its header fully validated.
  static Safetensors open(const std::string& path);

  std::vector<std::string> names() const;  // sorted
  bool contains(std::string_view name) const;
  Shape shape(std::string_view name) const;
  // The dtype name as stored in the file: "F32", "BF16", "I8", ...
  std::string stored_dtype(std::string_view name) const;
  // The partix dtype the tensor loads as by default. Throws for stored dtypes partix has
  // no type for (U8, I8, F8_*, ...).
  DType dtype(std::string_view name) const;
  // __metadata__ of the single file, or the index's "metadata" (values as JSON text
  // where they are not strings).
  const std::map<std::string, std::string>& metadata() const;

  // The tensor as an Array with the given sharding, converted to `dtype` when given.
  // Conversions: any stored type to a floating dtype (correctly rounded), integers and
  // bool to an integer dtype (values must fit), bool to bool.
  Array load(std::string_view name, const NamedSharding& sharding,
             std::optional<DType> dtype = std::nullopt) const;
  // On device 0.
  Array load(std::string_view name, std::optional<DType> dtype = std::nullopt) const;
  // Every tensor on device 0, or with the sharding `sharding_for(name, shape)` returns.
  using ShardingFn = std::function<NamedSharding(const std::string& name, const Shape& shape)>;
  Params load_all(std::optional<DType> dtype = std::nullopt) const;
  Params load_all(const ShardingFn& sharding_for, std::optional<DType> dtype = std::nullopt) const;

 public:
  struct Impl;  // internal (src/io); a default-constructed handle throws on use

 private:
  std::shared_ptr<const Impl> impl_;
};

// Writes `tensors` as one safetensors file Hugging Face reads (header padded to 8 bytes,
// tensors in name order, contiguous). The file appears atomically (written to a temporary
// name, then renamed). Every array must be concrete and addressable from this process.
void save_safetensors(const std::string& path, const Params& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace partix

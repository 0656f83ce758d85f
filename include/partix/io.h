// Model files: safetensors (Hugging Face), GGUF (llama.cpp) and byte-level BPE tokenizers.
//
// Files are untrusted input: a malformed file raises partix::Error naming the file and the
// problem, never a crash. Only regular files are opened (a FIFO or a device is refused, never
// waited on). Tensors load straight into their sharding: every device reads (or dequantizes)
// only its own slice of the file through a small staging window, so no device, and no host
// buffer, ever holds a whole sharded tensor. A file that shrinks while open (truncated by
// another process) is reported as partix::Error naming it.
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
// Cheap to copy (the open files are shared); thread-safe for concurrent loads.
class Safetensors {
 public:
  // path: a .safetensors file, a *.safetensors.index.json (its weight_map's files are
  // opened from the index's folder), or a folder holding model.safetensors or
  // model.safetensors.index.json. Every file is opened and its header fully validated.
  // A file rewritten in place with the same size while open is not detected.
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
// name, every write checked, fsynced, then renamed): a full disk is an error naming the path
// and leaves any previous file untouched. Every array must be concrete and addressable from this
// process. Quantized arrays are refused (safetensors has no quantized dtypes).
void save_safetensors(const std::string& path, const Params& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// ---------------------------------------------------------------------------------------
// GGUF

// A GGUF v2/v3 file: typed metadata and (possibly quantized) tensors. Tensor shapes are
// row-major, i.e. the reverse of GGUF's fastest-first dims: a GGUF tensor with dims
// [576, 49152] has shape {49152, 576}. Cheap to copy; thread-safe for concurrent loads.
class GgufFile {
 public:
  // Maps the file and validates the header, metadata and tensor infos (bounds, overlaps,
  // alignment, block sizes, and that the tensors tile the data section, so a changed type
  // or shape is caught). A file rewritten in place with the same size is not detected.
  static GgufFile open(const std::string& path);

  const std::string& path() const;
  uint32_t version() const;
  int64_t alignment() const;  // general.alignment, default 32

  // ---- metadata. Every getter throws partix::Error naming the file and key when the key
  // is missing or holds another type.
  std::vector<std::string> keys() const;  // file order
  bool has(std::string_view key) const;
  // "uint32", "string", "array[string]", ...
  std::string type_name(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  // Any integer type (uint64 values above INT64_MAX throw).
  int64_t get_int(std::string_view key) const;
  // float32 or float64.
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::vector<std::string> get_strings(std::string_view key) const;
  std::vector<int64_t> get_ints(std::string_view key) const;
  std::vector<double> get_floats(std::string_view key) const;  // float32/float64 arrays
  // The same with a fallback for a missing key (a present key of the wrong type throws).
  std::string get_string(std::string_view key, std::string_view fallback) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;

  // ---- tensors
  std::vector<std::string> tensor_names() const;  // file order
  bool has_tensor(std::string_view name) const;
  Shape tensor_shape(std::string_view name) const;  // row-major
  // The ggml type name: "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K", ...
  std::string tensor_type(std::string_view name) const;
  // The partix dtype of a tensor's stored type (Q8_0 ... Q6_K included); nullopt for types
  // partix does not read.
  std::optional<DType> tensor_dtype(std::string_view name) const;

  // The tensor dequantized to `dtype` (a floating dtype), with the given sharding. Each
  // device dequantizes only the quantization blocks its slice needs. Types: F32, F16, BF16,
  // Q8_0, Q4_0, Q4_1, Q4_K, Q6_K; any other throws naming the tensor and the type. With
  // `dtype` the tensor's own quantized dtype (tensor_dtype), its blocks load as they are;
  // the sharding must not split a block.
  Array load(std::string_view name, const NamedSharding& sharding, DType dtype = DType::F32) const;
  Array load(std::string_view name, DType dtype = DType::F32) const;  // on device 0

 public:
  struct Impl;  // internal (src/io); a default-constructed handle throws on use

 private:
  std::shared_ptr<const Impl> impl_;
};

// ---------------------------------------------------------------------------------------
// Tokenizers

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// A byte-level BPE tokenizer (GPT-2 style): text is split by the GPT-2 pre-tokenizer
// pattern (optionally digits one by one first), bytes are mapped to printable characters,
// and merges apply by rank. Added special tokens (<|im_start|>, ...) are matched whole
// before BPE. Also the trivial byte tokenizer (ids = bytes) for training on raw text.
class Tokenizer {
 public:
  // A Hugging Face tokenizer.json (model.type "BPE" with a ByteLevel pre-tokenizer,
  // optionally in a Sequence after Digits). from_json_file also reads a
  // tokenizer_config.json beside it for bos/eos/pad and the chat template; without it
  // bos_id()/eos_id() are empty.
  static Tokenizer from_json_file(const std::string& path);
  static Tokenizer from_json(std::string_view json, std::string_view source = "tokenizer.json");
  // tokenizer.ggml.* metadata (model "gpt2"; pre "gpt2", "smollm", "starcoder" or
  // "refact"); control tokens (type 3) become special tokens, user-defined ones (type 4)
  // added tokens; bos/eos/pad and the chat template come from the metadata.
  static Tokenizer from_gguf(const GgufFile& file);
  // ids 0..255 are the bytes; no merges, no special tokens.
  static Tokenizer bytes();

  // Token ids of UTF-8 text. With parse_special, special tokens written in the text
  // (e.g. "<|im_end|>") become their ids; otherwise they are ordinary text. Invalid UTF-8
  // is encoded byte by byte; a byte the vocabulary has no token for (SmolLM2 lacks 0xFF,
  // 0x04, ...) throws partix::Error unless the tokenizer.json names an unk_token: nothing
  // is dropped silently (Hugging Face drops it).
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // The text of ids; decode(encode(s)) == s. Throws for ids outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  int64_t vocab_size() const;
  // The token's string as in the vocabulary (byte-level characters, e.g. "Ġthe").
  std::string id_to_token(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  bool is_special(int32_t id) const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;

  // ChatML (SmolLM2-Instruct, Qwen): "<|im_start|>{role}\n{content}<|im_end|>\n" per
  // message, then "<|im_start|>assistant\n" when add_generation_prompt. When the source's
  // chat template has a default system prompt and messages do not start with a system
  // message, it is prepended (as the template does).
  std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt = true) const;
  // The default system prompt found in the source's chat template ("" when none).
  const std::string& default_system_prompt() const;

 public:
  struct Impl;  // internal (src/io); a default-constructed handle throws on use

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace partix

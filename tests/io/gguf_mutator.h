// Writes modified copies of a real GGUF file, for tests of hostile model files: metadata
// values replaced, tensor infos changed (type, dims), layers dropped, tensor data overwritten.
//
// The copy is re-laid out the way writers lay GGUF out (each tensor's original bytes at the
// next aligned offset), so a changed type or shape keeps the old bytes, as an edit in place
// of the header would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf.h"

namespace partix::test {

class GgufMutator {
 public:
  explicit GgufMutator(const std::string& source);

  GgufMutator& set_u32(const std::string& key, uint32_t v);
  GgufMutator& set_f32(const std::string& key, float v);
  GgufMutator& set_str(const std::string& key, const std::string& v);
  GgufMutator& remove_key(const std::string& key);
  // Tensor infos. dims are fastest first, as the file stores them.
  GgufMutator& set_type(const std::string& tensor, uint32_t ggml_type);
  GgufMutator& set_dims(const std::string& tensor, std::vector<uint64_t> dims);
  GgufMutator& drop_tensor(const std::string& tensor);
  // Appends an F32 tensor with every element `v`.
  GgufMutator& add_f32(const std::string& tensor, std::vector<uint64_t> dims, float v);
  // Overwrites every element of an F32 tensor.
  GgufMutator& fill_f32(const std::string& tensor, float v);
  // Keeps layers 0..n-1 (their tensors and llama.block_count): a small real model.
  GgufMutator& keep_layers(int n);

  void write(const std::string& path) const;

 private:
  detail::GgufTensorInfo& tensor(const std::string& name);
  detail::GgufValue& value(const std::string& key, detail::GgufType type);

  std::string bytes_;  // the source file
  detail::GgufParsed g_;
  // Per tensor (same order as g_.tensors): its original data range, or its new contents.
  std::vector<uint64_t> src_offset_, src_nbytes_;
  std::vector<std::string> replaced_;
};

}  // namespace partix::test

// GGUF tokenizer loading (tokenizer.ggml.* metadata), then the loaded tokenizer at work.
#include "tokenizer_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = partix::fuzz::ScratchDir::get().write("input.gguf", data, size);
  partix::Tokenizer t;
  const bool loaded = partix::fuzz::expect_partix_error(
      [&] { t = partix::Tokenizer::from_gguf(partix::GgufFile::open(path)); });
  if (loaded) partix::fuzz::exercise_tokenizer(t);
  return 0;
}

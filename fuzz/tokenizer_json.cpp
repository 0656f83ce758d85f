// Hugging Face tokenizer.json, optionally with the tokenizer_config.json that from_json_file
// reads beside it, then the loaded tokenizer at work.
//
// Input: the tokenizer.json text; when it contains kConfigSeparator, what follows is the
// tokenizer_config.json and both go through from_json_file. Without one, the text goes
// through from_json (the bytes entry point).
#include "tokenizer_util.h"

namespace {
constexpr std::string_view kConfigSeparator = "\n#tokenizer_config.json\n";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t sep = input.find(kConfigSeparator);
  partix::Tokenizer t;
  bool loaded = false;
  if (sep == std::string_view::npos) {
    loaded = partix::fuzz::expect_partix_error([&] { t = partix::Tokenizer::from_json(input); });
  } else {
    const auto& dir = partix::fuzz::ScratchDir::get();
    dir.write("tokenizer_config.json", input.substr(sep + kConfigSeparator.size()));
    const std::string path = dir.write("tokenizer.json", input.substr(0, sep));
    loaded =
        partix::fuzz::expect_partix_error([&] { t = partix::Tokenizer::from_json_file(path); });
  }
  if (loaded) partix::fuzz::exercise_tokenizer(t);
  return 0;
}

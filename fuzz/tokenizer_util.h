// What the tokenizer harnesses do with a tokenizer that loaded: encode text that reaches every
// branch of the pre-tokenizers and the added-token matcher, decode the ids back, render a chat.
#pragma once

#include <string>
#include <vector>

#include "fuzz_util.h"

namespace partix::fuzz {

inline void exercise_tokenizer(const Tokenizer& t) {
  using namespace std::string_view_literals;  // the sample with a NUL byte keeps its length
  static const std::string kTexts[] = {
      "Hello world! It's 2024: naïve café, 世界 🙂 x=42;",
      "  leading\n\n spaces\t\tand 12345 67 digits  ",
      "<|im_start|>user\nhi<|im_end|>\n<|endoftext|><s></s>",
      std::string("bytes \xff\xfe\x00\x01 and \xc3 torn"sv),
      "",
  };
  for (const std::string& text : kTexts) {
    for (bool parse_special : {true, false}) {
      std::vector<int32_t> ids;
      if (!expect_partix_error([&] { ids = t.encode(text, parse_special); })) continue;
      expect_partix_error([&] { (void)t.decode(ids); });
      expect_partix_error([&] { (void)t.decode(ids, /*skip_special=*/true); });
    }
  }
  const int64_t n = t.vocab_size();
  for (int64_t id : {int64_t{0}, n / 2, n - 1, n, int64_t{-1}}) {
    expect_partix_error([&] {
      (void)t.id_to_token(static_cast<int32_t>(id));
      (void)t.is_special(static_cast<int32_t>(id));
    });
  }
  (void)t.token_to_id("<|im_end|>");
  (void)t.bos_id();
  (void)t.eos_id();
  (void)t.pad_id();
  (void)t.default_system_prompt();
  expect_partix_error([&] {
    (void)t.apply_chat_template({{"user", "hi"}, {"assistant", "hello"}, {"user", "<|im_end|>"}});
  });
  expect_partix_error([&] { (void)t.apply_chat_template({}, /*add_generation_prompt=*/false); });
}

}  // namespace partix::fuzz

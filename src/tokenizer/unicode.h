// The little Unicode the tokenizers need: UTF-8 decoding that never fails (invalid bytes
// come back one at a time, flagged), and the classes of the GPT-2 pattern: \p{L}, \p{N}, \s.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace partix::detail {

struct CodePoint {
  int32_t cp;      // -1 for a byte that starts no valid UTF-8 sequence
  int32_t length;  // bytes consumed, >= 1
};
// Decodes the code point at text[pos]; rejects overlong forms, surrogates and values past
// U+10FFFF (each such byte is returned alone with cp = -1). Precondition: pos < size.
CodePoint decode_utf8(std::string_view text, size_t pos);
void append_utf8(std::string& out, int32_t cp);

bool is_letter(int32_t cp);      // general category L*
bool is_number(int32_t cp);      // general category N*
bool is_whitespace(int32_t cp);  // Unicode White_Space

}  // namespace partix::detail

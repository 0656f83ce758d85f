// Pre-tokenization for byte-level BPE: the GPT-2 split pattern, implemented by hand
// (std::regex has no Unicode classes and would be slow), the individual-digits split, and
// GPT-2's byte <-> printable character mapping.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace partix::detail {

// Splits text as the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// would (leftmost match, alternatives in order). Bytes that are not valid UTF-8 count as
// symbols (neither letter, number nor space). The pieces cover the text exactly.
std::vector<std::string_view> split_gpt2(std::string_view text);

// Splits every number character (\p{N}) into a piece of its own; the runs between them are
// pieces too. (Hugging Face's Digits pre-tokenizer with individual_digits.)
std::vector<std::string_view> split_digits(std::string_view text);

// GPT-2's mapping of the 256 byte values to printable code points: printable Latin-1 bytes
// map to themselves, the others to U+0100 upwards in byte order.
const std::array<int32_t, 256>& byte_to_unicode();
// The inverse: code point -> byte, or -1 for a code point no byte maps to.
int byte_from_unicode(int32_t cp);

}  // namespace partix::detail

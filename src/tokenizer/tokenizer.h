// The byte-level BPE engine behind partix::Tokenizer, and the loaders' common description
// of a tokenizer (TokenizerSpec) from which it is built and validated.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "partix/io.h"

namespace partix::detail {

struct SpecAddedToken {
  int32_t id = 0;
  std::string content;
  bool special = true;  // skipped by decode(skip_special) and by encode(parse_special=false)
  bool lstrip = false, rstrip = false;  // absorbs the whitespace to its left / right
};

// What a loader read; build_tokenizer validates it.
struct TokenizerSpec {
  std::string source;                                       // the file, for messages
  std::vector<std::pair<std::string, int32_t>> vocab;       // token (byte-level spelling), id
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
  std::vector<SpecAddedToken> added;
  bool split_digits = false;      // a Digits pre-tokenizer runs first
  bool individual_digits = true;  // ...one digit per piece (else runs of digits)
  bool use_regex = true;          // the GPT-2 pattern splits words
  bool add_prefix_space = false;  // a space is prepended to each piece without one
  bool ignore_merges = false;     // a word that is a token is taken whole
  std::optional<int32_t> bos, eos, pad, unk;
  std::string chat_template;  // "" when the source has none
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Hostile files must not make partix allocate for ids in the billions.
inline constexpr int64_t kMaxVocab = 1 << 24;

class TokenizerCore {
 public:
  TokenizerCore() = default;
  // The trivial byte tokenizer: ids 0..255 are the bytes.
  static TokenizerCore bytes();
  // Validates and indexes spec. Throws partix::Error "[Tokenizer] '<source>': <problem>".
  static TokenizerCore build(TokenizerSpec spec);

  std::vector<int32_t> encode(std::string_view text, bool parse_special) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const;
  std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt) const;

  int64_t vocab_size() const { return static_cast<int64_t>(id_to_token_.size()); }
  const std::string& token(int32_t id) const;
  std::optional<int32_t> find(std::string_view token) const;
  bool is_special(int32_t id) const;
  std::optional<int32_t> bos, eos, pad;
  std::string default_system_prompt;

 private:
  struct Added {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip;
  };
  struct Merge {
    int32_t rank, id;
  };
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void check_id(int32_t id, std::string_view api) const;

  std::string source_;
  bool raw_bytes_ = false;
  std::vector<std::string> id_to_token_;  // "" for ids no token has
  std::vector<uint8_t> flags_;            // per id: kAdded | kSpecial
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_to_id_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  std::array<int32_t, 256> byte_ids_{};         // -1: the vocabulary lacks that byte
  std::vector<Added> added_;                    // longest first
  bool split_digits_ = false, individual_digits_ = true, use_regex_ = true;
  bool add_prefix_space_ = false, ignore_merges_ = false;
  std::optional<int32_t> unk_;
  bool non_chatml_template_ = false;  // the source's template is something else
};

// The default system prompt a ChatML chat template writes when the conversation has none
// ("" when there is none, or when it is not a plain literal).
std::string chatml_default_system_prompt(std::string_view chat_template);

}  // namespace partix::detail

namespace partix {
struct Tokenizer::Impl : detail::TokenizerCore {
  explicit Impl(detail::TokenizerCore core) : detail::TokenizerCore(std::move(core)) {}
};
}  // namespace partix

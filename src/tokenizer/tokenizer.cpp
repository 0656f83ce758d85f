#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <queue>

#include "core/errors.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/unicode.h"

namespace partix {
namespace detail {
namespace {

constexpr std::string_view kApi = "Tokenizer";
constexpr uint8_t kAdded = 1, kSpecial = 2;

std::string byte_char(int b) {
  std::string s;
  append_utf8(s, byte_to_unicode()[static_cast<size_t>(b)]);
  return s;
}

// Text quoted in a message: printable ASCII as is, other bytes as \xNN.
std::string escape_for_message(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 40)) {
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02X}", c);
    }
  }
  return s.size() > 40 ? out + "..." : out;
}

bool is_space_byte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

TokenizerCore TokenizerCore::bytes() {
  TokenizerCore t;
  t.source_ = "bytes";
  t.raw_bytes_ = true;
  for (int b = 0; b < 256; ++b) {
    t.id_to_token_.push_back(byte_char(b));
    t.token_to_id_.emplace(t.id_to_token_.back(), b);
    t.byte_ids_[static_cast<size_t>(b)] = b;
  }
  t.flags_.assign(256, 0);
  return t;
}

TokenizerCore TokenizerCore::build(TokenizerSpec spec) {
  TokenizerCore t;
  t.source_ = spec.source;
  const std::string& src = t.source_;
  // Ids index a dense table: bound them before sizing it.
  int64_t max_id = -1;
  auto see_id = [&](int64_t id, std::string_view what) {
    if (id < 0 || id >= kMaxVocab) {
      fail(kApi, "'{}': {} has id {} (ids must be in [0, {}))", src, what, id, kMaxVocab);
    }
    max_id = std::max(max_id, id);
  };
  for (const auto& [tok, id] : spec.vocab) see_id(id, fmt::format("token '{}'", tok));
  for (const auto& a : spec.added) see_id(a.id, fmt::format("added token '{}'", a.content));
  if (max_id < 0) fail(kApi, "'{}': the vocabulary is empty", src);
  t.id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  t.flags_.assign(static_cast<size_t>(max_id + 1), 0);
  std::vector<uint8_t> seen(static_cast<size_t>(max_id + 1), 0);
  for (auto& [tok, id] : spec.vocab) {
    if (tok.empty()) fail(kApi, "'{}': token id {} is the empty string", src, id);
    if (seen[static_cast<size_t>(id)]) {
      fail(kApi, "'{}': id {} belongs to two tokens ('{}' and '{}')", src, id,
           t.id_to_token_[static_cast<size_t>(id)], tok);
    }
    auto [it, inserted] = t.token_to_id_.emplace(tok, id);
    if (!inserted)
      fail(kApi, "'{}': token '{}' appears twice (ids {} and {})", src, tok, it->second, id);
    seen[static_cast<size_t>(id)] = 1;
    t.id_to_token_[static_cast<size_t>(id)] = tok;
  }
  for (const SpecAddedToken& a : spec.added) {
    if (a.content.empty()) fail(kApi, "'{}': added token id {} is the empty string", src, a.id);
    const size_t id = static_cast<size_t>(a.id);
    if (seen[id] && t.id_to_token_[id] != a.content) {
      fail(kApi, "'{}': added token '{}' has id {}, which the vocabulary gives to '{}'", src,
           a.content, a.id, t.id_to_token_[id]);
    }
    auto it = t.token_to_id_.find(a.content);
    if (it != t.token_to_id_.end() && it->second != a.id) {
      fail(kApi, "'{}': added token '{}' has id {} but the vocabulary says {}", src, a.content,
           a.id, it->second);
    }
    t.token_to_id_.emplace(a.content, a.id);
    t.id_to_token_[id] = a.content;
    seen[id] = 1;
    t.flags_[id] = static_cast<uint8_t>(kAdded | (a.special ? kSpecial : 0));
    t.added_.push_back({a.content, a.id, a.special, a.lstrip, a.rstrip});
  }
  // Leftmost-longest matching tries the longest added token first.
  std::stable_sort(t.added_.begin(), t.added_.end(), [](const Added& a, const Added& b) {
    return a.content.size() > b.content.size();
  });
  for (int b = 0; b < 256; ++b) {
    auto it = t.token_to_id_.find(byte_char(b));
    t.byte_ids_[static_cast<size_t>(b)] = it == t.token_to_id_.end() ? -1 : it->second;
  }
  int32_t rank = 0;
  for (const auto& [l, r] : spec.merges) {
    auto li = t.token_to_id_.find(l), ri = t.token_to_id_.find(r);
    if (li == t.token_to_id_.end() || ri == t.token_to_id_.end()) {
      fail(kApi, "'{}': merge #{} '{} {}' uses a token that is not in the vocabulary", src, rank, l,
           r);
    }
    auto mi = t.token_to_id_.find(l + r);
    if (mi == t.token_to_id_.end()) {
      fail(kApi, "'{}': merge #{} '{} {}' makes '{}', which is not in the vocabulary", src, rank, l,
           r, l + r);
    }
    const uint64_t key =
        (static_cast<uint64_t>(li->second) << 32) | static_cast<uint32_t>(ri->second);
    t.merges_.emplace(key, Merge{rank, mi->second});  // a repeated merge keeps its first rank
    ++rank;
  }
  auto check_special = [&](std::optional<int32_t> id, std::string_view what) {
    if (id && (*id < 0 || *id >= static_cast<int32_t>(t.id_to_token_.size()) ||
               !seen[static_cast<size_t>(*id)])) {
      fail(kApi, "'{}': the {} token id {} is not in the vocabulary", src, what, *id);
    }
    return id;
  };
  t.bos = check_special(spec.bos, "bos");
  t.eos = check_special(spec.eos, "eos");
  t.pad = check_special(spec.pad, "pad");
  t.unk_ = check_special(spec.unk, "unknown");
  t.split_digits_ = spec.split_digits;
  t.individual_digits_ = spec.individual_digits;
  t.use_regex_ = spec.use_regex;
  t.add_prefix_space_ = spec.add_prefix_space;
  t.ignore_merges_ = spec.ignore_merges;
  // Only ChatML is rendered; a source whose template is something else must not get it.
  t.non_chatml_template_ =
      !spec.chat_template.empty() && spec.chat_template.find("<|im_start|>") == std::string::npos;
  t.default_system_prompt = chatml_default_system_prompt(spec.chat_template);
  return t;
}

const std::string& TokenizerCore::token(int32_t id) const {
  check_id(id, "Tokenizer.id_to_token");
  return id_to_token_[static_cast<size_t>(id)];
}

std::optional<int32_t> TokenizerCore::find(std::string_view token) const {
  auto it = token_to_id_.find(token);
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

bool TokenizerCore::is_special(int32_t id) const {
  check_id(id, "Tokenizer.is_special");
  return (flags_[static_cast<size_t>(id)] & kSpecial) != 0;
}

void TokenizerCore::check_id(int32_t id, std::string_view api) const {
  if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size()) ||
      id_to_token_[static_cast<size_t>(id)].empty()) {
    fail(api, "token id {} is not in the vocabulary of '{}' ({} ids)", id, source_,
         id_to_token_.size());
  }
}

// BPE on one pre-tokenized word: start from its bytes, then repeatedly merge the adjacent
// pair of lowest rank (the leftmost among equals) until no pair has a merge.
void TokenizerCore::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    std::string spelled;
    for (unsigned char c : word) append_utf8(spelled, byte_to_unicode()[c]);
    if (auto id = find(spelled)) {
      out.push_back(*id);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  for (size_t k = 0; k < word.size(); ++k) {
    const auto b = static_cast<unsigned char>(word[k]);
    int32_t id = byte_ids_[b];
    if (id < 0) {
      // Hugging Face drops such bytes silently; partix refuses to lose text. Vocabularies
      // trained on UTF-8 text may lack bytes that never occur in it (0xC0, 0xFF, ...).
      if (!unk_) {
        fail("Tokenizer.encode",
             "byte 0x{:02X} of '{}' has no token in '{}' and there is no "
             "unknown token (is the text valid UTF-8?)",
             b, escape_for_message(word), source_);
      }
      id = *unk_;
    }
    syms.push_back(
        {id, static_cast<int32_t>(k) - 1, k + 1 < word.size() ? static_cast<int32_t>(k + 1) : -1});
  }
  struct Candidate {
    int32_t rank, pos, left_id, right_id, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t l) {
    if (l < 0) return;
    const int32_t r = syms[static_cast<size_t>(l)].next;
    if (r < 0) return;
    const uint64_t key = (static_cast<uint64_t>(syms[static_cast<size_t>(l)].id) << 32) |
                         static_cast<uint32_t>(syms[static_cast<size_t>(r)].id);
    auto it = merges_.find(key);
    if (it == merges_.end()) return;
    heap.push({it->second.rank, l, syms[static_cast<size_t>(l)].id, syms[static_cast<size_t>(r)].id,
               it->second.id});
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(syms.size()); ++k) consider(k);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Sym& l = syms[static_cast<size_t>(c.pos)];
    // Stale entries: the left symbol was merged away or changed, or its neighbour did.
    if (l.id != c.left_id || l.next < 0 || syms[static_cast<size_t>(l.next)].id != c.right_id) {
      continue;
    }
    Sym& r = syms[static_cast<size_t>(l.next)];
    l.id = c.merged;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = c.pos;
    r.id = -1;  // dead
    consider(l.prev);
    consider(c.pos);
  }
  for (int32_t k = 0; k >= 0; k = syms[static_cast<size_t>(k)].next) {
    out.push_back(syms[static_cast<size_t>(k)].id);
  }
}

// Text without added tokens: the pre-tokenizer chain, then BPE per word.
void TokenizerCore::encode_segment(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> pieces;
  if (split_digits_) {
    pieces = split_digits(text);
    if (!individual_digits_) {  // rejoin consecutive single-digit pieces into runs
      std::vector<std::string_view> runs;
      for (std::string_view p : pieces) {
        const bool digit = is_number(decode_utf8(p, 0).cp) &&
                           static_cast<size_t>(decode_utf8(p, 0).length) == p.size();
        const bool prev_digit = !runs.empty() && is_number(decode_utf8(runs.back(), 0).cp);
        if (digit && prev_digit) {
          runs.back() = std::string_view(runs.back().data(), runs.back().size() + p.size());
        } else {
          runs.push_back(p);
        }
      }
      pieces = std::move(runs);
    }
  } else {
    pieces.push_back(text);
  }
  std::string prefixed;
  for (std::string_view piece : pieces) {
    if (add_prefix_space_ && piece.front() != ' ') {
      prefixed = " ";
      prefixed += piece;
      piece = prefixed;
    }
    if (use_regex_) {
      for (std::string_view w : split_gpt2(piece)) encode_word(w, out);
    } else {
      encode_word(piece, out);
    }
  }
}

std::vector<int32_t> TokenizerCore::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  if (raw_bytes_) {
    for (unsigned char c : text) out.push_back(c);
    return out;
  }
  // Added tokens are found first (leftmost, longest); the text between them is tokenized.
  size_t seg = 0, p = 0;
  while (p < text.size()) {
    const Added* hit = nullptr;
    for (const Added& a : added_) {
      if ((parse_special || !a.special) && text.compare(p, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (!hit) {
      ++p;
      continue;
    }
    size_t left = p, right = p + hit->content.size();
    if (hit->lstrip) {
      while (left > seg && is_space_byte(text[left - 1])) --left;
    }
    if (hit->rstrip) {
      while (right < text.size() && is_space_byte(text[right])) ++right;
    }
    encode_segment(text.substr(seg, left - seg), out);
    out.push_back(hit->id);
    seg = p = right;
  }
  encode_segment(text.substr(seg), out);
  return out;
}

std::string TokenizerCore::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    check_id(id, "Tokenizer.decode");
    const uint8_t f = flags_[static_cast<size_t>(id)];
    if (skip_special && (f & kSpecial)) continue;
    const std::string& tok = id_to_token_[static_cast<size_t>(id)];
    if (raw_bytes_) {
      out += static_cast<char>(id);
      continue;
    }
    if (f & kAdded) {  // added tokens are written as themselves, not in byte spelling
      out += tok;
      continue;
    }
    // Byte-level spelling back to bytes; a token with a character outside the byte
    // alphabet is taken as written (as Hugging Face's ByteLevel decoder does).
    std::string bytes;
    bool ok = true;
    for (size_t p = 0; p < tok.size() && ok;) {
      CodePoint c = decode_utf8(tok, p);
      const int b = byte_from_unicode(c.cp);
      ok = b >= 0;
      bytes += static_cast<char>(b);
      p += static_cast<size_t>(c.length);
    }
    out += ok ? bytes : tok;
  }
  return out;
}

std::string TokenizerCore::apply_chat_template(const std::vector<ChatMessage>& messages,
                                               bool add_generation_prompt) const {
  constexpr std::string_view api = "Tokenizer.apply_chat_template";
  if (non_chatml_template_) {
    fail(api,
         "'{}' has a chat template that is not ChatML; only ChatML "
         "(<|im_start|>role\\n...<|im_end|>) is supported",
         source_);
  }
  if (!find("<|im_start|>") || !find("<|im_end|>")) {
    fail(api, "'{}' has no <|im_start|>/<|im_end|> tokens, so ChatML does not apply", source_);
  }
  std::string out;
  if (!messages.empty() && messages[0].role != "system" && !default_system_prompt.empty()) {
    out += "<|im_start|>system\n" + default_system_prompt + "<|im_end|>\n";
  }
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string chatml_default_system_prompt(std::string_view tmpl) {
  // The template writes the default as one string literal:
  //   '<|im_start|>system\nYou are ...<|im_end|>\n'
  // with a real newline or a "\n" escape after "system".
  for (std::string_view head : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    size_t at = tmpl.find(head);
    if (at == std::string_view::npos) continue;
    size_t start = at + head.size();
    size_t end = tmpl.find("<|im_end|>", start);
    if (end == std::string_view::npos) continue;
    std::string_view body = tmpl.substr(start, end - start);
    // Jinja syntax inside means the prompt is computed, not a literal default.
    if (body.find("{{") != std::string_view::npos || body.find("{%") != std::string_view::npos ||
        body.find('\'') != std::string_view::npos || body.find('"') != std::string_view::npos) {
      continue;
    }
    std::string prompt;
    for (size_t k = 0; k < body.size(); ++k) {
      if (body[k] == '\\' && k + 1 < body.size() && body[k + 1] == 'n') {
        prompt += '\n';
        ++k;
      } else {
        prompt += body[k];
      }
    }
    return prompt;
  }
  return "";
}

}  // namespace detail

// ---------------------------------------------------------------------------------------

namespace {
const Tokenizer::Impl& checked(const std::shared_ptr<const Tokenizer::Impl>& impl) {
  if (!impl) detail::fail("Tokenizer", "use of an empty Tokenizer (default-constructed)");
  return *impl;
}
}  // namespace

Tokenizer Tokenizer::bytes() {
  Tokenizer t;
  t.impl_ = std::make_shared<const Impl>(detail::TokenizerCore::bytes());
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  return checked(impl_).encode(text, parse_special);
}
std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special) const {
  return checked(impl_).decode(ids, skip_special);
}
int64_t Tokenizer::vocab_size() const { return checked(impl_).vocab_size(); }
std::string Tokenizer::id_to_token(int32_t id) const { return checked(impl_).token(id); }
std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  return checked(impl_).find(token);
}
bool Tokenizer::is_special(int32_t id) const { return checked(impl_).is_special(id); }
std::optional<int32_t> Tokenizer::bos_id() const { return checked(impl_).bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return checked(impl_).eos; }
std::optional<int32_t> Tokenizer::pad_id() const { return checked(impl_).pad; }
std::string Tokenizer::apply_chat_template(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt) const {
  return checked(impl_).apply_chat_template(messages, add_generation_prompt);
}
const std::string& Tokenizer::default_system_prompt() const {
  return checked(impl_).default_system_prompt;
}

}  // namespace partix

#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"

namespace partix::detail {
namespace {

enum class Kind { kLetter, kNumber, kSpace, kOther };

Kind kind_of(int32_t cp) {
  if (is_letter(cp)) return Kind::kLetter;
  if (is_number(cp)) return Kind::kNumber;
  if (is_whitespace(cp)) return Kind::kSpace;
  return Kind::kOther;  // includes invalid bytes (cp == -1)
}

// One decoded character of the text.
struct Char {
  size_t pos;
  int32_t cp;
  Kind kind;
};

// The end (byte offset) of the run of characters of kind k starting at index i.
size_t run_end(const std::vector<Char>& cs, size_t i, Kind k, size_t text_size, size_t* next) {
  while (i < cs.size() && cs[i].kind == k) ++i;
  *next = i;
  return i < cs.size() ? cs[i].pos : text_size;
}

// The length of a contraction ('s 't 're 've 'm 'll 'd) starting at byte p, else 0.
size_t contraction(std::string_view t, size_t p) {
  if (p + 1 >= t.size() || t[p] != '\'') return 0;
  const char a = t[p + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (p + 2 < t.size()) {
    const char b = t[p + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  }
  return 0;
}

}  // namespace

std::vector<std::string_view> split_gpt2(std::string_view text) {
  std::vector<Char> cs;
  cs.reserve(text.size());
  for (size_t p = 0; p < text.size();) {
    CodePoint c = decode_utf8(text, p);
    cs.push_back({p, c.cp, kind_of(c.cp)});
    p += static_cast<size_t>(c.length);
  }
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < cs.size()) {
    const size_t start = cs[i].pos;
    size_t next = i;
    size_t end;
    if (size_t n = contraction(text, start)) {
      end = start + n;  // contractions are ASCII: n bytes are n characters
      next = i + n;
    } else if (cs[i].cp == ' ' && i + 1 < cs.size() && cs[i + 1].kind != Kind::kSpace) {
      // " ?X+": the space joins the run of the class that follows it.
      end = run_end(cs, i + 1, cs[i + 1].kind, text.size(), &next);
    } else if (cs[i].kind != Kind::kSpace) {
      end = run_end(cs, i, cs[i].kind, text.size(), &next);
    } else {
      // "\s+(?!\S)|\s+": a whitespace run leaves its last character to the next piece
      // when something other than whitespace follows (it may join that as " ?X+").
      size_t j;
      end = run_end(cs, i, Kind::kSpace, text.size(), &j);
      if (j < cs.size() && j - i >= 2) {
        next = j - 1;
        end = cs[j - 1].pos;
      } else {
        next = j;
      }
    }
    out.push_back(text.substr(start, end - start));
    i = next;
  }
  return out;
}

std::vector<std::string_view> split_digits(std::string_view text) {
  std::vector<std::string_view> out;
  size_t run = 0;  // start of the current non-digit run
  for (size_t p = 0; p < text.size();) {
    CodePoint c = decode_utf8(text, p);
    const size_t len = static_cast<size_t>(c.length);
    if (is_number(c.cp)) {
      if (p > run) out.push_back(text.substr(run, p - run));
      out.push_back(text.substr(p, len));
      run = p + len;
    }
    p += len;
  }
  if (run < text.size()) out.push_back(text.substr(run));
  return out;
}

const std::array<int32_t, 256>& byte_to_unicode() {
  static const std::array<int32_t, 256> table = [] {
    std::array<int32_t, 256> t{};
    int32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      t[static_cast<size_t>(b)] = printable ? b : extra++;
    }
    return t;
  }();
  return table;
}

int byte_from_unicode(int32_t cp) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> inv{};
    inv.fill(-1);
    const auto& fwd = byte_to_unicode();
    for (int b = 0; b < 256; ++b)
      inv[static_cast<size_t>(fwd[static_cast<size_t>(b)])] = static_cast<int16_t>(b);
    return inv;
  }();
  if (cp < 0 || cp >= static_cast<int32_t>(inverse.size())) return -1;
  return inverse[static_cast<size_t>(cp)];
}

}  // namespace partix::detail

#include "files/checksum.h"

#include <cstring>

namespace partix::detail {

namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // the host is little-endian, as the format assumes
  return v;
}

uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

uint64_t round(uint64_t acc, uint64_t input) { return rotl(acc + input * kP2, 31) * kP1; }

uint64_t merge(uint64_t h, uint64_t v) { return (h ^ round(0, v)) * kP1 + kP4; }

// Consumes whole 32-byte stripes; returns how many bytes it used.
size_t stripes(uint64_t acc[4], const unsigned char* p, size_t n) {
  uint64_t a = acc[0], b = acc[1], c = acc[2], d = acc[3];
  size_t done = 0;
  for (; done + 32 <= n; done += 32) {
    a = round(a, read64(p + done));
    b = round(b, read64(p + done + 8));
    c = round(c, read64(p + done + 16));
    d = round(d, read64(p + done + 24));
  }
  acc[0] = a, acc[1] = b, acc[2] = c, acc[3] = d;
  return done;
}

}  // namespace

void Xxh64::update(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += n;
  if (pending_n_ > 0) {
    const size_t take = std::min(n, 32 - pending_n_);
    std::memcpy(pending_ + pending_n_, p, take);
    pending_n_ += take;
    p += take;
    n -= take;
    if (pending_n_ < 32) return;
    stripes(acc_, pending_, 32);
    pending_n_ = 0;
  }
  const size_t used = stripes(acc_, p, n);
  std::memcpy(pending_, p + used, n - used);
  pending_n_ = n - used;
}

uint64_t Xxh64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(acc_[0], 1) + rotl(acc_[1], 7) + rotl(acc_[2], 12) + rotl(acc_[3], 18);
    for (uint64_t v : acc_) h = merge(h, v);
  } else {
    h = kP5;  // the seed is 0
  }
  h += total_;
  const unsigned char* p = pending_;
  size_t n = pending_n_;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round(0, read64(p)), 27) * kP1 + kP4;
  if (n >= 4) {
    h = rotl(h ^ (static_cast<uint64_t>(read32(p)) * kP1), 23) * kP2 + kP3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; ++p, --n) h = rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t xxh64(const void* data, size_t n) {
  Xxh64 h;
  h.update(data, n);
  return h.digest();
}

std::string hex64(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = kDigits[v & 15];
  return s;
}

bool parse_hex64(std::string_view text, uint64_t* out) {
  if (text.size() != 16) return false;
  uint64_t v = 0;
  for (char c : text) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace partix::detail

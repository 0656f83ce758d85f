// A read-only memory map of a whole file, and bounds-checked little-endian reading over it.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace partix::detail {

class MappedFile {
 public:
  // Maps `path` read-only. Throws partix::Error "[api] cannot open '<path>': <reason>".
  static std::shared_ptr<const MappedFile> open(const std::string& path, std::string_view api);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  uint64_t size() const { return size_; }
  const uint8_t* data() const { return data_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool mapped_ = false;
};

// Sequential little-endian reads from a byte span; every read checks the bounds first and
// throws "[api] '<file>': truncated at byte <pos> reading <what>" instead of overrunning.
class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> bytes, std::string_view api, std::string_view file)
      : bytes_(bytes), api_(api), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }
  // Throws unless n more bytes are available.
  void need(uint64_t n, std::string_view what) const;
  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));  // the host is little-endian
    pos_ += sizeof(T);
    return v;
  }
  std::string_view read_bytes(uint64_t n, std::string_view what);
  [[noreturn]] void fail_here(std::string_view problem) const;

 private:
  std::span<const uint8_t> bytes_;
  std::string_view api_, file_;
  uint64_t pos_ = 0;
};

}  // namespace partix::detail

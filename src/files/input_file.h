// Reading untrusted files: one open helper every reader uses (regular files only, never
// blocking on a FIFO), positioned reads that detect a file shrinking under us, and
// bounds-checked little-endian parsing over memory or over a file.
//
// Nothing is memory-mapped: a mapped file truncated by another process faults (SIGBUS) on the
// next access, while a read of a truncated file returns short and is reported as an Error.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace partix::detail {

// Opens `path` read-only and returns the descriptor. Throws "[api] cannot open '<path>': ..."
// or "[api] '<path>' is not a regular file (a directory)" for anything else (a FIFO is
// opened without blocking and refused, so no reader ever hangs on one).
int open_regular_file(const std::string& path, std::string_view api, uint64_t* size);

// The whole of a small regular file (config.json, tokenizer.json, a corpus file). Throws
// when it holds more than max_bytes (a hostile size must not allocate).
std::string read_text_file(const std::string& path, std::string_view api, uint64_t max_bytes);

class InputFile {
 public:
  static std::shared_ptr<const InputFile> open(const std::string& path, std::string_view api);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // at open; readers validate against it

  // Reads bytes [offset, offset + n) into dst (offset + n <= size()). Throws "[api] '<path>'
  // changed while being read: ..." when the file no longer holds them (truncated or shrunk by
  // another process), or for an I/O error.
  void read(uint64_t offset, void* dst, uint64_t n, std::string_view api) const;

 private:
  InputFile() = default;
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Sequential reads of [begin, end) of a file through a staging buffer, so reading a tensor row
// by row costs one pread per window, not one per row.
class FileWindow {
 public:
  FileWindow(const InputFile& file, uint64_t begin, uint64_t end, std::string_view api,
             uint64_t window = uint64_t{1} << 20)
      : file_(file), begin_(begin), end_(end), api_(api), window_(window) {}
  // The n bytes at absolute offset `offset` (within [begin, end)); valid until the next call.
  const uint8_t* at(uint64_t offset, uint64_t n);

 private:
  const InputFile& file_;
  uint64_t begin_, end_;
  std::string_view api_;
  uint64_t window_;
  std::vector<uint8_t> buf_;
  uint64_t buf_start_ = 0, buf_len_ = 0;
};

// Sequential little-endian reads from bytes in memory or from a file; every read checks the
// bounds first and throws "[api] '<file>': truncated at byte <pos> reading <what>" instead of
// overrunning. Over a file, bytes are fetched on demand into a growing buffer, so a parser
// only holds the header it has read.
class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> bytes, std::string_view api, std::string_view file)
      : data_(bytes.data()), size_(bytes.size()), loaded_(bytes.size()), api_(api), file_(file) {}
  ByteReader(const InputFile& file, std::string_view api)
      : size_(file.size()), file_ptr_(&file), api_(api), file_(file.path()) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return size_; }
  uint64_t remaining() const { return size_ - pos_; }
  // Throws unless n more bytes are available.
  void need(uint64_t n, std::string_view what);
  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));  // the host is little-endian
    pos_ += sizeof(T);
    return v;
  }
  // A view valid until the next read (a file-backed reader may grow its buffer).
  std::string_view read_bytes(uint64_t n, std::string_view what);
  [[noreturn]] void fail_here(std::string_view problem) const;

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t loaded_ = 0;  // bytes of data_ that are valid
  const InputFile* file_ptr_ = nullptr;
  std::vector<uint8_t> buf_;
  std::string_view api_, file_;
  uint64_t pos_ = 0;
};

}  // namespace partix::detail

#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "core/errors.h"

static_assert(std::endian::native == std::endian::little,
              "the file readers assume a little-endian host (safetensors and GGUF are LE)");

namespace partix::detail {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, std::string_view api) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(api, "cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(api, "cannot stat '{}': {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(api, "'{}' is not a regular file", path);
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ > 0) {  // mmap of length 0 fails; an empty file is reported by the parsers
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail(api, "cannot map '{}' ({} bytes): {}", path, f->size_, std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
    f->mapped_ = true;
  }
  ::close(fd);  // the mapping keeps the file alive
  return f;
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void ByteReader::need(uint64_t n, std::string_view what) const {
  if (n > remaining()) {
    fail(api_, "'{}': truncated at byte {} reading {} ({} bytes needed, {} left)", file_, pos_,
         what, n, remaining());
  }
}

std::string_view ByteReader::read_bytes(uint64_t n, std::string_view what) {
  need(n, what);
  std::string_view v(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
  pos_ += n;
  return v;
}

void ByteReader::fail_here(std::string_view problem) const {
  fail(api_, "'{}': {} (at byte {})", file_, problem, pos_);
}

}  // namespace partix::detail

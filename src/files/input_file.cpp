#include "files/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "core/errors.h"

static_assert(std::endian::native == std::endian::little,
              "the file readers assume a little-endian host (safetensors and GGUF are LE)");

namespace partix::detail {

namespace {

std::string_view file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

int open_regular_file(const std::string& path, std::string_view api, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) fail(api, "cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(api, "cannot stat '{}': {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(api, "'{}' is not a regular file ({})", path, file_kind(st.st_mode));
  }
  // Regular files never block; clear the flag so reads behave as usual.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

std::string read_text_file(const std::string& path, std::string_view api, uint64_t max_bytes) {
  auto f = InputFile::open(path, api);
  if (f->size() > max_bytes) {
    fail(api, "'{}' is {} bytes, more than the {} accepted for this file", path, f->size(),
         max_bytes);
  }
  std::string text(f->size(), '\0');
  f->read(0, text.data(), text.size(), api);
  return text;
}

std::shared_ptr<const InputFile> InputFile::open(const std::string& path, std::string_view api) {
  std::shared_ptr<InputFile> f(new InputFile());
  f->path_ = path;
  f->fd_ = open_regular_file(path, api, &f->size_);
  return f;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::read(uint64_t offset, void* dst, uint64_t n, std::string_view api) const {
  if (offset > size_ || n > size_ - offset) {
    internal_error("InputFile::read", "a read past the size validated at open");
  }
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t done = 0;
  while (done < n) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - done, uint64_t{1} << 30));
    ssize_t got = ::pread(fd_, out + done, chunk, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(api, "reading '{}' failed: {}", path_, std::strerror(errno));
    if (got == 0) {
      struct stat st {};
      const bool known = ::fstat(fd_, &st) == 0;
      fail(api,
           "'{}' changed while being read: it was {} bytes when opened and is now {} (truncated "
           "by another process?)",
           path_, size_, known ? std::to_string(st.st_size) : std::string("unknown"));
    }
    done += static_cast<uint64_t>(got);
  }
}

const uint8_t* FileWindow::at(uint64_t offset, uint64_t n) {
  if (offset < begin_ || offset > end_ || n > end_ - offset) {
    internal_error("FileWindow::at", "a read outside the window's range");
  }
  if (offset < buf_start_ || offset + n > buf_start_ + buf_len_) {
    buf_len_ = std::max(n, std::min(window_, end_ - offset));
    buf_.resize(static_cast<size_t>(buf_len_));
    buf_start_ = offset;
    file_.read(offset, buf_.data(), buf_len_, api_);
  }
  return buf_.data() + (offset - buf_start_);
}

void ByteReader::need(uint64_t n, std::string_view what) {
  if (n > remaining()) {
    fail(api_, "'{}': truncated at byte {} reading {} ({} bytes needed, {} left)", file_, pos_,
         what, n, remaining());
  }
  if (pos_ + n <= loaded_) return;
  // Grow geometrically so a header read field by field costs few reads.
  const uint64_t want = std::min(size_, std::max({pos_ + n, 2 * loaded_, uint64_t{1} << 16}));
  buf_.resize(static_cast<size_t>(want));
  file_ptr_->read(loaded_, buf_.data() + loaded_, want - loaded_, api_);
  loaded_ = want;
  data_ = buf_.data();
}

std::string_view ByteReader::read_bytes(uint64_t n, std::string_view what) {
  need(n, what);
  std::string_view v(reinterpret_cast<const char*>(data_ + pos_), n);
  pos_ += n;
  return v;
}

void ByteReader::fail_here(std::string_view problem) const {
  fail(api_, "'{}': {} (at byte {})", file_, problem, pos_);
}

}  // namespace partix::detail

#include "files/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/errors.h"

namespace partix::detail {

namespace fs = std::filesystem;

namespace {

constexpr size_t kBufferBytes = size_t{1} << 20;

std::string tmp_name(const std::string& path) { return fmt::format("{}.tmp-{}", path, ::getpid()); }

// The folder holding `path` ("." for a bare name).
fs::path parent_of(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// Writes to a symbolic link go to the file it names, as an in-place writer's would.
std::string resolve(const std::string& path) {
  std::error_code ec;
  if (fs::is_symlink(path, ec)) {
    fs::path target = fs::weakly_canonical(path, ec);
    if (!ec) return target.string();
  }
  return path;
}

}  // namespace

void fsync_dir(const fs::path& dir, std::string_view api) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    fail(api, "cannot open folder '{}' to sync it: {}", dir.string(), std::strerror(errno));
  if (::fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP) {
    int err = errno;
    ::close(fd);
    fail(api, "cannot sync folder '{}': {}", dir.string(), std::strerror(err));
  }
  ::close(fd);
}

namespace {

// Creating and removing a file is the only reliable test that a folder takes new files (access()
// ignores read-only mounts for some file systems, and root passes every permission check).
void probe_folder(const fs::path& dir, const std::string& path, std::string_view api) {
  const std::string probe = (dir / fmt::format(".partix-probe-{}", ::getpid())).string();
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    fail(api, "cannot write '{}': cannot create files in '{}': {}", path, dir.string(),
         std::strerror(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

bool process_alive(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

}  // namespace

void check_writable_file(const std::string& raw, std::string_view api) {
  const std::string path = resolve(raw);
  std::error_code ec;
  if (path.empty()) fail(api, "an empty path cannot be written");
  auto st = fs::status(path, ec);
  if (fs::is_directory(st)) fail(api, "cannot write '{}': it is a folder", raw);
  if (fs::is_character_file(st) || fs::is_fifo(st)) return;  // written in place
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    fail(api, "cannot write '{}': it exists and is not a regular file", raw);
  }
  const fs::path dir = parent_of(path);
  if (!fs::exists(dir, ec))
    fail(api, "cannot write '{}': folder '{}' does not exist", raw, dir.string());
  if (!fs::is_directory(dir, ec)) {
    fail(api, "cannot write '{}': '{}' is not a folder", raw, dir.string());
  }
  probe_folder(dir, raw, api);
}

void check_writable_dir(const std::string& path, std::string_view api,
                        const std::vector<std::string>& allowed) {
  std::error_code ec;
  if (path.empty()) fail(api, "an empty path cannot be written");
  if (fs::exists(path, ec)) {
    if (!fs::is_directory(path, ec))
      fail(api, "cannot write '{}': it exists and is not a folder", path);
    for (const auto& e : fs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        fail(api,
             "cannot write '{}': it is a folder holding '{}', which this writer does not "
             "produce; refusing to replace it (choose a new or an empty folder)",
             path, name);
      }
    }
    if (ec) fail(api, "cannot list '{}': {}", path, ec.message());
  }
  // The nearest existing ancestor must take new entries (missing parents are created).
  fs::path full = fs::absolute(path, ec).lexically_normal();
  if (!full.has_filename()) full = full.parent_path();  // "ckpt/" names the folder ckpt
  fs::path dir = parent_of(full.string());
  while (!fs::exists(dir, ec) && dir.has_parent_path() && dir != dir.parent_path()) {
    dir = dir.parent_path();
  }
  if (!fs::is_directory(dir, ec))
    fail(api, "cannot write '{}': '{}' is not a folder", path, dir.string());
  probe_folder(dir, path, api);
}

void remove_stale_temporaries(const std::string& path) {
  const fs::path target(path);
  const std::string base = target.filename().string() + ".tmp-";
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(parent_of(path), ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(base)) continue;
    const std::string rest = name.substr(base.size());
    const size_t digits = rest.find_first_not_of("0123456789");
    if (digits == 0) continue;
    const std::string suffix = digits == std::string::npos ? "" : rest.substr(digits);
    if (!suffix.empty() && suffix != ".old") continue;
    const long pid = std::strtol(rest.substr(0, digits).c_str(), nullptr, 10);
    if (pid <= 0 || pid == ::getpid() || process_alive(static_cast<pid_t>(pid))) continue;
    stale.push_back(e.path());
  }
  // A folder set aside by a writer that died before its swap completed is the only complete
  // copy when the target is missing: put it back rather than delete it.
  std::sort(stale.begin(), stale.end(), [](const fs::path& a, const fs::path& b) {
    return a.string().ends_with(".old") > b.string().ends_with(".old");
  });
  for (const fs::path& p : stale) {
    if (p.string().ends_with(".old") && !fs::exists(target, ec)) {
      fs::rename(p, target, ec);
      if (!ec) continue;
    }
    fs::remove_all(p, ec);
  }
}

// ---------------------------------------------------------------------------------------

AtomicFile::AtomicFile(std::string path, std::string_view api) : path_(resolve(path)), api_(api) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    // O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of blocking.
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd_ < 0) fail_io("open", errno);
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
    direct_ = true;
    return;
  }
  check_writable_file(path_, api_);
  remove_stale_temporaries(path_);
  tmp_ = tmp_name(path_);
  // An existing file keeps its permissions.
  const mode_t mode = ::stat(path_.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0666;
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd_ < 0) fail(api_, "cannot create '{}': {}", tmp_, std::strerror(errno));
  if (mode != 0666) ::fchmod(fd_, mode);
  buf_.reserve(kBufferBytes);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !direct_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::fail_io(std::string_view doing, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!direct_ && !tmp_.empty()) ::unlink(tmp_.c_str());
  fail(api_, "cannot write '{}' ({} failed): {}", path_, doing, std::strerror(err));
}

void AtomicFile::write(std::string_view bytes) {
  if (fd_ < 0) internal_error("AtomicFile", "write after commit or failure");
  if (buf_.size() + bytes.size() > kBufferBytes) flush();
  if (bytes.size() >= kBufferBytes) {
    write_all(bytes);  // large blocks go out without a copy
  } else {
    buf_.append(bytes);
  }
}

void AtomicFile::write_direct(std::string_view bytes) {
  if (fd_ < 0) internal_error("AtomicFile", "write after commit or failure");
  flush();
  const size_t whole = bytes.size() / kDirectAlign * kDirectAlign;
  const bool aligned = reinterpret_cast<uintptr_t>(bytes.data()) % kDirectAlign == 0 &&
                       ::lseek(fd_, 0, SEEK_CUR) % static_cast<off_t>(kDirectAlign) == 0;
  const int flags = ::fcntl(fd_, F_GETFL);
  if (!direct_ && !odirect_refused_ && aligned && whole > 0 && flags >= 0 &&
      ::fcntl(fd_, F_SETFL, flags | O_DIRECT) == 0) {
    size_t done = 0;
    while (done < whole) {
      ssize_t n = ::write(fd_, bytes.data() + done, whole - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL) {  // accepted by fcntl, refused by the file system
        odirect_refused_ = true;
        break;
      }
      if (n < 0) fail_io("write", errno);
      if (n == 0) fail_io("write", EIO);
      done += static_cast<size_t>(n);
      if (done % kDirectAlign != 0) break;  // a short write: the rest through the cache
    }
    if (::fcntl(fd_, F_SETFL, flags) != 0) fail_io("fcntl", errno);
    bytes.remove_prefix(done);
  } else if (!direct_ && aligned && whole > 0) {
    odirect_refused_ = true;
  }
  write_all(bytes);
}

void AtomicFile::flush() {
  if (fd_ < 0) internal_error("AtomicFile", "flush after commit or failure");
  write_all(buf_);
  buf_.clear();
}

void AtomicFile::write_all(std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_io("write", errno);
    if (n == 0) fail_io("write", EIO);
    done += static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  flush();
  // Devices and pipes have nothing to sync (EINVAL); a regular file must reach the disk.
  if (::fsync(fd_) != 0 && !(direct_ && (errno == EINVAL || errno == EROFS)))
    fail_io("fsync", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    int err = errno;
    if (!direct_) ::unlink(tmp_.c_str());
    fail(api_, "cannot write '{}' (close failed): {}", path_, std::strerror(err));
  }
  committed_ = true;
  if (direct_) return;
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_.c_str());
    fail(api_, "cannot rename '{}' to '{}': {}", tmp_, path_, std::strerror(err));
  }
  fsync_dir(parent_of(path_), api_);
}

void write_file_atomic(const std::string& path, std::string_view api, std::string_view bytes) {
  AtomicFile f(path, api);
  f.write(bytes);
  f.commit();
}

// ---------------------------------------------------------------------------------------

AtomicDir::AtomicDir(std::string path, std::string_view api, std::vector<std::string> allowed)
    : path_(fs::path(std::move(path)).lexically_normal().string()),
      api_(api),
      allowed_(std::move(allowed)) {
  if (path_.ends_with('/') && path_.size() > 1) path_.pop_back();
  check_writable_dir(path_, api_, allowed_);
  std::error_code ec;
  fs::create_directories(parent_of(path_), ec);
  if (ec) fail(api_, "cannot create the folders of '{}': {}", path_, ec.message());
  remove_stale_temporaries(path_);
  tmp_ = tmp_name(path_);
  fs::remove_all(tmp_, ec);
  if (!fs::create_directory(tmp_, ec) || ec) {
    fail(api_, "cannot create '{}': {}", tmp_, ec ? ec.message() : "it exists");
  }
}

AtomicDir::~AtomicDir() {
  std::error_code ec;
  if (!committed_) fs::remove_all(tmp_, ec);
}

std::string AtomicDir::file(std::string_view name) const {
  if (std::find(allowed_.begin(), allowed_.end(), name) == allowed_.end()) {
    internal_error("AtomicDir", fmt::format("'{}' is not among the folder's allowed names", name));
  }
  return (fs::path(tmp_) / name).string();
}

void AtomicDir::commit() {
  fsync_dir(tmp_, api_);
  // Checked again: the folder may have changed since the constructor looked.
  check_writable_dir(path_, api_, allowed_);
  std::error_code ec;
  if (!fs::exists(path_, ec)) {
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      fail(api_, "cannot rename '{}' to '{}': {}", tmp_, path_, std::strerror(errno));
    }
  } else if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, path_.c_str(), RENAME_EXCHANGE) == 0) {
    // Swapped in one step: tmp_ now holds the old folder.
    fs::remove_all(tmp_, ec);
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    // No atomic swap on this file system: set the old folder aside first. A crash between
    // the renames leaves both complete; remove_stale_temporaries puts the old one back.
    const std::string aside = tmp_ + ".old";
    if (std::rename(path_.c_str(), aside.c_str()) != 0) {
      fail(api_, "cannot move '{}' aside: {}", path_, std::strerror(errno));
    }
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      int err = errno;
      std::rename(aside.c_str(), path_.c_str());
      fail(api_, "cannot rename '{}' to '{}': {}", tmp_, path_, std::strerror(err));
    }
    fs::remove_all(aside, ec);
  } else {
    fail(api_, "cannot replace '{}' with '{}': {}", path_, tmp_, std::strerror(errno));
  }
  committed_ = true;
  fsync_dir(parent_of(path_), api_);
}

}  // namespace partix::detail

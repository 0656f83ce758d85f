#include "files/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

#include "core/errors.h"

namespace partix::detail {

namespace {

namespace fs = std::filesystem;

// The lock file, by identity: two spellings of one folder (a symlink, "a/../a") are one lock.
using Key = std::pair<dev_t, ino_t>;

// The locks this process holds. flock conflicts between two open files of one process too, so
// an owner taking its lock again must reuse the open file that holds it.
struct Held {
  int fd = -1;
  const void* owner = nullptr;
  int64_t handles = 0;
};

// Never destroyed: writers of static objects may release their locks during exit.
std::mutex& registry_mutex() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<Key, Held>& registry() {
  static auto* held = new std::map<Key, Held>;
  return *held;
}

void release(const Key& key) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(key);
  if (it == registry().end() || --it->second.handles > 0) return;
  ::close(it->second.fd);  // releases the flock
  registry().erase(it);
}

// The pid the holder wrote into the lock file, for the message ("" if none).
std::string holder_of(int fd) {
  char pid[32] = {};
  const ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
  std::string holder = n > 0 ? std::string(pid, static_cast<size_t>(n)) : std::string();
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return holder;
}

[[noreturn]] void in_use(const std::string& dir, const std::string& path, std::string_view api,
                         const std::string& who) {
  fail(api,
       "'{}' is in use by another run{} (it holds '{}'); two runs must not write one checkpoint "
       "folder at once: wait for it to end, or choose another folder",
       dir, who, path);
}

// flock without waiting; throws naming the folder when another process holds it.
void take(int fd, const std::string& dir, const std::string& path, std::string_view api) {
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    const std::string me = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) == 0) {
      [[maybe_unused]] const ssize_t n = ::pwrite(fd, me.data(), me.size(), 0);
    }
    return;
  }
  const int err = errno;
  const std::string holder = holder_of(fd);
  ::close(fd);
  if (err == EWOULDBLOCK) in_use(dir, path, api, holder.empty() ? "" : " (process " + holder + ")");
  fail(api, "cannot lock '{}': {}", path, std::strerror(err));
}

}  // namespace

std::shared_ptr<void> lock_folder(const std::string& dir, const void* owner, std::string_view api,
                                  bool create) {
  const std::string path = (fs::path(dir) / kFolderLockName).string();
  std::error_code ec;
  if (create) fs::create_directories(dir, ec);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (!create) return nullptr;
    fail(api, "cannot create the lock file '{}': {}", path, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(api, "cannot read '{}': {}", path, std::strerror(err));
  }
  const Key key{st.st_dev, st.st_ino};
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(key);
    if (it != registry().end()) {
      ::close(fd);
      if (it->second.owner != owner) {
        in_use(dir, path, api,
               " of this process (a CheckpointManager of the folder, or another Checkpointer's "
               "save still in flight)");
      }
      ++it->second.handles;
    } else {
      take(fd, dir, path, api);
      registry().emplace(key, Held{fd, owner, 1});
    }
  }
  return std::shared_ptr<void>(new Key(key), [](void* p) {
    const Key* k = static_cast<Key*>(p);
    release(*k);
    delete k;
  });
}

}  // namespace partix::detail

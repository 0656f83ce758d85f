// Writing output so that no error goes unnoticed and no reader sees half a file: every write,
// the fsync and the close are checked, and the result appears by rename. A file is written to
// <path>.tmp-<pid> beside its target; a folder (a checkpoint) to <dir>.tmp-<pid>/, swapped into
// place whole. Temporaries of processes that died are removed on the next write.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace partix::detail {

// Throws "[api] cannot write '<path>': <why>" unless `path` can be written as a file: its
// folder exists and takes new files (probed by creating one) and `path` is not a folder. Call
// before long work, so that a typo does not cost its result.
void check_writable_file(const std::string& path, std::string_view api);

// The same for a folder AtomicDir will write: the nearest existing ancestor takes new entries,
// and an existing `path` is a folder holding nothing but `allowed` names.
void check_writable_dir(const std::string& path, std::string_view api,
                        const std::vector<std::string>& allowed);

// Removes temporaries (<name>.tmp-<pid>...) beside `path` whose process no longer runs.
void remove_stale_temporaries(const std::string& path);

// fsync of a folder makes a rename in it durable; file systems that refuse it (EINVAL) pass.
void fsync_dir(const std::filesystem::path& dir, std::string_view api);

class AtomicFile {
 public:
  // Opens <path>.tmp-<pid> for writing. An existing character device or FIFO (/dev/null,
  // /dev/stdout) is written directly instead, still with every write checked.
  AtomicFile(std::string path, std::string_view api);
  ~AtomicFile();  // removes the temporary unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::string_view bytes);
  // write() past the page cache (O_DIRECT), for large outputs: the disk takes the bytes straight
  // from `bytes`, saving the kernel's copy and the later write-back. Applies to the whole
  // kDirectAlign blocks of `bytes` when its address and the file's size so far are multiples of
  // kDirectAlign; the rest, and any file system that refuses O_DIRECT, goes through write().
  void write_direct(std::string_view bytes);
  static constexpr size_t kDirectAlign = 4096;
  // Hands buffered bytes to the file now, so a full disk is reported at this point.
  void flush();
  // Flushes, fsyncs and closes, renames over the target and fsyncs its folder.
  void commit();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail_io(std::string_view doing, int err);
  void write_all(std::string_view bytes);
  std::string path_, tmp_, api_;
  int fd_ = -1;
  bool direct_ = false, committed_ = false;
  bool odirect_refused_ = false;  // the file system said no once: write() from then on
  std::string buf_;
};

// Writes `bytes` as the whole of `path`, atomically.
void write_file_atomic(const std::string& path, std::string_view api, std::string_view bytes);

class AtomicDir {
 public:
  // Creates <path>.tmp-<pid>/. An existing `path` is replaced at commit only if it is a folder
  // holding nothing but `allowed` names, so a mistyped path cannot delete unrelated files.
  AtomicDir(std::string path, std::string_view api, std::vector<std::string> allowed);
  ~AtomicDir();  // removes the temporary folder unless committed
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;

  // Where to write `name` (write it with AtomicFile or write_file_atomic: each is fsynced).
  std::string file(std::string_view name) const;
  // The temporary folder, for other processes that write files into it.
  const std::string& temporary() const { return tmp_; }
  // fsyncs the folder, swaps it into place (the old folder, if any, is removed after the
  // swap), and fsyncs the parent: a crash at any point leaves the old or the new whole.
  void commit();

 private:
  std::string path_, tmp_, api_;
  std::vector<std::string> allowed_;
  bool committed_ = false;
};

}  // namespace partix::detail

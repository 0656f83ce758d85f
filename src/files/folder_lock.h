// One writer per output folder (a checkpoint folder): an flock on <dir>/.partix-lock. The
// kernel releases it when its process ends, however it ends (kill -9 included), so nothing is
// left to clean up; the file holds the pid of the last holder, only for the message of the
// writer that is refused. Within a process, one owner (a CheckpointManager and its writer) may
// take the lock again while holding it; another owner is refused as another process would be.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace partix::detail {

inline constexpr std::string_view kFolderLockName = ".partix-lock";

// Takes the lock of `dir` for `owner` (any address that names the writer), without waiting:
// when another process or another owner of this process holds it, throws "[api] '<dir>' is in
// use by another run ...". `create`: make `dir` if absent and fail when the lock file cannot be
// made; otherwise such a folder returns nullptr (nothing to lock yet). The lock is held until
// the last handle returned to its owner is released.
std::shared_ptr<void> lock_folder(const std::string& dir, const void* owner, std::string_view api,
                                  bool create);

}  // namespace partix::detail

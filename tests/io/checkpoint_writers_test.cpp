// One writer per checkpoint folder: a save holds the folder's lock from its start until its
// step is committed (the background write included), so a second writer, in another process or
// this one, is refused at once naming the folder; the lock is released on completion, on error
// and when its process dies. A step already committed is never replaced unless asked.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "io/checkpoint_test_util.h"
#include "test_util.h"

using namespace partix;
namespace fs = std::filesystem;

namespace {

Array values(float scale, int64_t n = 64) {
  std::vector<Device> devs(devices().begin(), devices().begin() + 4);
  Mesh mesh({4}, {"x"}, devs);
  return test::iota({n}, DType::F32, NamedSharding(mesh, P("x")), scale);
}

std::string lock_file(const std::string& dir) { return dir + "/.partix-lock"; }

// Whether a process other than the lock's holders could take the folder's lock now (a second
// open file of the lock conflicts with the first even within one process).
bool lock_is_free(const std::string& dir) {
  const int fd = ::open(lock_file(dir).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return true;  // no lock file: nobody ever locked it
  const bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);  // releases it again
  return free;
}

// A child process that holds the folder's lock as a writer would (its pid in the file) until
// it is killed. Only system calls run in the child: the parent has threads.
class LockHolder {
 public:
  explicit LockHolder(const std::string& dir) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    const std::string path = lock_file(dir);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
      if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(1);
      char digits[24];
      int n = 0;
      for (pid_t p = ::getpid(); p > 0; p /= 10) digits[n++] = static_cast<char>('0' + p % 10);
      char text[24];
      for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
      if (::ftruncate(fd, 0) != 0 || ::write(fd, text, static_cast<size_t>(n)) != n) ::_exit(1);
      (void)!::write(fds[1], "x", 1);
      ::pause();
      ::_exit(0);
    }
    ::close(fds[1]);
    char c = 0;
    EXPECT_EQ(::read(fds[0], &c, 1), 1);
    ::close(fds[0]);
  }
  ~LockHolder() { kill(); }
  // kill -9: the writer crashed.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

}  // namespace

TEST(CheckpointWriters, ACommittedStepIsRefusedUnlessOverwriteIsAsked) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  const Array a = values(1.0f), b = values(-3.0f);
  ckpt::Checkpointer writer;
  writer.save(d, 1, a);
  writer.wait();
  EXPECT_PARTIX_ERROR(writer.save(d, 1, b), "[ckpt.save]", "step 1 of '" + d + "'",
                      "already committed", "overwrite");
  EXPECT_NO_THROW(writer.wait());  // refused before anything was started
  EXPECT_EQ(test::bytes_of(ckpt::restore(d, 1, a)), test::bytes_of(a));
  // The refusal released the lock: another writer (this process's default one) saves at once.
  ckpt::save(d, 2, b);
  ckpt::wait();
  writer.save(d, 1, b, {.overwrite = true});
  writer.wait();
  EXPECT_EQ(ckpt::all_steps(d), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(test::bytes_of(ckpt::restore(d, 1, a)), test::bytes_of(b));
  EXPECT_TRUE(lock_is_free(d));
}

TEST(CheckpointWriters, TheFolderIsLockedFromTheSaveUntilItsStepIsCommitted) {
  test::TempDir dir;
  const std::string d = (dir.path() / "run").string();  // made by the save
  const Array a = values(2.0f, 4096);
  ckpt::Checkpointer writer, other;
  {
    std::unique_lock<std::mutex> hold = detail::hold_checkpoint_commits();
    writer.save(d, 1, a);  // returns with the write in flight (held before its first stage)
    EXPECT_FALSE(lock_is_free(d));
    EXPECT_PARTIX_ERROR(other.save(d, 2, a), "[ckpt.save]", "'" + d + "' is in use by another",
                        "this process");
    EXPECT_PARTIX_ERROR(CheckpointManager{d}, "[CheckpointManager]", "'" + d + "' is in use");
    EXPECT_TRUE(ckpt::all_steps(d).empty());
  }
  writer.wait();
  EXPECT_EQ(ckpt::all_steps(d), std::vector<int64_t>{1});
  EXPECT_TRUE(lock_is_free(d));
  other.save(d, 2, a);
  other.wait();
  EXPECT_EQ(ckpt::all_steps(d), (std::vector<int64_t>{1, 2}));
  // A manager's own saves share its lock; other writers are refused while it lives.
  CheckpointManager manager(d);
  manager.save(3, std::vector<Array>{a});
  manager.wait();
  EXPECT_PARTIX_ERROR(ckpt::save(d, 4, a), "[ckpt.save]", "is in use by another");
  EXPECT_FALSE(lock_is_free(d));
}

TEST(CheckpointWriters, AnotherProcessSavingIsRefusedAtOnceAndItsCrashFreesTheFolder) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  const Array a = values(5.0f);
  ckpt::Checkpointer writer;
  LockHolder holder(d);
  EXPECT_PARTIX_ERROR(writer.save(d, 1, a), "[ckpt.save]", "'" + d + "' is in use by another run",
                      "(process " + std::to_string(holder.pid()) + ")", ".partix-lock");
  EXPECT_TRUE(ckpt::all_steps(d).empty());
  holder.kill();  // kill -9 while holding it: the kernel releases the lock
  writer.save(d, 1, a);
  writer.wait();
  EXPECT_EQ(test::bytes_of(ckpt::restore(d, 1, a)), test::bytes_of(a));
}

TEST(CheckpointWriters, AFailedWriteReleasesTheFolder) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  const Array small = values(1.0f), big = values(1.0f, 1 << 18);
  ckpt::Checkpointer writer;
  {
    test::FileSizeLimit limit(64 << 10);
    writer.save(d, 1, big);
    EXPECT_PARTIX_ERROR(writer.wait(), "[ckpt.save]", "cannot write step 1");
  }
  EXPECT_TRUE(lock_is_free(d));
  EXPECT_TRUE(ckpt::all_steps(d).empty());
  // Nothing was committed, so step 1 is not "already committed".
  ckpt::save(d, 1, small);
  ckpt::wait();
  EXPECT_EQ(ckpt::all_steps(d), std::vector<int64_t>{1});
}

TEST(CheckpointWriters, RestoreAndInfoRefuseNegativeSteps) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  const Array a = values(1.0f);
  EXPECT_PARTIX_ERROR(ckpt::restore(d, -2, a), "[ckpt.restore]", "step -2 is negative");
  EXPECT_PARTIX_ERROR(ckpt::info(d, -2), "[ckpt.info]", "step -2 is negative");
}

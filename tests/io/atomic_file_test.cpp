// The one writer every output goes through: a full disk or a file-size limit is an error
// naming the path and leaves the previous file untouched; nothing half-written appears;
// temporaries of dead processes are cleaned; unwritable destinations are found up front.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <new>

#include "files/atomic_file.h"
#include "io/io_test_util.h"
#include "test_util.h"

using namespace partix;
namespace fs = std::filesystem;

namespace {


std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(AtomicFile, FullDeviceIsAnErrorNamingThePath) {
  EXPECT_PARTIX_ERROR(detail::write_file_atomic("/dev/full", "test", "some text\n"), "[test]",
                      "cannot write '/dev/full'", "No space left on device");
  // A device that takes the bytes is written in place.
  EXPECT_NO_THROW(detail::write_file_atomic("/dev/null", "test", "some text\n"));
}

TEST(AtomicFile, AFailedWriteLeavesThePreviousFileAndNoTemporary) {
  test::TempDir dir;
  const std::string p = dir.file("out.csv");
  detail::write_file_atomic(p, "test", "old contents\n");
  {
    test::FileSizeLimit limit(64 << 10);
    detail::AtomicFile f(p, "test");
    f.write(std::string(40 << 10, 'a'));
    EXPECT_PARTIX_ERROR(
        {
          f.write(std::string(40 << 10, 'b'));
          f.commit();
        },
        "[test]", "cannot write '" + p + "'", "File too large");
  }
  EXPECT_EQ(test::read_bytes(p), "old contents\n");
  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{"out.csv"});
  // An abandoned writer (an exception elsewhere) leaves nothing either.
  {
    detail::AtomicFile f(p, "test");
    f.write("new");
  }
  EXPECT_EQ(test::read_bytes(p), "old contents\n");
  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{"out.csv"});
}

TEST(AtomicFile, DirectWritesGiveTheSameBytesOnEveryFileSystem) {
  // Aligned blocks go past the page cache where the file system allows it (the temporary
  // folder's disk), through it where not (/dev/shm is tmpfs); unaligned tails, unaligned
  // addresses and a file offset off a block boundary fall back to write(). The bytes are the
  // same in every case.
  constexpr size_t kA = detail::AtomicFile::kDirectAlign;
  struct Freer {
    void operator()(char* p) const { ::operator delete[](p, std::align_val_t(kA)); }
  };
  const size_t n = 5 * kA + 123;
  std::unique_ptr<char[], Freer> buf(static_cast<char*>(::operator new[](n + kA, std::align_val_t(kA))));
  for (size_t i = 0; i < n + kA; ++i) buf[i] = static_cast<char>((i * 7 + i / 4096) & 0xff);
  test::TempDir disk;
  std::vector<std::string> folders{disk.path().string()};
  if (fs::is_directory("/dev/shm")) folders.push_back("/dev/shm");
  for (const std::string& folder : folders) {
    SCOPED_TRACE(folder);
    const std::string p = folder + "/partix_direct_" + std::to_string(::getpid()) + ".bin";
    std::string want = std::string(kA, 'h');
    {
      detail::AtomicFile f(p, "test");
      f.write(std::string(kA, 'h'));               // a header of one block, buffered
      f.write_direct(std::string_view(buf.get(), n));  // aligned: 5 blocks direct, a tail
      want.append(buf.get(), n);
      f.write_direct(std::string_view(buf.get(), 2 * kA));  // the file is now off a boundary
      want.append(buf.get(), 2 * kA);
      f.write_direct(std::string_view(buf.get() + 1, kA));  // an unaligned address
      want.append(buf.get() + 1, kA);
      f.commit();
    }
    EXPECT_EQ(test::read_bytes(p), want);
    fs::remove(p);
  }
  // A failing direct write is an error naming the file, and leaves nothing behind.
  const std::string p = disk.file("limited.bin");
  {
    test::FileSizeLimit limit(3 * kA);
    detail::AtomicFile f(p, "test");
    EXPECT_PARTIX_ERROR(
        {
          f.write_direct(std::string_view(buf.get(), n));
          f.commit();
        },
        "[test]", "cannot write '" + p + "'", "File too large");
  }
  EXPECT_TRUE(listing(disk.path()).empty());
}

TEST(AtomicFile, WritesReplaceWholeAndFollowLinks) {
  test::TempDir dir;
  const std::string p = dir.file("a.txt");
  detail::write_file_atomic(p, "test", "one");
  detail::write_file_atomic(p, "test", "two");
  EXPECT_EQ(test::read_bytes(p), "two");
  fs::create_symlink(p, dir.file("link.txt"));
  detail::write_file_atomic(dir.file("link.txt"), "test", "three");
  EXPECT_TRUE(fs::is_symlink(dir.file("link.txt")));
  EXPECT_EQ(test::read_bytes(p), "three");
}

TEST(AtomicFile, StaleTemporariesOfDeadProcessesAreRemoved) {
  test::TempDir dir;
  const std::string p = dir.file("m.csv");
  // 999999999 is above any pid_max; the parent process is alive.
  test::write_bytes(p + ".tmp-999999999", "stale");
  const std::string live = p + ".tmp-" + std::to_string(::getppid());
  test::write_bytes(live, "in use");
  detail::write_file_atomic(p, "test", "x");
  EXPECT_FALSE(fs::exists(p + ".tmp-999999999"));
  EXPECT_TRUE(fs::exists(live));
  // A folder set aside by a writer that died mid-swap is put back when the target is gone.
  const std::string ck = dir.file("ck");
  fs::create_directories(ck + ".tmp-999999998.old");
  test::write_bytes(ck + ".tmp-999999998.old/config.json", "{}");
  fs::create_directories(ck + ".tmp-999999998");
  detail::remove_stale_temporaries(ck);
  EXPECT_EQ(test::read_bytes(ck + "/config.json"), "{}");
  EXPECT_FALSE(fs::exists(ck + ".tmp-999999998"));
}

TEST(AtomicFile, UnwritableDestinationsAreFoundBeforeAnyWork) {
  test::TempDir dir;
  EXPECT_PARTIX_ERROR(detail::check_writable_file(dir.path().string(), "test"), "it is a folder");
  EXPECT_PARTIX_ERROR(detail::check_writable_file(dir.file("no/such/x.csv"), "test"),
                      "folder '" + dir.file("no/such") + "' does not exist");
  test::write_bytes(dir.file("f"), "");
  EXPECT_PARTIX_ERROR(detail::check_writable_file(dir.file("f/x.csv"), "test"), "is not a folder");
  EXPECT_PARTIX_ERROR(detail::check_writable_file("/proc/partix.csv", "test"),
                      "cannot create files in '/proc'");
  EXPECT_NO_THROW(detail::check_writable_file(dir.file("x.csv"), "test"));
  EXPECT_FALSE(fs::exists(dir.file("x.csv")));  // the probe leaves nothing
  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{"f"});
}

TEST(AtomicDir, CommitSwapsTheWholeFolder) {
  test::TempDir dir;
  const std::string ck = dir.file("ck");
  for (const char* text : {"first", "second"}) {
    detail::AtomicDir out(ck, "test", {"a", "b"});
    detail::write_file_atomic(out.file("a"), "test", text);
    detail::write_file_atomic(out.file("b"), "test", text);
    // Until the commit, the folder holds the previous version (or nothing).
    EXPECT_NE(fs::exists(ck + "/a") ? test::read_bytes(ck + "/a") : "", text);
    out.commit();
    EXPECT_EQ(test::read_bytes(ck + "/a"), text);
    EXPECT_EQ(test::read_bytes(ck + "/b"), text);
  }
  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{"ck"});
  // An abandoned folder leaves the committed one and no temporary.
  {
    detail::AtomicDir out(ck, "test", {"a", "b"});
    detail::write_file_atomic(out.file("a"), "test", "third");
  }
  EXPECT_EQ(test::read_bytes(ck + "/a"), "second");
  EXPECT_EQ(listing(dir.path()), std::vector<std::string>{"ck"});
}

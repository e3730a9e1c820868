#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/atomic_file.h"
#include "base/mapped_file.h"

namespace mtp {
namespace {

namespace fs = std::filesystem;

struct Dir {
  fs::path path = fs::temp_directory_path() / ("mtp-atomic-" + std::to_string(getpid()));
  Dir() { fs::create_directories(path); }
  ~Dir() { fs::remove_all(path); }
  size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(path), {})); }
};

TEST(AtomicFile, CommitRenamesIntoPlace) {
  Dir d;
  std::string target = (d.path / "out.bin").string();
  auto f = AtomicFile::create(target);
  ASSERT_TRUE(f.ok()) << f.status().message();
  const uint8_t bytes[] = {1, 2, 3};
  ASSERT_TRUE(f->write(bytes).ok());
  EXPECT_FALSE(fs::exists(target));
  ASSERT_TRUE(f->write_zeros(5000).ok());
  ASSERT_TRUE(f->pwrite(bytes, 1).ok());
  EXPECT_EQ(f->position(), 5003u);
  ASSERT_TRUE(f->commit().ok());
  EXPECT_EQ(fs::file_size(target), 5003u);
  EXPECT_EQ(d.entries(), 1u);
  auto m = MappedFile::open(target);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->data()[0], 1);
  EXPECT_EQ(m->data()[3], 3);
}

TEST(AtomicFile, AbandonedWriteLeavesNothing) {
  Dir d;
  std::string target = (d.path / "out.bin").string();
  {
    auto f = AtomicFile::create(target);
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->write_zeros(100).ok());
  }
  EXPECT_EQ(d.entries(), 0u);
}

TEST(AtomicFile, ExistingFileIsReplacedOnlyOnCommit) {
  Dir d;
  std::string target = (d.path / "out.bin").string();
  std::ofstream(target) << "old";
  {
    auto f = AtomicFile::create(target);
    ASSERT_TRUE(f->write_zeros(10).ok());
  }
  EXPECT_EQ(fs::file_size(target), 3u);
  auto f = AtomicFile::create(target);
  ASSERT_TRUE(f->write_zeros(10).ok());
  ASSERT_TRUE(f->commit().ok());
  EXPECT_EQ(fs::file_size(target), 10u);
}

TEST(AtomicFile, KilledWriterNeverLeavesTheFinalName) {
  Dir d;
  std::string target = (d.path / "out.bin").string();
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto f = AtomicFile::create(target);
    if (!f.ok()) _exit(3);
    (void)f->write_zeros(1 << 20);
    raise(SIGKILL);
    _exit(4);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_FALSE(fs::exists(target));
}

TEST(AtomicFile, BadTargetsFailCleanly) {
  Dir d;
  EXPECT_FALSE(AtomicFile::create((d.path / "no/such/dir/x").string()).ok());
  EXPECT_FALSE(AtomicFile::create(d.path.string()).ok());
}

TEST(MappedFile, ErrorsNameThePath) {
  auto m = MappedFile::open("/definitely/not/here.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("/definitely/not/here.gguf"), std::string::npos);
  EXPECT_FALSE(MappedFile::open("/").ok());
}

}  // namespace
}  // namespace mtp

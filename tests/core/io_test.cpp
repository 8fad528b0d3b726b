// core/io and core/paths for files the doctor keeps: the test switch that fails a write as a full
// disk does, the one line that names the file system a write failed on, the temporary directory.
#include "core/io.hpp"
#include "core/paths.hpp"

#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <iterator>
#include <sys/stat.h>
#include <optional>
#include <string>
#include <unistd.h>

using namespace sdpa_doctor;

namespace {

// Sets an environment variable for one test, and puts the old value back.
class ScopedEnv {
public:
  ScopedEnv(const char* name, const char* value) : m_name(name) {
    if (const char* old = std::getenv(name)) m_old = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (m_old)
      ::setenv(m_name, m_old->c_str(), 1);
    else
      ::unsetenv(m_name);
  }

private:
  const char* m_name;
  std::optional<std::string> m_old;
};

TEST(WriteOwnFile, TheTestSwitchFailsMatchingNamesAsAFullDiskDoes) {
  sdpa_test::TempDir dir;
  const std::string cases = dir.file("cpu-reference-ref-math.cases.0.jsonl");
  const std::string journal = dir.file("journal.jsonl");
  const int a = ::open(cases.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  const int b = ::open(journal.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  {
    ScopedEnv fault("SDPA_DOCTOR_TEST_WRITE_FAULT", "*.cases.*");
    errno = 0;
    EXPECT_FALSE(write_own_file(a, "line\n", cases));
    EXPECT_EQ(errno, ENOSPC);
    EXPECT_TRUE(write_own_file(b, "line\n", journal)) << "another name is written";
  }
  EXPECT_TRUE(write_own_file(a, "line\n", cases)) << "without the switch, the write lands";
  ::close(a);
  ::close(b);
  EXPECT_EQ(sdpa_test::read_file(cases), "line\n");
  EXPECT_EQ(sdpa_test::read_file(journal), "line\n");
}

TEST(WriteFileAtomically, ReplacesTheFileWholeAsAnOrdinaryFile) {
  sdpa_test::TempDir dir;
  const std::string path = dir.file("r.json");
  sdpa_test::write_file(path, "old, and longer than the new text\n");
  auto written = write_file_atomically(path, "new\n");
  ASSERT_TRUE(written.has_value()) << written.error().message;
  EXPECT_EQ(*written, 4);
  EXPECT_EQ(sdpa_test::read_file(path), "new\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_TRUE(write_file_atomically(path, "durable\n", /*durable=*/true).has_value());
  EXPECT_EQ(sdpa_test::read_file(path), "durable\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1)
      << "no temporary file is left beside it";
}

TEST(WriteFileAtomically, AFailedWriteLeavesTheOldFileAndNamesTheFileSystem) {
  sdpa_test::TempDir dir;
  const std::string path = dir.file("w.cases.0.jsonl");
  sdpa_test::write_file(path, "old\n");
  ScopedEnv fault("SDPA_DOCTOR_TEST_WRITE_FAULT", "*.cases.*");
  auto written = write_file_atomically(path, "new\n");
  ASSERT_FALSE(written.has_value());
  EXPECT_EQ(written.error().message.rfind(path + ": " + std::strerror(ENOSPC) + " (", 0), 0u)
      << written.error().message;
  EXPECT_EQ(sdpa_test::read_file(path), "old\n");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
  EXPECT_FALSE(write_file_atomically(dir.file("no/such/dir/x"), "x").has_value());
}

// Whether this process's root directory is a mount point it can see (not so in a chroot made in
// a folder of another file system).
static bool root_is_a_mount() {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point;
    fields >> id >> parent >> device >> root >> point;
    if (point == "/") return true;
  }
  return false;
}

TEST(DescribeWriteFailure, NamesTheFileTheErrorAndItsFileSystem) {
  sdpa_test::TempDir dir;
  const std::string path = dir.file("journal.jsonl");
  const std::string line = describe_write_failure(path, ENOSPC);
  EXPECT_EQ(line.rfind(path + ": " + std::strerror(ENOSPC) + " (", 0), 0u) << line;
  // The mount point, where this process can see one above the file: in a chroot whose root is
  // no mount of its own, /proc/self/mountinfo lists none, and the line leaves it out.
  if (root_is_a_mount()) {
    EXPECT_NE(line.find(" at /"), std::string::npos) << "the mount point: " << line;
  }
  EXPECT_NE(line.find(" free of "), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
  // A file in a directory that is gone still gets its error and the nearest file system.
  const std::string gone = describe_write_failure(dir.file("no/such/dir/f"), ENOENT);
  EXPECT_NE(gone.find(std::strerror(ENOENT)), std::string::npos) << gone;
}

TEST(TempDirectory, IsTmpdirWhenItIsADirectoryElseTmp) {
  sdpa_test::TempDir dir;
  {
    ScopedEnv tmpdir("TMPDIR", dir.path().c_str());
    EXPECT_EQ(temp_directory(), dir.path());
  }
  for (const char* bad : {"/nonexistent/sdpa-doctor", "", "relative/dir"}) {
    ScopedEnv tmpdir("TMPDIR", bad);
    EXPECT_EQ(temp_directory(), "/tmp") << bad;
  }
  {
    sdpa_test::write_file(dir.file("a-file"), "");
    ScopedEnv tmpdir("TMPDIR", dir.file("a-file").c_str());
    EXPECT_EQ(temp_directory(), "/tmp");
  }
}

} // namespace

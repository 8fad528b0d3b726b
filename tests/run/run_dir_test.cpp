// The run directory and its journal: one run holds the directory at a time (a second claim is
// refused naming the first; a holder killed with SIGKILL leaves no lock), a new journal replaces an
// old one and a resumed one continues it, redactions reach every string the journal keeps, and a
// journal that cannot be written says why, naming its file system.
#include "run/journal.hpp"
#include "run/run.hpp"

#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <csignal>
#include <cstdlib>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

using namespace sdpa_doctor;
using namespace sdpa_doctor::run;

namespace {

TEST(ClaimRunDir, ASecondClaimIsRefusedNamingTheHolderUntilTheFirstGoes) {
  sdpa_test::TempDir dir;
  std::optional<RunDirClaim> first = claim_run_dir(dir.path());
  ASSERT_TRUE(first->lock.has_value()) << first->problem;
  EXPECT_EQ(first->refusal, RunDirClaim::Refusal::none);
  const nlohmann::json holder =
      nlohmann::json::parse(sdpa_test::read_file(dir.file(k_run_lock_name)));
  EXPECT_EQ(holder.at("pid"), ::getpid());
  EXPECT_FALSE(holder.at("host").get<std::string>().empty());
  EXPECT_FALSE(holder.at("started").get<std::string>().empty());

  // flock belongs to the open file: a second claim in this very process is refused too.
  const RunDirClaim second = claim_run_dir(dir.path());
  EXPECT_FALSE(second.lock.has_value());
  EXPECT_EQ(second.refusal, RunDirClaim::Refusal::in_use);
  EXPECT_NE(second.problem.find("pid " + std::to_string(::getpid())), std::string::npos)
      << second.problem;
  EXPECT_NE(second.problem.find(dir.path()), std::string::npos) << second.problem;

  first.reset(); // released
  const RunDirClaim third = claim_run_dir(dir.path());
  EXPECT_TRUE(third.lock.has_value()) << third.problem;
}

TEST(ClaimRunDir, AHolderKilledWithSigkillLeavesNoLock) {
  sdpa_test::TempDir dir;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const RunDirClaim claim = claim_run_dir(dir.path());
    const char said = claim.lock ? 'y' : 'n';
    (void)!::write(ready[1], &said, 1);
    for (;;)
      ::pause();
  }
  ::close(ready[1]);
  char said = 0;
  ASSERT_EQ(::read(ready[0], &said, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(said, 'y');
  const RunDirClaim while_held = claim_run_dir(dir.path());
  EXPECT_EQ(while_held.refusal, RunDirClaim::Refusal::in_use);
  EXPECT_NE(while_held.problem.find("pid " + std::to_string(child)), std::string::npos)
      << while_held.problem;
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  const RunDirClaim after = claim_run_dir(dir.path());
  EXPECT_TRUE(after.lock.has_value()) << after.problem;
}

TEST(ClaimRunDir, ALockFileThatCannotBeWrittenIsTheDisk) {
  sdpa_test::TempDir dir;
  ::setenv("SDPA_DOCTOR_TEST_WRITE_FAULT", k_run_lock_name, 1);
  const RunDirClaim claim = claim_run_dir(dir.path());
  ::unsetenv("SDPA_DOCTOR_TEST_WRITE_FAULT");
  EXPECT_FALSE(claim.lock.has_value());
  EXPECT_EQ(claim.refusal, RunDirClaim::Refusal::disk_failed);
  EXPECT_NE(claim.problem.find("No space left on device"), std::string::npos) << claim.problem;
  // Not held: the next claim gets it.
  EXPECT_TRUE(claim_run_dir(dir.path()).lock.has_value());
}

TEST(MakeRunDir, WithATmpdirThatIsMissingMakesOneInTmp) {
  ::setenv("TMPDIR", "/nonexistent/sdpa-doctor", 1);
  const auto made = make_run_dir("");
  ::unsetenv("TMPDIR");
  ASSERT_TRUE(made) << made.error().message;
  EXPECT_EQ(made->rfind("/tmp/sdpa-doctor-", 0), 0u) << *made;
  std::error_code ec;
  std::filesystem::remove_all(*made, ec);
}

TEST(Journal, ANewOneReplacesTheOldAndAResumedOneContinuesIt) {
  sdpa_test::TempDir dir;
  const std::string path = dir.file("journal.jsonl");
  Journal(path, {}, false).append({{"event", "start"}, {"run", 1}});
  Journal(path, {}, true).append({{"event", "start"}, {"run", 2}});
  EXPECT_EQ(sdpa_test::line_count(sdpa_test::read_file(path)), 2);
  Journal(path, {}, false).append({{"event", "start"}, {"run", 3}});
  const std::string text = sdpa_test::read_file(path);
  EXPECT_EQ(sdpa_test::line_count(text), 1);
  EXPECT_EQ(nlohmann::json::parse(text).at("run"), 3);
}

TEST(Journal, RedactionsReachEveryStringButNotTheKeysOrNumbers) {
  sdpa_test::TempDir dir;
  const std::string path = dir.file("journal.jsonl");
  {
    Journal journal(path, {{"ws1.lab", "<host>"}, {"alice", "<user>"}}, false);
    journal.append({{"event", "result"},
                    {"result", {{"reason", "/home/alice/x on ws1.lab"}, {"alice", 12345}}},
                    {"list", {"alice", "bob"}}});
    EXPECT_EQ(journal.failure(), "");
  }
  const nlohmann::json e = nlohmann::json::parse(sdpa_test::read_file(path));
  EXPECT_EQ(e.at("result").at("reason"), "/home/<user>/x on <host>");
  EXPECT_EQ(e.at("result").at("alice"), 12345);
  EXPECT_EQ(e.at("list"), nlohmann::json({"<user>", "bob"}));
}

TEST(Journal, AFailedWriteIsKeptAndNamesTheFileSystem) {
  sdpa_test::TempDir dir;
  const std::string path = dir.file("journal.jsonl");
  ::setenv("SDPA_DOCTOR_TEST_WRITE_FAULT", "journal.jsonl", 1);
  Journal journal(path, {}, false);
  journal.append({{"event", "start"}});
  ::unsetenv("SDPA_DOCTOR_TEST_WRITE_FAULT");
  journal.append({{"event", "end"}}); // after a failure nothing more is written
  EXPECT_NE(journal.failure().find(path + ": No space left on device ("), std::string::npos)
      << journal.failure();
  EXPECT_EQ(sdpa_test::read_file(path), "");
}

} // namespace

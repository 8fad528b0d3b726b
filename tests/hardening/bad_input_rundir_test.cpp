// The run directory as input, through the real binary: one another run holds (refused with exit
// 2, naming the holder, its journal untouched), one on a file system that is full (exit 4, one
// line naming the file system, nothing blamed on a backend), a TMPDIR that does not exist (the
// temporary directory falls back to /tmp).
//
// A full disk is made for real where a tmpfs can be mounted (root); the same paths are reached
// everywhere through the test-only switch SDPA_DOCTOR_TEST_WRITE_FAULT=GLOB, which fails the
// doctor's writes to its own files named GLOB with ENOSPC, as a full disk does.
#include "hardening/hardening_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using nlohmann::json;
using sdpa_hardening::crash_problem;
using sdpa_hardening::usage_error_problem;
using sdpa_test::run_binary;
namespace fs = std::filesystem;

namespace {

// One tiny case on our own kernels: seconds, no torch needed.
std::vector<std::string> small_check(const std::string& run_dir,
                                     const std::string& variants = "ref-math") {
  std::vector<std::string> argv = {sdpa_test::doctor(),
                                   "check",
                                   "-q",
                                   "--probe",
                                   "reference",
                                   "--variant",
                                   variants,
                                   "--case",
                                   "dtype=fp32,b=1,h=1,l=8,d=8",
                                   "--no-shrink"};
  if (!run_dir.empty()) argv.insert(argv.end(), {"--run-dir", run_dir});
  return argv;
}

std::vector<std::string> with(std::vector<std::string> argv, const std::vector<std::string>& more) {
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

std::vector<json> journal_events(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const json e = json::parse(line, nullptr, false);
    if (!e.is_discarded()) out.push_back(e);
  }
  return out;
}

int count_events(const std::vector<json>& events, const std::string& name) {
  int n = 0;
  for (const json& e : events)
    n += e.value("event", "") == name ? 1 : 0;
  return n;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

// Empty when `run` failed as the doctor's own failure should: exit 4, exactly one line on
// stderr, `sdpa-doctor: error: ` then `needle`. Else what is wrong.
std::string doctor_failure_problem(const sdpa_test::RunResult& run, const std::string& needle) {
  sdpa_test::RunResult exit_aside = run; // crash_problem counts any exit 4 as a crash
  exit_aside.exit_code = 0;
  if (auto crash = crash_problem(exit_aside); !crash.empty()) return crash;
  if (run.exit_code != 4) return "exit code " + std::to_string(run.exit_code) + ", expected 4";
  const auto lines = lines_of(run.err);
  if (lines.size() != 1) return "expected one line on stderr, got: " + run.err.substr(0, 600);
  if (lines[0].rfind("sdpa-doctor: error: ", 0) != 0) return "not an error line: " + lines[0];
  if (lines[0].find(needle) == std::string::npos) return "'" + needle + "' not in: " + lines[0];
  return {};
}

// A doctor started in the background with its output dropped; SIGKILLed when it goes.
class Background {
public:
  explicit Background(const std::vector<std::string>& argv) {
    m_pid = ::fork();
    if (m_pid != 0) return;
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    for (auto& a : copy)
      args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ~Background() { kill(); }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  pid_t pid() const { return m_pid; }
  bool running() { return m_pid > 0 && ::waitpid(m_pid, nullptr, WNOHANG) == 0; }
  // SIGKILL: what the OOM killer or a CI timeout does; nothing of it runs on the way out.
  void kill() {
    if (m_pid <= 0) return;
    ::kill(m_pid, SIGKILL);
    ::waitpid(m_pid, nullptr, 0);
    m_pid = -1;
  }

private:
  pid_t m_pid = -1;
};

// Waits until `path` holds `needle` (at most 60 s).
bool wait_for_text(const std::string& path, const std::string& needle) {
  for (int i = 0; i < 1200; ++i) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// A check that holds its run directory for a while: a case whose float64 oracle alone takes
// tens of seconds, killed long before it ends.
std::vector<std::string> long_check(const std::string& run_dir) {
  return {sdpa_test::doctor(),
          "check",
          "-q",
          "--probe",
          "reference",
          "--variant",
          "ref-math",
          "--case",
          "dtype=fp32,b=1,h=16,l=8192,d=128",
          "--no-oracle-cache",
          "--no-shrink",
          "--run-dir",
          run_dir};
}

// ---- a journal edited by hand or by someone else ---------------------------------------------

// A finished small check's run directory, and its journal's text.
struct FinishedRun {
  sdpa_test::TempDir dir;
  std::string journal;
  json result_event;
  FinishedRun() {
    const auto run = run_binary(small_check(dir.file("run")));
    EXPECT_EQ(run.exit_code, 0) << run.err;
    journal = sdpa_test::read_file(dir.file("run/journal.jsonl"));
    for (const json& e : journal_events(dir.file("run/journal.jsonl")))
      if (e.value("event", "") == "result") result_event = e;
  }
  // `report` of the journal with `extra` appended as one more line.
  sdpa_test::RunResult report_with(const json& extra) const {
    sdpa_test::write_file(dir.file("edited.jsonl"), journal + extra.dump() + "\n");
    return run_binary({sdpa_test::doctor(), "report", dir.file("edited.jsonl")});
  }
};

TEST(JournalAsInput, AResultOfAnUnplannedVariantIsRefusedByNameEscaped) {
  FinishedRun run;
  ASSERT_TRUE(run.result_event.is_object()) << run.journal;
  // The journal as written rebuilds with the check's own exit code.
  const auto as_written = run_binary({sdpa_test::doctor(), "report", run.dir.file("run")});
  EXPECT_EQ(as_written.exit_code, 0) << as_written.err;

  json evil = run.result_event;
  evil["result"]["variant"] = "flash[evil]\x1b[2J";
  const auto refused = run.report_with(evil);
  EXPECT_EQ(usage_error_problem(refused), "") << refused.err;
  EXPECT_NE(refused.err.find("variant 'flash[evil]\\x1b[2J'"), std::string::npos) << refused.err;

  json unplanned = run.result_event; // a real variant, but not this run's
  unplanned["result"]["variant"] = "ref-flash";
  const auto other = run.report_with(unplanned);
  EXPECT_EQ(usage_error_problem(other), "") << other.err;
  EXPECT_NE(other.err.find("'ref-flash'"), std::string::npos) << other.err;
}

TEST(JournalAsInput, AResultWhoseCaseIdIsAPathIsRefused) {
  FinishedRun run;
  ASSERT_TRUE(run.result_event.is_object()) << run.journal;
  json path = run.result_event;
  path["result"]["case_id"] = "../../../etc/passwd";
  const auto refused = run.report_with(path);
  EXPECT_EQ(usage_error_problem(refused), "") << refused.err;
  EXPECT_NE(refused.err.find("'../../../etc/passwd' is not the id of its case"), std::string::npos)
      << refused.err;
}

// A header that says format 0 is none this doctor reads (format 0 is the unnumbered header of
// earlier doctors); the message says so without contradicting itself.
TEST(JournalAsInput, AHeaderNumberedFormat0IsRefusedInWordsThatHold) {
  sdpa_test::TempDir dir;
  std::string journal =
      sdpa_test::read_file(sdpa_test::source_path("tests/fixtures/journal-format0/journal.jsonl"));
  const std::string key = "\"header\":{";
  journal.replace(journal.find(key), key.size(), key + "\"format\":0,");
  sdpa_test::write_file(dir.file("journal.jsonl"), journal);
  const auto run = run_binary({sdpa_test::doctor(), "report", dir.file("journal.jsonl")});
  EXPECT_EQ(usage_error_problem(run), "") << run.err;
  EXPECT_NE(run.err.find("says format 0; this doctor reads format 1 and the unnumbered header"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("formats 0 and 1"), std::string::npos) << run.err;
}

TEST(RunDirInUse, ASecondCheckIsRefusedNamingTheFirstAndLeavesItsJournalAlone) {
  sdpa_test::TempDir dir;
  const std::string run_dir = dir.file("run");
  Background first(long_check(run_dir));
  const std::string pid = std::to_string(first.pid());
  ASSERT_TRUE(wait_for_text(run_dir + "/journal.jsonl", "\"start\""))
      << "the first check never started";
  ASSERT_TRUE(first.running());

  const auto second = run_binary(with(small_check(run_dir), {"--json", dir.file("second.json")}));
  EXPECT_EQ(usage_error_problem(second), "") << second.err;
  EXPECT_NE(second.err.find("in use"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("pid " + pid), std::string::npos)
      << "the holder is named: " << second.err;
  EXPECT_NE(second.err.find(run_dir), std::string::npos) << second.err;
  EXPECT_FALSE(fs::exists(dir.file("second.json")));

  // --resume of a directory in use takes the same lock; so does a self-test kept there.
  const auto resume = run_binary({sdpa_test::doctor(), "check", "-q", "--resume", run_dir});
  EXPECT_EQ(usage_error_problem(resume), "") << resume.err;
  EXPECT_NE(resume.err.find("pid " + pid), std::string::npos) << resume.err;
  const auto self_test = run_binary({sdpa_test::doctor(), "self-test", "--run-dir", run_dir});
  EXPECT_EQ(usage_error_problem(self_test), "") << self_test.err;

  ASSERT_TRUE(first.running()) << "the first check must have held the directory throughout";
  const auto events = journal_events(run_dir + "/journal.jsonl");
  EXPECT_EQ(count_events(events, "start"), 1) << "only the first check wrote its journal";
  for (const json& e : events)
    EXPECT_NE(e.value("case", ""), "fp32-b1-h1-q8-k8-d8") << "the second run's cell: " << e.dump();
}

TEST(RunDirInUse, AKilledRunLeavesNoStaleLock) {
  sdpa_test::TempDir dir;
  const std::string run_dir = dir.file("run");
  {
    Background first(long_check(run_dir));
    ASSERT_TRUE(wait_for_text(run_dir + "/journal.jsonl", "\"start\""));
    first.kill(); // SIGKILL: no destructor, no cleanup of its own
  }
  const auto next = run_binary(with(small_check(run_dir), {"--json", dir.file("r.json")}));
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_EQ(crash_problem(next), "");
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("results").size(), 1u);
  EXPECT_EQ(report.at("results")[0].at("status"), "pass");
  // A new check starts a new journal: the killed run's events are not mixed into it.
  const auto events = journal_events(run_dir + "/journal.jsonl");
  EXPECT_EQ(count_events(events, "start"), 1);
  EXPECT_EQ(count_events(events, "end"), 1);
}

// ---- a full disk ------------------------------------------------------------------------------

// A tmpfs of `bytes` mounted on `dir` for the test's life; `problem` says why not where the test
// may not mount (not root, no CAP_SYS_ADMIN, a container that forbids it).
class Tmpfs {
public:
  Tmpfs(const std::string& dir, long bytes) : m_dir(dir) {
    fs::create_directories(dir);
    const auto run = run_binary(
        {"/bin/mount", "-t", "tmpfs", "-o", "size=" + std::to_string(bytes), "tmpfs", dir});
    if (run.exit_code == 0)
      m_mounted = true;
    else
      m_problem = "cannot mount a tmpfs here: " + run.err;
  }
  ~Tmpfs() {
    if (m_mounted) run_binary({"/bin/umount", "-l", m_dir});
  }
  Tmpfs(const Tmpfs&) = delete;
  Tmpfs& operator=(const Tmpfs&) = delete;
  const std::string& problem() const { return m_problem; }
  // Fills it until `leave` bytes are free (rounded to pages by tmpfs).
  void fill(long leave) {
    const long free_now = long(fs::space(m_dir).available);
    std::ofstream f(m_dir + "/filler", std::ios::binary);
    const std::string page(4096, 'f');
    for (long n = 0; n + leave < free_now; n += long(page.size()))
      f.write(page.data(), long(page.size()));
  }

private:
  std::string m_dir;
  bool m_mounted = false;
  std::string m_problem;
};

TEST(FullDisk, ARunDirOnAFullTmpfsIsExit4NamingItBeforeAnythingRuns) {
  sdpa_test::TempDir dir;
  Tmpfs disk(dir.file("small"), 256 * 1024);
  if (!disk.problem().empty()) GTEST_SKIP() << disk.problem();
  disk.fill(0);
  const auto run =
      run_binary(with(small_check(dir.file("small/run")), {"--json", dir.file("r.json")}));
  EXPECT_EQ(doctor_failure_problem(run, "No space left on device"), "") << run.err;
  EXPECT_NE(run.err.find("tmpfs at " + dir.file("small")), std::string::npos) << run.err;
  EXPECT_EQ(run.out, "");
  EXPECT_FALSE(fs::exists(dir.file("small/run/journal.jsonl")));
}

TEST(FullDisk, ATmpfsThatFillsDuringTheRunBlamesNoBackend) {
  sdpa_test::TempDir dir;
  Tmpfs disk(dir.file("small"), 256 * 1024);
  if (!disk.problem().empty()) GTEST_SKIP() << disk.problem();
  disk.fill(4096); // room for the lock's one line, not for the journal or a cases file
  const auto run =
      run_binary(with(small_check(dir.file("small/run")), {"--json", dir.file("r.json")}));
  EXPECT_EQ(doctor_failure_problem(run, "No space left on device"), "") << run.err;
  EXPECT_NE(run.err.find("tmpfs at " + dir.file("small")), std::string::npos) << run.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  EXPECT_EQ(report.at("exit_code"), 4);
  for (const json& r : report.at("results")) {
    EXPECT_EQ(r.at("status"), "skipped") << r.dump();
    EXPECT_NE(r.value("reason", "").find("No space left on device"), std::string::npos) << r.dump();
  }
  for (const json& f : report.at("findings"))
    EXPECT_EQ(f.dump().find("reference kernel failed"), std::string::npos) << f.dump();
}

// The switch the tests use where no tmpfs can be mounted: the doctor's writes to files named
// GLOB fail with ENOSPC.
sdpa_test::RunOptions write_fault(const std::string& glob) {
  sdpa_test::RunOptions o;
  o.set_env["SDPA_DOCTOR_TEST_WRITE_FAULT"] = glob;
  return o;
}

TEST(FullDisk, ACasesFileThatCannotBeWrittenSkipsItsCellsAndIsExit4) {
  sdpa_test::TempDir dir;
  const auto run = run_binary(
      with(small_check(dir.file("run"), "ref-math,ref-flash"), {"--json", dir.file("r.json")}),
      write_fault("*.cases.*"));
  EXPECT_EQ(doctor_failure_problem(run, "No space left on device"), "") << run.err;
  EXPECT_NE(run.err.find(dir.file("run")), std::string::npos)
      << "the directory is named: " << run.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  EXPECT_EQ(report.at("exit_code"), 4);
  ASSERT_EQ(report.at("results").size(), 2u);
  for (const json& r : report.at("results")) {
    EXPECT_EQ(r.at("status"), "skipped") << r.dump();
    EXPECT_NE(r.value("reason", "").find("cases file"), std::string::npos) << r.dump();
  }
  bool named = false;
  for (const json& f : report.at("findings")) {
    EXPECT_NE(f.at("id"), "variant-error") << f.dump();
    EXPECT_EQ(f.dump().find("reference kernel failed"), std::string::npos) << f.dump();
    named = named || f.at("id") == "run-dir-unwritable";
  }
  EXPECT_TRUE(named) << "the report says why its cells did not run";
  // The journal, on the same directory, still says what happened, and rebuilds to the same exit.
  const auto events = journal_events(dir.file("run/journal.jsonl"));
  EXPECT_EQ(count_events(events, "end"), 1);
  const auto rebuilt = run_binary({sdpa_test::doctor(), "report", dir.file("run"), "-q", "--json",
                                   dir.file("rebuilt.json")});
  EXPECT_EQ(rebuilt.exit_code, 4) << rebuilt.err;
  const json again = json::parse(sdpa_test::read_file(dir.file("rebuilt.json")));
  EXPECT_EQ(again.at("exit_code"), 4);
  for (const json& r : again.at("results")) EXPECT_EQ(r.at("status"), "skipped") << r.dump();
}

TEST(FullDisk, AJournalThatCannotBeWrittenLosesNoResultAndIsExit4) {
  sdpa_test::TempDir dir;
  const auto run = run_binary(with(small_check(dir.file("run")), {"--json", dir.file("r.json")}),
                              write_fault("journal.jsonl"));
  EXPECT_EQ(doctor_failure_problem(run, "journal.jsonl: No space left on device"), "") << run.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  EXPECT_EQ(report.at("exit_code"), 4);
  ASSERT_EQ(report.at("results").size(), 1u);
  EXPECT_EQ(report.at("results")[0].at("status"), "pass") << "measured, and kept in the report";
}

TEST(FullDisk, ALockThatCannotBeWrittenStopsBeforeAnythingRuns) {
  sdpa_test::TempDir dir;
  const auto run = run_binary(with(small_check(dir.file("run")), {"--json", dir.file("r.json")}),
                              write_fault("run.lock"));
  EXPECT_EQ(doctor_failure_problem(run, "run.lock: No space left on device"), "") << run.err;
  EXPECT_EQ(run.out, "");
  EXPECT_FALSE(fs::exists(dir.file("run/journal.jsonl")));
  EXPECT_FALSE(fs::exists(dir.file("r.json")));
}

TEST(FullDisk, ASelfTestThatCannotWriteItsCasesIsOneLineNotTwentyWrongRows) {
  sdpa_test::TempDir dir;
  const auto run = run_binary({sdpa_test::doctor(), "self-test", "--run-dir", dir.file("run")},
                              write_fault("*.cases.*"));
  EXPECT_EQ(doctor_failure_problem(run, "No space left on device"), "") << run.err;
  EXPECT_EQ(run.out.find("WRONG"), std::string::npos) << run.out;
}

// ---- the temporary directory -----------------------------------------------------------------

TEST(TempDirFallback, SelfTestAndCheckWithAMissingTmpdirUseTmp) {
  sdpa_test::RunOptions o;
  o.set_env["TMPDIR"] = "/nonexistent/sdpa-doctor-test";
  const auto self_test = run_binary({sdpa_test::doctor(), "self-test"}, o);
  EXPECT_EQ(self_test.exit_code, 0) << self_test.out << self_test.err;
  EXPECT_EQ(self_test.out.find("WRONG"), std::string::npos) << self_test.out;
  EXPECT_EQ(crash_problem(self_test), "");

  sdpa_test::TempDir dir;
  // No --run-dir: a temporary one.
  const auto check = run_binary(with(small_check(""), {"--json", dir.file("r.json")}), o);
  EXPECT_EQ(check.exit_code, 0) << check.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("results").size(), 1u);
  EXPECT_EQ(report.at("results")[0].at("status"), "pass");
  EXPECT_FALSE(fs::exists("/nonexistent"));
  // It names the directory it kept: in /tmp, not the working directory.
  const auto at = check.out.find("journal: ");
  ASSERT_NE(at, std::string::npos) << check.out;
  const fs::path journal = check.out.substr(at + 9, check.out.find('\n', at) - at - 9);
  EXPECT_EQ(journal.string().rfind("/tmp/sdpa-doctor-", 0), 0u) << journal;
  if (journal.string().rfind("/tmp/sdpa-doctor-", 0) == 0) fs::remove_all(journal.parent_path());
}

} // namespace

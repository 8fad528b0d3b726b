// A check killed with SIGKILL mid-run, through the real binary: `report JOURNAL` rebuilds its
// reports from the journal with every planned cell in them, and `check --resume RUN-DIR` runs
// exactly the cells the journal lacks, then reports the whole run.
#include "support/edited_journal.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using nlohmann::json;
using namespace sdpa_test;

namespace {

const std::vector<std::string> k_cases = {"--case", "dtype=fp32,b=1,h=2,l=64,d=32", "--case",
                                          "dtype=fp32,b=1,h=2,l=128,d=32", "--case",
                                          "dtype=bf16,b=1,h=2,l=64,d=32"};
constexpr int k_cells = 3 * 2; // math and flash

std::vector<json> journal_events(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const json e = json::parse(line, nullptr, false);
    if (!e.is_discarded()) out.push_back(e);
  }
  return out;
}

// `begin` events after the `n`-th `start` (0-based).
int begins_after_start(const std::vector<json>& events, int n) {
  int starts = -1, begins = 0;
  for (const json& e : events) {
    if (e.value("event", "") == "start") ++starts;
    else if (e.value("event", "") == "begin" && starts == n) ++begins;
  }
  return begins;
}

// Runs a check whose flash cells hang, and SIGKILLs the doctor once the first of them began:
// the journal then holds what finished and nothing says the run ended.
void killed_check(const TempDir& dir) {
  // The LibTorch worker honours the fault switch; the reference kernels, the witness, never do.
  std::vector<std::string> argv = {doctor(), "check", "-q", "--probe", "libtorch", "--variant",
                                   "math,flash", "--json", dir.file("never.json"), "--run-dir",
                                   dir.file("run")};
  argv.insert(argv.end(), k_cases.begin(), k_cases.end());
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setenv("SDPA_DOCTOR_TEST_FAULT", "variant=flash,case=*,action=hang", 1);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  const std::string journal = dir.file("run/journal.jsonl");
  bool hanging = false;
  for (int i = 0; i < 600 && !hanging; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (const json& e : journal_events(journal))
      if (e.value("event", "") == "begin" && e.value("variant", "") == "flash") hanging = true;
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(hanging) << "no flash cell began within 30 s";
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_FALSE(std::filesystem::exists(dir.file("never.json")));
}

#ifdef SDPA_TEST_HAVE_TORCH_WORKER
constexpr bool k_torch_worker = true;
#else
constexpr bool k_torch_worker = false;
#endif

TEST(ReportJournal, AKilledRunGetsEveryPlannedCellAndExit130) {
  if (!k_torch_worker) GTEST_SKIP() << "the libtorch worker is not built";
  TempDir dir;
  killed_check(dir);
  const auto run = run_binary({doctor(), "report", dir.file("run"), "--json", dir.file("r.json"),
                               "--markdown", dir.file("r.md"), "--junit", dir.file("r.xml")});
  EXPECT_EQ(run.exit_code, 130) << run.err;
  const json report = json::parse(read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("results").size(), size_t(k_cells));
  EXPECT_TRUE(report.at("interrupted").get<bool>());
  int passed = 0, not_measured = 0;
  for (const json& r : report.at("results")) {
    if (r.at("variant") == "math") {
      EXPECT_EQ(r.at("status"), "pass") << r.dump(); // measured before the kill, as it was
      EXPECT_GT(r.at("metrics").at("timed_runs").get<int>(), 0);
      ++passed;
    } else {
      EXPECT_EQ(r.at("status"), "skipped") << r.dump();
      EXPECT_NE(r.at("reason").get<std::string>().find("not measured"), std::string::npos);
      ++not_measured;
    }
  }
  EXPECT_EQ(passed, 3);
  EXPECT_EQ(not_measured, 3);
  EXPECT_NE(run.out.find("--resume"), std::string::npos) << run.out;
  EXPECT_NE(read_file(dir.file("r.xml")).find("<testsuite"), std::string::npos);
  EXPECT_NE(read_file(dir.file("r.md")).find("math"), std::string::npos);
  EXPECT_FALSE(report.at("inventory").is_null()); // the header the run started with
}

TEST(ResumeCheck, RunsOnlyTheCellsTheJournalLacks) {
  if (!k_torch_worker) GTEST_SKIP() << "the libtorch worker is not built";
  TempDir dir;
  killed_check(dir);
  const std::string journal = dir.file("run/journal.jsonl");
  const int begun_before = begins_after_start(journal_events(journal), 0);
  const auto run = run_binary({doctor(), "check", "-q", "--resume", dir.file("run"), "--json",
                               dir.file("r.json")});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const json report = json::parse(read_file(dir.file("r.json")));
  ASSERT_EQ(report.at("results").size(), size_t(k_cells));
  for (const json& r : report.at("results")) EXPECT_EQ(r.at("status"), "pass") << r.dump();
  // The hung cell began and never ended: it and the two after it are the three that ran again.
  EXPECT_EQ(begun_before, 4);
  EXPECT_EQ(begins_after_start(journal_events(journal), 1), 3);
  // The journal now holds the whole run: the rebuilt report agrees and passes.
  const auto rebuilt = run_binary({doctor(), "report", journal, "--json", dir.file("again.json")});
  EXPECT_EQ(rebuilt.exit_code, 0) << rebuilt.err;
  const json again = json::parse(read_file(dir.file("again.json")));
  EXPECT_EQ(again.at("summary").at("by_status").at("pass"), k_cells);
}

TEST(ResumeCheck, PlanOptionsCannotComeWithIt) {
  TempDir dir;
  const auto run = run_binary({doctor(), "check", "--resume", dir.path(), "--case",
                               "dtype=fp32,b=1,h=1,l=8,d=8"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("--case cannot come with it"), std::string::npos) << run.err;
  EXPECT_EQ(line_count(run.err), 1) << run.err;
}

TEST(ResumeCheck, ADirectoryWithoutAJournalIsAUsageError) {
  TempDir dir;
  const auto run = run_binary({doctor(), "check", "--resume", dir.path()});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("journal.jsonl"), std::string::npos) << run.err;
  EXPECT_EQ(line_count(run.err), 1) << run.err;
}

// `check --redact` keeps the redaction in its journal: `report RUN-DIR` and `check --resume
// RUN-DIR` rebuild reports without the hostname or user name, and the journal file holds neither.
// The witnesses are a user name set through $USER and, where the test may make a UTS namespace,
// a hostname of its own; a run without --redact shows that both reach the journal otherwise.
TEST(ReportJournal, RedactionIsKeptInTheJournal) {
  TempDir dir;
  const std::string user = "witness-user-7f3a";
  const std::string host = "witness-host-7f3a";
  RunOptions env;
  env.set_env["USER"] = user;
  const bool own_host = run_binary({"/usr/bin/unshare", "--uts", "/bin/true"}).exit_code == 0;
  // The doctor, under the witness hostname where a namespace can give it one.
  const auto doctor_argv = [&](std::vector<std::string> args) {
    args.insert(args.begin(), doctor());
    if (own_host)
      args.insert(args.begin(), {"/usr/bin/unshare", "--uts", "/bin/sh", "-c",
                                 "hostname \"$0\" && exec \"$@\"", host});
    return args;
  };
  const auto leaks = [&](const std::string& text) {
    return text.find(user) != std::string::npos ||
           (own_host && text.find(host) != std::string::npos);
  };
  const std::vector<std::string> check = {"check", "-q", "--probe", "reference", "--variant",
                                          "ref-math", "--case", "dtype=fp32,b=1,h=1,l=8,d=8"};

  std::vector<std::string> plain = check;
  plain.insert(plain.end(), {"--run-dir", dir.file("plain")});
  ASSERT_EQ(run_binary(doctor_argv(plain), env).exit_code, 0);
  const std::string plain_journal = read_file(dir.file("plain/journal.jsonl"));
  EXPECT_NE(plain_journal.find(user), std::string::npos) << "the witness must reach the journal";
  if (own_host) {
    EXPECT_NE(plain_journal.find(host), std::string::npos);
  }

  std::vector<std::string> redacted = check;
  redacted.insert(redacted.end(),
                  {"--redact", "--run-dir", dir.file("run"), "--json", dir.file("check.json")});
  const auto run = run_binary(doctor_argv(redacted), env);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(leaks(read_file(dir.file("check.json"))));
  EXPECT_FALSE(leaks(read_file(dir.file("run/journal.jsonl")))) << "the journal is redacted too";

  // Rebuilt without --redact: still redacted.
  const auto rebuilt = run_binary(doctor_argv({"report", dir.file("run"), "--json",
                                               dir.file("report.json"), "--markdown",
                                               dir.file("report.md")}),
                                  env);
  EXPECT_EQ(rebuilt.exit_code, 0) << rebuilt.err;
  EXPECT_FALSE(leaks(rebuilt.out + rebuilt.err));
  EXPECT_FALSE(leaks(read_file(dir.file("report.json"))));
  EXPECT_FALSE(leaks(read_file(dir.file("report.md"))));
  const json report = json::parse(read_file(dir.file("report.json")));
  ASSERT_EQ(report.at("results").size(), 1u);
  EXPECT_EQ(report.at("results")[0].at("status"), "pass");

  // Resumed without --redact: the journal it appends to and its report stay redacted.
  const auto resumed = run_binary(
      doctor_argv({"check", "-q", "--resume", dir.file("run"), "--json", dir.file("resumed.json")}),
      env);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_FALSE(leaks(resumed.out + resumed.err));
  EXPECT_FALSE(leaks(read_file(dir.file("resumed.json"))));
  EXPECT_FALSE(leaks(read_file(dir.file("run/journal.jsonl"))));
}

TEST(ReportJournal, BadInputsAreOneLineAndExit2) {
  TempDir dir;
  write_file(dir.file("other.jsonl"), "{\"event\":\"begin\"}\nnot json\n");
  write_file(dir.file("empty.jsonl"), "");
  for (const std::string& path :
       {dir.file("missing.jsonl"), dir.file("other.jsonl"), dir.file("empty.jsonl"), dir.path()}) {
    const auto run = run_binary({doctor(), "report", path});
    EXPECT_EQ(run.exit_code, 2) << path << ": " << run.err;
    EXPECT_EQ(line_count(run.err), 1) << path << ": " << run.err;
  }
  const auto none = run_binary({doctor(), "report"});
  EXPECT_EQ(none.exit_code, 2) << none.err;
}

// A journal written before the check request was typed (its header: the raw options and a
// rendered report) still rebuilds; one of a header format this doctor does not know is refused
// in one line naming the format.
TEST(ReportJournal, AJournalOfTheEarlierFormatStillRebuilds) {
  TempDir dir;
  const auto run = run_binary({doctor(), "report", source_path("tests/fixtures/journal-format0"),
                               "--json", dir.file("r.json")},
                              RunOptions{{{"NO_COLOR", "1"}}, {}, {}, 120});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json report = json::parse(read_file(dir.file("r.json")));
  EXPECT_EQ(report.at("exit_code"), 0);
  EXPECT_EQ(report.at("suite"), "custom");
  ASSERT_FALSE(report.at("results").empty());
  for (const json& r : report.at("results")) EXPECT_EQ(r.at("probe"), "reference") << r.dump();
}

TEST(ReportJournal, AnUnknownHeaderFormatIsRefusedNamingIt) {
  TempDir dir;
  std::string journal = read_file(source_path("tests/fixtures/journal-format0/journal.jsonl"));
  const std::string key = "\"header\":{";
  journal.replace(journal.find(key), key.size(), key + "\"format\":9,");
  write_file(dir.file("journal.jsonl"), journal);
  const auto run = run_binary({doctor(), "report", dir.file("journal.jsonl")});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(line_count(run.err), 1) << run.err;
  EXPECT_NE(run.err.find("format 9"), std::string::npos) << run.err;
}

// A start event whose plan does not read says why (here a variant this doctor does not know),
// not that there is no start event.
TEST(ReportJournal, AStartWithAnUnknownVariantIsNamed) {
  TempDir dir;
  std::string journal = read_file(source_path("tests/fixtures/journal-format0/journal.jsonl"));
  const std::string variant = "\"variant\":\"ref-math\"";
  journal.replace(journal.find(variant), variant.size(), "\"variant\":\"flash[\"");
  write_file(dir.file("journal.jsonl"), journal);
  const auto run = run_binary({doctor(), "report", dir.file("journal.jsonl")});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(line_count(run.err), 1) << run.err;
  EXPECT_NE(run.err.find("unknown variant"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("no start event"), std::string::npos) << run.err;
}

// The journal's request is checked as the flags are: a value no command line could give is
// refused by name, exit 2, before anything runs.
TEST(ResumeCheck, AJournalRequestOutsideTheFlagsIsRefused) {
  for (const auto& [key, value, flag] :
       std::vector<std::tuple<std::string, int, std::string>>{
           {"startup_timeout_ms", -5, "--startup-timeout"}, {"repeat", 0, "--repeat"}}) {
    TempDir dir;
    ASSERT_EQ(edited_run(dir.file("run"), [&](json& request) { request[key] = value; }), "");
    const auto run = run_binary({doctor(), "check", "-q", "--resume", dir.file("run")});
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_EQ(line_count(run.err), 1) << run.err;
    EXPECT_NE(run.err.find("\"" + key + "\" is " + std::to_string(value) + ": " + flag + " allows"),
              std::string::npos)
        << run.err;
  }
}

// The interpreter a journal names runs only from a run directory the user owns that no one else
// can write, and the user is told which one runs.
TEST(ResumeCheck, TheJournalsInterpreterRunsOnlyFromAPrivateRunDir) {
  TempDir dir;
  const std::string marker = dir.file("ran");
  const std::string python = dir.file("python");
  write_file(python, "#!/bin/sh\ntouch '" + marker + "'\n");
  ::chmod(python.c_str(), 0755);
  ASSERT_EQ(edited_run(dir.file("run"), [&](json& request) { request["python"] = python; }), "");

  ::chmod(dir.file("run").c_str(), 0777);
  const auto refused = run_binary({doctor(), "check", "-q", "--resume", dir.file("run")});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_EQ(line_count(refused.err), 1) << refused.err;
  EXPECT_NE(refused.err.find("names the interpreter " + python), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("is writable by others (mode 0777)"), std::string::npos)
      << refused.err;
  EXPECT_FALSE(std::filesystem::exists(marker));

  ::chmod(dir.file("run").c_str(), 0755);
  ::chmod(dir.file("run/journal.jsonl").c_str(), 0666);
  const auto journal_open = run_binary({doctor(), "check", "-q", "--resume", dir.file("run")});
  EXPECT_EQ(journal_open.exit_code, 2) << journal_open.err;
  EXPECT_FALSE(std::filesystem::exists(marker));

  ::chmod(dir.file("run/journal.jsonl").c_str(), 0644);
  const auto resumed = run_binary({doctor(), "check", "--resume", dir.file("run"), "--json",
                                   dir.file("resumed.json")});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("with the interpreter its journal names: " + python),
            std::string::npos)
      << resumed.err;
  EXPECT_TRUE(std::filesystem::exists(marker));
}

} // namespace

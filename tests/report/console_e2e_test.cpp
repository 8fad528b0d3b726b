// The console and the Markdown of the built binary: a failing quick check says each cause once
// (its console against a golden file), report text from hostile reports reaches neither the
// terminal nor a Markdown renderer as commands through diff, merge and report, and on a real
// pseudo-terminal the progress line fits 40 columns and a dumb terminal gets no escape.
#include "output_checks.hpp"
#include "support/run_binary.hpp"
#include "support/torch_probes.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <poll.h>
#include <pty.h>
#include <regex>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

using nlohmann::json;
using sdpa_test::doctor;
using sdpa_test::read_file;
using sdpa_test::run_binary;
using sdpa_test::TempDir;

namespace {

using sdpa_test::k_torch_worker;
using sdpa_test::python_has_torch;
const std::string& k_python = sdpa_test::k_test_python;

bool updating() {
  const char* v = std::getenv("SDPA_DOCTOR_UPDATE_GOLDEN");
  return v && *v && std::string(v) != "0";
}

size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The lines of the section that starts with a line beginning with `title`, to its blank line.
std::vector<std::string> section(const std::string& text, const std::string& title) {
  std::vector<std::string> out;
  bool in = false;
  for (const std::string& line : lines_of(text)) {
    if (!in && line.rfind(title, 0) == 0) in = true;
    if (in && line.empty()) break;
    if (in) out.push_back(line);
  }
  return out;
}

// What differs between two runs of the same check: durations and the temporary directory.
std::string masked(std::string text, const std::string& dir) {
  for (size_t p; (p = text.find(dir)) != std::string::npos;) text.replace(p, dir.size(), "<dir>");
  static const std::regex k_duration(R"(\b\d+(\.\d+)? (s|ms)\b)");
  return std::regex_replace(text, k_duration, "<time>");
}

// Argv of the doctor's diff/merge/report on `files`, and what it printed.
sdpa_test::RunResult doctor_on(std::vector<std::string> argv) {
  argv.insert(argv.begin(), doctor());
  sdpa_test::RunOptions o;
  o.set_env = {{"NO_COLOR", "1"}};
  return run_binary(argv, o);
}

// The console is the terminal's: nothing of the report may act on it.
void expect_console_safe(const sdpa_test::RunResult& r, const std::string& what) {
  EXPECT_EQ(sdpa_test::control_bytes(r.out), "") << what << ":\n" << r.out;
  EXPECT_NE(r.out.find("\\x1b[2J"), std::string::npos) << what << ": the text is shown\n" << r.out;
}

// The Markdown is for a renderer: fences balanced, no tag, heading or link of the data's.
void expect_markdown_safe(const std::string& md, const std::string& what) {
  std::string prose;
  EXPECT_TRUE(sdpa_test::fences_balanced(md, &prose)) << what << ":\n" << md;
  EXPECT_EQ(sdpa_test::control_bytes(sdpa_test::without_fences(md, "python")), "") << what;
  for (const std::string& tag : sdpa_test::html_tags(prose))
    EXPECT_TRUE(tag == "details" || tag == "summary") << what << ": <" << tag << "> in\n" << prose;
  EXPECT_EQ(prose.find("\n# heading"), std::string::npos) << what << ":\n" << prose;
}

json golden_report() {
  return json::parse(
      read_file(sdpa_test::source_path("tests/report/golden/crash_known_issue.json")));
}

// The report with the hostile text in its hostname, kernel and one failing cell's reason.
json hostile(json doc, const std::string& variant) {
  doc["host"]["hostname"] = "ws-" + sdpa_test::k_evil;
  doc["host"]["kernel"] = sdpa_test::k_evil;
  for (json& r : doc["results"]) {
    if (r["variant"] != variant) continue;
    r["status"] = "crash";
    r["reason"] = "boom " + sdpa_test::k_evil;
    break;
  }
  return doc;
}

// ---- a pseudo-terminal -----------------------------------------------------------------------

struct TerminalRun {
  int exit_code = -1;
  std::string output; // stdout and stderr together, as the terminal got them
};

// Runs `argv` with its stdin, stdout and stderr on a new pseudo-terminal of `columns` columns.
TerminalRun run_on_terminal(const std::vector<std::string>& argv, int columns,
                            const std::map<std::string, std::string>& env, int timeout_s = 120) {
  winsize size{};
  size.ws_col = static_cast<unsigned short>(columns);
  size.ws_row = 40;
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, &size);
  if (pid < 0) return {};
  if (pid == 0) {
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  TerminalRun run;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n <= 0) break; // EIO: the last writer closed the terminal
    run.output.append(buf, size_t(n));
  }
  ::kill(pid, SIGKILL); // a no-op after a normal end
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  return run;
}

// A small check of the reference kernels: no torch needed, some seconds.
std::vector<std::string> small_check(const TempDir& dir) {
  return {doctor(), "check", "--probe", "reference", "--variant", "ref-math,ref-flash", "--case",
          "dtype=fp16,b=1,h=2,l=16,d=32", "--case", "dtype=bf16,b=1,h=2,l=24,d=32", "--case",
          "dtype=fp32,b=1,h=2,l=33,d=16,causal", "--run-dir", dir.file("run")};
}

std::string without_sgr(const std::string& line) {
  static const std::regex k_sgr("\x1b\\[[0-9;]*m");
  return std::regex_replace(line, k_sgr, "");
}

} // namespace

// One variant (libtorch flash) aborts on every case: one block, at most 8 lines at 100 columns,
// and the console from the matrix on is the golden file's (durations and paths masked).
TEST(FailingQuickCheck, SaysEachCauseOnce) {
  if (!k_torch_worker) GTEST_SKIP() << "libtorch worker not built";
  TempDir dir;
  sdpa_test::RunOptions o;
  o.set_env = {{"NO_COLOR", "1"}, {"SDPA_DOCTOR_TEST_FAULT", "variant=flash,case=*,action=abort"}};
  o.unset_env = {"COLUMNS"};
  o.timeout_s = 600;
  // The shrink's budget in seconds out of reach, so a loaded machine shrinks as far as any other.
  auto r = run_binary({doctor(), "check", "--probe", "libtorch", "--variant", "math,flash",
                       "--shrink-budget", "24,600s", "--json", dir.file("r.json"), "--markdown",
                       dir.file("r.md"), "--run-dir", dir.file("run")},
                      o);
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;

  const auto failures = section(r.out, "Failures (");
  ASSERT_FALSE(failures.empty()) << r.out;
  EXPECT_LE(failures.size(), 8u) << r.out;
  size_t blocks = 0;
  for (const std::string& line : failures) {
    EXPECT_LE(display_width(line), 100u) << line;
    blocks += line.rfind("  ✗ CRASH", 0) == 0;
  }
  EXPECT_EQ(blocks, 1u) << r.out;

  const std::string md = read_file(dir.file("r.md"));
  const std::string md_failures = md.substr(md.find("## Failures"), md.find("## Recommendations") -
                                                                        md.find("## Failures"));
  size_t details = 0;
  for (size_t p = 0; (p = md_failures.find("<details><summary>", p)) != std::string::npos; ++p)
    ++details;
  EXPECT_EQ(details, 1u) << md_failures;

  const std::string from_matrix =
      masked(r.out.substr(r.out.find("\ncpu · host CPU\n") + 1), dir.path());
  const std::string golden =
      sdpa_test::source_path("tests/report/golden/quick_check_abort.console.txt");
  if (updating()) {
    sdpa_test::write_file(golden, from_matrix);
    return;
  }
  EXPECT_EQ(read_file(golden), from_matrix)
      << "the console differs from " << golden << " (SDPA_DOCTOR_UPDATE_GOLDEN=1 to accept)";
}

// Every cell passes, but the first recommendation's re-run crashes (the next one passes): the exit
// code is 1, and the summary says it is the re-run.
TEST(FailedReRun, TheSummarySaysWhyTheExitCodeIsOne) {
  if (!python_has_torch()) GTEST_SKIP() << "no torch in " << k_python;
  TempDir dir;
  sdpa_test::RunOptions o;
  o.set_env = {{"NO_COLOR", "1"},
               {"SDPA_DOCTOR_TEST_FAULT", "variant=verify:keep-defaults,action=abort"}};
  o.timeout_s = 300;
  auto r = run_binary({doctor(), "check", "--probe", "python", "--python", k_python, "--case",
                       "dtype=fp32,b=1,h=2,l=16,d=32", "--json", dir.file("r.json"), "--run-dir",
                       dir.file("run")},
                      o);
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  const json report = json::parse(read_file(dir.file("r.json"))); // outlives the loop below
  for (const json& res : report.at("results"))
    EXPECT_TRUE(res.at("status") == "pass" || res.at("status") == "unsupported") << res;
  EXPECT_NE(
      sdpa_test::unwrapped(r.out).find("exit code 1 (a re-run under the recommended flags failed)"),
      std::string::npos)
      << r.out;
}

TEST(HostileReports, DiffEscapesThem) {
  TempDir dir;
  sdpa_test::write_file(dir.file("new.json"), hostile(golden_report(), "flash").dump(1));
  const std::string base = sdpa_test::source_path("tests/report/golden/crash_known_issue.json");
  auto r = doctor_on({"diff", base, dir.file("new.json"), "--markdown", dir.file("d.md")});
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err; // the hostile cell is a regression
  expect_console_safe(r, "diff");
  expect_markdown_safe(read_file(dir.file("d.md")), "diff --markdown");
}

TEST(HostileReports, MergeEscapesThem) {
  TempDir dir;
  json good = golden_report();
  good["host"]["hostname"] = "node-good";
  sdpa_test::write_file(dir.file("a.json"), good.dump(1));
  sdpa_test::write_file(dir.file("b.json"), hostile(golden_report(), "flash").dump(1));
  auto r =
      doctor_on({"merge", dir.file("a.json"), dir.file("b.json"), "--markdown", dir.file("m.md")});
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  expect_console_safe(r, "merge"); // the odd node is named by its hostname
  expect_markdown_safe(read_file(dir.file("m.md")), "merge --markdown");
}

TEST(HostileReports, ReportFromAJournalEscapesThem) {
  TempDir dir;
  // A real run (a planted tolerance of 0 makes its one cell a mismatch), then its journal edited.
  auto run = run_binary({doctor(), "check", "-q", "--probe", "reference", "--variant", "ref-flash",
                         "--case", "dtype=fp16,b=1,h=2,l=33,d=32", "--tolerance", "fp16=0:0",
                         "--run-dir", dir.file("run")});
  ASSERT_EQ(run.exit_code, 1) << run.out << run.err;
  std::string journal;
  for (const std::string& line : lines_of(read_file(dir.file("run/journal.jsonl")))) {
    json e = json::parse(line);
    if (e["event"] == "start") {
      e["header"]["report"]["host"]["hostname"] = "ws-" + sdpa_test::k_evil;
      e["header"]["report"]["host"]["kernel"] = sdpa_test::k_evil;
    }
    if (e["event"] == "result") e["result"]["reason"] = "boom " + sdpa_test::k_evil;
    journal += e.dump() + "\n";
  }
  sdpa_test::write_file(dir.file("run/journal.jsonl"), journal);
  auto r = doctor_on({"report", dir.file("run/journal.jsonl"), "--markdown", dir.file("r.md")});
  ASSERT_EQ(r.exit_code, 1) << r.out << r.err;
  expect_console_safe(r, "report");
  const std::string md = read_file(dir.file("r.md"));
  expect_markdown_safe(md, "report --markdown");
  EXPECT_NE(md.find("&lt;img src=x onerror=alert(1)>"), std::string::npos) << md;
}

// A 40-column terminal: every redraw of the progress line fits it, and the matrix is still a
// table (every row as wide as its rules) where its cells cannot shrink to fit.
TEST(NarrowTerminal, TheProgressLineFitsAndTheMatrixKeepsItsForm) {
  TempDir dir;
  const auto run = run_on_terminal(small_check(dir), 40,
                                   {{"TERM", "xterm-256color"}, {"LC_ALL", "C.UTF-8"}});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  size_t redraws = 0;
  for (size_t p = 0; (p = run.output.find("\r\x1b[K", p)) != std::string::npos; ++redraws) {
    p += 4;
    const std::string drawn = run.output.substr(p, run.output.find_first_of("\r\n\x1b", p) - p);
    EXPECT_LE(display_width(drawn), 39u) << "a progress line wider than the terminal: " << drawn;
  }
  EXPECT_GT(redraws, 0u) << "no progress line was drawn:\n" << run.output;
  size_t table_width = 0, rows = 0;
  for (const std::string& raw : lines_of(run.output)) {
    std::string line = without_sgr(raw);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const bool table_line = line.rfind("┌", 0) == 0 || line.rfind("│", 0) == 0 ||
                            line.rfind("├", 0) == 0 || line.rfind("└", 0) == 0;
    if (!table_line) continue;
    if (table_width == 0) table_width = display_width(line);
    EXPECT_EQ(display_width(line), table_width) << line;
    ++rows;
  }
  EXPECT_GE(rows, 6u) << run.output;
}

// TERM=dumb: no colour, no cursor movement; the progress is plain lines.
TEST(DumbTerminal, GetsNoEscapeSequence) {
  TempDir dir;
  const auto run = run_on_terminal(small_check(dir), 80, {{"TERM", "dumb"}, {"LC_ALL", "C.UTF-8"}});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(run.output.find('\x1b'), std::string::npos) << run.output;
  // The terminal turns "\n" into "\r\n"; a "\r" of the doctor's own would be a redraw.
  for (size_t p = 0; (p = run.output.find('\r', p)) != std::string::npos; ++p)
    EXPECT_EQ(run.output.substr(p, 2), "\r\n") << "a carriage return at " << p;
  EXPECT_NE(run.output.find("Summary: "), std::string::npos) << run.output;
}

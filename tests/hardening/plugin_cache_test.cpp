// The LibTorch plugin cache under a hostile or careless hand, through the real binary: a compiler
// that never returns, is killed or writes junk, a cached plugin that is not what was built, a
// cache another live check holds locked, a cache folder that cannot be used. A fake torch on
// PYTHONPATH stands in for the torch under test, and a fake CXX (a shell script doing what the
// file `mode` beside it says) for its compiler; its `copy` mode hands over the plugin built with
// this doctor, so a "build" takes no time.
#include "hardening/hardening_support.hpp"
#include "support/lock_holder.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

using nlohmann::json;
using sdpa_hardening::crash_problem;
namespace fs = std::filesystem;

namespace {

using Env = std::map<std::string, std::string>;
using std::chrono::seconds;

constexpr const char* k_python = "/usr/bin/python3";

constexpr const char* k_fake_cxx = R"(#!/bin/sh
# A compiler for the tests: what it does is read from the file `mode` beside it.
here=$(dirname "$0")
[ "$1" = --version ] && { echo "fake-cxx 1.0"; exit 0; }
out=; prev=
for a; do [ "$prev" = -o ] && out=$a; prev=$a; done
case $(cat "$here/mode") in
  copy) cp "$here/plugin.so" "$out" ;;
  other) cp "$here/other.so" "$out" ;;
  big) cp "$here/plugin.so" "$out" && truncate -s 300M "$out" ;;
  junk) printf 'junk' > "$out" ;;
  sleep) sleep 300 & echo $! > "$here/child.pid"; wait ;;
  enospc) echo "cc1plus: fatal error: $out: No space left on device" >&2; exit 1 ;;
  sigkill) kill -KILL $$ ;;
  fail) echo "fatal error: torch/extension.h: No such file or directory" >&2; exit 1 ;;
esac
)";

bool wait_until(const std::function<bool()>& done, seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// Gone, or a zombie nobody reaped yet: it runs no more.
bool process_gone(pid_t pid) {
  const std::string stat = sdpa_test::read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  return stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z");
}

// A check running in the background, so a test can signal it in the middle.
class BackgroundCheck {
public:
  BackgroundCheck(const std::vector<std::string>& argv, const Env& env, const std::string& err) {
    m_pid = ::fork();
    if (m_pid != 0) return;
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    const int out_fd = ::open("/dev/null", O_WRONLY);
    const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out_fd, 1);
    ::dup2(err_fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ~BackgroundCheck() {
    if (m_pid > 0 && m_code == k_running) {
      ::kill(m_pid, SIGKILL);
      ::waitpid(m_pid, nullptr, 0);
    }
  }
  BackgroundCheck(const BackgroundCheck&) = delete;
  BackgroundCheck& operator=(const BackgroundCheck&) = delete;
  pid_t pid() const { return m_pid; }
  // Its exit code once it ended within `limit`; -1 for a signal, k_running when it did not end.
  int wait(seconds limit) {
    wait_until([&] {
      int status = 0;
      if (::waitpid(m_pid, &status, WNOHANG) != m_pid) return false;
      m_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return true;
    }, limit);
    return m_code;
  }
  static constexpr int k_running = -2;

private:
  pid_t m_pid = -1;
  int m_code = k_running;
};

class PluginCache : public ::testing::Test {
protected:
  void SetUp() override {
    if (sdpa_hardening::torch_worker().empty()) GTEST_SKIP() << "the libtorch worker is not built";
    if (::access(k_python, X_OK) != 0) GTEST_SKIP() << "no " << k_python;
    write_fake_torch("site", "0.0.1");
  }

  // A torch package named `version` in `site` (for PYTHONPATH), as far as the doctor looks.
  void write_fake_torch(const std::string& site, const std::string& version) const {
    fs::create_directories(m_dir.file(site + "/torch/lib"));
    sdpa_test::write_file(m_dir.file(site + "/torch/__init__.py"),
                          "__version__ = '" + version + "'\nfrom . import version\n"
                          "class _C:\n    _GLIBCXX_USE_CXX11_ABI = 1\n");
    sdpa_test::write_file(m_dir.file(site + "/torch/version.py"),
                          "__version__ = '" + version + "'\ngit_version = 'fake'\n");
    sdpa_test::write_file(m_dir.file(site + "/torch/lib/libtorch_cpu.so"), "");
  }

  // A fake compiler of its own folder, doing `mode`; its path.
  std::string fake_cxx(const std::string& name, const std::string& mode) const {
    const std::string dir = m_dir.file(name);
    fs::create_directories(dir);
    sdpa_hardening::make_executable(dir + "/c++", k_fake_cxx);
    fs::copy_file(sdpa_test::build_path("sdpa-doctor-torch-plugin.so"), dir + "/plugin.so",
                  fs::copy_options::overwrite_existing);
    set_mode(name, mode);
    return dir + "/c++";
  }
  void set_mode(const std::string& name, const std::string& mode) const {
    sdpa_test::write_file(m_dir.file(name + "/mode"), mode + "\n");
  }
  std::string cache() const { return m_dir.file("cache"); }
  std::string workers() const { return m_dir.file("cache/workers"); }

  Env env(const std::string& cxx, const std::string& cache_dir) const {
    return {{"PYTHONPATH", m_dir.file("site")}, {"SDPA_DOCTOR_CACHE_DIR", cache_dir}, {"CXX", cxx}};
  }
  std::vector<std::string> argv(const std::string& name, std::vector<std::string> extra = {}) const {
    std::vector<std::string> a = {sdpa_test::doctor(), "check", "--probe", "libtorch", "--python",
                                  k_python, "--variant", "math", "--case",
                                  "dtype=fp32,b=1,h=1,l=8,d=8", "--no-shrink", "--run-dir",
                                  m_dir.file("run-" + name), "--json", report_path(name)};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  std::string report_path(const std::string& name) const { return m_dir.file(name + ".json"); }
  json report(const std::string& name) const {
    return json::parse(sdpa_test::read_file(report_path(name)), nullptr, false);
  }

  // A check to its end; its report (null when none was written).
  json check(const std::string& name, const Env& e, sdpa_test::RunResult& run,
             std::vector<std::string> extra = {}) const {
    sdpa_test::RunOptions options;
    options.timeout_s = 120;
    options.set_env = e;
    run = sdpa_test::run_binary(argv(name, std::move(extra)), options);
    return report(name);
  }

  sdpa_test::TempDir m_dir;
};

std::vector<std::string> statuses(const json& report) {
  std::vector<std::string> out;
  for (const json& r : report.value("results", json::array()))
    out.push_back(r.value("status", "") + ": " + r.value("reason", ""));
  return out;
}

std::vector<json> findings_with_id(const json& report, const std::string& id) {
  std::vector<json> out;
  for (const json& f : report.value("inventory", json::object()).value("findings", json::array()))
    if (f.value("id", "") == id) out.push_back(f);
  for (const json& f : report.value("findings", json::array()))
    if (f.value("id", "") == id) out.push_back(f);
  return out;
}

std::string plugin_loaded(const json& report) {
  return report.value("inventory", json::object())
      .value("runtime", json::object())
      .value("torch_plugin", "");
}

bool has_failed_marker(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".failed") return true;
  return false;
}

pid_t read_pid(const std::string& file) {
  return pid_t(std::atoi(sdpa_test::read_file(file).c_str()));
}

} // namespace

// ---- a compiler that never returns ------------------------------------------------------------

TEST_F(PluginCache, ACompilerThatNeverReturnsIsKilledWithItsChildrenAtTheDeadline) {
  const std::string cxx = fake_cxx("cxx", "sleep");
  sdpa_test::RunResult run;
  const auto start = std::chrono::steady_clock::now();
  const json r = check("sleep", env(cxx, cache()), run, {"--plugin-build-timeout", "2"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(60));
  EXPECT_EQ(crash_problem(run), "") << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const auto failed = findings_with_id(r, "torch-plugin-build-failed");
  ASSERT_EQ(failed.size(), 1u) << r.dump().substr(0, 3000);
  const std::string message = failed[0].value("message", "");
  EXPECT_NE(message.find(cxx + " did not finish in 2 s (--plugin-build-timeout)"), std::string::npos)
      << message;
  EXPECT_EQ(statuses(r), std::vector<std::string>{"skipped: " + r["results"][0].value("reason", "")});
  const pid_t child = read_pid(m_dir.file("cxx/child.pid"));
  ASSERT_GT(child, 0);
  EXPECT_TRUE(wait_until([&] { return process_gone(child); }, seconds(10)))
      << "the compiler's child " << child << " outlived the check";
  EXPECT_FALSE(has_failed_marker(workers())) << "a deadline is not a lasting failure";
}

// ---- Ctrl-C or SIGTERM while the plugin builds -----------------------------------------------

TEST_F(PluginCache, SigintOrSigtermDuringTheBuildEndsTheCheckAtOnceWithItsReport) {
  for (const auto& [sig, code] : std::vector<std::pair<int, int>>{{SIGINT, 130}, {SIGTERM, 143}}) {
    const std::string name = "signal-" + std::to_string(sig);
    const std::string cxx = fake_cxx(name, "sleep");
    BackgroundCheck doctor(argv(name), env(cxx, cache()), m_dir.file(name + ".err"));
    const std::string child_file = m_dir.file(name + "/child.pid");
    ASSERT_TRUE(wait_until([&] { return fs::exists(child_file); }, seconds(60)))
        << sdpa_test::read_file(m_dir.file(name + ".err"));
    ASSERT_TRUE(wait_until([&] { return read_pid(child_file) > 0; }, seconds(5)));
    const auto signalled = std::chrono::steady_clock::now();
    ::kill(doctor.pid(), sig);
    EXPECT_EQ(doctor.wait(seconds(30)), code) << sdpa_test::read_file(m_dir.file(name + ".err"));
    EXPECT_LT(std::chrono::steady_clock::now() - signalled, seconds(10)) << "it waited for the compiler";
    const json r = report(name);
    ASSERT_TRUE(r.is_object()) << "no report";
    EXPECT_TRUE(r.value("interrupted", false));
    const pid_t child = read_pid(child_file);
    EXPECT_TRUE(wait_until([&] { return process_gone(child); }, seconds(10)))
        << "the compiler's child " << child << " outlived the check";
  }
}

// ---- a lock another live check holds ----------------------------------------------------------

TEST_F(PluginCache, ALockHeldByAnotherCheckIsNamedSigtermEndsTheWaitAndItsDeadlineGoesOnWithout) {
  // The holder: a check whose compiler never returns, holding the cache's lock while it builds.
  const std::string slow = fake_cxx("slow", "sleep");
  BackgroundCheck holder(argv("holder"), env(slow, cache()), m_dir.file("holder.err"));
  ASSERT_TRUE(wait_until([&] { return fs::exists(m_dir.file("slow/child.pid")); }, seconds(60)))
      << sdpa_test::read_file(m_dir.file("holder.err"));
  const std::string who = "waiting for sdpa-doctor pid " + std::to_string(holder.pid()) +
                          " building the LibTorch plugin for torch 0.0.1";
  const std::string fast = fake_cxx("fast", "copy");

  // Past its deadline a waiter builds in its own run directory, and its libtorch cells run.
  sdpa_test::RunResult run;
  const json r = check("waiter", env(fast, cache()), run, {"--cache-lock-timeout", "2"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find(who), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("is still locked: going on without it"), std::string::npos) << run.err;
  EXPECT_EQ(plugin_loaded(r).rfind(m_dir.file("run-waiter") + "/", 0), 0u) << plugin_loaded(r);
  EXPECT_EQ(statuses(r), std::vector<std::string>{"pass: "});

  // SIGTERM ends a wait at once, with its report.
  BackgroundCheck waiter(argv("term"), env(fast, cache()), m_dir.file("term.err"));
  ASSERT_TRUE(wait_until([&] {
    return sdpa_test::read_file(m_dir.file("term.err")).find(who) != std::string::npos;
  }, seconds(60))) << sdpa_test::read_file(m_dir.file("term.err"));
  const auto signalled = std::chrono::steady_clock::now();
  ::kill(waiter.pid(), SIGTERM);
  EXPECT_EQ(waiter.wait(seconds(30)), 143);
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, seconds(10));
  EXPECT_TRUE(report("term").value("interrupted", false));

  ::kill(holder.pid(), SIGTERM);
  EXPECT_EQ(holder.wait(seconds(30)), 143);
}

// ---- a cached plugin that is not what was built -----------------------------------------------

TEST_F(PluginCache, ABadCachedPluginIsBuiltAgainOnceAndThenIsOneFindingBlamingNoBackend) {
  const std::string cxx = fake_cxx("cxx", "copy");
  sdpa_test::RunResult run;
  const std::string plugin = plugin_loaded(check("first", env(cxx, cache()), run));
  ASSERT_EQ(plugin.rfind(workers() + "/", 0), 0u) << plugin << "\n" << run.err;
  Dl_info libc{};
  ASSERT_NE(::dladdr(reinterpret_cast<void*>(&::puts), &libc), 0);
  const std::string good = sdpa_test::read_file(plugin);
  const std::vector<std::pair<std::string, std::function<void()>>> bad = {
      {"random bytes", [&] { sdpa_test::write_file(plugin, std::string(4096, '\x5a')); }},
      {"truncated copy", [&] { sdpa_test::write_file(plugin, good.substr(0, good.size() / 2)); }},
      {"empty file", [&] { sdpa_test::write_file(plugin, ""); }},
      {"directory", [&] { fs::create_directory(plugin); }},
      {"/dev/zero link", [&] { fs::create_symlink("/dev/zero", plugin); }},
      {"another library", [&] { fs::copy_file(libc.dli_fname, plugin); }},
  };
  int attempt = 0;
  for (const auto& [name, make] : bad) {
    fs::remove_all(plugin);
    make();
    const json r = check("rebuilt-" + std::to_string(attempt++), env(cxx, cache()), run);
    EXPECT_EQ(crash_problem(run), "") << name << ": " << run.err;
    EXPECT_EQ(run.exit_code, 0) << name << ": " << run.err;
    EXPECT_NE(run.err.find("cannot be used"), std::string::npos) << name << ": " << run.err;
    EXPECT_EQ(plugin_loaded(r), plugin) << name;
    EXPECT_EQ(statuses(r), std::vector<std::string>{"pass: "}) << name;
  }

  // Built again, and still unusable (a compiler that exits 0 and writes junk).
  set_mode("cxx", "junk");
  sdpa_test::write_file(plugin, "junk");
  const json r = check("junk", env(cxx, cache()), run);
  EXPECT_EQ(crash_problem(run), "") << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const auto unusable = findings_with_id(r, "torch-plugin-unusable");
  ASSERT_EQ(unusable.size(), 1u) << r.dump().substr(0, 3000);
  EXPECT_NE(unusable[0].value("message", "").find(plugin), std::string::npos);
  for (const json& cell : r["results"]) {
    EXPECT_EQ(cell.value("status", ""), "skipped");
    EXPECT_EQ(cell.value("reason", ""), unusable[0].value("message", ""));
  }
  EXPECT_TRUE(r.value("recommendations", json::array()).empty()) << r.dump().substr(0, 3000);
  for (const char* blamed : {"variant-", "no-working-configuration", "backend"})
    for (const json& f : r.value("findings", json::array()))
      EXPECT_EQ(f.value("id", "").find(blamed), std::string::npos) << f.dump();
}

// A plugin that passes the check (the compiler's own output) but is not one: the worker's hello
// is the handshake, its refusal of every case is the plugin's, and nothing of a backend.
TEST_F(PluginCache, APluginThatDoesNotLoadIsOneFindingAndSkippedCells) {
  const std::string cxx = fake_cxx("cxx", "other");
  fs::copy_file(SDPA_TEST_NOT_A_PLUGIN, m_dir.file("cxx/other.so"));
  sdpa_test::RunResult run;
  const json r = check("other", env(cxx, cache()), run);
  EXPECT_EQ(crash_problem(run), "") << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const auto unusable = findings_with_id(r, "torch-plugin-unusable");
  ASSERT_EQ(unusable.size(), 1u) << r.dump().substr(0, 3000);
  const std::string message = unusable[0].value("message", "");
  EXPECT_NE(message.find("is not a LibTorch plugin of this doctor"), std::string::npos) << message;
  for (const json& cell : r["results"]) {
    EXPECT_EQ(cell.value("status", ""), "skipped");
    EXPECT_EQ(cell.value("reason", ""), message);
  }
  EXPECT_TRUE(r.value("recommendations", json::array()).empty()) << r.dump().substr(0, 3000);
}

// ---- a full disk, a signal: said, and tried again next time -----------------------------------

TEST_F(PluginCache, AFullDiskOrAKilledCompilerIsSaidAndTriedAgainNextTime) {
  const std::string cxx = fake_cxx("cxx", "enospc");
  const std::vector<std::pair<std::string, std::string>> passing = {
      {"enospc", "the disk that holds " + workers() + " is full"},
      {"sigkill", "the compiler " + cxx + " was killed by SIGKILL"}};
  sdpa_test::RunResult run;
  for (const auto& [mode, said] : passing) {
    set_mode("cxx", mode);
    const json r = check(mode, env(cxx, cache()), run);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    const auto failed = findings_with_id(r, "torch-plugin-build-failed");
    ASSERT_EQ(failed.size(), 1u) << mode << ": " << r.dump().substr(0, 3000);
    EXPECT_NE(failed[0].value("message", "").find(said), std::string::npos) << failed[0].dump();
    EXPECT_FALSE(has_failed_marker(workers())) << mode << " was remembered as a failure";
  }
  set_mode("cxx", "copy");
  EXPECT_EQ(statuses(check("freed", env(cxx, cache()), run)), std::vector<std::string>{"pass: "})
      << run.err;

  // The compiler's own diagnostic is a lasting answer: remembered.
  const std::string other = fake_cxx("other", "fail");
  check("refused", env(other, cache()), run);
  EXPECT_TRUE(has_failed_marker(workers()));
}

// ---- a cache folder that cannot be used ------------------------------------------------------

TEST_F(PluginCache, AnUnusableCacheFolderBuildsThePluginForThisRunOnly) {
  const std::string cxx = fake_cxx("cxx", "copy");
  sdpa_test::write_file(m_dir.file("a-file"), "x");
  int n = 0;
  for (const std::string& dir : {std::string("/proc/self/x"), m_dir.file("a-file/x")}) {
    const std::string name = "private-" + std::to_string(n++);
    sdpa_test::RunResult run;
    const json r = check(name, env(cxx, dir), run);
    EXPECT_EQ(run.exit_code, 0) << dir << ": " << run.err;
    EXPECT_EQ(plugin_loaded(r).rfind(m_dir.file("run-" + name) + "/", 0), 0u) << plugin_loaded(r);
    EXPECT_EQ(statuses(r), std::vector<std::string>{"pass: "}) << dir << ": " << run.err;
  }
}

// ---- a plugin in use by a live check is never evicted ------------------------------------------

TEST_F(PluginCache, ACheckForAnotherTorchNeverEvictsThePluginALiveCheckUses) {
  // Check A loads its plugin (300 MiB, past the cache's bound) and hangs in its worker.
  const std::string big = fake_cxx("big", "big");
  Env a_env = env(big, cache());
  a_env["SDPA_DOCTOR_TEST_FAULT"] = "variant=math,case=*,action=hang";
  BackgroundCheck a(argv("a", {"--case-timeout", "120"}), a_env, m_dir.file("a.err"));
  ASSERT_TRUE(wait_until([&] {
    return sdpa_test::read_file(m_dir.file("run-a/journal.jsonl")).find("\"event\":\"begin\"") !=
           std::string::npos;
  }, seconds(60))) << sdpa_test::read_file(m_dir.file("a.err"));
  std::string in_use;
  for (const auto& e : fs::directory_iterator(workers()))
    if (e.path().extension() == ".so") in_use = e.path().string();
  ASSERT_FALSE(in_use.empty());
  // Used long ago as far as its time goes: the first an eviction would pick.
  fs::last_write_time(in_use, fs::file_time_type::clock::now() - std::chrono::hours(1));

  // Check B, for another torch, builds its own plugin and makes room.
  const std::string copy = fake_cxx("copy", "copy");
  write_fake_torch("site2", "0.0.2");
  Env b_env = env(copy, cache());
  b_env["PYTHONPATH"] = m_dir.file("site2");
  sdpa_test::RunResult run;
  EXPECT_EQ(statuses(check("b", b_env, run)), std::vector<std::string>{"pass: "}) << run.err;
  EXPECT_TRUE(fs::exists(in_use)) << "the plugin check A uses was evicted";

  ::kill(a.pid(), SIGTERM);
  EXPECT_EQ(a.wait(seconds(30)), 143) << sdpa_test::read_file(m_dir.file("a.err"));
  // Once no check uses it, the next build evicts it: the bound still holds.
  write_fake_torch("site3", "0.0.3");
  b_env["PYTHONPATH"] = m_dir.file("site3");
  EXPECT_EQ(statuses(check("c", b_env, run)), std::vector<std::string>{"pass: "}) << run.err;
  EXPECT_FALSE(fs::exists(in_use));
}

// ---- the oracle cache's lock held by another live process -------------------------------------

TEST(OracleCacheLock, AHolderIsNamedAndPastTheDeadlineTheCheckComputesItsOwnOracles) {
  sdpa_test::TempDir dir;
  fs::create_directories(dir.file("oracle"));
  const sdpa_test::LockHolder holder(dir.file("oracle/.lock"), "oracle-holder");
  ASSERT_TRUE(holder.holding());
  sdpa_test::RunOptions options;
  options.timeout_s = 120;
  // A case big enough (1 GFLOP) for its oracle to be kept across runs.
  const auto run = sdpa_test::run_binary(
      {sdpa_test::doctor(), "check", "--probe", "reference", "--variant", "ref-math", "--case",
       "dtype=fp32,b=1,h=4,l=1024,d=64", "--no-shrink", "--oracle-cache", dir.file("oracle"),
       "--cache-lock-timeout", "1", "--run-dir", dir.file("run"), "--json", dir.file("r.json")},
      options);
  EXPECT_EQ(crash_problem(run), "") << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("waiting for pid " + std::to_string(holder.pid()) + " (oracle-holder)"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("is still locked: going on without it"), std::string::npos) << run.err;
  const json r = json::parse(sdpa_test::read_file(dir.file("r.json")), nullptr, false);
  EXPECT_EQ(statuses(r), std::vector<std::string>{"pass: "});
  for (const auto& e : fs::directory_iterator(dir.file("oracle")))
    EXPECT_EQ(e.path().filename(), ".lock") << "an oracle was stored under another run's lock";
}

// Bad input through the real binary: each row must be a clean usage error (exit 2, one line on
// stderr, nothing on stdout, no crash text), and checked before anything runs, so it costs
// seconds. Below the table: inputs that are not usage errors (a python that prints garbage or
// hangs, a hostile sysfs tree) must leave the doctor standing with a report.
#include "hardening/hardening_support.hpp"
#include "support/edited_journal.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

using sdpa_hardening::crash_problem;
using sdpa_hardening::k_small_plan;
using sdpa_hardening::Row;
using sdpa_hardening::row_argv;
using sdpa_hardening::run_row;
using sdpa_hardening::usage_error_problem;
using sdpa_test::run_binary;
namespace fs = std::filesystem;

namespace {

std::string nested(int depth) { return std::string(depth, '[') + std::string(depth, ']') + "\n"; }

// Files the rows point at, made once.
void write_fixtures(const sdpa_test::TempDir& dir) {
  const auto put = [&dir](const std::string& name, const std::string& text) {
    sdpa_test::write_file(dir.file(name), text);
  };
  put("empty.jsonl", "");
  put("comments.jsonl", "# only a comment\n\n   \n");
  put("notjson.jsonl", "dtype=fp16,b=1\n");
  put("array.jsonl", "[1,2,3]\n");
  put("string.jsonl", "\"fp16\"\n");
  put("wrongtype.jsonl", "{\"dtype\":\"fp16\",\"d\":[64]}\n");
  put("fraction.jsonl", "{\"dtype\":\"fp16\",\"d\":64.5}\n");
  put("badvalue.jsonl", "{\"dtype\":\"fp16\",\"d\":0}\n");
  put("unknownkey.jsonl", "{\"dtype\":\"fp16\",\"colour\":\"red\"}\n");
  put("baddtype.jsonl", "{\"dtype\":\"fp8\"}\n");
  put("secondbad.jsonl", "{\"dtype\":\"fp16\"}\n{\"dtype\":\"fp16\",\"l\":-1}\n");
  put("nested.jsonl", nested(200000));
  put("binary.jsonl", std::string("\x7f" "ELF\x02\x01\x01\0\0\0\0\xff\xfe", 14));
  put("highbytes.jsonl", std::string(64, '\xff') + "\n");
  sdpa_hardening::make_sparse_file(dir.file("huge.jsonl"), 1LL << 30);
  sdpa_hardening::make_sparse_file(dir.file("huge-issues.json"), 1LL << 30);
  ::mkfifo(dir.file("fifo").c_str(), 0644);
  fs::create_directories(dir.file("fifo-run"));
  ::mkfifo(dir.file("fifo-run/journal.jsonl").c_str(), 0644);

  put("issues-notjson.json", "not json at all");
  put("issues-object.json", "{\"id\":\"x\"}");
  put("issues-badregex.json",
      R"([{"id":"x","title":"t","link":"","advice":"a","match":{"stderr_regex":"(unclosed"}}])");
  put("issues-idtype.json", R"([{"id":7,"title":"t","link":"","advice":"a","match":{}}])");
  put("issues-matchtype.json", R"([{"id":"x","title":"t","link":"","advice":"a","match":"y"}])");
  put("issues-archtype.json",
      R"([{"id":"x","title":"t","link":"","advice":"a","match":{"archs":"gfx1201"}}])");
  put("issues-status.json",
      R"([{"id":"x","title":"t","link":"","advice":"a","match":{"statuses":["exploded"]}}])");
  put("issues-unknownkey.json",
      R"([{"id":"x","title":"t","link":"","advice":"a","match":{},"severity":"high"}])");
  put("issues-strings.json", R"(["a","b"])");
  put("newline.jsonl", R"({"dtype":"fp\n16"})" "\n");
  put("issues-newline.json",
      R"([{"id":"x\ny","title":"t","link":"","advice":"a","match":{"stderr_regex":"(un\nclosed"}}])");
  put("issues-overflow.json", "[1e999]");
  put("overflow.jsonl", "{\"dtype\":\"fp16\",\"d\":1e999}\n");
  put("issues-dim.json",
      R"([{"id":"x","title":"t","link":"","advice":"a","match":{"head_dim_min":"64"}}])");
  put("model-notjson.json", "num_attention_heads: 32\n");
  put("model-array.json", R"([{"num_attention_heads":32}])");
  put("model-no-heads.json", R"({"hidden_size":4096,"max_position_embeddings":8192})");
  put("model-heads-hidden.json",
      R"({"num_attention_heads":30,"hidden_size":4096,"max_position_embeddings":8192})");
  put("model-kv-heads.json", R"({"num_attention_heads":32,"num_key_value_heads":5,)"
                             R"("hidden_size":4096,"max_position_embeddings":8192})");
  put("model-zero-heads.json",
      R"({"num_attention_heads":0,"hidden_size":4096,"max_position_embeddings":8192})");
  put("model-negative-positions.json",
      R"({"num_attention_heads":32,"hidden_size":4096,"max_position_embeddings":-1})");
  put("model-dtype.json", R"({"num_attention_heads":32,"hidden_size":4096,)"
                          R"("max_position_embeddings":8192,"torch_dtype":"float8_e4m3fn"})");
  put("model-window-zero.json", R"({"num_attention_heads":4,"hidden_size":256,)"
                                R"("max_position_embeddings":64,"sliding_window":0,)"
                                R"("use_sliding_window":true})");
  put("model-ok.json",
      R"({"num_attention_heads":4,"hidden_size":256,"max_position_embeddings":64})");
  put("plain.txt", "not a program\n");
  ::chmod(dir.file("plain.txt").c_str(), 0644);
}

const std::string& fixture_dir() {
  static const sdpa_hardening::FixtureDir dir(write_fixtures);
  return dir.path();
}

// Journals whose request no command line could give, or that name an interpreter from a run
// directory anyone can write. Each takes a real check to make, so only the row that names one
// makes it (each row runs in a process of its own).
void make_edited_runs_named_in(const std::vector<std::string>& argv) {
  using Edit = std::function<void(nlohmann::json&)>;
  const std::vector<std::pair<std::string, Edit>> runs = {
      {"run-startup-negative", [](nlohmann::json& r) { r["startup_timeout_ms"] = -5; }},
      {"run-repeat-zero", [](nlohmann::json& r) { r["repeat"] = 0; }},
      {"run-open", [](nlohmann::json& r) { r["python"] = "/bin/true"; }}};
  for (const auto& [name, edit] : runs) {
    const std::string dir = fixture_dir() + "/" + name;
    if (std::find(argv.begin(), argv.end(), "@/" + name) == argv.end() || fs::exists(dir)) continue;
    const std::string problem = sdpa_test::edited_run(dir, edit);
    ASSERT_EQ(problem, "") << name;
    if (name == "run-open") ::chmod(dir.c_str(), 0777);
  }
}

std::vector<Row> rows() {
  return {
      // flags and values
      {"unknown_flag", {"--no-such-flag"}, false},
      {"unknown_check_flag", {"check", "--no-such-flag"}},
      {"unknown_subcommand", {"frobnicate"}, false},
      {"flag_without_value", {"check", "--suite"}, false},
      {"suite_value", {"check", "--suite", "enormous"}},
      {"color_value", {"--color", "purple", "check"}},
      {"case_timeout_negative", {"check", "--case-timeout", "-1"}},
      {"case_timeout_text", {"check", "--case-timeout", "soon"}},
      {"worker_timeout_zero", {"check", "--worker-timeout", "0"}},
      {"plugin_build_timeout_zero", {"check", "--plugin-build-timeout", "0"}},
      {"plugin_build_timeout_text", {"check", "--plugin-build-timeout", "forever"}},
      {"plugin_build_timeout_nan", {"check", "--plugin-build-timeout", "nan"}},
      {"cache_lock_timeout_negative", {"check", "--cache-lock-timeout", "-5"}},
      {"cache_lock_timeout_empty", {"check", "--cache-lock-timeout", ""}},
      {"restarts_out_of_range", {"check", "--max-worker-restarts", "99999"}},
      {"repeat_zero", {"check", "--repeat", "0"}},
      {"repeat_text", {"check", "--repeat", "many"}},
      {"repeat_huge", {"check", "--repeat", "99999999999999999999"}},
      {"warmup_zero", {"check", "--warmup", "0"}},
      {"probe_unknown", {"check", "--probe", "gpu"}, false},
      {"probe_fault_is_internal", {"check", "--probe", "fault"}, false},
      {"variant_unknown_flag", {"check", "--variant", "flash[bogus]"}},
      {"variant_unclosed", {"check", "--variant", "flash[ck"}},
      {"variant_unknown_backend", {"check", "--variant", "flahs"}},
      {"variant_not_in_probe",
       {"check", "--probe", "reference", "--variant", "math", "--case", "l=8,d=8"}, false},
      {"variant_gpu_only_on_cpu",
       {"check", "--probe", "libtorch", "--device", "cpu", "--variant", "flash[ck]", "--case",
        "l=8,d=8"},
       false},
      {"device_unknown", {"check", "--device", "gpu7"}},
      {"device_negative", {"check", "--device", "cuda:-1"}},
      {"device_not_in_inventory", {"check", "--device", "cuda:9"}},
      {"device_not_in_inventory_among_cpu", {"check", "--device", "cpu,cuda:0,cuda:9"}},
      {"dtype_unknown", {"check", "--dtype", "fp8"}},
      {"dtype_no_planned_case", {"check", "--dtype", "bf16"}},
      {"dtype_empty_item", {"check", "--dtype", "fp32,half8"}},
      {"progress_every_zero", {"check", "--progress-every", "0"}},
      {"repro_report_flag_not_taken", {"repro", "fp16-b1-h8-q128-k128-d64", "--junit", "x.xml"},
       false},
      {"devices_fail_on_not_taken", {"devices", "--fail-on", "crash"}, false},
      {"fail_on_unknown", {"check", "--fail-on", "sometimes"}},
      {"tolerance_text", {"check", "--tolerance", "bf16=x"}},
      {"tolerance_negative", {"check", "--tolerance", "bf16=-1:0.1"}},
      {"tolerance_dtype", {"check", "--tolerance", "fp8=0.1:0.1"}},
      {"target_zero_batch", {"check", "--target", "b=0"}},
      {"cases_suite", {"cases", "--suite", "nope"}, false},
      {"repro_bad_id", {"repro", "not-a-case-id"}, false},
      {"repro_no_id", {"repro"}, false},
      // --case strings
      {"case_empty", {"check", "--case", ""}},
      {"case_key_without_value", {"check", "--case", "dtype"}},
      {"case_empty_value", {"check", "--case", "dtype="}},
      {"case_value_without_key", {"check", "--case", "=3"}},
      {"case_unknown_key", {"check", "--case", "colour=red"}},
      {"case_b_zero", {"check", "--case", "b=0"}},
      {"case_b_negative", {"check", "--case", "b=-1"}},
      {"case_h_zero", {"check", "--case", "h=0"}},
      {"case_d_zero", {"check", "--case", "dtype=fp16,d=0"}},
      {"case_l_negative", {"check", "--case", "l=-8"}},
      {"case_l_past_guard", {"check", "--case", "l=1000000000"}},
      {"case_l_past_dim", {"check", "--case", "l=1048577"}},
      {"case_elements_past_guard", {"check", "--case", "b=1024,h=1024,l=1024,d=1024"}},
      {"case_overflow", {"check", "--case", "b=99999999999999999999"}},
      {"case_fraction", {"check", "--case", "d=1.5"}},
      {"case_dtype", {"check", "--case", "dtype=fp8"}},
      {"case_gqa_indivisible", {"check", "--case", "hq=8,hkv=3"}},
      {"case_causal_value", {"check", "--case", "causal=2"}},
      {"case_mask_value", {"check", "--case", "mask=maybe"}},
      {"case_layout_value", {"check", "--case", "layout=diagonal"}},
      {"case_seed_negative", {"check", "--case", "seed=-1"}},
      {"case_in_cases_command", {"cases", "--case", "d=0"}, false},
      // case files
      {"case_file_missing", {"check", "--case-file", "@/missing.jsonl"}},
      {"case_file_directory", {"check", "--case-file", "@"}},
      {"case_file_empty", {"check", "--case-file", "@/empty.jsonl"}},
      {"case_file_only_comments", {"check", "--case-file", "@/comments.jsonl"}},
      {"case_file_not_json", {"check", "--case-file", "@/notjson.jsonl"}},
      {"case_file_array", {"check", "--case-file", "@/array.jsonl"}},
      {"case_file_string", {"check", "--case-file", "@/string.jsonl"}},
      {"case_file_wrong_type", {"check", "--case-file", "@/wrongtype.jsonl"}},
      {"case_file_fraction", {"check", "--case-file", "@/fraction.jsonl"}},
      {"case_file_number_overflow", {"check", "--case-file", "@/overflow.jsonl"}},
      {"case_file_bad_value", {"check", "--case-file", "@/badvalue.jsonl"}},
      {"case_file_unknown_key", {"check", "--case-file", "@/unknownkey.jsonl"}},
      {"case_file_bad_dtype", {"check", "--case-file", "@/baddtype.jsonl"}},
      {"case_file_second_line_bad", {"check", "--case-file", "@/secondbad.jsonl"}},
      {"case_file_deeply_nested", {"check", "--case-file", "@/nested.jsonl"}},
      {"case_file_binary", {"check", "--case-file", "@/binary.jsonl"}},
      {"case_file_high_bytes", {"check", "--case-file", "@/highbytes.jsonl"}},
      {"case_file_1gb_sparse", {"check", "--case-file", "@/huge.jsonl"}},
      {"case_file_dev_zero", {"check", "--case-file", "/dev/zero"}},
      {"case_file_in_cases_command", {"cases", "--case-file", "@/notjson.jsonl"}, false},
      // known-issue files
      {"issues_missing", {"check", "--known-issues", "@/no-such-issues.json"}},
      {"issues_not_json", {"check", "--known-issues", "@/issues-notjson.json"}},
      {"issues_object_not_array", {"check", "--known-issues", "@/issues-object.json"}},
      {"issues_bad_regex", {"check", "--known-issues", "@/issues-badregex.json"}},
      {"issues_id_type", {"check", "--known-issues", "@/issues-idtype.json"}},
      {"issues_match_type", {"check", "--known-issues", "@/issues-matchtype.json"}},
      {"issues_arch_type", {"check", "--known-issues", "@/issues-archtype.json"}},
      {"issues_unknown_status", {"check", "--known-issues", "@/issues-status.json"}},
      {"issues_unknown_key", {"check", "--known-issues", "@/issues-unknownkey.json"}},
      {"issues_array_of_strings", {"check", "--known-issues", "@/issues-strings.json"}},
      {"issues_number_overflow", {"check", "--known-issues", "@/issues-overflow.json"}},
      {"issues_head_dim_type", {"check", "--known-issues", "@/issues-dim.json"}},
      {"issues_empty", {"check", "--known-issues", "@/empty.jsonl"}},
      {"issues_1gb_sparse", {"check", "--known-issues", "@/huge-issues.json"}},
      {"issues_fifo", {"check", "--known-issues", "@/fifo"}},
      {"issues_dev_zero", {"check", "--known-issues", "/dev/zero"}},
      {"issues_in_known_issues_command",
       {"known-issues", "--no-devices", "--known-issues", "@/issues-badregex.json"},
       false},
      // --model configs
      {"model_missing", {"check", "--model", "@/no-such-config.json"}},
      {"model_directory", {"check", "--model", "@"}},
      {"model_not_json", {"check", "--model", "@/model-notjson.json"}},
      {"model_json_array", {"check", "--model", "@/model-array.json"}},
      {"model_no_heads", {"check", "--model", "@/model-no-heads.json"}},
      {"model_heads_not_dividing_hidden", {"check", "--model", "@/model-heads-hidden.json"}},
      {"model_kv_heads_not_dividing", {"check", "--model", "@/model-kv-heads.json"}},
      {"model_zero_heads", {"check", "--model", "@/model-zero-heads.json"}},
      {"model_negative_positions", {"check", "--model", "@/model-negative-positions.json"}},
      {"model_unknown_dtype", {"check", "--model", "@/model-dtype.json"}},
      {"model_window_zero_in_use", {"check", "--model", "@/model-window-zero.json"}},
      {"model_binary", {"check", "--model", "@/binary.jsonl"}},
      {"model_max_len_zero", {"check", "--model", "@/model-ok.json", "--max-len", "0"}},
      {"model_max_len_negative", {"check", "--model", "@/model-ok.json", "--max-len", "-5"}},
      {"model_in_cases_command", {"cases", "--model", "@/model-kv-heads.json"}, false},
      {"model_max_len_in_cases_command",
       {"cases", "--model", "@/model-ok.json", "--max-len", "0"},
       false},
      // outputs
      {"json_dir_missing", {"check", "--json", "/nonexistent-sdpa-dir/r.json"}},
      {"json_is_directory", {"check", "--json", "@"}},
      {"json_under_a_file", {"check", "--json", "/proc/version/r.json"}},
      {"json_in_proc", {"check", "--json", "/proc/sdpa-doctor-r.json"}},
      {"markdown_dir_missing", {"check", "--markdown", "/nonexistent-sdpa-dir/r.md"}},
      {"junit_dir_missing", {"check", "--junit", "/nonexistent-sdpa-dir/r.xml"}},
      {"log_file_under_a_file", {"check", "--log-file", "/proc/version/x.log"}},
      {"run_dir_under_a_file", {"check", "--run-dir", "/proc/version/run"}},
      // --python
      {"python_missing", {"check", "--probe", "python", "--python", "@/no-such-python"}},
      {"python_not_executable", {"check", "--probe", "python", "--python", "@/plain.txt"}},
      {"python_directory", {"check", "--probe", "python", "--python", "@"}},
      {"python_not_on_path", {"check", "--probe", "python", "--python", "no-such-python-sdpa"}},
      // the libtorch probe takes its torch from --python: a missing one is not the built-in torch
      {"python_missing_for_libtorch",
       {"check", "--probe", "libtorch", "--python", "/nonexistent/python", "--case",
        "dtype=fp32,b=1,h=1,l=8,d=8"},
       false},
      // --sysfs-root
      {"sysfs_root_missing", {"check", "--sysfs-root", "@/no-such-root"}},
      {"sysfs_root_is_a_file", {"check", "--sysfs-root", "@/empty.jsonl"}},
      {"devices_sysfs_root_missing", {"devices", "--sysfs-root", "@/no-such-root"}, false},
      // report JOURNAL and check --resume
      {"report_missing_journal", {"report", "@/no-such-run"}, false},
      {"report_not_a_journal", {"report", "@/notjson.jsonl"}, false},
      {"report_empty_journal", {"report", "@/empty.jsonl"}, false},
      {"report_directory_without_journal", {"report", "@"}, false},
      {"report_no_argument", {"report"}, false},
      // a journal is a regular file: a FIFO or a device would never end
      {"report_journal_fifo", {"report", "@/fifo"}, false},
      {"report_journal_dev_zero", {"report", "/dev/zero"}, false},
      {"resume_journal_fifo", {"check", "--resume", "@/fifo-run"}, false},
      {"resume_journal_startup_timeout_negative", {"check", "--resume", "@/run-startup-negative"},
       false},
      {"resume_journal_repeat_zero", {"check", "--resume", "@/run-repeat-zero"}, false},
      {"resume_journal_interpreter_in_open_dir", {"check", "--resume", "@/run-open"}, false},
      {"resume_missing_dir", {"check", "--resume", "@/no-such-run"}, false},
      {"resume_without_journal", {"check", "--resume", "@"}, false},
      {"resume_with_plan_option", {"check", "--resume", "@", "--variant", "math"}, false},
      {"shrink_budget_bad", {"check", "--shrink-budget", "lots"}},
      // a test's planted fault left in the environment: malformed is refused, never blamed on a backend
      {"test_fault_unknown_action", {"check"}, true, {{"SDPA_DOCTOR_TEST_FAULT", "action=explode"}}},
      {"test_fault_not_key_value", {"check"}, true, {{"SDPA_DOCTOR_TEST_FAULT", "variant"}}},
      {"test_fault_bad_condition",
       {"check"}, true, {{"SDPA_DOCTOR_TEST_FAULT", "when=d>x,action=nan"}}},
      // control characters in what the user typed or wrote: still one line, the bytes escaped
      {"flag_with_newline", {"check", "--bo\ngus"}},
      {"case_with_newline", {"check", "--case", "dtype=fp16\nb=1"}},
      {"case_with_carriage_return", {"check", "--case", "dtype=fp\r16"}},
      {"case_with_terminal_escape", {"check", "--case", "dtype=\x1b[2J\x1b[31mred"}},
      {"variant_with_newline", {"check", "--variant", "fla\nsh"}},
      {"device_with_newline", {"check", "--device", "cuda:\n0"}},
      {"json_path_with_newline", {"check", "--json", "/nonexistent-sdpa-dir\n/r.json"}},
      {"python_path_with_newline", {"check", "--probe", "python", "--python", "@/no\nsuch"}},
      {"case_file_value_with_newline", {"check", "--case-file", "@/newline.jsonl"}},
      {"issues_regex_with_newline", {"check", "--known-issues", "@/issues-newline.json"}},
  };
}

class BadInput : public ::testing::TestWithParam<Row> {};

TEST_P(BadInput, IsOneLineUsageErrorWithExit2) {
  const Row& row = GetParam();
  make_edited_runs_named_in(row.argv);
  const auto [run, seconds, shown] =
      run_row(row_argv(row.argv, fixture_dir(), row.small_plan), row.env);
  EXPECT_EQ(usage_error_problem(run), "") << shown << "\nexit " << run.exit_code << "\nstderr:\n"
                                          << run.err.substr(0, 1000);
  // Inputs are checked before any worker starts.
  EXPECT_LT(seconds, 20.0) << shown;
}

INSTANTIATE_TEST_SUITE_P(Table, BadInput, ::testing::ValuesIn(rows()),
                         [](const auto& row_info) { return std::string(row_info.param.name); });

// ---- inputs that are findings, not usage errors ----------------------------------------------

const std::vector<std::string> k_python_plan = {"--probe", "python", "--variant", "math",
                                                "--case", "dtype=fp32,b=1,h=1,l=8,d=8",
                                                "--max-worker-restarts", "1"};

nlohmann::json run_json_report(const std::vector<std::string>& extra, sdpa_test::RunResult& run,
                               const sdpa_test::TempDir& dir, int timeout_s = 120) {
  std::vector<std::string> argv = {sdpa_test::doctor(), "check", "--json", dir.file("r.json"),
                                   "--run-dir", dir.file("run")};
  argv.insert(argv.end(), extra.begin(), extra.end());
  sdpa_test::RunOptions options;
  options.timeout_s = timeout_s;
  run = run_binary(argv, options);
  return nlohmann::json::parse(sdpa_test::read_file(dir.file("r.json")), nullptr, false);
}

// The python probe's results, which must be exactly the planned case, once, with a status that
// says the probe did not measure anything (never a pass, never missing).
void expect_python_case_failed(const nlohmann::json& report, const std::string& allowed) {
  ASSERT_TRUE(report.is_object()) << "no JSON report";
  int n = 0;
  for (const auto& r : report["results"]) {
    if (r.value("probe", "") != "python") continue;
    ++n;
    EXPECT_NE(allowed.find(r.value("status", "?")), std::string::npos)
        << r.dump() << " (expected one of " << allowed << ")";
    EXPECT_FALSE(r.value("reason", "").empty()) << r.dump();
  }
  EXPECT_EQ(n, 1) << report["results"].dump();
}

// A check whose --python is `script`: refused as no Python interpreter (exit 2, said on stderr),
// never a crash. Its JSON report.
nlohmann::json run_refused_python(const std::string& script, const sdpa_test::TempDir& dir,
                                  sdpa_test::RunResult& run) {
  const std::string fake = dir.file("python");
  sdpa_hardening::make_executable(fake, script);
  std::vector<std::string> extra = k_python_plan;
  extra.insert(extra.end(), {"--python", fake});
  const auto report = run_json_report(extra, run, dir);
  EXPECT_EQ(crash_problem(run), "") << run.err;
  // Not a Python: the user's setup (exit 2, the cell skipped with the reason), not a backend error.
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("not a Python interpreter"), std::string::npos) << run.err;
  return report;
}

TEST(BadPython, ScriptPrintingGarbageIsAFindingNotACrash) {
  sdpa_test::TempDir dir;
  sdpa_test::RunResult run;
  // Garbage on stdout, on stderr and on the results fd, then a clean exit without `bye`.
  const auto report = run_refused_python("#!/bin/sh\n"
                                         "fd=\nwhile [ $# -gt 0 ]; do [ \"$1\" = --results-fd ] && "
                                         "fd=$2; shift; done\n"
                                         "echo 'Traceback? {{{ garbage'\n"
                                         "printf '\\001\\002\\377 more garbage\\n' >&2\n"
                                         "[ -n \"$fd\" ] && "
                                         "eval \"printf '{not json\\\\n' >&$fd\"\n"
                                         "exit 0\n",
                                         dir, run);
  expect_python_case_failed(report, "skipped");
}

TEST(BadPython, NothingARefusedInterpreterPrintsIsUsed) {
  sdpa_test::TempDir dir;
  sdpa_test::RunResult run;
  // What the pre-flight reads from a torch, GPUs included, from a script that is no Python.
  const auto report =
      run_refused_python("#!/bin/sh\n"
                         "echo 'sdpa-doctor-preflight gpus "
                         "[{\"index\":0,\"name\":\"AMD GPU\",\"arch\":\"gfx1201\"}]'\n"
                         "echo 'sdpa-doctor-preflight hip-runtimes "
                         "[\"/opt/rocm/lib/libamdhip64.so\"]'\n"
                         "exit 0\n",
                         dir, run);
  ASSERT_TRUE(report.is_object()) << "no JSON report";
  // Its words are quoted in the error, never taken for a device or a planned cell.
  EXPECT_EQ(report["inventory"].dump().find("gfx1201"), std::string::npos) << report["inventory"];
  EXPECT_EQ(report["targets"], nlohmann::json::array({"cpu"})) << report["targets"];
  for (const auto& r : report["results"]) EXPECT_EQ(r.value("device", ""), "cpu") << r.dump();
  EXPECT_EQ(run.out.find("1 AMD GPU found"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("cuda:0"), std::string::npos) << run.out;
}

TEST(BadPython, InterpreterHangingAtStartIsUnusable) {
  sdpa_test::TempDir dir;
  const std::string fake = dir.file("python");
  sdpa_hardening::make_executable(fake, "#!/bin/sh\nexec sleep 1000\n");
  std::vector<std::string> extra = k_python_plan;
  extra.insert(extra.end(), {"--python", fake, "--case-timeout", "2", "--worker-timeout", "3"});
  const auto start = std::chrono::steady_clock::now();
  sdpa_test::RunResult run;
  const auto report = run_json_report(extra, run, dir);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(crash_problem(run), "") << run.err;
  // A --python that never answers is the user's input, said once: not TIMEOUT cells.
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("did not return in 3 s: a wedged GPU or driver does this"),
            std::string::npos)
      << run.err;
  expect_python_case_failed(report, "skipped");
  // The worker deadline once, not the default minute.
  EXPECT_LT(seconds, 30.0);
  EXPECT_TRUE(sdpa_hardening::processes_with_cmdline(dir.path()).empty());
}

// A config that turns the sliding window off may leave its size at 0: that is no window.
TEST(ModelConfig, WindowOfZeroTurnedOffIsNoWindow) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("config.json"),
                        R"({"num_attention_heads":4,"hidden_size":256,)"
                        R"("max_position_embeddings":64,"sliding_window":0,)"
                        R"("use_sliding_window":false})");
  const auto run = run_binary({sdpa_test::doctor(), "cases", "--model", dir.file("config.json")});
  EXPECT_EQ(crash_problem(run), "") << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(run.out.empty());
  EXPECT_EQ(run.out.find("win"), std::string::npos) << run.out;
}

// A captured tree from a bug report can hold anything: loops, FIFOs, huge and unreadable files.
void make_hostile_tree(const std::string& root) {
  const std::string topo = root + "/sys/class/kfd/kfd/topology";
  fs::create_directories(topo + "/nodes/1/mem_banks/0");
  fs::create_directories(topo + "/nodes/2");
  fs::create_directories(root + "/sys/class/drm/renderD128");
  fs::create_directories(root + "/sys/module/amdgpu");
  fs::create_directories(root + "/sys/bus/pci/devices");
  // Node 0: its properties is a symlink loop.
  fs::create_directories(topo + "/nodes/0");
  fs::create_symlink("properties.b", topo + "/nodes/0/properties");
  fs::create_symlink("properties", topo + "/nodes/0/properties.b");
  // Node 1: a 4 GiB properties file (sparse: NUL bytes) and a FIFO as its bank's properties.
  sdpa_hardening::make_sparse_file(topo + "/nodes/1/properties", 4LL << 30);
  ::mkfifo((topo + "/nodes/1/mem_banks/0/properties").c_str(), 0644);
  // Node 2: a directory where a file belongs, and a gpu_id that points at /dev/zero.
  fs::create_directories(topo + "/nodes/2/properties");
  fs::create_symlink("/dev/zero", topo + "/nodes/2/gpu_id");
  // Node 3: a symlink back up the tree (a directory loop).
  fs::create_symlink("..", topo + "/nodes/3");
  // The drm device link loops, the module version is unreadable (a directory), and the PCI
  // directory is a loop too.
  fs::create_symlink("device", root + "/sys/class/drm/renderD128/device");
  fs::create_directories(root + "/sys/module/amdgpu/version");
  fs::create_symlink("0000:03:00.0", root + "/sys/bus/pci/devices/0000:03:00.0");
  fs::create_directories(root + "/proc/sys/kernel");
  sdpa_hardening::make_sparse_file(root + "/proc/sys/kernel/osrelease", 1LL << 30);
}

TEST(HostileSysfs, DevicesReportsFindingsAndSurvives) {
  sdpa_test::TempDir dir;
  make_hostile_tree(dir.file("root"));
  sdpa_test::RunOptions options;
  options.timeout_s = 60;
  const auto run = run_binary({sdpa_test::doctor(), "devices", "--sysfs-root", dir.file("root"),
                               "--no-hip", "--no-rocm-smi", "--json", "-"},
                              options);
  EXPECT_EQ(crash_problem(run), "") << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const auto j = nlohmann::json::parse(run.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << run.out.substr(0, 2000);
  const std::string text = j.dump();
  EXPECT_NE(text.find("sysfs-"), std::string::npos) << "no sysfs finding: " << text;
  EXPECT_NE(text.find("symbolic links"), std::string::npos) << "the loop is not named: " << text;
}

TEST(HostileSysfs, CheckRunsItsPlanAnyway) {
  sdpa_test::TempDir dir;
  make_hostile_tree(dir.file("root"));
  std::vector<std::string> extra = {"--sysfs-root", dir.file("root")};
  extra.insert(extra.end(), k_small_plan.begin(), k_small_plan.end());
  sdpa_test::RunResult run;
  const auto report = run_json_report(extra, run, dir);
  EXPECT_EQ(crash_problem(run), "") << run.err;
  EXPECT_EQ(run.exit_code, 0) << run.err;
  ASSERT_TRUE(report.is_object());
  ASSERT_EQ(report["results"].size(), 1u) << report["results"].dump();
  EXPECT_EQ(report["results"][0].value("status", ""), "pass") << report["results"][0].dump();
}

} // namespace

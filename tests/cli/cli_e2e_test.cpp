// The built binary, run for real: version, help, and bad flags.
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

using sdpa_test::doctor;
using sdpa_test::run_binary;

TEST(CliE2E, VersionListsEveryDependency) {
  auto r = run_binary({doctor(), "--version"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* dep : {"sdpa-doctor", "HIP runtime", "ROCm SMI", "LibTorch", "fmt", "spdlog",
                          "CLI11"})
    EXPECT_NE(r.out.find(dep), std::string::npos) << dep << "\n" << r.out;
  auto sub = run_binary({doctor(), "version"});
  EXPECT_EQ(sub.exit_code, 0);
  EXPECT_EQ(sub.out, r.out);
}

TEST(CliE2E, HelpDocumentsSubcommandsAndExitCodes) {
  auto r = run_binary({doctor(), "--help"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* word : {"check", "devices", "cases", "self-test", "Exit codes", "--json",
                           "--junit", "--markdown", "--color"})
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
}

TEST(CliE2E, BadFlagIsOneLineAndExitTwo) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--bogus"},
                                        {"--color", "purple"},
                                        {"devices", "--no-such-flag"},
                                        {"no-such-subcommand"},
                                        {"check", "--mode", "jit"},
                                        {"check", "--mode", "eager,traced"},
                                        {"check", "--compile", "tvm"},
                                        {"repro", "fp16-b1-h8-q128-k128-d64", "--mode", "jit"}}) {
    args.insert(args.begin(), doctor());
    auto r = run_binary(args);
    EXPECT_EQ(r.exit_code, 2) << args[1] << ": " << r.err;
    EXPECT_EQ(r.err.rfind("sdpa-doctor: error: ", 0), 0u) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_LE(sdpa_test::line_count(r.err), 2) << r.err;
  }
}

// With no subcommand `check` runs, so check's flags work at the top level, as --help says.
TEST(CliE2E, CheckFlagsWorkWithoutTheSubcommand) {
  sdpa_test::TempDir dir;
  auto r = run_binary({doctor(), "--probe", "reference", "--variant", "ref-math", "--case",
                       "dtype=fp32,b=1,h=1,l=8,d=8", "-q", "--json", dir.file("r.json"),
                       "--run-dir", dir.file("run")});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string report = sdpa_test::read_file(dir.file("r.json"));
  EXPECT_NE(report.find("\"ref-math\""), std::string::npos);
  EXPECT_NE(report.find("fp32-b1-h1-q8-k8-d8"), std::string::npos);
  // A subcommand named after global flags is still that subcommand.
  auto devices = run_binary({doctor(), "-q", "devices", "--json", dir.file("d.json")});
  EXPECT_NE(devices.exit_code, 2) << devices.err;
}

// `cases --model` prints the shapes each shipped config plans, byte for byte as in its golden.
TEST(CliE2E, ModelConfigsPlanTheirGoldenShapes) {
  for (const char* model : {"llama-3-8b", "qwen2.5-7b", "mistral-7b-v0.1"}) {
    auto r = run_binary({doctor(), "cases", "--model",
                         sdpa_test::source_path(std::string("data/models/") + model + ".json")});
    EXPECT_EQ(r.exit_code, 0) << model << ": " << r.err;
    EXPECT_EQ(r.out, sdpa_test::read_file(sdpa_test::source_path(
                         std::string("tests/cli/golden/") + model + ".cases.txt")))
        << model;
  }
}

// A whole check of a model's shapes on the CPU, the model named in the console and the JSON.
TEST(CliE2E, CheckModelRunsOnTheCpuAndNamesTheModel) {
  sdpa_test::TempDir dir;
  sdpa_test::RunOptions options;
  options.timeout_s = 300;
  auto r = run_binary({doctor(), "check", "--model",
                       sdpa_test::source_path("data/models/llama-3-8b.json"), "--max-len", "64",
                       "--probe", "reference", "--json", dir.file("r.json")},
                      options);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("suite model"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  model     meta-llama/Meta-Llama-3-8B (32 heads, 8 kv heads, d=128)\n"),
            std::string::npos)
      << r.out;
  const std::string json = sdpa_test::read_file(dir.file("r.json"));
  EXPECT_NE(json.find("\"model\": \"meta-llama/Meta-Llama-3-8B (32 heads"), std::string::npos);
  EXPECT_NE(json.find("\"suite\": \"model\""), std::string::npos);
  EXPECT_NE(json.find("bf16-b1-h32:8-q64-k64-d128-causal"), std::string::npos);
  EXPECT_NE(json.find("bf16-b1-h32:8-q1-k64-d128"), std::string::npos);
}

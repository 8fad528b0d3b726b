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
                                        {"no-such-subcommand"}}) {
    args.insert(args.begin(), doctor());
    auto r = run_binary(args);
    EXPECT_EQ(r.exit_code, 2) << args[1] << ": " << r.err;
    EXPECT_EQ(r.err.rfind("sdpa-doctor: error: ", 0), 0u) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_LE(sdpa_test::line_count(r.err), 2) << r.err;
  }
}

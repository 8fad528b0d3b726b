// Golden files for every renderer over the fixed report models. Regenerate with
// SDPA_DOCTOR_UPDATE_GOLDEN=1 after an intended change, then review the diff.
#include "fixtures.hpp"

#include "report/report.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>

using namespace sdpa_doctor;

namespace {

struct Format {
  std::string suffix;
  std::function<std::string(const Report&)> render;
};

const std::vector<Format>& formats() {
  static const std::vector<Format> k_formats = {
      {"console.txt", [](const Report& r) { return report::render_console(r, {false, true, 100}); }},
      {"console-ascii-60.txt",
       [](const Report& r) { return report::render_console(r, {false, false, 60}); }},
      {"json", [](const Report& r) { return report::render_json(r); }},
      {"md", [](const Report& r) { return report::render_markdown(r); }},
      {"junit.xml", [](const Report& r) { return report::render_junit(r); }},
  };
  return k_formats;
}

bool updating() {
  const char* v = std::getenv("SDPA_DOCTOR_UPDATE_GOLDEN");
  return v && *v && std::string(v) != "0";
}

} // namespace

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, MatchesFile) {
  const std::string name = GetParam();
  for (const auto& fixture : sdpa_fixtures::all_fixtures()) {
    if (fixture.name != name) continue;
    for (const Format& f : formats()) {
      const std::string path = sdpa_test::source_path("tests/report/golden/" + name + "." + f.suffix);
      const std::string actual = f.render(fixture.report);
      if (updating()) {
        sdpa_test::write_file(path, actual);
        continue;
      }
      ASSERT_TRUE(std::filesystem::exists(path))
          << path << " is missing; run with SDPA_DOCTOR_UPDATE_GOLDEN=1";
      EXPECT_EQ(sdpa_test::read_file(path), actual)
          << "rendering differs from " << path << " (SDPA_DOCTOR_UPDATE_GOLDEN=1 to accept)";
    }
    return;
  }
  FAIL() << "no fixture " << name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden,
                         ::testing::Values("crash_known_issue", "timeout_mismatch",
                                           "all_unsupported", "no_gpu", "budget_spent"));

// `known-issues` run for real: every shipped entry with its source and the text its failure
// prints, and a user's file merged in with every one of its fields escaped on the terminal.
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <sstream>
#include <vector>

namespace {

using sdpa_test::doctor;
using sdpa_test::run_binary;

// The listing's entries by id: a line of two spaces and a word opens one, deeper lines belong to it.
std::map<std::string, std::vector<std::string>> entries(const std::string& out) {
  std::map<std::string, std::vector<std::string>> by_id;
  std::vector<std::string>* current = nullptr;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("    ", 0) == 0) {
      if (current) current->push_back(line.substr(4));
    } else if (line.rfind("  ", 0) == 0) {
      current = &by_id[line.substr(2)];
    } else {
      current = nullptr;
    }
  }
  return by_id;
}

bool has_line(const std::vector<std::string>& lines, const std::string& want) {
  for (const std::string& l : lines)
    if (l == want) return true;
  return false;
}

TEST(KnownIssuesCommand, ListsEveryShippedEntryWithItsSourceAndItsText) {
  const auto r = run_binary({doctor(), "known-issues", "--no-devices"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto shipped =
      nlohmann::json::parse(sdpa_test::read_file(sdpa_test::source_path("data/known_issues.json")));
  const auto listed = entries(r.out);
  for (const auto& e : shipped) {
    const std::string id = e["id"];
    ASSERT_EQ(listed.count(id), 1u) << id << "\n" << r.out;
    const auto& lines = listed.at(id);
    EXPECT_TRUE(has_line(lines, e["link"].get<std::string>())) << id;
    ASSERT_TRUE(e.contains("verbatim")) << id;
    std::string text = e["verbatim"]["text"];
    for (size_t at; (at = text.find('\n')) != std::string::npos;) text.replace(at, 1, "\\n");
    const bool published = e["verbatim"]["published"];
    EXPECT_TRUE(has_line(lines, std::string("text (") +
                                    (published ? "published" : "not published by the source") +
                                    "): " + text))
        << id;
    const std::string note = e["verbatim"].value("note", "");
    if (!note.empty()) {
      EXPECT_TRUE(has_line(lines, "about the text: " + note)) << id;
    }
  }
}

TEST(KnownIssuesCommand, EscapesEveryFieldOfAUsersFile) {
  sdpa_test::TempDir dir;
  const std::string esc = "\x1b[2J\x1b]0;owned\x07";
  nlohmann::json entry = {
      {"id", "local-" + esc},
      {"title", "title " + esc},
      {"link", "https://example.org/" + esc},
      {"match", {{"archs", {"gfx1201" + esc}}, {"stderr", "boom"}}},
      {"advice", "advice"},
      {"fixed_in", "2.99" + esc},
      {"verbatim",
       {{"text", "boom\nline two " + esc}, {"published", false}, {"note", "note " + esc},
        {"status", "error"}, {"variant", "flash"}, {"case", "fp16-b1-h8-q128-k128-d64"},
        {"arch", "gfx1201"}, {"torch", "2.8.0"}}}};
  sdpa_test::write_file(dir.file("mine.json"), nlohmann::json::array({entry}).dump());
  const auto r = run_binary({doctor(), "known-issues", "--known-issues", dir.file("mine.json"),
                             "--arch", "gfx1201"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x07'), std::string::npos) << r.out;
  const std::string shown = "\\x1b[2J\\x1b]0;owned\\x07";
  const auto listed = entries(r.out);
  ASSERT_EQ(listed.count("local-" + shown), 1u) << r.out;
  const auto& lines = listed.at("local-" + shown);
  EXPECT_TRUE(has_line(lines, "title " + shown)) << r.out;
  EXPECT_TRUE(has_line(lines, "https://example.org/" + shown)) << r.out;
  EXPECT_TRUE(has_line(lines, "fixed in: 2.99" + shown)) << r.out;
  EXPECT_TRUE(has_line(lines, "text (not published by the source): boom\\nline two " + shown))
      << r.out;
  EXPECT_TRUE(has_line(lines, "about the text: note " + shown)) << r.out;
}

} // namespace

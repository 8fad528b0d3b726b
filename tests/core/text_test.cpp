#include "core/text.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <string>
#include <unistd.h>

using sdpa_doctor::escape_to_one_line;
using sdpa_doctor::json_error_text;
using sdpa_doctor::shortened;
using sdpa_doctor::utf8_sequence_length;

TEST(EscapeToOneLine, PrintableTextIsUnchanged) {
  EXPECT_EQ(escape_to_one_line("unknown dtype 'fp8' (fp16, bf16, fp32)"),
            "unknown dtype 'fp8' (fp16, bf16, fp32)");
  EXPECT_EQ(escape_to_one_line(""), "");
}

TEST(EscapeToOneLine, LineBreaksAndTabsAreShownAsEscapes) {
  EXPECT_EQ(escape_to_one_line("a\nb\r\nc\td"), "a\\nb\\r\\nc\\td");
}

TEST(EscapeToOneLine, TerminalControlBytesAreHex) {
  EXPECT_EQ(escape_to_one_line("\x1b[31mred"), "\\x1b[31mred");
  EXPECT_EQ(escape_to_one_line(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(escape_to_one_line("\x7f"), "\\x7f");
}

TEST(EscapeToOneLine, ValidUtf8StaysAndBrokenUtf8IsHex) {
  EXPECT_EQ(escape_to_one_line("gfx1201 \xe2\x9c\x93"), "gfx1201 \xe2\x9c\x93");
  EXPECT_EQ(escape_to_one_line("\xff\xfe"), "\\xff\\xfe");
  EXPECT_EQ(escape_to_one_line("\xe2\x9c"), "\\xe2\\x9c"); // truncated sequence
}

TEST(Utf8SequenceLength, CountsOnlyCompleteSequences) {
  EXPECT_EQ(utf8_sequence_length("a", 0), 1u);
  EXPECT_EQ(utf8_sequence_length("\xc3\xa9", 0), 2u);
  EXPECT_EQ(utf8_sequence_length("\xf0\x9f\x98\x80", 0), 4u);
  EXPECT_EQ(utf8_sequence_length("\xc3", 0), 0u);
  EXPECT_EQ(utf8_sequence_length("\x80", 0), 0u);
}

TEST(EscapeToOneLine, C1ControlsAndBidiOverridesAreShownAsCodepoints) {
  EXPECT_EQ(escape_to_one_line("a\xc2\x9b" "2Jb"), "a\\u009b2Jb"); // CSI as one codepoint
  EXPECT_EQ(escape_to_one_line("x\xe2\x80\xaey"), "x\\u202ey");     // right-to-left override
  EXPECT_EQ(escape_to_one_line("\xe2\x81\xa6z"), "\\u2066z");       // left-to-right isolate
  EXPECT_EQ(escape_to_one_line("caf\xc3\xa9 \xc2\xb7 \xe2\x80\x94"),
            "caf\xc3\xa9 \xc2\xb7 \xe2\x80\x94");
}

TEST(EscapeLines, KeepsLineBreaksAndEscapesTheRest) {
  using sdpa_doctor::escape_lines;
  EXPECT_EQ(escape_lines("one\r\ntwo\x1b[2J\n"), "one\ntwo\\x1b[2J\n");
  EXPECT_EQ(escape_lines("a\rb\tc"), "a\\rb\\tc");
  EXPECT_EQ(escape_lines(""), "");
}

TEST(FitToWidth, CutsBetweenCodepointsAtTheColumn) {
  using sdpa_doctor::display_width;
  using sdpa_doctor::fit_to_width;
  EXPECT_EQ(fit_to_width("abcdef", 4), "abcd");
  EXPECT_EQ(fit_to_width("abc", 10), "abc");
  EXPECT_EQ(fit_to_width("a · b · c", 3), "a ·"); // the dot is two bytes, one column
  EXPECT_EQ(display_width(fit_to_width("[3s] 12/48 cells · cpu libtorch/flash", 20)), 20u);
  EXPECT_EQ(fit_to_width("abc", 0), "");
}

TEST(DumbTerminal, TermDumbOrUnsetTakesNoEscapes) {
  const char* saved = std::getenv("TERM");
  const std::string old = saved ? saved : "";
  setenv("TERM", "dumb", 1);
  EXPECT_TRUE(sdpa_doctor::dumb_terminal());
  setenv("TERM", "xterm-256color", 1);
  EXPECT_FALSE(sdpa_doctor::dumb_terminal());
  unsetenv("TERM");
  EXPECT_TRUE(sdpa_doctor::dumb_terminal());
  if (saved) setenv("TERM", old.c_str(), 1);
}

TEST(TerminalColumns, ZeroWhenNotATerminal) {
  // A pipe is no terminal, whatever $COLUMNS says.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  setenv("COLUMNS", "40", 1);
  EXPECT_EQ(sdpa_doctor::terminal_columns(fds[1]), 0);
  unsetenv("COLUMNS");
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(JsonErrorText, DropsTheLibraryPrefixAndClipsTheQuotedToken) {
  nlohmann::json doc;
  std::string what;
  try {
    doc = nlohmann::json::parse("{\"time_ms\": " + std::string(401, '9') + "}");
  } catch (const nlohmann::json::exception& e) {
    what = e.what();
  }
  ASSERT_NE(what.find("[json.exception."), std::string::npos) << what;
  EXPECT_EQ(json_error_text(what),
            "number overflow parsing '" + std::string(32, '9') + "...'");
  EXPECT_EQ(json_error_text("[json.exception.parse_error.101] parse error at line 1, column 2: "
                            "syntax error while parsing value - invalid literal; last read: 'x'"),
            "parse error at line 1, column 2: syntax error while parsing value - invalid "
            "literal; last read: 'x'");
  EXPECT_EQ(json_error_text("no prefix, 'short' quote"), "no prefix, 'short' quote");
}

TEST(Shortened, KeepsShortTextAndCutsLongText) {
  EXPECT_EQ(shortened("gfx1201"), "gfx1201");
  EXPECT_EQ(shortened(std::string(61, 'x')), std::string(60, 'x') + "...");
  EXPECT_EQ(shortened("abcdef", 3), "abc...");
}

TEST(ReplaceWords, ReplacesEveryOccurrenceInTheOrderGiven) {
  std::string text = "ws1.lab: /home/alice/ws1 alice@ws1.lab";
  sdpa_doctor::replace_words(text, {{"ws1.lab", "<host>"}, {"ws1", "<host>"}, {"alice", "<user>"},
                                    {"", "never"}});
  EXPECT_EQ(text, "<host>: /home/<user>/<host> <user>@<host>");
  std::string loop = "aaa";
  sdpa_doctor::replace_words(loop, {{"a", "aa"}}); // a replacement is not searched again
  EXPECT_EQ(loop, "aaaaaa");
}

TEST(Excerpt, IsPrintableUtf8OnOneLine) {
  using sdpa_doctor::excerpt;
  EXPECT_EQ(excerpt(std::string("a\0b\nc", 5)), "a b c");
  EXPECT_EQ(excerpt("\xff ok"), "? ok");
  EXPECT_EQ(excerpt("\xc3\xa9"), "\xc3\xa9");
  EXPECT_EQ(excerpt(std::string(300, 'x'), 10), std::string(10, 'x') + "...");
}

TEST(SanitizeText, KeepsLinesAndTabsAndReplacesOtherControls) {
  EXPECT_EQ(sdpa_doctor::sanitize_text(std::string("a\tb\nc\0d\x1b", 8)), "a\tb\nc?d?");
  EXPECT_EQ(sdpa_doctor::sanitize_text("\xff"), "?");
}

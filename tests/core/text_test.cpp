#include "core/text.hpp"

#include <gtest/gtest.h>

#include <string>

using sdpa_doctor::escape_to_one_line;
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

TEST(ReplaceWords, ReplacesEveryOccurrenceInTheOrderGiven) {
  std::string text = "ws1.lab: /home/alice/ws1 alice@ws1.lab";
  sdpa_doctor::replace_words(text, {{"ws1.lab", "<host>"}, {"ws1", "<host>"}, {"alice", "<user>"},
                                    {"", "never"}});
  EXPECT_EQ(text, "<host>: /home/<user>/<host> <user>@<host>");
  std::string loop = "aaa";
  sdpa_doctor::replace_words(loop, {{"a", "aa"}}); // a replacement is not searched again
  EXPECT_EQ(loop, "aaaaaa");
}

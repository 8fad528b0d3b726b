#pragma once
// Text helpers for what reaches a terminal: user input and worker output are arbitrary bytes.

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sdpa_doctor {

// Length of the valid UTF-8 sequence starting at text[i], or 0 when there is none.
std::size_t utf8_sequence_length(std::string_view text, std::size_t i);

// The text on one printable line: newline, carriage return and tab become \n \r \t, any other
// control byte or byte that is not valid UTF-8 becomes \xNN, and the C1 controls and the bidi
// overrides (which some terminals obey and which reorder what is shown) become \uNNNN, so an
// error message shows what was typed without breaking the line or driving the terminal.
std::string escape_to_one_line(std::string_view text);

// The value at `key` in a map of facts, versions or environment variables, or "" where it has none.
std::string value_at(const std::map<std::string, std::string>& map, std::string_view key);

// `s` without leading and trailing spaces and tabs (the items of a flag such as --case).
std::string_view trim_blanks(std::string_view s);

// Multi-line text (a stderr tail, a code block) with its line breaks kept ("\r\n" becomes "\n")
// and every line escaped as by escape_to_one_line.
std::string escape_lines(std::string_view text);

// Display columns of UTF-8 text: one per codepoint (the symbols and box characters we emit are
// one column wide).
std::size_t display_width(std::string_view utf8);

// The longest prefix of `line` that takes at most `columns` columns, cut between codepoints.
std::string_view fit_to_width(std::string_view line, std::size_t columns);

// `text` when it is at most `max` bytes, else its first `max` bytes and "...": a value quoted back
// in an error line, which may be as long as the file it came from.
std::string shortened(std::string_view text, std::size_t max = 60);

// A printable, valid-UTF-8, single-line excerpt of at most `max` bytes (then "..."), for reasons
// and logs: bytes that are not UTF-8 become '?', control characters but tab a space.
std::string excerpt(std::string_view text, std::size_t max = 120);

// Valid UTF-8 with NULs and other control characters but tab and newline replaced by '?'.
std::string sanitize_text(std::string_view text);

// A JSON parser's error as a user reads it: nlohmann's "[json.exception.parse_error.101] "
// prefix dropped and a long token it quotes clipped, so "parse error at line 1, column 3: ..."
// or "number overflow parsing '1e999'" stays one short line.
std::string json_error_text(std::string_view what);

// Every occurrence in `text` of each pair's first replaced by its second, pair by pair in the
// order given (put longer words first: "ws1.lab" before "ws1"). Empty words are skipped.
void replace_words(std::string& text,
                   const std::vector<std::pair<std::string, std::string>>& words);

// Whether the locale (LC_ALL, else LC_CTYPE, else LANG) is UTF-8: box drawing needs it.
bool utf8_locale();

// TERM is unset, empty or "dumb": a terminal that takes no escape sequence (no colour, no
// cursor movement), e.g. an editor's shell buffer.
bool dumb_terminal();

// Columns of the terminal on `fd` (its window size, else $COLUMNS); 0 when `fd` is not a
// terminal or neither says.
int terminal_columns(int fd);

} // namespace sdpa_doctor

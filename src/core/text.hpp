#pragma once
// Text helpers for what reaches a terminal: user input and worker output are arbitrary bytes.

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sdpa_doctor {

// Length of the valid UTF-8 sequence starting at text[i], or 0 when there is none.
std::size_t utf8_sequence_length(std::string_view text, std::size_t i);

// The text on one printable line: newline, carriage return and tab become \n \r \t, any other
// control byte or byte that is not valid UTF-8 becomes \xNN, so an error message shows what was
// typed without breaking the line or driving the terminal.
std::string escape_to_one_line(std::string_view text);

// Every occurrence in `text` of each pair's first replaced by its second, pair by pair in the
// order given (put longer words first: "ws1.lab" before "ws1"). Empty words are skipped.
void replace_words(std::string& text,
                   const std::vector<std::pair<std::string, std::string>>& words);

// Whether the locale (LC_ALL, else LC_CTYPE, else LANG) is UTF-8: box drawing needs it.
bool utf8_locale();

} // namespace sdpa_doctor

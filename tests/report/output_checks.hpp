// Checks on rendered text: that no report content can drive a terminal or a Markdown renderer,
// and the console's wrapped lines joined again. Shared by the renderer tests and the end-to-end
// tests of check, diff, merge and report.
#pragma once

#include <set>
#include <string>

namespace sdpa_test {

// Terminal escapes, an HTML injection, a line that would close a code fence and Markdown markup,
// in one string.
extern const std::string k_evil;

// The bytes a terminal would act on (C0 controls but the newline, DEL, C1 controls in UTF-8),
// with their offsets; empty when there are none.
std::string control_bytes(const std::string& text);

// Whether every fenced code block is closed: a fence opens with 3+ backticks at the start of a
// line and closes with a line of at least as many backticks and nothing else. The prose outside
// the fences goes to `prose` (when given), with its inline code spans left out: what is left is
// what a Markdown renderer reads as markup.
bool fences_balanced(const std::string& md, std::string* prose = nullptr);

// The HTML tag names in `prose`.
std::set<std::string> html_tags(const std::string& prose);

// The console text with its wrapped lines joined again (a line break and the indent after it
// become one space).
std::string unwrapped(const std::string& text);

// `md` without its fenced blocks of language `lang` (```python ... ```).
std::string without_fences(std::string md, const std::string& lang);

} // namespace sdpa_test

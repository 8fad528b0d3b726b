#include "output_checks.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <sstream>

namespace sdpa_test {

const std::string k_evil = "\x1b[2J\x1b]0;owned\x07\xc2\x9b"
                           "31m<img src=x onerror=alert(1)>\n```\n"
                           "# heading *bold* [link](javascript:alert(1)) <script>x</script>";

std::string control_bytes(const std::string& text) {
  std::string found;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7F ||
        (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) < 0xA0))
      found += fmt::format("\\x{:02x} at {}; ", c, i);
  }
  return found;
}

namespace {

// The length of the backtick run at text[i].
size_t backticks(const std::string& text, size_t i) {
  size_t n = 0;
  while (i + n < text.size() && text[i + n] == '`') ++n;
  return n;
}

// One line of prose without its code spans; backslash-escaped characters stay literal.
std::string without_code_spans(const std::string& line) {
  std::string out;
  for (size_t i = 0; i < line.size();) {
    if (line[i] == '\\' && i + 1 < line.size()) {
      out += line.substr(i, 2);
      i += 2;
      continue;
    }
    const size_t n = backticks(line, i);
    if (n == 0) {
      out += line[i++];
      continue;
    }
    // A code span ends at the next run of exactly as many backticks.
    size_t close = i + n;
    while (close < line.size() && backticks(line, close) != n)
      close += std::max<size_t>(1, backticks(line, close));
    i = close < line.size() ? close + n : i + n;
  }
  return out;
}

} // namespace

bool fences_balanced(const std::string& md, std::string* prose) {
  size_t open = 0;
  std::istringstream in(md);
  for (std::string line; std::getline(in, line);) {
    const size_t run = backticks(line, 0);
    if (open == 0 && run >= 3) open = run;
    else if (open > 0) open = run >= open && run == line.size() ? 0 : open;
    else if (prose) *prose += without_code_spans(line) + "\n";
  }
  return open == 0;
}

std::set<std::string> html_tags(const std::string& prose) {
  std::set<std::string> tags;
  for (size_t p = 0; (p = prose.find('<', p)) != std::string::npos; ++p) {
    const size_t q = p + 1 + (p + 1 < prose.size() && prose[p + 1] == '/');
    size_t e = q;
    while (e < prose.size() && std::isalpha(static_cast<unsigned char>(prose[e]))) ++e;
    if (e > q) tags.insert(prose.substr(q, e - q));
  }
  return tags;
}

std::string unwrapped(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n') {
      out += text[i];
      continue;
    }
    out += ' ';
    while (i + 1 < text.size() && text[i + 1] == ' ') ++i;
  }
  return out;
}

std::string without_fences(std::string md, const std::string& lang) {
  const std::string open = "```" + lang + "\n";
  for (size_t p; (p = md.find(open)) != std::string::npos;) {
    const size_t close = md.find("\n```\n", p);
    md.erase(p, close == std::string::npos ? std::string::npos : close + 5 - p);
  }
  return md;
}

} // namespace sdpa_test

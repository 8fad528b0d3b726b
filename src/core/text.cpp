#include "core/text.hpp"

#include <fmt/format.h>

#include <cstdlib>

namespace sdpa_doctor {

std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) return 0;
  return n;
}

std::string escape_to_one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = utf8_sequence_length(text, i);
    if (n > 1 || (n == 1 && c >= 0x20 && c != 0x7F)) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out += fmt::format("\\x{:02x}", c);
    ++i;
  }
  return out;
}

bool utf8_locale() {
  for (const char* name : {"LC_ALL", "LC_CTYPE", "LANG"}) {
    const char* v = std::getenv(name);
    if (v && *v) {
      const std::string_view s = v;
      return s.find("UTF-8") != s.npos || s.find("utf8") != s.npos || s.find("UTF8") != s.npos ||
             s.find("utf-8") != s.npos;
    }
  }
  return false;
}

void replace_words(std::string& text,
                   const std::vector<std::pair<std::string, std::string>>& words) {
  for (const auto& [from, to] : words) {
    if (from.empty()) continue;
    for (size_t p = 0; (p = text.find(from, p)) != std::string::npos; p += to.size())
      text.replace(p, from.size(), to);
  }
}

} // namespace sdpa_doctor

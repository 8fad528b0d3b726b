#include "core/text.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <sys/ioctl.h>
#include <unistd.h>

namespace sdpa_doctor {

std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) return 0;
  return n;
}

namespace {

// The codepoint of a valid multi-byte sequence (2 or 3 bytes suffice for what we look for).
char32_t codepoint(std::string_view s) {
  const auto b = [&](std::size_t k) { return char32_t(static_cast<unsigned char>(s[k])); };
  if (s.size() == 2) return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
  if (s.size() == 3) return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  return 0;
}

// C1 controls (U+0080..U+009F: CSI as one codepoint) and the bidi embeddings, overrides and
// isolates that make a terminal show text in another order than it is.
bool invisible_control(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x202A && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

// Printable UTF-8: an invalid byte becomes '?', a control character '?' or (on one line) a
// space; tab always stays, newline where lines are kept.
std::string clean(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t n = utf8_sequence_length(text, i);
    if (n == 0) {
      out += '?';
      ++i;
      continue;
    }
    if (n == 1 && (c < 0x20 || c == 0x7F)) {
      if (c == '\n' && keep_newlines) out += '\n';
      else if (c == '\t') out += '\t';
      else out += keep_newlines ? '?' : ' ';
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return out;
}

} // namespace

std::string value_at(const std::map<std::string, std::string>& map, std::string_view key) {
  const auto it = map.find(std::string(key));
  return it == map.end() ? std::string{} : it->second;
}

std::string_view trim_blanks(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string escape_to_one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t n = utf8_sequence_length(text, i);
    if (n > 1) {
      const std::string_view seq = text.substr(i, n);
      if (const char32_t cp = codepoint(seq); invisible_control(cp))
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
      else
        out.append(seq);
      i += n;
      continue;
    }
    if (n == 1 && c >= 0x20 && c != 0x7F) out += static_cast<char>(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else out += fmt::format("\\x{:02x}", c);
    ++i;
  }
  return out;
}

std::string escape_lines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t start = 0; start < text.size();) {
    std::size_t nl = text.find('\n', start);
    const bool last = nl == std::string_view::npos;
    if (last) nl = text.size();
    std::string_view line = text.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out += escape_to_one_line(line);
    if (!last) out += '\n';
    start = nl + 1;
  }
  return out;
}

std::size_t display_width(std::string_view s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string_view fit_to_width(std::string_view line, std::size_t columns) {
  std::size_t seen = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if ((static_cast<unsigned char>(line[i]) & 0xC0) == 0x80) continue;
    if (seen++ == columns) return line.substr(0, i);
  }
  return line;
}

std::string shortened(std::string_view text, std::size_t max) {
  if (text.size() <= max) return std::string(text);
  return std::string(text.substr(0, max)) + "...";
}

std::string sanitize_text(std::string_view text) { return clean(text, true); }

std::string excerpt(std::string_view text, std::size_t max) {
  bool cut = text.size() > max;
  std::string out = clean(text.substr(0, max), false);
  if (cut) out += "...";
  return out;
}

std::string json_error_text(std::string_view what) {
  constexpr std::string_view k_prefix = "[json.exception.";
  if (what.substr(0, k_prefix.size()) == k_prefix) {
    const auto end = what.find("] ");
    if (end != std::string_view::npos) what.remove_prefix(end + 2);
  }
  // The quoted token (what was last read, the number that overflowed) can be a whole line.
  constexpr std::size_t k_max_quoted = 32;
  std::string out;
  while (!what.empty()) {
    const auto open = what.find('\'');
    const auto close = open == std::string_view::npos ? open : what.find('\'', open + 1);
    if (close == std::string_view::npos) break;
    out.append(what.substr(0, open + 1));
    out += shortened(what.substr(open + 1, close - open - 1), k_max_quoted) + '\'';
    what.remove_prefix(close + 1);
  }
  out.append(what);
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

bool dumb_terminal() {
  const char* term = std::getenv("TERM");
  return !term || !*term || std::string_view(term) == "dumb";
}

int terminal_columns(int fd) {
  if (!::isatty(fd)) return 0;
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS"); columns && *columns) {
    char* end = nullptr;
    const long n = std::strtol(columns, &end, 10);
    if (*end == '\0' && n > 0 && n < 10000) return static_cast<int>(n);
  }
  return 0;
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

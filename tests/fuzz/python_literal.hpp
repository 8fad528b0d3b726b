// Whether a text is one Python literal of the forms the repro script's template takes: a
// double-quoted string of printable ASCII with \" \\ \xNN \uNNNN \UNNNNNNNN escapes, a decimal
// number, True/False/None, or a tuple "(a, b, )" / dict "{k: v, k: v}" of those. Written apart
// from the renderer, so the two do not share a mistake.
#pragma once

#include <cctype>
#include <string_view>

namespace sdpa_fuzz {

class PythonLiteral {
public:
  static bool is_one(std::string_view text) {
    PythonLiteral p{text};
    return p.literal() && p.m_at == text.size();
  }

private:
  explicit PythonLiteral(std::string_view text) : m_text(text) {}

  bool eat(std::string_view token) {
    if (m_text.substr(m_at, token.size()) != token) return false;
    m_at += token.size();
    return true;
  }
  bool hex(int n) {
    for (int i = 0; i < n; ++i, ++m_at)
      if (m_at >= m_text.size() || !std::isxdigit(static_cast<unsigned char>(m_text[m_at])))
        return false;
    return true;
  }
  bool digits() {
    const size_t start = m_at;
    while (m_at < m_text.size() && std::isdigit(static_cast<unsigned char>(m_text[m_at]))) ++m_at;
    return m_at > start;
  }
  bool string() {
    if (!eat("\"")) return false;
    while (m_at < m_text.size()) {
      const unsigned char c = static_cast<unsigned char>(m_text[m_at++]);
      if (c == '"') return true;
      if (c < 0x20 || c >= 0x7f) return false;
      if (c != '\\') continue;
      if (m_at >= m_text.size()) return false;
      const char e = m_text[m_at++];
      if (e == '"' || e == '\\') continue;
      if (e == 'x' ? !hex(2) : e == 'u' ? !hex(4) : e == 'U' ? !hex(8) : true) return false;
    }
    return false;
  }
  bool number() {
    eat("-");
    if (!digits()) return false;
    if (eat(".") && !digits()) return false;
    if (eat("e") || eat("E")) {
      if (!eat("-")) eat("+");
      if (!digits()) return false;
    }
    return true;
  }
  bool tuple() {
    if (!eat("(")) return false;
    while (!eat(")"))
      if (!literal() || !eat(", ")) return false;
    return true;
  }
  bool dict() {
    if (!eat("{")) return false;
    if (eat("}")) return true;
    do {
      if (!string() || !eat(": ") || !literal()) return false;
    } while (eat(", "));
    return eat("}");
  }
  bool literal() {
    if (++m_depth > 8) return false;
    const size_t at = m_at;
    const bool ok = string() || (m_at = at, number()) || (m_at = at, eat("True")) ||
                    eat("False") || eat("None") || (m_at = at, tuple()) || (m_at = at, dict());
    --m_depth;
    return ok;
  }

  std::string_view m_text;
  size_t m_at = 0;
  int m_depth = 0;
};

} // namespace sdpa_fuzz

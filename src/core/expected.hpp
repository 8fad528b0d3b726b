// core/expected: the result type across part boundaries for what fails on real machines.
// Depends on nothing but the standard library.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace sdpa_doctor {

// A failure that a caller can report: one line, no trailing newline.
struct Error {
  std::string message;
};

// Minimal std::expected stand-in (C++23 is not available on the toolchains we support).
template <typename T> class Expected {
public:
  Expected(T value) : m_state(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Error error) : m_state(std::move(error)) {} // NOLINT: implicit by design

  bool has_value() const { return m_state.index() == 0; }
  explicit operator bool() const { return has_value(); }
  T& value() & { return std::get<0>(m_state); }
  const T& value() const& { return std::get<0>(m_state); }
  T&& value() && { return std::get<0>(std::move(m_state)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(m_state); }

private:
  std::variant<T, Error> m_state;
};

inline Error make_error(std::string message) { return Error{std::move(message)}; }

// Thrown for "stop the tool": caught once in run_cli, printed as `sdpa-doctor: error: ...`.
struct Fatal {
  std::string message;
  int exit_code = 2;
};

} // namespace sdpa_doctor

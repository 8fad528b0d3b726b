// probes/protocol_writer: the worker side of protocol v1 (ARCHITECTURE.md): one JSON object per
// line, each with "v":1, written to the results fd with write(2) loops and nothing buffered, so a
// line is on the pipe before the worker touches the next thing (a crash cannot eat it).
// Depends on core only (nlohmann-json for the wire format); never on torch or isolate.
#pragma once

#include "core/case.hpp"
#include "core/model.hpp"
#include "core/status.hpp"

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::probes {

struct ResultEvent {
  std::string case_id;
  Status status = Status::error;
  std::string reason;                 // one line; empty for pass
  Metrics metrics;                    // unset fields and non-finite values are written as null
  std::optional<Tolerance> tolerance; // the tolerance the verdict was judged with
  std::string backend_chosen;         // empty when unknown
  std::vector<std::string> warnings;  // captured library warnings, in order
  std::string canary;                 // "ok" / "failed: <why>"; empty = none ran (not written)
};

class ProtocolWriter {
public:
  // Does not take ownership of `fd`.
  explicit ProtocolWriter(int fd);

  // `worker`: "libtorch", "python", "reference"; versions/facts: free-form string maps.
  bool hello(std::string_view worker, std::string_view device, std::string_view variant,
             const std::map<std::string, std::string>& versions,
             const std::map<std::string, std::string>& facts);
  bool begin(std::string_view case_id);
  bool result(const ResultEvent& event);
  bool bye();

  // False once a write failed (the reader went away): later events are dropped.
  bool ok() const { return m_ok; }

  // The line result() would write, without the trailing newline (for tests and tools).
  static std::string result_line(const ResultEvent& event);

private:
  bool write_line(const std::string& line);

  int m_fd;
  bool m_ok = true;
};

} // namespace sdpa_doctor::probes

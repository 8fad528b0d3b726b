// check/journal_header: what a check's journal keeps of it in its start event, so that `check
// --resume` and `report JOURNAL` decide as the check did: the typed request, and the facts
// measured before any worker ran (host, environment, versions, the device inventory, targets).
#pragma once

#include "check/request.hpp"
#include "core/expected.hpp"
#include "core/model.hpp"

#include <nlohmann/json.hpp>

namespace sdpa_doctor::check {

// 1: the typed request and the measured facts as data. Journals without a format (written before
// it) keep the raw check options and a rendered report; they are still read.
inline constexpr int k_journal_header_format = 1;

struct JournalHeader {
  CheckRequest request;
  Report started;      // the report's header facts; no results
  bool redact = false; // the run was redacted: its journal is, and a resumed run stays so
};

nlohmann::json journal_header_to_json(const JournalHeader& header);

// The header of a journal of either format. A newer format, or one that does not read, is an
// error in one line naming it.
Expected<JournalHeader> read_journal_header(const nlohmann::json& header);

} // namespace sdpa_doctor::check

// Fixed report models for the renderer tests: every field set by hand so the golden files only
// change when a renderer (or the shipped known-issue data that advice adds) changes.
#pragma once

#include "core/model.hpp"

#include <string>
#include <vector>

namespace sdpa_fixtures {

// RX 9070 XT (gfx1201), torch 2.9: flash[ck] dies on the CK SDPA assert (pytorch#188113),
// the rest of its cases are skipped, AOTriton flash and math pass, ref-flash passes.
sdpa_doctor::Report crash_with_known_issue();
// RX 7900 XTX (gfx1100), torch 2.9 / AOTriton 0.11b: flash times out on one case, mem-efficient
// returns NaN and a mismatch, math passes.
sdpa_doctor::Report timeout_and_mismatch();
// RX 6800 XT (gfx1030): every fused case refused ("not compiled for current AMD GPU").
sdpa_doctor::Report all_unsupported();
// No GPU: the CPU probe target only.
sdpa_doctor::Report no_gpu();
// CPU only: libtorch flash aborts on every case until its restart budget is spent (five crashes,
// three cases not run), python flash is wrong on the causal cases; both flash variants shrunk.
sdpa_doctor::Report budget_spent();

// Findings, recommendations, known-issue matches (shipped data/known_issues.json) and the exit
// code, as a check's advice fills them in.
void advise(sdpa_doctor::Report& report);

struct Named {
  std::string name;
  sdpa_doctor::Report report;
};
// All of the above, with findings, recommendations and known-issue matches filled in by advice
// from data/known_issues.json, and the exit code from the default --fail-on.
std::vector<Named> all_fixtures();

} // namespace sdpa_fixtures

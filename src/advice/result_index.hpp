// advice/result_index: the one index of a Report's results that every advice rule and the
// recommendation read, built once per advise() call. Internal to advice; core types only.
#pragma once

#include "advice/advice.hpp"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace sdpa_doctor::advice::detail {

// What one variant did with one case on one device, across the torch probes that ran it.
enum class Outcome { pass, refused, failed, unmeasured };

struct Cell {
  Outcome outcome = Outcome::unmeasured;
  std::optional<double> time_ms; // best median over the probes that passed
  std::string chosen;            // backend the dispatcher reported, for the default variant
};

// variant -> case id -> one result
using ResultsByVariant = std::map<std::string, std::map<std::string, const CaseResult*>>;

// The results of one (device, variant, probe), by status, for the per-variant findings.
struct VariantGroup {
  std::string device, variant;
  Probe probe = Probe::torch;
  Mode mode = Mode::eager;
  std::map<Status, std::vector<const CaseResult*>> by_status;
  std::size_t total = 0;
};

// Everything advice knows about one probe target. `worst` and `reference` hold every result on
// the device; `cells` and `cases` only the torch-probe results in the requested dtypes.
struct DeviceIndex {
  std::string device;
  // Compiled: the index of the device's compiled cells, a target of its own (the eager index
  // never sees them, so a compiled failure never steers the eager advice).
  Mode mode = Mode::eager;
  ResultsByVariant worst;     // non-reference probes: the first non-pass result, else the pass
  ResultsByVariant reference; // the doctor's reference kernels, same rule
  std::vector<std::string> case_order;                      // first-seen order
  std::map<std::string, Case> cases;                        // id -> case
  std::map<std::string, std::map<std::string, Cell>> cells; // variant -> case id -> cell
  std::set<std::string> variants;
  std::string torch;      // torch version of the first torch-probe result that names one
  bool ck_failed = false; // some ck variant failed on this device (any dtype)

  bool is_gpu() const { return device != "cpu"; }
  // nullptr when `variant` did not run case `id` on this device.
  const CaseResult* result(const std::string& variant, const std::string& id) const;
  const Cell* cell(const std::string& variant, const std::string& id) const;
};

struct ResultIndex {
  std::vector<VariantGroup> groups;  // first-seen order over all results
  std::vector<DeviceIndex> devices;  // the targets, then devices first seen in torch-probe results
  std::vector<DeviceIndex> compiled; // the devices with compiled cells, in first-seen order
};

bool is_torch_probe(Probe p);
ResultIndex build_result_index(const Report& report, const AdviceOptions& options);

// The one way advice builds a finding.
Finding make_finding(std::string id, Severity severity, std::string device, std::string message,
                     std::string remedy, std::vector<std::string> case_ids = {});

// Failure and skip findings per (device, variant, probe), in group order.
void variant_findings(const ResultIndex& index, std::vector<Finding>& out);
// Cross-variant findings on one device, one per rule that holds, in rule order.
void device_findings(const DeviceIndex& device, std::vector<Finding>& out);
// The recommendation for one device, or a no-working-configuration finding.
void recommend(const Report& report, const DeviceIndex& device, const AdviceOptions& options,
               AdviceResult& out);
// Where a compiled cell of the device failed: a finding saying whether only compiled cells fail
// (their eager twins pass), and the configuration that makes compiled attention pass, for the
// workload "compiled" (verified by a compiled re-run). Nothing where every compiled cell passed.
void compiled_findings(const DeviceIndex& eager, const DeviceIndex& compiled,
                       std::vector<Finding>& out);
void recommend_compiled(const Report& report, const DeviceIndex& compiled,
                        const AdviceOptions& options, AdviceResult& out);
// Whether any measured cell of the index failed.
bool any_failed(const DeviceIndex& device);

} // namespace sdpa_doctor::advice::detail

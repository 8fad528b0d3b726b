#include "cli/commands.hpp"
#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/status.hpp"
#include "core/variant.hpp"
#include "devices/devices.hpp"
#include "report/compare.hpp"
#include "report/report.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>

namespace sdpa_doctor::cli {

namespace {

struct ReproOptions {
  std::string case_id;
  std::string variant = "default";
  std::string device; // empty: the first device that exists (cuda:0 when a GPU is there, else cpu)
  std::string probe = "python";
  std::string output = "-";
  double atol = 0; // 0 and 0: the script's per-dtype defaults
  double rtol = 0;
  std::string report;             // --report: the device (and variant) that report measured
  bool variant_given = false;     // --variant on the command line wins over the report's
  bool original = false;          // --original: CASE-ID itself, not its shrink's smallest case
};

bool valid_device(const std::string& d) {
  if (d == "cpu") return true;
  if (d.rfind("cuda:", 0) != 0 || d.size() == 5) return false;
  return d.find_first_not_of("0123456789", 5) == std::string::npos;
}

// cuda:0 where the machine has an AMD GPU, else cpu: a script for a device that is not there
// reproduces nothing. Asks sysfs only (no HIP, no ROCm SMI child): a repro costs no enumeration.
std::string first_existing_device() {
  devices::EnumerateOptions eo;
  eo.use_hip = false;
  eo.use_smi = false;
  const DeviceInventory inventory = devices::enumerate_devices(eo);
  for (const Device& d : inventory.devices)
    if (d.index >= 0) return fmt::format("cuda:{}", d.index);
  return "cpu";
}

// The report's cell of `case_id` a repro is most likely wanted for: one of `variant` when it is
// given, a failing one, a torch probe's (the script runs torch), in that order of weight.
report::DigestCell measured_cell(const ReproOptions& o) {
  auto digest = report::read_report_file(o.report);
  if (!digest) throw Fatal{fmt::format("repro: --report {}: {}", o.report, digest.error().message),
                           exit_code::usage};
  const auto weight = [&](const report::DigestCell& c) {
    const bool failed = c.status != Status::pass && c.status != Status::unsupported &&
                        c.status != Status::skipped;
    return 4 * (o.variant_given && c.variant == o.variant) + 2 * failed + (c.probe != "reference");
  };
  const report::DigestCell* chosen = nullptr;
  for (const report::DigestCell& c : digest->cells)
    if (c.case_id == o.case_id && (!chosen || weight(c) > weight(*chosen))) chosen = &c;
  if (!chosen)
    throw Fatal{fmt::format("repro: {} has no result for case {}", o.report, o.case_id),
                exit_code::usage};
  return *chosen;
}

// The smallest failing case the report's shrinking found for `cell`'s failure; "" when none.
std::string smallest_failing_case(const std::string& path, const report::DigestCell& cell) {
  std::ifstream in(path, std::ios::binary);
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  if (!doc.is_object() || !doc.contains("shrinks") || !doc["shrinks"].is_array()) return {};
  for (const nlohmann::json& s : doc["shrinks"]) {
    if (!s.is_object() || s.value("original_case", "") != cell.case_id ||
        s.value("device", "") != cell.device || s.value("variant", "") != cell.variant)
      continue;
    const auto minimal = s.find("minimal_case");
    if (minimal != s.end() && minimal->is_object()) return minimal->value("id", "");
  }
  return {};
}

int run_repro(ReproOptions o) {
  if (!o.report.empty()) {
    const report::DigestCell cell = measured_cell(o);
    if (o.device.empty()) o.device = cell.device;
    if (!o.variant_given && cell.probe != "reference") o.variant = cell.variant;
    // A shrunk failure's script is its smallest failing case: the one to attach to a bug.
    if (const std::string smallest = smallest_failing_case(o.report, cell);
        !o.original && !smallest.empty() && smallest != o.case_id) {
      fmt::print(stderr, "sdpa-doctor: {} on {} shrank to {}: its script follows (--original for "
                         "{} itself)\n",
                 o.case_id, o.device, smallest, o.case_id);
      o.case_id = smallest;
    }
  }
  if (o.device.empty()) o.device = first_existing_device();
  auto kase = parse_case_id(o.case_id);
  if (!kase) throw Fatal{fmt::format("repro: {}", kase.error().message), exit_code::usage};
  auto variant = parse_variant(o.variant);
  if (!variant) throw Fatal{fmt::format("repro: {}", variant.error().message), exit_code::usage};
  if (!valid_device(o.device))
    throw Fatal{fmt::format("repro: invalid device '{}' (cpu or cuda:N)", o.device),
                exit_code::usage};
  auto probe = probe_from_string(o.probe);
  if (!probe) throw Fatal{fmt::format("repro: unknown probe '{}'", o.probe), exit_code::usage};
  if (o.atol < 0 || o.rtol < 0)
    throw Fatal{"repro: --atol and --rtol must not be negative", exit_code::usage};

  CaseResult r;
  r.kase = *kase;
  r.case_id = kase->id();
  r.device = o.device;
  r.variant = variant->name();
  r.probe = *probe;
  r.status = Status::skipped;
  r.reason = "written by `sdpa-doctor repro`, not measured";
  r.tolerance = {o.atol, o.rtol};
  auto written = report::write_atomically(o.output, report::render_repro(r));
  if (!written) throw Fatal{written.error().message, exit_code::internal};
  return exit_code::ok;
}

} // namespace

void setup_repro(CLI::App& app, const GlobalOptions&, Action& action) {
  auto options = std::make_shared<ReproOptions>();
  auto* sub = app.add_subcommand(
      "repro", "Print a standalone Python script (needs only torch) that rebuilds CASE-ID's exact "
               "inputs, runs SDPA under a variant and compares with a float64 reference");
  sub->add_option("case", options->case_id,
                  "Case id as printed in reports, e.g. fp16-b1-h8-q128-k128-d64-causal")
      ->required();
  auto* variant = sub->add_option(
      "--variant", options->variant,
      "Backend and flags, e.g. flash, flash[ck], mem_efficient[aotriton,experimental]")
      ->default_str("default");
  sub->add_option("--report", options->report,
                  "A report of a check: take the device and variant it measured CASE-ID on (a "
                  "failing result first); --device and --variant still win")
      ->type_name("FILE");
  sub->add_flag("--original", options->original,
               "With --report: the script of CASE-ID itself, not of the smallest failing case its "
               "shrinking found");
  sub->add_option("--device", options->device,
                  "cpu or cuda:N (default: the device of --report, else cuda:0 where an AMD GPU "
                  "is found, else cpu)");
  sub->add_option("--atol", options->atol, "Absolute tolerance (default: per dtype)");
  sub->add_option("--rtol", options->rtol, "Relative tolerance (default: per dtype)");
  sub->add_option("-o,--output", options->output, "Write the script to FILE ('-' = stdout)")
      ->type_name("FILE")
      ->default_str("-");
  sub->callback([&action, options, variant] {
    options->variant_given = variant->count() > 0;
    action = [options] { return run_repro(*options); };
  });
}

} // namespace sdpa_doctor::cli

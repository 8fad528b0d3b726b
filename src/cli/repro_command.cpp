#include "cli/commands.hpp"
#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/status.hpp"
#include "core/variant.hpp"
#include "devices/devices.hpp"
#include "report/report.hpp"

#include <fmt/format.h>

#include <cstdio>
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
  eo.use_rocm_smi = false;
  const DeviceInventory inventory = devices::enumerate_devices(eo);
  for (const Device& d : inventory.devices)
    if (d.index >= 0) return fmt::format("cuda:{}", d.index);
  return "cpu";
}

int run_repro(ReproOptions o) {
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
  sub->add_option("--variant", options->variant,
                  "Backend and flags, e.g. flash, flash[ck], mem_efficient[aotriton,experimental]")
      ->default_str("default");
  sub->add_option("--device", options->device,
                  "cpu or cuda:N (default: cuda:0 where an AMD GPU is found, else cpu)");
  sub->add_option("--atol", options->atol, "Absolute tolerance (default: per dtype)");
  sub->add_option("--rtol", options->rtol, "Relative tolerance (default: per dtype)");
  sub->add_option("-o,--output", options->output, "Write the script to FILE ('-' = stdout)")
      ->type_name("FILE")
      ->default_str("-");
  sub->callback([&action, options] { action = [options] { return run_repro(*options); }; });
}

} // namespace sdpa_doctor::cli

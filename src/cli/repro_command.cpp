#include "cli/commands.hpp"
#include "compare/compare.hpp"
#include "core/case.hpp"
#include "core/expected.hpp"
#include "core/io.hpp"
#include "core/model_json.hpp"
#include "core/status.hpp"
#include "core/text.hpp"
#include "core/variant.hpp"
#include "devices/devices.hpp"
#include "report/report.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <optional>

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
  std::string mode;               // --mode eager|compiled; empty: the report's, else eager
  std::string compile;            // --compile: torch.compile's backend; empty: the report's
};

// cuda:0 where the machine has an AMD GPU, else cpu: a script for a device that is not there
// reproduces nothing. Asks sysfs only (no HIP, no ROCm SMI child): a repro costs no enumeration.
std::string first_existing_device() {
  devices::EnumerateOptions eo;
  eo.use_hip = false;
  eo.use_smi = false;
  eo.use_cuda = false;
  eo.use_nvml = false;
  const DeviceInventory inventory = devices::enumerate_devices(eo);
  for (const Device& d : inventory.devices)
    if (d.index >= 0) return fmt::format("cuda:{}", d.index);
  return "cpu";
}

// What --report says of the case: its measured results and its shrinks.
struct MeasuredReport {
  Report report;
  std::vector<Shrink> shrinks;
};

MeasuredReport read_measured(const std::string& path) {
  const auto fail = [&](const std::string& why) {
    return Fatal{fmt::format("repro: --report {}: {}", path, why), exit_code::usage};
  };
  // Read once (a FIFO or stdin has no second reading); the digest reader checks what every
  // reader of reports checks (schema, numbers, types) before the document is read for its results.
  auto text = read_text_file(path, "the file", report::k_max_report_bytes);
  if (!text) throw fail(text.error().message);
  if (auto digest = compare::read_report(*text); !digest) throw fail(digest.error().message);
  const nlohmann::json doc = nlohmann::json::parse(*text, nullptr, false);
  auto measured = report::read_measured_report(doc);
  if (!measured) throw fail(measured.error().message);
  MeasuredReport out{std::move(*measured), {}};
  if (auto s = doc.find("shrinks"); s != doc.end() && s->is_array())
    for (const nlohmann::json& item : *s)
      if (auto shrink = shrink_from_json(item)) out.shrinks.push_back(std::move(*shrink));
  return out;
}

// The report's result of `case_id` a repro is most likely wanted for: one of `variant` when it is
// given, a failing one, a torch probe's (the script runs torch), in that order of weight.
CaseResult measured_result(const ReproOptions& o, const MeasuredReport& m) {
  const auto weight = [&](const CaseResult& r) {
    const bool failed = r.status != Status::pass && r.status != Status::unsupported &&
                        r.status != Status::skipped;
    return 8 * (!o.mode.empty() && to_string(r.mode) == o.mode) +
           4 * (o.variant_given && r.variant == o.variant) + 2 * failed +
           (r.probe != Probe::reference);
  };
  const CaseResult* chosen = nullptr;
  for (const CaseResult& r : m.report.results)
    if (r.case_id == o.case_id && (!chosen || weight(r) > weight(*chosen))) chosen = &r;
  if (!chosen)
    throw Fatal{fmt::format("repro: {} has no result for case {}", o.report,
                            escape_to_one_line(o.case_id)),
                exit_code::usage};
  return *chosen;
}

// The smallest failing case the report's shrinking found for `r`'s failure, if any.
std::optional<Case> smallest_failing_case(const MeasuredReport& m, const CaseResult& r) {
  for (const Shrink& s : m.shrinks)
    if (s.original_case == r.case_id && s.device == r.device && s.variant == r.variant &&
        s.mode == r.mode && s.probe == r.probe && s.minimal)
      return s.minimal;
  return std::nullopt;
}

// The result the script is written for, and the torch.compile backend of a compiled one:
// measured (with --report), else a case never run.
CaseResult requested_result(ReproOptions& o) {
  auto kase = parse_case_id(o.case_id);
  if (!kase) throw Fatal{fmt::format("repro: {}", kase.error().message), exit_code::usage};
  if (o.report.empty()) {
    CaseResult r;
    r.kase = *kase;
    r.case_id = kase->id();
    r.device = o.device.empty() ? first_existing_device() : o.device;
    r.variant = o.variant;
    r.status = Status::skipped;
    r.reason = "written by `sdpa-doctor repro`, not measured";
    if (o.mode == "compiled") r.mode = Mode::compiled;
    return r;
  }
  const MeasuredReport m = read_measured(o.report);
  CaseResult r = measured_result(o, m);
  if (!o.mode.empty()) r.mode = *mode_from_string(o.mode);
  if (o.compile.empty()) o.compile = report::compile_backend_of(m.report, r);
  if (!o.device.empty()) r.device = o.device;
  if (o.variant_given) r.variant = o.variant;
  // A shrunk failure's script is its smallest failing case: the one to attach to a bug.
  if (auto smallest = smallest_failing_case(m, r); smallest && !o.original && *smallest != r.kase) {
    fmt::print(stderr, "sdpa-doctor: {} on {} shrank to {}: its script follows (--original for "
                       "{} itself)\n",
               r.case_id, escape_to_one_line(r.device), smallest->id(), r.case_id);
    r.kase = *smallest;
    r.case_id = smallest->id();
  }
  return r;
}

int run_repro(ReproOptions o) {
  auto probe = probe_from_string(o.probe);
  if (!probe) throw Fatal{fmt::format("repro: unknown probe '{}'", escape_to_one_line(o.probe)),
                          exit_code::usage};
  if (o.atol < 0 || o.rtol < 0)
    throw Fatal{"repro: --atol and --rtol must not be negative", exit_code::usage};
  CaseResult r = requested_result(o);
  if (o.report.empty()) r.probe = *probe;
  // The measured tolerance stays unless one is given: the script judges as the check did.
  if (o.atol > 0 || o.rtol > 0) r.tolerance = {o.atol, o.rtol};
  auto script = report::render_repro(r, o.compile.empty() ? "aot_eager" : o.compile);
  if (!script) throw Fatal{fmt::format("repro: {}", script.error().message), exit_code::usage};
  auto written = report::write_atomically(o.output, *script);
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
  sub->add_option("--mode", options->mode,
                  "eager or compiled: the call as eager code makes it, or through torch.compile "
                  "(default: the mode of --report's result, a compiled failure first, else eager)")
      ->check(CLI::IsMember({"eager", "compiled"}))
      ->type_name("MODE");
  sub->add_option("--compile", options->compile,
                  "torch.compile backend of a compiled script: aot_eager or inductor (default: "
                  "the one --report's cell ran under, else aot_eager)")
      ->check(CLI::IsMember({"aot_eager", "inductor"}))
      ->type_name("BACKEND");
  sub->add_option("--atol", options->atol, "Absolute tolerance (default: per dtype)")
      ->check(finite_number(0));
  sub->add_option("--rtol", options->rtol, "Relative tolerance (default: per dtype)")
      ->check(finite_number(0));
  sub->add_option("-o,--output", options->output, "Write the script to FILE ('-' = stdout)")
      ->type_name("FILE")
      ->default_str("-");
  sub->callback([&action, options, variant] {
    options->variant_given = variant->count() > 0;
    action = [options] { return run_repro(*options); };
  });
}

} // namespace sdpa_doctor::cli

#include "advice/advice.hpp"
#include "cli/commands.hpp"
#include "core/expected.hpp"
#include "core/paths.hpp"
#include "core/status.hpp"
#include "core/text.hpp"
#if __has_include("devices/devices.hpp")
#include "devices/devices.hpp"
#define SDPA_DOCTOR_KNOWN_ISSUES_HAVE_DEVICES 1
#endif

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <set>

namespace sdpa_doctor::cli {

namespace {

struct KnownIssuesOptions {
  std::vector<std::string> files; // --known-issues FILE, added after the shipped data
  std::vector<std::string> archs; // --arch gfxNNNN: check these instead of this machine's GPUs
  std::string torch;              // --torch VERSION: narrow by torch version
  bool no_devices = false;        // do not enumerate this machine's GPUs
};

advice::KnownIssues load_all(const KnownIssuesOptions& o) {
  std::vector<advice::KnownIssues> files;
  const auto dir = data_dir();
  if (!dir)
    throw Fatal{"cannot find the data directory with known_issues.json (set SDPA_DOCTOR_DATA_DIR)",
                exit_code::internal};
  auto shipped = advice::load_known_issues((*dir / "known_issues.json").string());
  if (!shipped) throw Fatal{shipped.error().message, exit_code::internal};
  files.push_back(std::move(*shipped));
  for (const std::string& f : o.files) {
    auto extra = advice::load_known_issues(f);
    if (!extra) throw Fatal{extra.error().message, exit_code::usage};
    files.push_back(std::move(*extra));
  }
  return advice::merge_known_issues(files);
}

// "any device", "any AMD GPU" or the arch patterns the issue is limited to.
std::string arch_summary(const advice::KnownIssue& issue) {
  std::set<std::string> archs;
  bool any = false;
  for (const advice::IssueRule& r : issue.rules) {
    if (r.archs.empty()) any = true;
    archs.insert(r.archs.begin(), r.archs.end());
  }
  if (any || archs.empty()) return "any device";
  if (archs == std::set<std::string>{"gfx*"}) return "any AMD GPU";
  return fmt::format("{}", fmt::join(archs, ", "));
}

// What the entry's failure prints, for a user to hold beside their own log, and whether its source
// published that text (else it is the text the failure prints as the source describes it).
void print_verbatim(const advice::Verbatim& v) {
  fmt::print("    text ({}): {}\n", v.published ? "published" : "not published by the source",
             escape_to_one_line(v.text));
  if (!v.note.empty()) fmt::print("    about the text: {}\n", escape_to_one_line(v.note));
}

// (label, arch) of the GPUs to check: --arch values, else this machine's devices.
std::vector<std::pair<std::string, std::string>> targets(const KnownIssuesOptions& o,
                                                         std::string& why_none) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& a : o.archs) out.emplace_back(a, a);
  if (!out.empty() || o.no_devices) {
    if (out.empty()) why_none = "device check disabled (--no-devices); pass --arch gfxNNNN";
    return out;
  }
#ifdef SDPA_DOCTOR_KNOWN_ISSUES_HAVE_DEVICES
  const DeviceInventory inv = devices::enumerate_devices(devices::EnumerateOptions{});
  for (const Device& d : inv.devices) {
    std::string label = d.index >= 0 ? fmt::format("cuda:{}", d.index) : d.pci_bdf;
    if (!d.name.empty()) label += " " + d.name;
    out.emplace_back(label, d.gfx_target);
  }
  if (out.empty())
    why_none = inv.no_gpu_reason.empty() ? "no AMD GPU found" : "no AMD GPU found: " + inv.no_gpu_reason;
#else
  why_none = "device list not available in this build; pass --arch gfxNNNN";
#endif
  return out;
}

int run_known_issues(const KnownIssuesOptions& o) {
  for (const std::string& a : o.archs) {
    if (a.rfind("gfx", 0) != 0 || a.size() < 5)
      throw Fatal{fmt::format("--arch '{}' is not a gfx target (e.g. gfx1201)", a),
                  exit_code::usage};
  }
  if (!o.torch.empty() && advice::version_numbers(o.torch).empty())
    throw Fatal{fmt::format("--torch '{}' is not a version (e.g. 2.7.1)", o.torch),
                exit_code::usage};
  const advice::KnownIssues issues = load_all(o);
  fmt::print("Known issues ({}):\n", issues.issues.size());
  // Every field may come from a user's --known-issues file: escaped, one line each.
  for (const advice::KnownIssue& i : issues.issues) {
    fmt::print("  {}\n    {}\n", escape_to_one_line(i.id), escape_to_one_line(i.title));
    if (!i.link.empty()) fmt::print("    {}\n", escape_to_one_line(i.link));
    fmt::print("    applies to: {}\n", escape_to_one_line(arch_summary(i)));
    if (!i.fixed_in.empty()) fmt::print("    fixed in: {}\n", escape_to_one_line(i.fixed_in));
    if (i.verbatim) print_verbatim(*i.verbatim);
  }
  std::string why_none;
  const auto devices = targets(o, why_none);
  fmt::print("\nOn this machine{}:\n", o.torch.empty() ? "" : fmt::format(" (torch {})", o.torch));
  if (devices.empty()) fmt::print("  {}\n", why_none);
  for (const auto& [label, arch] : devices) {
    std::vector<std::string> ids;
    for (const advice::KnownIssue& i : issues.issues) {
      // Issues that hold on any GPU (stderr patterns, generic limits) are listed above only.
      const std::string scope = arch_summary(i);
      if (scope == "any device" || scope == "any AMD GPU") continue;
      if (advice::issue_applies_to(i, arch, o.torch)) ids.push_back(i.id);
    }
    fmt::print("  {} ({}): {}\n", escape_to_one_line(label),
               arch.empty() ? "arch unknown" : escape_to_one_line(arch),
               ids.empty() ? std::string("no arch-specific known issue")
                           : escape_to_one_line(fmt::format("{}", fmt::join(ids, ", "))));
  }
  return exit_code::ok;
}

} // namespace

void setup_known_issues(CLI::App& app, const GlobalOptions&, Action& action) {
  auto options = std::make_shared<KnownIssuesOptions>();
  auto* sub = app.add_subcommand(
      "known-issues", "List the known SDPA issues on AMD GPUs the doctor recognises, and which "
                      "apply to this machine's GPUs");
  sub->add_option("--known-issues", options->files,
                  "Also load FILE (same format as share/sdpa-doctor/known_issues.json); an id "
                  "seen again replaces the shipped entry")
      ->type_name("FILE");
  sub->add_option("--arch", options->archs, "Check these gfx targets instead of this machine's GPUs")
      ->type_name("GFX");
  sub->add_option("--torch", options->torch, "Only issues that can hold for this torch version")
      ->type_name("VERSION");
  sub->add_flag("--no-devices", options->no_devices, "Do not look for this machine's GPUs");
  sub->callback([&action, options] { action = [options] { return run_known_issues(*options); }; });
}

} // namespace sdpa_doctor::cli

// `sdpa-doctor variants`: every variant a check can plan, which probes run it on which devices,
// and what it sets (environment, torch flags), so a cell in the matrix can be read back.
#include "cli/commands.hpp"
#include "core/status.hpp"
#include "core/variant.hpp"
#include "cases/cases.hpp"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace sdpa_doctor::cli {

namespace {

struct VariantRow {
  Variant variant;
  std::set<std::string> probes;
  std::set<std::string> devices; // "cpu", "gpu"
};

// What a flag means for the torch probes (reference variants take none).
std::string flag_meaning(const std::string& flag) {
  if (flag == "ck") return "torch.backends.cuda.preferred_rocm_fa_library(\"ck\")";
  if (flag == "aotriton") return "torch.backends.cuda.preferred_rocm_fa_library(\"aotriton\")";
  return {};
}

std::string what_it_sets(const Variant& v) {
  std::vector<std::string> parts;
  if (v.backend == "ref-math" || v.backend == "ref-flash")
    parts.push_back("the doctor's own kernel (no torch)");
  else if (v.backend == "default")
    parts.push_back("torch's own dispatch");
  else
    parts.push_back(fmt::format("only the {} SDPA backend enabled", v.backend));
  for (const auto& flag : v.flags)
    if (std::string m = flag_meaning(flag); !m.empty()) parts.push_back(m);
  for (const auto& [k, val] : v.environment()) parts.push_back(fmt::format("{}={}", k, val));
  return fmt::format("{}", fmt::join(parts, "; "));
}

int run_variants() {
  std::vector<VariantRow> rows;
  std::map<std::string, size_t> index;
  for (const char* target : {"cpu", "cuda:0"})
    for (Probe probe : {Probe::torch, Probe::python, Probe::reference})
      for (const Variant& v : cases::plan_variants(probe, target)) {
        auto [it, fresh] = index.try_emplace(v.name(), rows.size());
        if (fresh) rows.push_back({v, {}, {}});
        rows[it->second].probes.insert(std::string(to_string(probe)));
        rows[it->second].devices.insert(std::string(target) == "cpu" ? "cpu" : "gpu");
      }
  size_t width = 7;
  for (const auto& r : rows) width = std::max(width, r.variant.name().size());
  fmt::print("{:<{}}  {:<26}  {:<7}  {}\n", "variant", width, "probes", "devices", "sets");
  for (const auto& r : rows)
    fmt::print("{:<{}}  {:<26}  {:<7}  {}\n", r.variant.name(), width,
               fmt::format("{}", fmt::join(r.probes, ",")),
               fmt::format("{}", fmt::join(r.devices, ",")), what_it_sets(r.variant));
  return exit_code::ok;
}

} // namespace

void setup_variants(CLI::App& app, const GlobalOptions&, Action& action) {
  auto* sub = app.add_subcommand(
      "variants", "List every backend variant: the probes and devices it runs on and what it sets");
  sub->callback([&action] { action = [] { return run_variants(); }; });
}

} // namespace sdpa_doctor::cli

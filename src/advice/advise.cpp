#include "advice/advice.hpp"
#include "core/io.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>

namespace sdpa_doctor::advice {

namespace {

// What one variant did with one case on one device, across the torch probes that ran it.
enum class Outcome { pass, refused, failed, unmeasured };

struct Cell {
  Outcome outcome = Outcome::unmeasured;
  std::optional<double> time_ms; // best median over the probes that passed
  std::string chosen;            // backend the dispatcher reported, for the default variant
};

bool is_torch_probe(Probe p) { return p == Probe::torch || p == Probe::python; }

bool is_failure(Status s) { return is_failure_by_default(s); }

struct DeviceView {
  std::string device;
  std::vector<std::string> case_order;        // first-seen order
  std::map<std::string, Case> cases;          // id -> case
  std::map<std::string, std::map<std::string, Cell>> cells; // variant -> case id -> cell
  std::set<std::string> variants;
};

Outcome outcome_of(Status s) {
  switch (s) {
  case Status::pass: return Outcome::pass;
  case Status::unsupported: return Outcome::refused;
  case Status::skipped: return Outcome::unmeasured;
  default: return Outcome::failed;
  }
}

// A second probe ran the same variant and case: a failure anywhere outweighs a pass elsewhere,
// because a user may take either probe's path (C++ or Python).
Cell combine(Cell cell, const CaseResult& r) {
  auto rank = [](Outcome o) {
    switch (o) {
    case Outcome::failed: return 3;
    case Outcome::unmeasured: return 2;
    case Outcome::refused: return 1;
    case Outcome::pass: return 0;
    }
    return 3;
  };
  const Outcome o = outcome_of(r.status);
  if (rank(o) > rank(cell.outcome)) cell.outcome = o;
  if (o == Outcome::pass && r.metrics.time_ms)
    cell.time_ms = cell.time_ms ? std::min(*cell.time_ms, *r.metrics.time_ms) : *r.metrics.time_ms;
  return cell;
}

std::vector<DeviceView> device_views(const Report& report, const AdviceOptions& options) {
  std::vector<DeviceView> views;
  auto view_for = [&](const std::string& device) -> DeviceView& {
    for (DeviceView& v : views) {
      if (v.device == device) return v;
    }
    views.push_back(DeviceView{device, {}, {}, {}, {}});
    return views.back();
  };
  for (const std::string& t : report.targets) view_for(t);
  for (const CaseResult& r : report.results) {
    if (!is_torch_probe(r.probe)) continue;
    if (!options.dtypes.empty() && !options.dtypes.count(r.kase.dtype)) continue;
    DeviceView& v = view_for(r.device);
    if (!v.cases.count(r.case_id)) {
      v.cases[r.case_id] = r.kase;
      v.case_order.push_back(r.case_id);
    }
    v.variants.insert(r.variant);
    auto& cells = v.cells[r.variant];
    auto it = cells.find(r.case_id);
    if (it == cells.end()) {
      Cell c;
      c.outcome = outcome_of(r.status);
      if (r.status == Status::pass) c.time_ms = r.metrics.time_ms;
      c.chosen = r.backend_chosen;
      cells.emplace(r.case_id, c);
    } else {
      it->second = combine(it->second, r);
    }
  }
  return views;
}

// A configuration the user can set: backends tried in this order, all under the same flags.
struct Chain {
  enum class Kind { defaults, no_mem_efficient, no_flash, math_only };
  Kind kind;
  std::vector<std::string> flags; // ck, aotriton, experimental
  std::vector<std::string> variants; // measured variant names, in dispatch order
};

struct Evaluation {
  bool proven = false;
  std::map<std::string, std::string> served_by; // case id -> variant name
  std::optional<double> total_ms;              // over the served cases, when every time is known
  int unfused = 0; // 0 per case served by flash, 1 by mem-efficient, 2 by math: lower is better
  std::string why_not;                         // first case that breaks it
};

std::string variant_name(const std::string& backend, const std::vector<std::string>& flags) {
  Variant v{backend, flags};
  return v.name();
}

Evaluation evaluate(const DeviceView& view, const Chain& chain) {
  Evaluation e;
  double total = 0;
  bool all_times = true;
  for (const std::string& id : view.case_order) {
    bool served = false;
    for (const std::string& variant : chain.variants) {
      auto vit = view.cells.find(variant);
      const Cell* cell = nullptr;
      if (vit != view.cells.end()) {
        auto cit = vit->second.find(id);
        if (cit != vit->second.end()) cell = &cit->second;
      }
      if (!cell || cell->outcome == Outcome::unmeasured) {
        e.why_not = fmt::format("{} was not measured on {}", variant, id);
        return e;
      }
      if (cell->outcome == Outcome::failed) {
        e.why_not = fmt::format("{} failed {}", variant, id);
        return e;
      }
      if (cell->outcome == Outcome::pass) {
        e.served_by[id] = variant;
        std::string backend = variant.substr(0, variant.find('['));
        if (backend == "default") backend = cell->chosen.empty() ? "flash" : cell->chosen;
        e.unfused += backend == "math" ? 2 : backend == "mem_efficient" ? 1 : 0;
        if (cell->time_ms) total += *cell->time_ms;
        else all_times = false;
        served = true;
        break;
      }
    }
    if (!served) {
      e.why_not = fmt::format("every backend refused {}", id);
      return e;
    }
  }
  if (view.case_order.empty()) {
    e.why_not = "no case was measured";
    return e;
  }
  e.proven = true;
  if (all_times) e.total_ms = total;
  return e;
}

int changes(const Chain& c) {
  const int base = c.kind == Chain::Kind::defaults ? 0 : c.kind == Chain::Kind::math_only ? 2 : 1;
  return base + int(c.flags.size());
}

std::vector<Chain> candidate_chains(const DeviceView& view) {
  std::set<std::vector<std::string>> flag_sets{{}};
  for (const std::string& name : view.variants) {
    auto v = parse_variant(name);
    if (!v) continue;
    if (v->backend == "flash" || v->backend == "mem_efficient" || v->backend == "default")
      flag_sets.insert(v->flags);
  }
  std::vector<Chain> out;
  for (const auto& f : flag_sets) {
    if (view.variants.count(variant_name("default", f)))
      out.push_back({Chain::Kind::defaults, f, {variant_name("default", f)}});
    out.push_back({Chain::Kind::defaults,
                   f,
                   {variant_name("flash", f), variant_name("mem_efficient", f), "math"}});
    out.push_back({Chain::Kind::no_mem_efficient, f, {variant_name("flash", f), "math"}});
    out.push_back({Chain::Kind::no_flash, f, {variant_name("mem_efficient", f), "math"}});
  }
  out.push_back({Chain::Kind::math_only, {}, {"math"}});
  return out;
}

std::string recommendation_id(const Chain& c) {
  std::vector<std::string> parts;
  switch (c.kind) {
  case Chain::Kind::defaults:
    if (c.flags.empty()) parts.push_back("keep-defaults");
    break;
  case Chain::Kind::no_mem_efficient: parts.push_back("disable-mem-efficient"); break;
  case Chain::Kind::no_flash: parts.push_back("disable-flash"); break;
  case Chain::Kind::math_only: parts.push_back("use-math-only"); break;
  }
  for (const std::string& f : c.flags) {
    if (f == "experimental") parts.push_back("enable-aotriton-experimental");
    if (f == "ck") parts.push_back("prefer-ck");
    if (f == "aotriton") parts.push_back("prefer-aotriton");
  }
  return fmt::format("{}", fmt::join(parts, "+"));
}

bool has(const std::vector<std::string>& v, std::string_view x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

struct DeviceContext {
  std::string torch;
  bool is_gpu = false;
  bool ck_failed = false; // some ck variant failed on this device
};

std::string python_for(const Chain& c, const DeviceContext& ctx) {
  std::vector<std::string> lines;
  const bool has_fa_library = !ctx.torch.empty() && compare_versions(ctx.torch, "2.7") >= 0;
  if (!c.flags.empty() && (has(c.flags, "experimental") || has(c.flags, "ck")))
    lines.push_back("# set the environment variables below before `import torch`");
  lines.push_back("import torch");
  if (c.kind != Chain::Kind::defaults)
    lines.push_back("from torch.nn.attention import SDPBackend, sdpa_kernel");
  if (has_fa_library && has(c.flags, "ck")) {
    lines.push_back("torch.backends.cuda.preferred_rocm_fa_library(\"ck\")");
  } else if (has_fa_library && ctx.is_gpu && c.kind != Chain::Kind::math_only &&
             (has(c.flags, "aotriton") || ctx.ck_failed)) {
    lines.push_back("torch.backends.cuda.preferred_rocm_fa_library(\"aotriton\")");
  }
  switch (c.kind) {
  case Chain::Kind::defaults:
    if (lines.size() == 1) lines.push_back("# nothing to change: the default dispatch passed");
    break;
  case Chain::Kind::no_mem_efficient:
    lines.push_back("torch.backends.cuda.enable_mem_efficient_sdp(False)");
    lines.push_back("# or only around the call:");
    lines.push_back("with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):");
    lines.push_back("    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)");
    break;
  case Chain::Kind::no_flash:
    lines.push_back("torch.backends.cuda.enable_flash_sdp(False)");
    lines.push_back("# or only around the call:");
    lines.push_back("with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):");
    lines.push_back("    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)");
    break;
  case Chain::Kind::math_only:
    lines.push_back("torch.backends.cuda.enable_flash_sdp(False)");
    lines.push_back("torch.backends.cuda.enable_mem_efficient_sdp(False)");
    lines.push_back("torch.backends.cuda.enable_math_sdp(True)");
    lines.push_back("# or only around the call:");
    lines.push_back("with sdpa_kernel([SDPBackend.MATH]):");
    lines.push_back("    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)");
    break;
  }
  return fmt::format("{}", fmt::join(lines, "\n"));
}

std::string environment_for(const Chain& c) {
  std::vector<std::string> lines;
  for (const auto& [k, v] : Variant{"flash", c.flags}.environment()) lines.push_back(k + "=" + v);
  return fmt::format("{}", fmt::join(lines, "\n"));
}

std::string cpp_for(const Chain& c, const DeviceContext& ctx) {
  std::vector<std::string> lines;
  const bool has_fa_library = !ctx.torch.empty() && compare_versions(ctx.torch, "2.7") >= 0;
  if (has_fa_library && has(c.flags, "ck"))
    lines.push_back("at::globalContext().setROCmFAPreferredBackend(at::ROCmFABackend::Ck);");
  else if (has_fa_library && ctx.is_gpu && c.kind != Chain::Kind::math_only &&
           (has(c.flags, "aotriton") || ctx.ck_failed))
    lines.push_back("at::globalContext().setROCmFAPreferredBackend(at::ROCmFABackend::AOTriton);");
  switch (c.kind) {
  case Chain::Kind::defaults: break;
  case Chain::Kind::no_mem_efficient:
    lines.push_back("at::globalContext().setSDPUseMemEfficient(false);");
    break;
  case Chain::Kind::no_flash: lines.push_back("at::globalContext().setSDPUseFlash(false);"); break;
  case Chain::Kind::math_only:
    lines.push_back("at::globalContext().setSDPUseFlash(false);");
    lines.push_back("at::globalContext().setSDPUseMemEfficient(false);");
    lines.push_back("at::globalContext().setSDPUseMath(true);");
    break;
  }
  if (lines.empty()) return "// nothing to change";
  lines.push_back("// If you ever leave only flash enabled from C++, also call "
                  "setSDPUseOverrideable(false):");
  lines.push_back("// overrideable defaults to on and turns a rejected flash into \"Invalid "
                  "backend\".");
  return fmt::format("{}", fmt::join(lines, "\n"));
}

std::string describe(const Chain& c) {
  std::string flags;
  if (has(c.flags, "experimental")) flags += ", AOTriton experimental archs enabled";
  if (has(c.flags, "ck")) flags += ", CK preferred";
  if (has(c.flags, "aotriton")) flags += ", AOTriton preferred";
  switch (c.kind) {
  case Chain::Kind::defaults: return "default dispatch (flash, then mem-efficient, then math)" + flags;
  case Chain::Kind::no_mem_efficient: return "flash with math fallback, mem-efficient off" + flags;
  case Chain::Kind::no_flash: return "mem-efficient with math fallback, flash off" + flags;
  case Chain::Kind::math_only: return "math only (flash and mem-efficient off)";
  }
  return {};
}

std::string cost_for(const Chain& c, const Evaluation& e, const DeviceView& view,
                     const AdviceOptions& options) {
  std::vector<std::string> parts;
  size_t by_math = 0;
  std::set<std::string> math_dtypes;
  for (const auto& [id, variant] : e.served_by) {
    if (variant == "math") {
      ++by_math;
      math_dtypes.insert(std::string(to_string(view.cases.at(id).dtype)));
    }
  }
  if (by_math == 0) return {};
  if (c.kind != Chain::Kind::math_only && by_math < e.served_by.size())
    parts.push_back(fmt::format("math serves {} of {} cases ({})", by_math, e.served_by.size(),
                                fmt::join(math_dtypes, ", ")));
  if (options.target) {
    const Case& t = *options.target;
    parts.push_back(fmt::format(
        "math materialises B*H*Lq*Lkv fp32 scores (scores + softmax): {} for b={},h={},l={},d={}",
        format_bytes(t.math_scores_bytes()), t.b, t.hq, t.lq, t.d));
  } else {
    parts.push_back("math materialises B*H*Lq*Lkv fp32 scores (scores + softmax), memory grows "
                    "with L^2: 2 GiB at b=1,h=32,l=4096 (pass --target for your shape)");
  }
  // How much slower math was than the fastest fused variant on the cases both passed.
  double math_ms = 0, fused_ms = 0;
  int both = 0;
  std::string fused_name;
  auto math_it = view.cells.find("math");
  if (math_it != view.cells.end()) {
    for (const std::string& variant : c.variants) {
      if (variant == "math") continue;
      auto f = view.cells.find(variant);
      if (f == view.cells.end()) continue;
      for (const auto& [id, cell] : f->second) {
        auto m = math_it->second.find(id);
        if (m == math_it->second.end() || cell.outcome != Outcome::pass ||
            m->second.outcome != Outcome::pass || !cell.time_ms || !m->second.time_ms)
          continue;
        math_ms += *m->second.time_ms;
        fused_ms += *cell.time_ms;
        ++both;
      }
      fused_name = variant;
      if (both > 0) break;
    }
  }
  if (both > 0 && fused_ms > 0)
    parts.push_back(fmt::format("math took {:.1f}x the time of {} on the {} cases both passed",
                                math_ms / fused_ms, fused_name, both));
  return fmt::format("{}", fmt::join(parts, "; "));
}

void variant_findings(const Report& report, std::vector<Finding>& out) {
  struct Group {
    std::string device, variant;
    Probe probe;
    std::map<Status, std::vector<const CaseResult*>> by_status;
    size_t total = 0;
  };
  std::vector<Group> groups;
  for (const CaseResult& r : report.results) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) {
      return g.device == r.device && g.variant == r.variant && g.probe == r.probe;
    });
    if (it == groups.end()) {
      groups.push_back(Group{r.device, r.variant, r.probe, {}, 0});
      it = groups.end() - 1;
    }
    it->by_status[r.status].push_back(&r);
    ++it->total;
  }
  static const std::pair<Status, const char*> k_order[] = {
      {Status::crash, "crashed"},     {Status::timeout, "timed out"},
      {Status::nonfinite, "returned NaN/Inf"}, {Status::mismatch, "returned wrong values"},
      {Status::error, "raised an error"}};
  for (const Group& g : groups) {
    for (const auto& [status, verb] : k_order) {
      auto it = g.by_status.find(status);
      if (it == g.by_status.end()) continue;
      Finding f;
      f.id = fmt::format("variant-{}", to_string(status));
      f.severity = Severity::problem;
      f.device = g.device;
      const CaseResult& first = *it->second.front();
      std::string detail;
      if (first.process_end && !first.process_end->signal_name.empty())
        detail = fmt::format(" ({})", first.process_end->signal_name);
      else if (!first.reason.empty())
        detail = fmt::format(": {}", first.reason);
      f.message = fmt::format("{} ({}) {} on {} in {} of {} cases{}", g.variant,
                              to_string(g.probe), verb, g.device, it->second.size(), g.total,
                              detail);
      f.remedy = g.probe == Probe::reference
                     ? "the doctor's own reference kernel failed: check the device and driver"
                     : fmt::format("avoid {} on {} (see the recommendation)", g.variant, g.device);
      for (const CaseResult* r : it->second) f.case_ids.push_back(r->case_id);
      out.push_back(std::move(f));
    }
    auto sk = g.by_status.find(Status::skipped);
    if (sk != g.by_status.end()) {
      Finding f;
      f.id = "cases-skipped";
      f.severity = Severity::warning;
      f.device = g.device;
      f.message = fmt::format("{} ({}) on {}: {} of {} cases not run: {}", g.variant,
                              to_string(g.probe), g.device, sk->second.size(), g.total,
                              sk->second.front()->reason.empty() ? "no reason recorded"
                                                                 : sk->second.front()->reason);
      for (const CaseResult* r : sk->second) f.case_ids.push_back(r->case_id);
      out.push_back(std::move(f));
    }
  }
}

// Cross-variant findings on one device: CK vs AOTriton, the experimental gate, our reference
// kernels as witnesses, silent fallback to math.
void device_findings(const Report& report, const std::string& device, std::vector<Finding>& out) {
  std::map<std::string, std::map<std::string, const CaseResult*>> by_variant; // torch probes
  std::map<std::string, std::map<std::string, const CaseResult*>> reference;
  for (const CaseResult& r : report.results) {
    if (r.device != device) continue;
    auto& slot = r.probe == Probe::reference ? reference[r.variant][r.case_id]
                                             : by_variant[r.variant][r.case_id];
    if (!slot || (slot->status == Status::pass && r.status != Status::pass)) slot = &r;
  }

  // CK failed where the same backend without CK passed.
  {
    Finding f;
    for (const auto& [name, cases] : by_variant) {
      auto v = parse_variant(name);
      if (!v || !v->has_flag("ck")) continue;
      Variant other = *v;
      other.flags.erase(std::remove(other.flags.begin(), other.flags.end(), "ck"),
                        other.flags.end());
      std::vector<std::string> alternatives = {other.name()};
      Variant aot = other;
      aot.flags.push_back("aotriton");
      std::sort(aot.flags.begin(), aot.flags.end());
      alternatives.push_back(aot.name());
      for (const auto& [id, r] : cases) {
        if (!is_failure(r->status)) continue;
        for (const std::string& alt : alternatives) {
          auto a = by_variant.find(alt);
          if (a == by_variant.end()) continue;
          auto ar = a->second.find(id);
          if (ar != a->second.end() && ar->second->status == Status::pass) {
            if (!has(f.case_ids, id)) f.case_ids.push_back(id);
            break;
          }
        }
      }
    }
    if (!f.case_ids.empty()) {
      f.id = "disable-ck-flash";
      f.severity = Severity::problem;
      f.device = device;
      f.message = fmt::format("the CK attention kernels fail on {} where AOTriton passes the same "
                              "cases",
                              device);
      f.remedy = "do not set TORCH_ROCM_FA_PREFER_CK=1 or preferred_rocm_fa_library(\"ck\") on "
                 "this device; use AOTriton (the default)";
      out.push_back(std::move(f));
    }
  }

  // The experimental gate: the same backend refused without the flag and passed with it.
  {
    Finding f;
    for (const auto& [name, cases] : by_variant) {
      auto v = parse_variant(name);
      if (!v || !v->has_flag("experimental")) continue;
      Variant gated = *v;
      gated.flags.erase(std::remove(gated.flags.begin(), gated.flags.end(), "experimental"),
                        gated.flags.end());
      auto g = by_variant.find(gated.name());
      if (g == by_variant.end()) continue;
      for (const auto& [id, r] : cases) {
        auto gr = g->second.find(id);
        if (r->status == Status::pass && gr != g->second.end() &&
            gr->second->status == Status::unsupported && !has(f.case_ids, id))
          f.case_ids.push_back(id);
      }
    }
    if (!f.case_ids.empty()) {
      f.id = "enable-aotriton-experimental";
      f.severity = Severity::warning;
      f.device = device;
      f.message = fmt::format("AOTriton refuses {} as experimental unless "
                              "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1, and passes with it",
                              device);
      f.remedy = "export TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 before starting Python (at "
                 "your own risk: the arch is experimental in this AOTriton)";
      out.push_back(std::move(f));
    }
  }

  // Our reference kernels pass where torch's fused kernels fail: the backend is at fault.
  {
    Finding f;
    for (const auto& [name, cases] : by_variant) {
      const std::string backend = name.substr(0, name.find('['));
      if (backend != "flash" && backend != "mem_efficient" && backend != "default") continue;
      for (const auto& [id, r] : cases) {
        if (!is_failure(r->status)) continue;
        for (const auto& [ref_name, ref_cases] : reference) {
          auto rr = ref_cases.find(id);
          if (rr != ref_cases.end() && rr->second->status == Status::pass) {
            if (!has(f.case_ids, id)) f.case_ids.push_back(id);
            break;
          }
        }
      }
    }
    if (!f.case_ids.empty()) {
      f.id = "backend-fault-not-device";
      f.severity = Severity::warning;
      f.device = device;
      f.message = fmt::format("the doctor's reference kernels pass on {} where torch's fused "
                              "kernels fail: the fault is in the backend, not the driver or the "
                              "card",
                              device);
      f.remedy = "report it to the backend (the Markdown report carries a repro per case)";
      out.push_back(std::move(f));
    }
  }

  // Silent fallback: the default dispatch ran math on a GPU.
  if (device != "cpu") {
    Finding f;
    for (const auto& [name, cases] : by_variant) {
      if (name.rfind("default", 0) != 0) continue;
      for (const auto& [id, r] : cases) {
        if (r->status == Status::pass && r->backend_chosen == "math" && !has(f.case_ids, id))
          f.case_ids.push_back(id);
      }
    }
    if (!f.case_ids.empty()) {
      f.id = "default-falls-back-to-math";
      f.severity = Severity::warning;
      f.device = device;
      f.message = fmt::format("the default dispatch on {} chose math for {} case(s): no fused "
                              "kernel accepted them, memory grows with L^2",
                              device, f.case_ids.size());
      f.remedy = "see the recommendation for a fused configuration that passed, if any";
      out.push_back(std::move(f));
    }
  }
}

} // namespace

AdviceResult advise(const Report& report, const KnownIssues& issues, const AdviceOptions& options) {
  AdviceResult out;
  out.known_issues = match_known_issues(report, issues);
  variant_findings(report, out.findings);
  gfx_findings(report, out.findings);
  poisoned_findings(report, out.findings);

  for (const DeviceView& view : device_views(report, options)) {
    device_findings(report, view.device, out.findings);
    if (view.case_order.empty()) continue;

    DeviceContext ctx;
    ctx.is_gpu = view.device != "cpu";
    for (const CaseResult& r : report.results) {
      if (r.device != view.device || !is_torch_probe(r.probe)) continue;
      if (ctx.torch.empty()) ctx.torch = facts_for(report, r).torch;
      auto v = parse_variant(r.variant);
      if (v && v->has_flag("ck") && is_failure(r.status)) ctx.ck_failed = true;
    }

    const Chain* best = nullptr;
    Evaluation best_eval;
    std::string why_not;
    const std::vector<Chain> chains = candidate_chains(view);
    for (const Chain& c : chains) {
      Evaluation e = evaluate(view, c);
      if (!e.proven) {
        if (why_not.empty() && c.kind == Chain::Kind::math_only) why_not = e.why_not;
        continue;
      }
      if (!best) {
        best = &c;
        best_eval = std::move(e);
        continue;
      }
      // Fused first: flash and mem-efficient keep memory O(L), math materialises L^2 scores,
      // and the small probe shapes say little about speed at the user's real sizes. So the
      // chain that serves more cases with fused kernels wins; then time; then fewer changes.
      bool better = false;
      if (e.unfused != best_eval.unfused) {
        better = e.unfused < best_eval.unfused;
      } else {
        // Times within 10% are noise at probe sizes; then fewer changes win.
        const bool timed = e.total_ms && best_eval.total_ms && *best_eval.total_ms > 0;
        const double ratio = timed ? *e.total_ms / *best_eval.total_ms : 1.0;
        if (timed && ratio < 0.9) better = true;
        else if (timed && ratio > 1.0 / 0.9) better = false;
        else better = changes(c) < changes(*best);
      }
      if (better) {
        best = &c;
        best_eval = std::move(e);
      }
    }

    if (!best) {
      Finding f;
      f.id = "no-working-configuration";
      f.severity = Severity::problem;
      f.device = view.device;
      f.message = fmt::format("no measured configuration passes every case on {} ({})",
                              view.device, why_not.empty() ? "nothing passed" : why_not);
      f.remedy = "nothing to recommend from measurements; see the failures and known issues";
      out.findings.push_back(std::move(f));
      continue;
    }

    Recommendation rec;
    rec.id = recommendation_id(*best);
    rec.device = view.device;
    std::set<std::string> dtypes;
    for (const auto& [id, c] : view.cases) dtypes.insert(std::string(to_string(c.dtype)));
    rec.summary = fmt::format("{} on {}: every measured case passed ({} cases, {})",
                              describe(*best), view.device, view.case_order.size(),
                              fmt::join(dtypes, ", "));
    rec.python = python_for(*best, ctx);
    rec.environment = environment_for(*best);
    rec.cpp = cpp_for(*best, ctx);
    rec.transformers = "model = AutoModel.from_pretrained(..., attn_implementation=\"sdpa\")  "
                       "# torch SDPA, under the flags above";
    if (ctx.is_gpu)
      rec.vllm = "not measured: vLLM's --attention-backend kernels are not torch SDPA; the flags "
                 "above reach vLLM only where it calls torch SDPA (e.g. ViT encoders on RDNA)";
    rec.cost = cost_for(*best, best_eval, view, options);
    for (const std::string& id : view.case_order) rec.case_ids.push_back(id);
    out.recommendations.push_back(std::move(rec));
  }
  return out;
}

} // namespace sdpa_doctor::advice

// The configuration choice: candidate backend chains over the measured cells of one device, the
// one that is proven and best, and the recommendation text for it.
#include "advice/result_index.hpp"
#include "core/io.hpp"

#include <algorithm>
#include <fmt/format.h>

namespace sdpa_doctor::advice::detail {

namespace {

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

Evaluation evaluate(const DeviceIndex& view, const Chain& chain) {
  Evaluation e;
  double total = 0;
  bool all_times = true;
  for (const std::string& id : view.case_order) {
    bool served = false;
    for (const std::string& variant : chain.variants) {
      const Cell* cell = view.cell(variant, id);
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

std::vector<Chain> candidate_chains(const DeviceIndex& view) {
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

bool has(const std::vector<std::string>& v, std::string_view x) {
  return std::find(v.begin(), v.end(), x) != v.end();
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

// "ck" or "aotriton" when the chain should name the ROCm flash library; "" when it need not or
// the torch is too old to have the switch (2.7). AOTriton is named after CK failed here.
std::string fa_library_for(const Chain& c, const DeviceIndex& d) {
  const bool has_fa_library = !d.torch.empty() && compare_versions(d.torch, "2.7") >= 0;
  if (has_fa_library && has(c.flags, "ck")) return "ck";
  if (has_fa_library && d.is_gpu() && c.kind != Chain::Kind::math_only &&
      (has(c.flags, "aotriton") || d.ck_failed))
    return "aotriton";
  return {};
}

// The context-manager form of a chain, for users who change it only around the call.
void around_the_call(std::vector<std::string>& lines, const char* backends) {
  lines.push_back("# or only around the call:");
  lines.push_back(fmt::format("with sdpa_kernel([{}]):", backends));
  lines.push_back("    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)");
}

// The backends a chain leaves on, as sdpa_kernel's list.
const char* kernel_list(const Chain& c) {
  switch (c.kind) {
  case Chain::Kind::defaults: return nullptr;
  case Chain::Kind::no_mem_efficient: return "SDPBackend.FLASH_ATTENTION, SDPBackend.MATH";
  case Chain::Kind::no_flash: return "SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH";
  case Chain::Kind::math_only: return "SDPBackend.MATH";
  }
  return nullptr;
}

// Compiled attention: the flags hold where torch.compile traces (set before the first call), and
// the context manager inside the compiled function, as models write it; masks are arguments.
void inside_compiled(std::vector<std::string>& lines, const Chain& c) {
  lines.push_back("# compiled code: the flags above hold when torch.compile traces; or inside the "
                  "compiled region:");
  lines.push_back("@torch.compile(fullgraph=True)");
  lines.push_back("def attention(q, k, v, attn_mask=None):");
  if (const char* backends = kernel_list(c)) {
    lines.push_back(fmt::format("    with sdpa_kernel([{}]):", backends));
    lines.push_back("        return torch.nn.functional.scaled_dot_product_attention(q, k, v, "
                    "attn_mask=attn_mask)");
  } else {
    lines.push_back("    return torch.nn.functional.scaled_dot_product_attention(q, k, v, "
                    "attn_mask=attn_mask)");
  }
}

std::string python_for(const Chain& c, const DeviceIndex& d) {
  std::vector<std::string> lines;
  if (!c.flags.empty() && (has(c.flags, "experimental") || has(c.flags, "ck")))
    lines.push_back("# set the environment variables below before `import torch`");
  lines.push_back("import torch");
  if (c.kind != Chain::Kind::defaults)
    lines.push_back("from torch.nn.attention import SDPBackend, sdpa_kernel");
  if (const std::string library = fa_library_for(c, d); !library.empty())
    lines.push_back(fmt::format("torch.backends.cuda.preferred_rocm_fa_library(\"{}\")", library));
  switch (c.kind) {
  case Chain::Kind::defaults:
    if (lines.size() == 1) lines.push_back("# nothing to change: the default dispatch passed");
    break;
  case Chain::Kind::no_mem_efficient:
    lines.push_back("torch.backends.cuda.enable_mem_efficient_sdp(False)");
    around_the_call(lines, "SDPBackend.FLASH_ATTENTION, SDPBackend.MATH");
    break;
  case Chain::Kind::no_flash:
    lines.push_back("torch.backends.cuda.enable_flash_sdp(False)");
    around_the_call(lines, "SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH");
    break;
  case Chain::Kind::math_only:
    lines.push_back("torch.backends.cuda.enable_flash_sdp(False)");
    lines.push_back("torch.backends.cuda.enable_mem_efficient_sdp(False)");
    lines.push_back("torch.backends.cuda.enable_math_sdp(True)");
    around_the_call(lines, "SDPBackend.MATH");
    break;
  }
  if (d.mode == Mode::compiled) inside_compiled(lines, c);
  return fmt::format("{}", fmt::join(lines, "\n"));
}

std::string environment_for(const Chain& c) {
  std::vector<std::string> lines;
  for (const auto& [k, v] : Variant{"flash", c.flags}.environment()) lines.push_back(k + "=" + v);
  return fmt::format("{}", fmt::join(lines, "\n"));
}

std::string cpp_for(const Chain& c, const DeviceIndex& d) {
  std::vector<std::string> lines;
  const std::string library = fa_library_for(c, d);
  if (library == "ck")
    lines.push_back("at::globalContext().setROCmFAPreferredBackend(at::ROCmFABackend::Ck);");
  else if (library == "aotriton")
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

// "cudnn for 24 cases, mem_efficient for 11, math for 1": what the default dispatch chose under
// these flags where the `default` variant passed, most used first; empty when it was not measured.
std::string dispatch_choices(const Chain& c, const DeviceIndex& d) {
  std::map<std::string, int> count;
  for (const std::string& id : d.case_order) {
    const Cell* cell = d.cell(variant_name("default", c.flags), id);
    if (!cell || cell->outcome != Outcome::pass) continue;
    ++count[cell->chosen.empty() ? std::string("an unknown backend") : cell->chosen];
  }
  std::vector<std::pair<std::string, int>> order(count.begin(), count.end());
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> parts;
  for (const auto& [backend, n] : order)
    parts.push_back(fmt::format("{} for {} case{}", backend, n, n == 1 ? "" : "s"));
  return fmt::format("{}", fmt::join(parts, ", "));
}

std::string describe(const Chain& c, const std::string& choices) {
  std::string flags;
  if (has(c.flags, "experimental")) flags += ", AOTriton experimental archs enabled";
  if (has(c.flags, "ck")) flags += ", CK preferred";
  if (has(c.flags, "aotriton")) flags += ", AOTriton preferred";
  switch (c.kind) {
  case Chain::Kind::defaults:
    // The priority order is torch's own (newer builds try cuDNN first on some GPUs): say what it
    // picked where that was measured.
    return (choices.empty() ? "default dispatch (flash, then mem-efficient, then math)"
                            : "default dispatch (it chose " + choices + ")") +
           flags;
  case Chain::Kind::no_mem_efficient: return "flash with math fallback, mem-efficient off" + flags;
  case Chain::Kind::no_flash: return "mem-efficient with math fallback, flash off" + flags;
  case Chain::Kind::math_only: return "math only (flash and mem-efficient off)";
  }
  return {};
}

std::string cost_for(const Chain& c, const Evaluation& e, const DeviceIndex& view,
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
    parts.push_back(fmt::format("math serves {} of {} case{} ({})", by_math, e.served_by.size(),
                                e.served_by.size() == 1 ? "" : "s", fmt::join(math_dtypes, ", ")));
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
    parts.push_back(fmt::format("math took {:.1f}x the time of {} on the {} case{} both passed",
                                math_ms / fused_ms, fused_name, both, both == 1 ? "" : "s"));
  return fmt::format("{}", fmt::join(parts, "; "));
}

// Whether proven chain `c` (with evaluation `e`) beats the best so far.
bool better_than(const Chain& c, const Evaluation& e, const Chain& best, const Evaluation& best_e) {
  // Fused first: flash and mem-efficient keep memory O(L), math materialises L^2 scores,
  // and the small probe shapes say little about speed at the user's real sizes. So the
  // chain that serves more cases with fused kernels wins; then time; then fewer changes.
  if (e.unfused != best_e.unfused) return e.unfused < best_e.unfused;
  // Times within 10% are noise at probe sizes; then fewer changes win.
  const bool timed = e.total_ms && best_e.total_ms && *best_e.total_ms > 0;
  const double ratio = timed ? *e.total_ms / *best_e.total_ms : 1.0;
  if (timed && ratio < 0.9) return true;
  if (timed && ratio > 1.0 / 0.9) return false;
  return changes(c) < changes(best);
}

struct Ranked {
  Chain chain;
  Evaluation evaluation;
};

struct Choice {
  std::vector<Ranked> ranked; // every proven chain, best first; empty: none was proven
  std::string why_not;        // why math alone was not proven, when it was not
};

// Proven chains, best first: the best of those left is taken each time (`better_than` has a
// noise band, so it is no ordering a sort may rely on).
Choice rank_chains(const DeviceIndex& view) {
  Choice out;
  std::vector<Ranked> proven;
  for (const Chain& c : candidate_chains(view)) {
    Evaluation e = evaluate(view, c);
    if (e.proven) proven.push_back({c, std::move(e)});
    else if (out.why_not.empty() && c.kind == Chain::Kind::math_only) out.why_not = e.why_not;
  }
  while (!proven.empty()) {
    auto best = proven.begin();
    for (auto it = std::next(best); it != proven.end(); ++it)
      if (better_than(it->chain, it->evaluation, best->chain, best->evaluation)) best = it;
    out.ranked.push_back(std::move(*best));
    proven.erase(best);
  }
  return out;
}

Recommendation recommendation_for(const Chain& c, const Evaluation& e, const DeviceIndex& d,
                                  const AdviceOptions& options, const std::string& workload) {
  Recommendation rec;
  rec.id = recommendation_id(c);
  rec.device = d.device;
  std::set<std::string> dtypes;
  for (const auto& [id, kase] : d.cases) dtypes.insert(std::string(to_string(kase.dtype)));
  rec.summary = fmt::format("{} on {}: every measured {}case passed ({} case{}, {})",
                            describe(c, dispatch_choices(c, d)), d.device,
                            d.mode == Mode::compiled ? "compiled " : "", d.case_order.size(),
                            d.case_order.size() == 1 ? "" : "s", fmt::join(dtypes, ", "));
  rec.python = python_for(c, d);
  rec.environment = environment_for(c);
  rec.cpp = cpp_for(c, d);
  rec.transformers = "model = AutoModel.from_pretrained(..., attn_implementation=\"sdpa\")  "
                     "# torch SDPA, under the flags above";
  if (workload == "training")
    rec.transformers += "; Trainer and model.train() run its backward under the same flags";
  if (workload == k_compiled_workload)
    rec.transformers += "; model = torch.compile(model) traces SDPA under the same flags";
  rec.workload = workload;
  if (!workload.empty())
    rec.summary = fmt::format("for {}: {}", workload, rec.summary);
  // vLLM serves inference only.
  if (d.is_gpu() && workload != "training")
    rec.vllm = "not measured: vLLM's --attention-backend kernels are not torch SDPA; the flags "
               "above reach vLLM only where it calls torch SDPA (e.g. ViT encoders on RDNA)";
  rec.cost = cost_for(c, e, d, options);
  rec.case_ids = d.case_order;
  return rec;
}

// Skipped because the run was interrupted or its journal ended first; a report written before
// results carried their cause says so in words only.
bool unmeasured(const CaseResult& r) {
  if (r.status != Status::skipped) return false;
  if (r.cause != SkipCause::none)
    return r.cause == SkipCause::interrupted || r.cause == SkipCause::not_measured;
  return r.reason == "interrupted" || r.reason.starts_with("not measured");
}

// An interrupted run with nothing failed has no failures to point at: say what is missing.
std::string no_configuration_remedy(const Report& report, const std::string& device) {
  size_t unmeasured_cells = 0, cells = 0, failed = 0;
  for (const CaseResult& r : report.results) {
    if (r.device != device) continue;
    ++cells;
    if (unmeasured(r)) ++unmeasured_cells;
    if (is_failure_by_default(r.status)) ++failed;
  }
  if (report.interrupted && failed == 0)
    return fmt::format("interrupted: {} of {} cells not measured; `sdpa-doctor check --resume "
                       "RUN-DIR` measures only them (the journal keeps what finished)",
                       unmeasured_cells, cells);
  return "nothing to recommend from measurements; see the failures and known issues";
}

// The device's view without its backward cases: what inference runs.
DeviceIndex forward_view(const DeviceIndex& device) {
  DeviceIndex out = device;
  std::erase_if(out.case_order, [&](const std::string& id) {
    auto it = device.cases.find(id);
    return it != device.cases.end() && it->second.backward;
  });
  std::erase_if(out.cases, [](const auto& entry) { return entry.second.backward; });
  return out;
}

// The recommendation for one workload ("" for both) from its ranked chains, with alternatives.
void recommend_from(const Report& report, const DeviceIndex& view, const Choice& choice,
                    const AdviceOptions& options, const std::string& workload, AdviceResult& out) {
  if (choice.ranked.empty()) {
    out.findings.push_back(make_finding(
        "no-working-configuration", Severity::problem, view.device,
        fmt::format("no measured configuration passes every {}case on {} ({})",
                    workload.empty() ? "" : workload + " ", view.device,
                    choice.why_not.empty() ? "nothing passed" : choice.why_not),
        no_configuration_remedy(report, view.device)));
    return;
  }
  // Two chains can print the same advice (the `default` variant and the flash, mem-efficient,
  // math chain under the same flags): each id once, in rank order.
  std::set<std::string> said;
  for (const Ranked& r : choice.ranked) {
    Recommendation rec = recommendation_for(r.chain, r.evaluation, view, options, workload);
    if (!said.insert(rec.id).second) continue;
    if (said.size() == 1) out.recommendations.push_back(std::move(rec));
    else if (said.size() <= 1 + k_max_alternatives) out.alternatives.push_back(std::move(rec));
    else break;
  }
}

// The id of the best chain, empty when none is proven.
std::string best_id(const Choice& choice) {
  return choice.ranked.empty() ? std::string() : recommendation_id(choice.ranked.front().chain);
}

} // namespace

void recommend(const Report& report, const DeviceIndex& device, const AdviceOptions& options,
               AdviceResult& out) {
  if (device.case_order.empty()) return;
  const Choice training = rank_chains(device);
  const DeviceIndex inference_view = forward_view(device);
  const bool trains = inference_view.case_order.size() < device.case_order.size();
  // Training runs the forward too, so its chain must pass every case; inference needs only the
  // forward ones. One recommendation where the best of both is the same, else one each.
  if (!trains || inference_view.case_order.empty()) {
    recommend_from(report, device, training, options, "", out);
    return;
  }
  const Choice inference = rank_chains(inference_view);
  if (best_id(inference) == best_id(training)) {
    recommend_from(report, device, training, options, "", out);
    return;
  }
  recommend_from(report, inference_view, inference, options, "inference", out);
  recommend_from(report, device, training, options, "training", out);
}

void recommend_compiled(const Report& report, const DeviceIndex& compiled,
                        const AdviceOptions& options, AdviceResult& out) {
  if (compiled.case_order.empty()) return;
  // Forward and backward alike: compiled training traces both through the same flags.
  recommend_from(report, compiled, rank_chains(compiled), options,
                 std::string(k_compiled_workload), out);
}

} // namespace sdpa_doctor::advice::detail

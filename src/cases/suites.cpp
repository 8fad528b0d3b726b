#include "cases/cases.hpp"

#include "core/io.hpp"
#include "core/text.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <optional>
#include <set>
#include <sstream>

namespace sdpa_doctor::cases {

namespace {

Case with_dropout(Case c, int percent) {
  c.dropout_percent = percent;
  return c;
}

Case backward_of(Case c) {
  c.backward = true;
  return c;
}

Case make(DType dtype, int64_t b, int64_t hq, int64_t hkv, int64_t lq, int64_t lkv, int64_t d,
          bool causal = false, Mask mask = Mask::none, Layout layout = Layout::contiguous,
          uint64_t seed = 0) {
  Case c;
  c.dtype = dtype;
  c.b = b;
  c.hq = hq;
  c.hkv = hkv;
  c.lq = lq;
  c.lkv = lkv;
  c.d = d;
  c.causal = causal;
  c.mask = mask;
  c.layout = layout;
  c.seed = seed;
  return c;
}

constexpr DType k_dtypes[] = {DType::f16, DType::bf16, DType::f32};

// Every fourth query row fully masked: padded rows, which torch >= 2.5 returns as 0.
Case with_masked_rows(Case c) {
  c.masked_rows = true;
  return c;
}

// Causal aligned bottom-right (causal_lower_right), as decoding and chunked prefill call it.
Case bottom_right(Case c) {
  c.causal = c.causal_bottom_right = true;
  return c;
}

Case with_layouts(Case c, Layout q, Layout k, Layout v) {
  c.set_layouts(q, k, v);
  return c;
}

Case with_mask(Case c, std::optional<DType> dtype, MaskShape shape,
               Layout layout = Layout::contiguous) {
  c.mask_dtype = dtype;
  c.mask_shape = shape;
  c.mask_layout = layout;
  return c;
}

// What user code hands SDPA beyond packed tensors and a (B,1,..) mask in q's dtype: one tensor
// alone in another layout, fused-projection slices, misaligned storage, masks in fp32, of every
// shape and with odd row strides, GQA with a mask, a sliding window, scores near 1e4.
void add_real_failure_surface(std::vector<Case>& out) {
  using L = Layout;
  const Case plain = make(DType::f16, 2, 8, 8, 512, 512, 64);
  out.push_back(with_layouts(plain, L::contiguous, L::contiguous, L::transposed));
  Case sliced = make(DType::bf16, 2, 8, 8, 512, 512, 128, true);
  out.push_back(with_layouts(sliced, L::strided, L::strided, L::strided));
  out.push_back(with_layouts(sliced, L::offset, L::transposed, L::strided));
  const Case add = make(DType::f16, 2, 8, 8, 256, 256, 64, false, Mask::additive);
  out.push_back(with_mask(add, DType::f32, MaskShape::batch));
  out.push_back(with_mask(make(DType::bf16, 2, 8, 8, 256, 256, 128, false, Mask::additive),
                          DType::f32, MaskShape::shared));
  out.push_back(with_mask(make(DType::f16, 1, 8, 8, 200, 200, 64, false, Mask::additive),
                          std::nullopt, MaskShape::plain, L::strided));
  out.push_back(with_mask(add, std::nullopt, MaskShape::batch_heads, L::offset));
  out.push_back(with_mask(make(DType::bf16, 1, 16, 4, 512, 512, 128, false, Mask::boolean),
                          std::nullopt, MaskShape::batch_heads));
  Case window = make(DType::bf16, 1, 8, 8, 1024, 1024, 64, false, Mask::boolean);
  window.window = 256;
  out.push_back(window);
  for (DType t : {DType::f16, DType::bf16}) {
    Case large = make(t, 1, 8, 8, 512, 512, 128);
    large.large = true;
    out.push_back(large);
  }
  // Fully masked rows (padding), with masks of both kinds, and the gradient of such rows.
  out.push_back(with_masked_rows(make(DType::f16, 2, 8, 8, 256, 256, 64, false, Mask::boolean)));
  out.push_back(with_masked_rows(make(DType::bf16, 2, 8, 8, 256, 256, 64, false, Mask::additive)));
  out.push_back(with_masked_rows(make(DType::f32, 2, 8, 8, 256, 256, 128, false, Mask::boolean)));
  out.push_back(with_masked_rows(make(DType::f16, 1, 8, 8, 256, 256, 64, false, Mask::additive)));
  const Case padded = make(DType::bf16, 2, 8, 8, 256, 256, 64, false, Mask::boolean);
  out.push_back(backward_of(with_masked_rows(padded)));
}

// Each entry exercises one gate of the backends' can_use checks; sizes stay small enough for the
// float64 oracle and torch's CPU math to finish the whole suite in seconds.
std::vector<Case> quick_suite() {
  std::vector<Case> out;
  for (DType t : k_dtypes) {
    out.push_back(make(t, 1, 4, 4, 128, 128, 64));                  // the plain case
    out.push_back(make(t, 1, 2, 2, 77, 77, 128));                   // odd length, d=128
    out.push_back(make(t, 1, 2, 2, 129, 129, 256, true));           // d=256, causal, odd
    out.push_back(make(t, 1, 4, 4, 128, 128, 64, true));            // causal
    out.push_back(make(t, 2, 4, 4, 1, 256, 128));                   // decode: Lq = 1
    out.push_back(make(t, 1, 4, 4, 64, 200, 64));                   // Lq != Lkv
    out.push_back(make(t, 1, 4, 4, 64, 200, 64, true));             // causal with Lq != Lkv
    out.push_back(make(t, 1, 8, 2, 128, 128, 64));                  // GQA 8:2
    out.push_back(make(t, 1, 4, 4, 96, 96, 64, false, Mask::boolean));
    out.push_back(make(t, 1, 4, 4, 96, 96, 64, false, Mask::additive));
    out.push_back(make(t, 2, 4, 4, 64, 64, 64, false, Mask::none, Layout::transposed));
  }
  // Variety the gates above do not need once per dtype.
  out.push_back(make(DType::f16, 1, 8, 2, 1, 129, 128, false, Mask::none, Layout::transposed, 1));
  out.push_back(make(DType::bf16, 2, 4, 4, 33, 65, 64, false, Mask::boolean, Layout::contiguous,
                     2));
  // torch refuses an explicit mask together with is_causal, so masked cases are never causal.
  out.push_back(make(DType::f16, 1, 2, 2, 48, 48, 32, false, Mask::additive, Layout::contiguous,
                     3));
  // Shapes real reports break on: causal decode against an odd KV (top-left causal, the query sees
  // one key), a tiny causal query at head dim 80, and head dim 512.
  out.push_back(make(DType::f16, 1, 4, 4, 1, 77, 64, true));
  out.push_back(make(DType::bf16, 1, 2, 2, 16, 45, 80, true));
  out.push_back(make(DType::f16, 1, 2, 2, 64, 64, 512));
  // Decoding and chunked prefill align causal bottom-right (causal_lower_right): one query
  // against 129 cached keys under GQA (ROCm/flash-attention#158 and pytorch PR#186434 fail only
  // there), and a chunk of 16 queries against 80 keys.
  out.push_back(bottom_right(make(DType::bf16, 1, 8, 2, 1, 129, 64)));
  out.push_back(bottom_right(make(DType::f16, 1, 4, 4, 16, 80, 64)));
  // Training: the backward of a causal case, of GQA and of an odd length, one per dtype, small
  // enough to cost the default check little. `--train` adds the backward twin of every case.
  out.push_back(backward_of(make(DType::f16, 1, 2, 2, 64, 64, 64, true)));
  out.push_back(backward_of(make(DType::bf16, 1, 4, 2, 64, 64, 64)));
  out.push_back(backward_of(make(DType::f32, 1, 2, 2, 33, 33, 128)));
  out.push_back(with_dropout(make(DType::bf16, 1, 4, 4, 64, 64, 64), 25));
  out.push_back(with_masked_rows(make(DType::bf16, 1, 4, 4, 64, 80, 64, false, Mask::boolean)));
  // Failures the field reports only in low precision, at their cheapest shapes: an fp32 additive
  // mask under bf16 and fp16 queries (NaN, pytorch#143242), and scores near 1e4 (PyTorch's own
  // tests require no NaN in bf16 and no overflow in fp16 there).
  for (DType t : {DType::bf16, DType::f16}) {
    out.push_back(with_mask(make(t, 1, 2, 2, 32, 32, 64, false, Mask::additive), DType::f32,
                            MaskShape::batch));
    Case large = make(t, 1, 2, 2, 32, 32, 64);
    large.large = true;
    out.push_back(large);
  }
  // The head dims kernels tile by least: 16, and 80 in fp32 under causal.
  out.push_back(make(DType::f16, 1, 2, 2, 32, 32, 16));
  out.push_back(make(DType::f32, 1, 2, 2, 16, 45, 80, true));
  return out;
}

std::vector<Case> full_suite() {
  std::vector<Case> out;
  const int64_t head_dims[] = {32, 64, 80, 96, 128, 160, 192, 256, 512};
  for (DType t : k_dtypes)
    for (int64_t d : head_dims)
      for (int64_t l : {int64_t{128}, int64_t{1024}})
        for (bool causal : {false, true}) out.push_back(make(t, 2, 8, 8, l, l, d, causal));
  // Long sequences: where tiled kernels, memory and timeouts show.
  for (DType t : k_dtypes)
    for (int64_t l : {int64_t{4096}, int64_t{8192}})
      for (int64_t d : {int64_t{64}, int64_t{128}})
        for (bool causal : {false, true}) out.push_back(make(t, 1, 8, 8, l, l, d, causal));
  // Decode.
  for (DType t : k_dtypes)
    for (int64_t lkv : {int64_t{512}, int64_t{4096}, int64_t{8192}})
      for (int64_t d : {int64_t{64}, int64_t{128}, int64_t{256}})
        out.push_back(make(t, 4, 16, 16, 1, lkv, d));
  // Grouped-query attention.
  const std::pair<int64_t, int64_t> groups[] = {{32, 8}, {8, 1}, {16, 4}};
  for (DType t : k_dtypes)
    for (auto [hq, hkv] : groups)
      for (int64_t d : {int64_t{64}, int64_t{128}})
        out.push_back(make(t, 1, hq, hkv, 1024, 1024, d, d == 128));
  // Masks.
  for (DType t : k_dtypes)
    for (Mask m : {Mask::boolean, Mask::additive})
      for (int64_t d : {int64_t{64}, int64_t{128}})
        for (int64_t l : {int64_t{256}, int64_t{2048}}) out.push_back(make(t, 2, 8, 8, l, l, d, false, m));
  // Transposed layout (B,L,H,D buffers).
  for (DType t : k_dtypes)
    for (int64_t d : {int64_t{64}, int64_t{128}, int64_t{256}})
      for (int64_t l : {int64_t{512}, int64_t{2048}})
        for (bool causal : {false, true})
          out.push_back(make(t, 2, 8, 8, l, l, d, causal, Mask::none, Layout::transposed));
  // Odd and mismatched lengths.
  const std::pair<int64_t, int64_t> lengths[] = {{17, 17}, {77, 77}, {129, 1000}, {1000, 129},
                                                  {2047, 2047}};
  for (DType t : k_dtypes)
    for (auto [lq, lkv] : lengths)
      for (int64_t d : {int64_t{64}, int64_t{128}}) out.push_back(make(t, 1, 8, 8, lq, lkv, d));
  // Tiny causal queries (decode and speculative steps) against keys that are no multiple of 8 or
  // 16, where kernels take their tile tails.
  for (DType t : k_dtypes)
    for (int64_t lq : {int64_t{1}, int64_t{2}, int64_t{8}, int64_t{16}}) {
      out.push_back(make(t, 2, 8, 8, lq, 77, 64, true));
      out.push_back(make(t, 2, 8, 8, lq, 1037, 128, true));
    }
  // The same queries aligned bottom-right, as decoding and chunked prefill call them, under GQA;
  // and the backward of a chunk.
  for (DType t : k_dtypes) {
    for (int64_t lq : {int64_t{1}, int64_t{16}})
      out.push_back(bottom_right(make(t, 2, 8, 2, lq, 1037, 128)));
    out.push_back(backward_of(bottom_right(make(t, 1, 8, 2, 64, 320, 64))));
  }
  // Head dims field reports name that the dims above leave out, at an odd length, causal or not.
  for (DType t : k_dtypes)
    for (int64_t d : {int64_t{16}, int64_t{40}, int64_t{48}, int64_t{72}, int64_t{384}})
      for (bool causal : {false, true}) out.push_back(make(t, 1, 8, 8, 257, 257, d, causal));
  // Training: the backward of the short cases at every head dim (the first block's L = 128), of
  // GQA and of a mask of each kind; backward kernels have their own head-dim limits.
  for (DType t : k_dtypes)
    for (int64_t d : head_dims)
      for (bool causal : {false, true}) out.push_back(backward_of(make(t, 2, 8, 8, 128, 128, d, causal)));
  for (DType t : k_dtypes) {
    out.push_back(backward_of(make(t, 1, 8, 2, 256, 256, 128, true)));
    out.push_back(backward_of(make(t, 2, 8, 8, 256, 256, 64, false, Mask::boolean)));
    out.push_back(backward_of(make(t, 2, 8, 8, 256, 256, 64, false, Mask::additive)));
  }
  add_real_failure_surface(out);
  for (DType t : k_dtypes) { // V the identity: Lkv = D
    out.push_back(with_dropout(make(t, 2, 8, 8, 256, 64, 64), 10));
    out.push_back(with_dropout(make(t, 1, 8, 8, 128, 128, 128, true), 30));
  }
  return out;
}

// batch x heads past 65,535: what a kernel that puts them on a launch grid's y or z axis (at most
// 65,535 blocks) cannot launch. Tiny per head, so only the count is large.
std::vector<Case> gpu_full_suite() {
  std::vector<Case> out;
  for (DType t : {DType::f16, DType::bf16})
    for (bool causal : {false, true}) out.push_back(make(t, 2048, 32, 32, 8, 8, 32, causal));
  // The heads alone past it, one decode step, for a kernel that gives the batch its own axis.
  out.push_back(make(DType::f16, 1, 65600, 65600, 1, 13, 32));
  return out;
}

} // namespace

Expected<std::vector<Case>> suite_cases(std::string_view suite) {
  if (suite == "quick") return quick_suite();
  if (suite == "full") return full_suite();
  return make_error(fmt::format("unknown suite '{}' (known: {})", suite,
                                fmt::join(std::begin(k_suites), std::end(k_suites), ", ")));
}

std::vector<Case> gpu_suite_cases(std::string_view suite) {
  if (suite == "full") return gpu_full_suite();
  return {};
}

namespace {

// A model's cases in its own dtype, or in each `--dtype` given instead.
std::vector<Case> model_cases_in(const ModelShapes& model, const CaseSources& sources) {
  std::vector<DType> dtypes = sources.dtypes;
  if (dtypes.empty()) dtypes.push_back(model.dtype);
  std::vector<Case> out;
  for (DType d : dtypes) {
    ModelShapes as = model;
    as.dtype = d;
    auto cases = model_cases(as, sources.max_len);
    out.insert(out.end(), cases.begin(), cases.end());
  }
  return out;
}

std::string plan_label(const CaseSources& sources) {
  const bool cases = !sources.specs.empty() || !sources.case_file.empty();
  if (!cases && !sources.model)
    return sources.suite.empty() ? std::string(k_default_suite) : sources.suite;
  const std::string custom = cases ? "custom" : "model";
  return sources.suite.empty() ? custom : sources.suite + "+" + custom;
}

} // namespace

bool in_compile_family(const Case& c, std::string_view suite) {
  // What the compiled call adds (Dynamo, fake tensors, AOTAutograd) does not depend on layouts,
  // seeds or the numerics cases: those stay eager.
  const bool plain = c.layout == Layout::contiguous && !c.q_layout && !c.k_layout && !c.v_layout &&
                     !c.mask_dtype && c.mask_shape == MaskShape::batch &&
                     c.mask_layout == Layout::contiguous && c.window == 0 && !c.large &&
                     !c.masked_rows && c.seed == 0 && c.dropout_percent == 0;
  if (!plain) return false;
  const bool gqa = c.hq != c.hkv;
  if (suite == "full") return c.lq * c.lkv <= 256 * 256;
  // Three cells a variant, each compile a tenth of a second: causal decode under GQA (bottom-right
  // decoding's shape: grouped heads and a CausalBias argument in one forward), in whatever dtype it
  // is planned; a mask as an argument; and training (a causal backward).
  if (c.causal && gqa && c.lq < c.lkv) return true;
  if (c.dtype != DType::f16 || c.b != 1 || gqa) return false;
  if (c.backward) return c.causal;
  return c.mask == Mask::additive && c.lq == c.lkv && c.d == 64;
}

Expected<PlannedCases> plan_cases(const CaseSources& sources) {
  const bool other_sources =
      !sources.specs.empty() || !sources.case_file.empty() || sources.model.has_value();
  std::vector<Case> all;
  std::set<std::string> family;
  if (!sources.suite.empty() || !other_sources) {
    const std::string_view name = sources.suite.empty() ? k_default_suite : sources.suite;
    auto suite = suite_cases(name);
    if (!suite) return suite.error();
    all = std::move(*suite);
    for (const Case& c : all)
      if (in_compile_family(c, name)) family.insert(c.id());
  }
  for (const std::string& spec : sources.specs) {
    auto c = parse_case_spec(spec);
    if (!c) return c.error();
    all.push_back(*c);
  }
  if (!sources.case_file.empty()) {
    auto file = load_case_file(sources.case_file);
    if (!file) return file.error();
    all.insert(all.end(), file->begin(), file->end());
  }
  // --dtype filters the other sources; --model's cases are planned in those dtypes instead.
  if (!sources.dtypes.empty())
    std::erase_if(all, [&](const Case& c) {
      return std::find(sources.dtypes.begin(), sources.dtypes.end(), c.dtype) ==
             sources.dtypes.end();
    });
  PlannedCases plan;
  if (sources.model) {
    auto planned = model_cases_in(*sources.model, sources);
    all.insert(all.end(), planned.begin(), planned.end());
    // SDPA takes no window and Case has no window mask: say what the plan leaves out.
    int64_t longest = 0;
    for (const Case& c : planned) longest = std::max(longest, c.lkv);
    if (sources.model->sliding_window > 0 && longest > sources.model->sliding_window)
      plan.notes.push_back(fmt::format("{}: sliding window {} is shorter than planned length {}: "
                                       "those cases run full causal attention",
                                       sources.model->name, sources.model->sliding_window,
                                       longest));
  }
  if (all.empty()) {
    std::vector<std::string_view> names;
    for (DType d : sources.dtypes) names.push_back(to_string(d));
    return make_error(
        fmt::format("--dtype {}: no planned case has that dtype", fmt::join(names, ",")));
  }
  std::set<std::string> seen;
  for (const Case& c : all) {
    if (c.causal && c.mask != Mask::none)
      return make_error(fmt::format("case {}: causal with an explicit mask: torch refuses "
                                    "is_causal together with attn_mask (plan one or the other)",
                                    c.id()));
    if (seen.insert(c.id()).second) plan.cases.push_back(c);
    if (sources.train && !c.backward && c.dropout_percent == 0 && c.lq > 1 &&
        seen.insert(backward_of(c).id()).second)
      plan.cases.push_back(backward_of(c));
  }
  for (const Case& c : plan.cases)
    if (sources.compile_all || family.count(c.id())) plan.compiled.push_back(c.id());
  plan.label = plan_label(sources);
  if (!sources.suite.empty())
    for (const Case& c : gpu_suite_cases(sources.suite))
      if (sources.dtypes.empty() ||
          std::find(sources.dtypes.begin(), sources.dtypes.end(), c.dtype) != sources.dtypes.end())
        plan.gpu_only.push_back(c);
  return plan;
}

Expected<std::string> read_input_file(const std::string& path, std::string_view what) {
  auto text = read_text_file(path, fmt::format("{} '{}'", what, path), k_max_case_file_bytes);
  if (!text) return text.error();
  if (text->find('\0') != std::string::npos)
    return make_error(fmt::format("{} '{}' is binary, not JSON", what, path));
  return text;
}

Expected<std::vector<Case>> load_case_file(const std::string& path) {
  auto read = read_input_file(path, "case file");
  if (!read) return make_error(read.error().message);
  const std::string& text = *read;

  std::vector<Case> cases;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      return make_error(
          fmt::format("{}:{}: not JSON: {}", path, number, json_error_text(e.what())));
    }
    auto c = case_from_json(j);
    if (!c) return make_error(fmt::format("{}:{}: {}", path, number, c.error().message));
    cases.push_back(*c);
  }
  if (cases.empty()) return make_error(fmt::format("case file '{}' holds no cases", path));
  return cases;
}

} // namespace sdpa_doctor::cases

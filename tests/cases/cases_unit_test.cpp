// The plan's data and its rules (src/cases/): suites, case files, model configs, tolerances, the
// comparison, limits, targets and variants, the refusal texts.
#include "cases/cases.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fcntl.h>
#include <limits>
#include <set>
#include <unistd.h>

using namespace sdpa_doctor;
using namespace sdpa_doctor::cases;

namespace {

std::vector<Case> suite(std::string_view name) {
  auto s = suite_cases(name);
  EXPECT_TRUE(s.has_value()) << (s ? "" : s.error().message);
  return s ? *s : std::vector<Case>{};
}

} // namespace

TEST(Suites, QuickCoversEveryGateAndStaysSmall) {
  const auto cases = suite("quick");
  EXPECT_GE(cases.size(), 24u);
  EXPECT_LE(cases.size(), 60u);
  std::set<DType> dtypes;
  std::set<int64_t> dims;
  bool odd = false, decode = false, lq_ne_lkv = false, gqa = false, causal = false,
       bool_mask = false, add_mask = false, transposed = false;
  std::set<std::string> ids;
  for (const Case& c : cases) {
    EXPECT_EQ(validate(c), "") << c.id();
    EXPECT_TRUE(ids.insert(c.id()).second) << "duplicate " << c.id();
    EXPECT_LE(std::max(c.lq, c.lkv), 256) << c.id();
    EXPECT_LE(c.b * c.hq, 8) << c.id();
    // torch refuses an explicit mask with is_causal.
    EXPECT_FALSE(c.causal && c.mask != Mask::none) << c.id();
    dtypes.insert(c.dtype);
    dims.insert(c.d);
    odd |= c.lq % 2 == 1 && c.lq > 1;
    decode |= c.lq == 1;
    lq_ne_lkv |= c.lq != c.lkv && c.lq > 1;
    gqa |= c.hq == 8 && c.hkv == 2;
    causal |= c.causal;
    bool_mask |= c.mask == Mask::boolean;
    add_mask |= c.mask == Mask::additive;
    transposed |= c.layout == Layout::transposed;
  }
  EXPECT_EQ(dtypes.size(), 3u);
  EXPECT_TRUE(dims.count(64) && dims.count(128) && dims.count(256) && dims.count(512));
  EXPECT_TRUE(odd && decode && lq_ne_lkv && gqa && causal && bool_mask && add_mask && transposed);
  // The shapes field reports break on, once each: causal decode against an odd KV.
  EXPECT_TRUE(std::any_of(cases.begin(), cases.end(), [](const Case& c) {
    return c.causal && c.lq == 1 && c.lkv % 8 != 0;
  }));
  // Decoding and chunked prefill as models call them: causal aligned bottom-right, GQA decode.
  EXPECT_TRUE(std::any_of(cases.begin(), cases.end(), [](const Case& c) {
    return c.causal_bottom_right && c.lq == 1 && c.lkv == 129 && c.hq != c.hkv;
  }));
  EXPECT_TRUE(std::any_of(cases.begin(), cases.end(), [](const Case& c) {
    return c.causal_bottom_right && c.lq == 16 && c.lkv == 80;
  }));
}

// `diff` matches cells by case id, so a renamed or dropped id breaks every baseline: the suites'
// ids are pinned, in order, and a new case adds a line to its file.
TEST(Suites, CaseIdsArePinned) {
  for (std::string name : {"quick", "full"}) {
    std::string ids;
    for (const Case& c : suite(name)) ids += c.id() + "\n";
    EXPECT_EQ(ids, sdpa_test::read_file(sdpa_test::source_path("tests/cases/golden/" + name + ".ids")))
        << name;
  }
}

TEST(Suites, FullHasTinyCausalQueriesOddKeysAndEveryReportedHeadDim) {
  const auto cases = suite("full");
  for (int64_t lq : {1, 2, 8, 16})
    EXPECT_TRUE(std::any_of(cases.begin(), cases.end(), [&](const Case& c) {
      return c.causal && c.lq == lq && c.lkv % 8 != 0 && c.lkv > lq;
    })) << lq;
  // The head dims field reports name (AOTriton 48/80, corruption at 384, 512), causal or not.
  for (int64_t d : {16, 40, 48, 72, 80, 96, 160, 192, 256, 384, 512})
    for (bool causal : {false, true})
      EXPECT_TRUE(std::any_of(cases.begin(), cases.end(), [&](const Case& c) {
        return c.d == d && c.causal == causal;
      })) << d << " causal " << causal;
  for (int64_t d : {16, 40, 48, 72, 384})
    EXPECT_TRUE(std::any_of(cases.begin(), cases.end(),
                            [&](const Case& c) { return c.d == d && c.lkv % 16 != 0; }))
        << d;
  // A CPU runs the whole suite: the GPU launch limits live in gpu_suite_cases.
  for (const Case& c : cases) EXPECT_LE(c.b * c.hq, k_max_grid_yz) << c.id();
}

TEST(Suites, GpuOnlyCasesPassTheGridLimitAndACpuNeverRunsThem) {
  EXPECT_TRUE(gpu_suite_cases("quick").empty());
  const auto gpu = gpu_suite_cases("full");
  ASSERT_FALSE(gpu.empty());
  std::set<std::string> full_ids;
  for (const Case& c : suite("full")) full_ids.insert(c.id());
  for (const Case& c : gpu) {
    EXPECT_EQ(validate(c), "") << c.id();
    EXPECT_GT(c.b * c.hq, k_max_grid_yz) << c.id();
    EXPECT_EQ(full_ids.count(c.id()), 0u) << c.id();
    EXPECT_EQ(target_guard(c, "cuda:0"), "") << c.id();
    const std::string why = target_guard(c, "cpu");
    EXPECT_NE(why.find("65535"), std::string::npos) << why;
    EXPECT_NE(why.find(std::to_string(c.b * c.hq)), std::string::npos) << why;
  }
  // Inputs stay small enough for the host's float64 oracle.
  for (const Case& c : gpu) EXPECT_LE(case_host_bytes(c), int64_t{1} << 30) << c.id();
  for (const Case& c : suite("full")) EXPECT_EQ(target_guard(c, "cpu"), "") << c.id();
}

TEST(Suites, FullHasHundredsUpTo8kAndDims16To512) {
  const auto cases = suite("full");
  EXPECT_GE(cases.size(), 200u);
  int64_t max_l = 0, min_d = 1 << 20, max_d = 0;
  std::set<std::string> ids;
  bool transposed = false;
  for (const Case& c : cases) {
    EXPECT_EQ(validate(c), "") << c.id();
    EXPECT_TRUE(ids.insert(c.id()).second) << "duplicate " << c.id();
    max_l = std::max({max_l, c.lq, c.lkv});
    min_d = std::min(min_d, c.d);
    max_d = std::max(max_d, c.d);
    transposed |= c.layout == Layout::transposed;
  }
  EXPECT_EQ(max_l, 8192);
  EXPECT_EQ(min_d, 16);
  EXPECT_EQ(max_d, 512);
  EXPECT_TRUE(transposed);
}

TEST(Suites, UnknownSuiteNamesTheKnownOnes) {
  auto s = suite_cases("fast");
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find("fast"), std::string::npos);
  EXPECT_NE(s.error().message.find("quick"), std::string::npos);
  EXPECT_NE(s.error().message.find("full"), std::string::npos);
}

TEST(CaseFile, ReadsLinesSkippingBlanksAndComments) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("c.jsonl"),
                        "# my cases\n{\"dtype\":\"bf16\",\"h\":4,\"l\":33,\"d\":64}\n\n"
                        "{\"dtype\":\"fp32\",\"hq\":8,\"hkv\":2,\"lq\":1,\"lkv\":9,\"d\":32,"
                        "\"mask\":\"bool\"}\r\n");
  auto cases = load_case_file(dir.file("c.jsonl"));
  ASSERT_TRUE(cases.has_value()) << cases.error().message;
  ASSERT_EQ(cases->size(), 2u);
  EXPECT_EQ((*cases)[0].id(), "bf16-b1-h4-q33-k33-d64");
  EXPECT_EQ((*cases)[1].hkv, 2);
  EXPECT_EQ((*cases)[1].mask, Mask::boolean);
}

TEST(CaseFile, ErrorsNameTheLine) {
  sdpa_test::TempDir dir;
  struct Bad {
    std::string text;
    std::string expect;
  };
  const Bad bad[] = {
      {"{\"d\":64}\nnot json\n", ":2: not JSON"},
      {"{\"d\":64}\n\n[1,2]\n", ":3:"},
      {"{\"d\":64,\"hq\":8,\"hkv\":3}\n", ":1:"},                // wrong shape (GQA)
      {"{\"d\":-4}\n", ":1:"},                                     // negative size
      {"{\"d\":64,\"colour\":\"red\"}\n", ":1: unknown key 'colour'"},
  };
  for (const auto& b : bad) {
    sdpa_test::write_file(dir.file("bad.jsonl"), b.text);
    auto r = load_case_file(dir.file("bad.jsonl"));
    ASSERT_FALSE(r.has_value()) << b.text;
    EXPECT_NE(r.error().message.find(b.expect), std::string::npos) << r.error().message;
  }
}

TEST(CaseFile, RefusesEmptyBinaryMissingAndHuge) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("empty"), "");
  EXPECT_NE(load_case_file(dir.file("empty")).error().message.find("no cases"), std::string::npos);
  sdpa_test::write_file(dir.file("comments"), "# nothing\n\n");
  EXPECT_FALSE(load_case_file(dir.file("comments")).has_value());
  sdpa_test::write_file(dir.file("bin"), std::string("\x7f" "ELF\0\0\x01", 7));
  EXPECT_NE(load_case_file(dir.file("bin")).error().message.find("binary"), std::string::npos);
  EXPECT_FALSE(load_case_file(dir.file("missing")).has_value());
  EXPECT_NE(load_case_file(dir.path()).error().message.find("directory"), std::string::npos);
  {
    const int fd = ::open(dir.file("huge").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, k_max_case_file_bytes + 1), 0);
    ::close(fd);
  }
  EXPECT_NE(load_case_file(dir.file("huge")).error().message.find("limit"), std::string::npos);
}

// --- model configs ---------------------------------------------------------------------------

TEST(ModelConfig, ShippedConfigsReadTheirPublishedShapes) {
  auto llama = load_model_config(sdpa_test::source_path("data/models/llama-3-8b.json"));
  ASSERT_TRUE(llama.has_value()) << llama.error().message;
  EXPECT_EQ(llama->name, "meta-llama/Meta-Llama-3-8B");
  EXPECT_EQ(llama->heads, 32);
  EXPECT_EQ(llama->kv_heads, 8);
  EXPECT_EQ(llama->head_dim, 128); // hidden 4096 / 32 heads
  EXPECT_EQ(llama->max_positions, 8192);
  EXPECT_EQ(llama->dtype, DType::bf16);
  EXPECT_EQ(llama->sliding_window, 0);
  EXPECT_EQ(llama->describe(), "meta-llama/Meta-Llama-3-8B (32 heads, 8 kv heads, d=128)");

  auto qwen = load_model_config(sdpa_test::source_path("data/models/qwen2.5-7b.json"));
  ASSERT_TRUE(qwen.has_value()) << qwen.error().message;
  EXPECT_EQ(qwen->heads, 28);
  EXPECT_EQ(qwen->kv_heads, 4);
  EXPECT_EQ(qwen->head_dim, 128);
  EXPECT_EQ(qwen->sliding_window, 0); // use_sliding_window: false

  auto mistral = load_model_config(sdpa_test::source_path("data/models/mistral-7b-v0.1.json"));
  ASSERT_TRUE(mistral.has_value()) << mistral.error().message;
  EXPECT_EQ(mistral->sliding_window, 4096);
  EXPECT_NE(mistral->describe().find("window 4096"), std::string::npos);
}

TEST(ModelConfig, DefaultsAndFallbacks) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("c.json"),
                        R"({"model_type":"tiny","num_attention_heads":4,"hidden_size":256,)"
                        R"("head_dim":null,"sliding_window":null,"max_position_embeddings":100})");
  auto m = load_model_config(dir.file("c.json"));
  ASSERT_TRUE(m.has_value()) << m.error().message;
  EXPECT_EQ(m->name, "c.json"); // no _name_or_path: the file's name
  EXPECT_EQ(m->kv_heads, 4);
  EXPECT_EQ(m->head_dim, 64);
  EXPECT_EQ(m->dtype, DType::bf16);
  EXPECT_EQ(m->sliding_window, 0);
}

TEST(ModelConfig, PlansPrefillAndDecodeCappedByPositions) {
  ModelShapes m;
  m.name = "m";
  m.heads = 32;
  m.kv_heads = 8;
  m.head_dim = 128;
  m.max_positions = 8192;
  m.dtype = DType::f16;
  std::vector<std::string> ids;
  for (const Case& c : model_cases(m, 256)) ids.push_back(c.id());
  EXPECT_EQ(ids, (std::vector<std::string>{
                     "fp16-b1-h32:8-q64-k64-d128-causal", "fp16-b1-h32:8-q128-k128-d128-causal",
                     "fp16-b1-h32:8-q256-k256-d128-causal",
                     "fp16-b1-h32:8-q64-k256-d128-causal_br", "fp16-b1-h32:8-q1-k256-d128"}));
  m.max_positions = 100; // never past what the model can attend to
  for (const Case& c : model_cases(m, 256)) {
    EXPECT_LE(c.lkv, 100);
    EXPECT_EQ(validate(c), "");
  }
  EXPECT_EQ(model_cases(m, 32).size(), 3u); // prefill 32, a chunk of 8 against 32, the decode
  EXPECT_EQ(model_target_case(m).lq, 100);
}

TEST(ModelConfig, BadConfigsAreOneLineErrors) {
  sdpa_test::TempDir dir;
  struct Bad {
    const char* text;
    const char* expect;
  };
  const Bad bad[] = {
      {"not json", "not JSON"},
      {"[1,2]", "JSON object"},
      {R"({"hidden_size":4096,"max_position_embeddings":8})", "missing num_attention_heads"},
      {R"({"num_attention_heads":32,"max_position_embeddings":8})", "missing head_dim"},
      {R"({"num_attention_heads":30,"hidden_size":4096,"max_position_embeddings":8})",
       "does not divide hidden_size"},
      {R"({"num_attention_heads":32,"num_key_value_heads":5,"head_dim":64,)"
       R"("max_position_embeddings":8})",
       "does not divide num_attention_heads"},
      {R"({"num_attention_heads":0,"head_dim":64,"max_position_embeddings":8})", "positive"},
      {R"({"num_attention_heads":-4,"head_dim":64,"max_position_embeddings":8})", "positive"},
      {R"({"num_attention_heads":4.5,"head_dim":64,"max_position_embeddings":8})", "whole"},
      {R"({"num_attention_heads":4,"head_dim":64})", "missing max_position_embeddings"},
      {R"({"num_attention_heads":4,"head_dim":64,"max_position_embeddings":8,)"
       R"("torch_dtype":"int8"})",
       "torch_dtype"},
  };
  for (const Bad& b : bad) {
    sdpa_test::write_file(dir.file("c.json"), b.text);
    auto r = load_model_config(dir.file("c.json"));
    ASSERT_FALSE(r.has_value()) << b.text;
    EXPECT_NE(r.error().message.find(b.expect), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
  }
  EXPECT_FALSE(load_model_config(dir.file("missing.json")).has_value());
}

TEST(Tolerance, DefaultsFollowTheDtypeRounding) {
  EXPECT_LT(default_tolerance(DType::f32).rtol, default_tolerance(DType::f16).rtol);
  EXPECT_LT(default_tolerance(DType::f16).rtol, default_tolerance(DType::bf16).rtol);
  // Each at least a few units in the last place of the dtype at 1.0, at most ~50 of them.
  EXPECT_GE(default_tolerance(DType::f16).atol, 0x1p-11);
  EXPECT_LE(default_tolerance(DType::f16).atol, 50 * 0x1p-11);
  EXPECT_GE(default_tolerance(DType::bf16).atol, 0x1p-8);
  EXPECT_LE(default_tolerance(DType::bf16).atol, 50 * 0x1p-8);
  EXPECT_GE(default_tolerance(DType::f32).atol, 0x1p-24);
}

TEST(Tolerance, OverridesParseAndRoundTrip) {
  auto p = parse_tolerance_overrides("bf16=0.02:0.03, float16=1e-4:0");
  ASSERT_TRUE(p.has_value()) << p.error().message;
  EXPECT_EQ(p->for_dtype(DType::bf16), (Tolerance{0.02, 0.03}));
  EXPECT_EQ(p->for_dtype(DType::f16), (Tolerance{1e-4, 0}));
  EXPECT_EQ(p->for_dtype(DType::f32), k_tolerance_fp32);
  auto back = parse_tolerance_overrides(to_string(*p));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, *p);
  EXPECT_EQ(*parse_tolerance_overrides(""), TolerancePolicy{});
}

TEST(Tolerance, BadOverridesAreErrors) {
  for (const char* bad : {"bf16", "bf16=0.1", "int8=1:1", "fp16=-1:0", "fp16=a:b", "fp16=1:inf",
                          "fp16=1:1x"}) {
    auto p = parse_tolerance_overrides(bad);
    EXPECT_FALSE(p.has_value()) << bad;
    if (!p) {
      EXPECT_NE(p.error().message.find("invalid tolerance"), std::string::npos) << bad;
    }
  }
}

TEST(Compare, ExactIsPass) {
  const float out[] = {0.5f, -0.25f, 0.0f};
  const double ref[] = {0.5, -0.25, 0.0};
  auto c = compare_to_oracle(out, ref, 3, {0, 0});
  EXPECT_EQ(c.status, Status::pass);
  EXPECT_EQ(*c.metrics.max_abs_err, 0.0);
  EXPECT_EQ(*c.metrics.rel_l2_err, 0.0);
  EXPECT_EQ(*c.metrics.frac_outside_tol, 0.0);
  EXPECT_EQ(c.reason, "");
}

TEST(Compare, OutsideUsesAtolPlusRtolTimesRef) {
  const float out[] = {1.0f + 0.011f, 2.0f + 0.02f, 0.0f};
  const double ref[] = {1.0, 2.0, 0.0};
  // 0.01 + 0.0 * |ref|: both non-zero errors are outside.
  auto a = compare_to_oracle(out, ref, 3, {0.01, 0});
  EXPECT_EQ(a.status, Status::mismatch);
  EXPECT_NEAR(*a.metrics.frac_outside_tol, 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(*a.metrics.max_abs_err, 0.02, 1e-6);
  EXPECT_NE(a.reason.find("2 of 3"), std::string::npos) << a.reason;
  // 0.001 + 0.01 * |ref|: 0.011 = limit for 1.0 (float rounding puts it just above) and
  // 0.02 < 0.021 for 2.0.
  auto b = compare_to_oracle(out, ref, 3, {0.002, 0.01});
  EXPECT_EQ(b.status, Status::pass);
  const double rel = std::sqrt((0.011 * 0.011 + 0.02 * 0.02) / 5.0);
  EXPECT_NEAR(*b.metrics.rel_l2_err, rel, 1e-6);
}

TEST(Compare, NanAndInfAreNonfinite) {
  const float out[] = {std::numeric_limits<float>::quiet_NaN(), 1.0f,
                       std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  const double ref[] = {0.5, 1.0, 0.5, 0.5};
  auto c = compare_to_oracle(out, ref, 4, {1, 1});
  EXPECT_EQ(c.status, Status::nonfinite);
  EXPECT_EQ(c.metrics.nan_count, 1);
  EXPECT_EQ(c.metrics.inf_count, 2);
  EXPECT_EQ(*c.metrics.frac_outside_tol, 0.75);
  EXPECT_EQ(*c.metrics.max_abs_err, 0.0); // over the finite pairs only
}

// Fully masked rows (rows i % 4 == 3 of a masked_rows case; here Lq = 8, D = 2: elements 6, 7,
// 14 and 15). Under torch < 2.5 semantics the oracle is NaN there and a NaN output is right.
TEST(CompareMaskedRows, ExpectedNanIsAcceptedAndAFiniteValueThereIsAMismatch) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const MaskedRows rows{8, 2};
  std::vector<double> ref(16, 0.5);
  for (size_t i : {6, 7, 14, 15}) ref[i] = nan;
  std::vector<float> out(16, 0.5f);
  for (size_t i : {6, 7, 14, 15}) out[i] = std::numeric_limits<float>::quiet_NaN();
  auto ok = compare_to_oracle(out.data(), ref.data(), 16, {0.01, 0.01}, rows);
  EXPECT_EQ(ok.status, Status::pass) << ok.reason;
  EXPECT_EQ(ok.metrics.nan_count, 0);
  out[7] = out[14] = 0.0f; // torch >= 2.5's answer where torch < 2.5 gives NaN
  auto bad = compare_to_oracle(out.data(), ref.data(), 16, {0.01, 0.01}, rows);
  EXPECT_EQ(bad.status, Status::mismatch);
  EXPECT_EQ(bad.reason, "2 of 4 elements in fully masked rows are finite where torch < 2.5 "
                        "returns NaN");
  out[0] = 0.9f; // and one ordinary element off
  auto both = compare_to_oracle(out.data(), ref.data(), 16, {0.01, 0.01}, rows);
  EXPECT_EQ(both.status, Status::mismatch);
  EXPECT_EQ(both.reason.rfind("2 of 4 elements in fully masked rows", 0), 0u) << both.reason;
  EXPECT_NE(both.reason.find("; 1 of 16 elements outside"), std::string::npos) << both.reason;
  // The ordinary part's example is an ordinary element, not the finite one in a masked row before it.
  out[0] = 0.5f;
  out[9] = 0.9f;
  auto after = compare_to_oracle(out.data(), ref.data(), 16, {0.01, 0.01}, rows);
  EXPECT_NE(after.reason.find("(first at index 9: got 0.9, expected 0.5)"), std::string::npos)
      << after.reason;
}

// Under torch >= 2.5 semantics the oracle is 0 there: a NaN is nonfinite, and the reason names the
// fully masked rows when every non-finite element is in them (a backend returning NaN for padded
// rows).
TEST(CompareMaskedRows, NanUnderZeroSemanticsIsNonfiniteAndNamesTheRows) {
  const MaskedRows rows{8, 2};
  std::vector<double> ref(16, 0.5);
  for (size_t i : {6, 7, 14, 15}) ref[i] = 0.0;
  std::vector<float> out(ref.begin(), ref.end());
  out[6] = out[15] = std::numeric_limits<float>::quiet_NaN();
  auto in_rows = compare_to_oracle(out.data(), ref.data(), 16, {0.01, 0.01}, rows);
  EXPECT_EQ(in_rows.status, Status::nonfinite);
  EXPECT_EQ(in_rows.reason, "2 NaN and 0 Inf of 16 output elements (first at index 6), all in "
                            "fully masked rows, where torch >= 2.5 returns 0");
  out[1] = std::numeric_limits<float>::quiet_NaN(); // one elsewhere: no such claim
  auto mixed = compare_to_oracle(out.data(), ref.data(), 16, {0.01, 0.01}, rows);
  EXPECT_EQ(mixed.status, Status::nonfinite);
  EXPECT_EQ(mixed.reason.find("fully masked"), std::string::npos) << mixed.reason;
  // Without masked rows the wording is what it always was.
  out[1] = 0.5f;
  auto plain = compare_to_oracle(out.data(), ref.data(), 16, {0.01, 0.01});
  EXPECT_EQ(plain.reason, "2 NaN and 0 Inf of 16 output elements (first at index 6)");
  // A gradient pair carries its rows too (dq's).
  const std::vector<float> exact(ref.begin(), ref.end());
  auto grads = compare_gradients({{"dq", out.data(), ref.data(), 16, rows},
                                  {"dk", exact.data(), ref.data(), 16},
                                  {"dv", exact.data(), ref.data(), 16}},
                                 {0.01, 0.01});
  EXPECT_EQ(grads.status, Status::nonfinite);
  EXPECT_NE(grads.reason.find("all in fully masked rows"), std::string::npos) << grads.reason;
  const Case c = *parse_case_spec("dtype=fp16,b=1,h=2,lq=8,lkv=8,d=2,mask=bool,masked_rows");
  EXPECT_EQ(masked_rows_of(c).lq, 8);
  EXPECT_EQ(masked_rows_of(c).d, 2);
  Case plain_case = c;
  plain_case.masked_rows = false;
  EXPECT_FALSE(masked_rows_of(plain_case).contains(6));
  EXPECT_TRUE(masked_rows_of(c).contains(6));
  EXPECT_FALSE(masked_rows_of(c).contains(8));
}

TEST(Limits, DeadlineGrowsWithSizeAndIsClamped) {
  auto parsed = parse_case_spec("dtype=fp16,b=1,h=2,l=8,d=16");
  ASSERT_TRUE(parsed.has_value());
  const Case small = *parsed;
  auto big = parse_case_spec("dtype=bf16,b=1,h=32,l=8192,d=128");
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(default_case_deadline(small, false), std::chrono::milliseconds(15'000));
  EXPECT_GT(default_case_deadline(*big, false), default_case_deadline(*big, true));
  EXPECT_GT(default_case_deadline(*big, true), default_case_deadline(small, true));
  EXPECT_LE(default_case_deadline(*big, false), std::chrono::milliseconds(3'600'000));
}

TEST(Limits, MemoryGuardGivesTheNumbers) {
  auto c = parse_case_spec("dtype=fp16,b=1,h=32,l=16384,d=128");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(case_memory_bytes(*c), c->input_bytes() + c->math_scores_bytes());
  EXPECT_EQ(memory_guard(*c, int64_t{1} << 50), "");
  const std::string why = memory_guard(*c, int64_t{16} << 30);
  EXPECT_NE(why.find("math scores"), std::string::npos) << why;
  EXPECT_NE(why.find(std::to_string(case_memory_bytes(*c))), std::string::npos) << why;
  EXPECT_NE(why.find("but only 16 GiB"), std::string::npos) << why;
  EXPECT_EQ(memory_guard(*c, int64_t{16} << 30, /*math_scores=*/false), "");
  EXPECT_GT(case_host_bytes(*c), c->q_elements() * 8);
}

TEST(Plan, VariantsPerTarget) {
  auto names = [](const std::vector<Variant>& vs) {
    std::vector<std::string> out;
    for (const auto& v : vs) out.push_back(v.name());
    return out;
  };
  EXPECT_EQ(names(torch_variants("cpu")),
            (std::vector<std::string>{"math", "flash", "mem_efficient", "cudnn", "default"}));
  const auto gpu = names(torch_variants("cuda:1"));
  EXPECT_EQ(gpu.size(), 9u);
  for (const char* v : {"flash[ck]", "flash[aotriton]", "flash[aotriton,experimental]",
                        "mem_efficient[aotriton,experimental]"})
    EXPECT_NE(std::find(gpu.begin(), gpu.end(), v), gpu.end()) << v;
  EXPECT_EQ(names(plan_variants(Probe::reference, "cpu")),
            (std::vector<std::string>{"ref-math", "ref-flash"}));
  EXPECT_EQ(plan_variants(Probe::python, "cuda:0").size(), 9u);
  EXPECT_TRUE(is_gpu_target("cuda:0"));
  EXPECT_FALSE(is_gpu_target("cuda:"));
  EXPECT_FALSE(is_gpu_target("cuda:-1"));
  EXPECT_FALSE(is_valid_target("gpu0"));
  EXPECT_TRUE(is_valid_target("cpu"));
}

TEST(Plan, RefusalsAreRecognised) {
  EXPECT_TRUE(is_backend_refusal("No available kernel. Aborting execution."));
  EXPECT_TRUE(is_backend_refusal("No viable backend for scaled_dot_product_attention was found."));
  EXPECT_TRUE(is_backend_refusal("Torch was not compiled with cuDNN attention."));
  EXPECT_TRUE(is_backend_refusal("Flash attention was not compiled for current AMD GPU architecture"));
  EXPECT_FALSE(is_backend_refusal("HIP error: invalid argument"));
  EXPECT_FALSE(is_backend_refusal("Explicit attn_mask should not be set when is_causal=True"));
}

TEST(Plan, RefusalsAreTheDataFilesList) {
  // The one source both workers read; the C++ list is generated from it at configure time.
  const auto data = nlohmann::json::parse(
      sdpa_test::read_file(sdpa_test::source_path("data/backend_refusals.json")));
  std::vector<std::string> expected = data.at("refusals").get<std::vector<std::string>>();
  std::vector<std::string> compiled(backend_refusals().begin(), backend_refusals().end());
  EXPECT_EQ(compiled, expected);
  EXPECT_FALSE(expected.empty());
}

// A gradient is measured with atol per unit of its own size: an error that is small next to a
// large gradient passes, the same error next to a small one does not.
TEST(Compare, GradientToleranceScalesWithTheGradientsSize) {
  const Tolerance t = gradient_tolerance({1e-3, 1e-3});
  EXPECT_DOUBLE_EQ(t.atol, 1e-3 * k_gradient_slack);
  EXPECT_DOUBLE_EQ(t.rtol, 1e-3 * k_gradient_slack);
  const double big[] = {40.0, -10.0};
  const float off_big[] = {40.05f, -10.0f}; // 0.05 off: inside 0.002 * 40 + 0.002 * 40
  EXPECT_EQ(measure_tensor(off_big, big, 2, t, {}, true).outside, 0);
  EXPECT_EQ(measure_tensor(off_big, big, 2, t, {}, false).outside, 0); // rtol alone: 0.08
  const double small[] = {0.25, -0.5};
  const float off_small[] = {0.255f, -0.5f}; // 0.005 off: outside 0.002 + 0.002 * 0.25
  EXPECT_EQ(measure_tensor(off_small, small, 2, t, {}, true).outside, 1);
  const double wide[] = {40.0, 0.0};
  const float off_zero[] = {40.0f, 0.05f}; // 0.05 off a 0: inside 0.002 * 40 only with the scale
  EXPECT_EQ(measure_tensor(off_zero, wide, 2, t, {}, true).outside, 0);
  EXPECT_EQ(measure_tensor(off_zero, wide, 2, t, {}, false).outside, 1);

  const float dq[] = {0.1f, 0.2f};
  const double dq_ref[] = {0.1, 0.2};
  const float dk[] = {40.05f, -10.0f}; // 0.05 off: inside 0.08 + 0.002 * 40
  const float dv[] = {0.3f, 0.9f};    // 0.5 off at index 1
  const double dv_ref[] = {0.3, 0.4};
  const Comparison c = compare_gradients(
      {{"dq", dq, dq_ref, 2}, {"dk", dk, big, 2}, {"dv", dv, dv_ref, 2}}, {1e-3, 1e-3});
  EXPECT_EQ(c.status, Status::mismatch);
  EXPECT_EQ(c.reason.rfind("dv: 1 of 2 elements", 0), 0u) << c.reason;
  EXPECT_NEAR(*c.metrics.max_abs_err, 0.5, 1e-6);
}

// A dropout case's outputs, as a healthy backend makes them: each probability dropped with
// probability p (a seeded Bernoulli draw), else scaled by 1/(1-p).
struct DropoutSample {
  std::vector<double> probs;
  std::vector<float> first, same, other;
};

DropoutSample healthy_dropout(size_t n, double p) {
  DropoutSample s;
  uint64_t state = 7;
  auto uniform = [&] { // a small LCG: the test needs no library's generator
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return double(state >> 11) * 0x1.0p-53;
  };
  for (size_t i = 0; i < n; ++i) s.probs.push_back(0.002 + 0.02 * double(i % 17));
  for (std::vector<float>* out : {&s.first, &s.other})
    for (size_t i = 0; i < n; ++i)
      out->push_back(uniform() < p ? 0.0f : float(s.probs[i] / (1 - p)));
  s.same = s.first;
  return s;
}

Comparison judge(const DropoutSample& s, double p) {
  return judge_dropout({s.first.data(), s.same.data(), s.other.data()}, s.probs.data(),
                       s.probs.size(), p, {1e-3, 1e-3});
}

TEST(Dropout, AHealthyBackendPassesAtEveryProbability) {
  for (double p : {0.1, 0.25, 0.5, 0.9}) {
    const Comparison c = judge(healthy_dropout(20000, p), p);
    EXPECT_EQ(c.status, Status::pass) << p << ": " << c.reason;
    EXPECT_LT(*c.metrics.max_abs_err, 1e-6);
  }
}

TEST(Dropout, EachBrokenPropertyIsNamed) {
  const double p = 0.25;
  DropoutSample none = healthy_dropout(20000, p); // drops nothing: every value scaled
  for (size_t i = 0; i < none.first.size(); ++i) none.first[i] = float(none.probs[i] / (1 - p));
  none.same = none.first;
  Comparison c = judge(none, p);
  EXPECT_EQ(c.status, Status::mismatch);
  EXPECT_NE(c.reason.find("0.00% of 20000 probabilities >= 0.001 were dropped, expected 25%"),
            std::string::npos) << c.reason;

  DropoutSample unscaled = healthy_dropout(20000, p); // drops, but forgets 1/(1-p)
  for (size_t i = 0; i < unscaled.first.size(); ++i)
    if (unscaled.first[i] != 0) unscaled.first[i] = float(unscaled.probs[i]);
  unscaled.same = unscaled.first;
  c = judge(unscaled, p);
  EXPECT_EQ(c.status, Status::mismatch);
  EXPECT_EQ(c.reason.rfind("dropout: ", 0), 0u) << c.reason;
  EXPECT_NE(c.reason.find("neither 0 nor their probability / (1 - p)"), std::string::npos);

  DropoutSample unseeded = healthy_dropout(20000, p); // the same seed draws anew
  unseeded.same = unseeded.other;
  c = judge(unseeded, p);
  EXPECT_NE(c.reason.find("not reproducible: "), std::string::npos) << c.reason;
  EXPECT_EQ(c.reason.find("seed is ignored"), std::string::npos);

  DropoutSample fixed = healthy_dropout(20000, p); // the seed changes nothing
  fixed.other = fixed.first;
  c = judge(fixed, p);
  EXPECT_EQ(c.reason, "dropout: the seed is ignored: a run under another seed gave the same "
                      "output");

  DropoutSample nan = healthy_dropout(20000, p);
  nan.first[10] = std::numeric_limits<float>::quiet_NaN();
  nan.same = nan.first;
  c = judge(nan, p);
  EXPECT_EQ(c.status, Status::nonfinite);
  EXPECT_EQ(c.metrics.nan_count, 1);
  nan.first[3] = 7.0f; // a value off before it: the NaN's example is still the NaN
  nan.same = nan.first;
  c = judge(nan, p);
  EXPECT_NE(c.reason.find("1 NaN and 0 Inf of 20000 output elements (first at index 10)"),
            std::string::npos)
      << c.reason;

  DropoutSample zeros = healthy_dropout(20000, p); // a kernel that never ran
  std::fill(zeros.first.begin(), zeros.first.end(), 0.0f);
  zeros.same = zeros.other = zeros.first;
  c = judge(zeros, p);
  EXPECT_EQ(c.reason.rfind(std::string(k_all_zero_output) + ": dropout: 100.00%", 0), 0u)
      << c.reason;
}

TEST(Dropout, TheBinomialBoundHoldsAtSixSigmasAndNotFarBeyond) {
  const double p = 0.2;
  DropoutSample s = healthy_dropout(10000, p);
  // 10000 counted: sigma 40, bound 241 drops from the expected 2000. Make the count exact.
  auto set_dropped = [&](size_t target) {
    size_t dropped = 0;
    for (size_t i = 0; i < s.first.size(); ++i) {
      const bool drop = dropped < target;
      s.first[i] = drop ? 0.0f : float(s.probs[i] / (1 - p));
      dropped += drop;
    }
    s.same = s.first;
  };
  set_dropped(2000 + 240);
  EXPECT_EQ(judge(s, p).status, Status::pass) << judge(s, p).reason;
  set_dropped(2000 + 242);
  EXPECT_EQ(judge(s, p).status, Status::mismatch);
  // Too few probabilities to judge a fraction (40 of 100 dropped at p = 0.2): only the
  // element-wise properties count.
  s = healthy_dropout(100, p);
  set_dropped(40);
  EXPECT_EQ(judge(s, p).status, Status::pass) << judge(s, p).reason;
}

TEST(Compare, DirectionsCombineIntoOneVerdictThatSaysWhichFailed) {
  Comparison pass;
  pass.metrics.max_abs_err = 0.001;
  Comparison mismatch;
  mismatch.status = Status::mismatch;
  mismatch.reason = "dk: 3 of 9 elements outside";
  mismatch.metrics.max_abs_err = 0.5;
  Comparison nan;
  nan.status = Status::nonfinite;
  nan.reason = "1 NaN and 0 Inf of 9 output elements";
  nan.metrics.nan_count = 1;

  const Comparison backward_only = combine_directions(pass, mismatch);
  EXPECT_EQ(backward_only.status, Status::mismatch);
  EXPECT_EQ(backward_only.reason, "backward: dk: 3 of 9 elements outside");
  EXPECT_DOUBLE_EQ(*backward_only.metrics.max_abs_err, 0.5);
  const Comparison forward_only = combine_directions(nan, pass);
  EXPECT_EQ(forward_only.status, Status::nonfinite);
  EXPECT_EQ(forward_only.reason, nan.reason);
  const Comparison both = combine_directions(mismatch, nan);
  EXPECT_EQ(both.status, Status::nonfinite);
  EXPECT_EQ(both.reason, "forward: dk: 3 of 9 elements outside; backward: 1 NaN and 0 Inf of 9 "
                         "output elements");
  EXPECT_EQ(combine_directions(pass, pass).status, Status::pass);
}

TEST(Plan, TrainAddsTheBackwardTwinOfEveryCaseWithMoreThanOneQuery) {
  CaseSources sources;
  sources.specs = {"dtype=fp16,h=2,l=64,d=64", "dtype=fp16,h=2,lq=1,lkv=64,d=64",
                   "dtype=bf16,h=2,l=32,d=64,backward"};
  sources.train = true;
  auto plan = plan_cases(sources);
  ASSERT_TRUE(plan) << plan.error().message;
  std::vector<std::string> ids;
  for (const Case& c : plan->cases) ids.push_back(c.id());
  EXPECT_EQ(ids, (std::vector<std::string>{"fp16-b1-h2-q64-k64-d64", "fp16-b1-h2-q64-k64-d64-bwd",
                                           "fp16-b1-h2-q1-k64-d64", "bf16-b1-h2-q32-k32-d64-bwd"}));
  sources.train = false;
  EXPECT_EQ(plan_cases(sources)->cases.size(), 3u);
}

// --- the doctor's judge of a worker's events ------------------------------------------------------

namespace {

nlohmann::json tensor_measure(int64_t n, int64_t outside = 0, int64_t first = -1) {
  TensorErrors t;
  t.n = n;
  t.tolerance = {0.004, 0.004};
  t.max_abs_err = outside ? 0.5 : 1e-4;
  t.rel_l2_err = outside ? 0.01 : 1e-4;
  t.outside = outside;
  t.first_mismatch = first;
  t.mismatch_got = outside ? 0.75 : 0;
  t.mismatch_expected = outside ? 0.25 : 0;
  return to_json(output_only(t))["out"];
}

} // namespace

TEST(JudgeEvent, AMeasuredResultGetsItsVerdictDirectionsAndMetrics) {
  nlohmann::json result = {{"event", "result"}, {"case", "c"}, {"status", "measured"},
                           {"reason", ""}, {"metrics", {{"time_ms", 0.75}}},
                           {"measured", {{"out", tensor_measure(64)},
                                         {"dq", tensor_measure(64, 1, 32)},
                                         {"dk", tensor_measure(64)},
                                         {"dv", tensor_measure(64)}}}};
  judge_worker_event(result);
  EXPECT_EQ(result["status"], "mismatch");
  EXPECT_EQ(result["reason"], "backward: dq: 1 of 64 elements outside atol=0.004 + "
                              "rtol=0.004*|ref| (first at index 32: got 0.75, expected 0.25); "
                              "max abs err 0.5, rel L2 err 0.01");
  EXPECT_EQ(result["directions"], (nlohmann::json{{"forward", "pass"}, {"backward", "mismatch"}}));
  EXPECT_EQ(result["metrics"]["max_abs_err"], 0.5);
  EXPECT_EQ(result["metrics"]["frac_outside_tol"], 1.0 / 64);
  EXPECT_EQ(result["metrics"]["time_ms"], 0.75) << "the worker's timing stays";
}

TEST(JudgeEvent, ABackwardThatFailedKeepsItsStatusAndGetsTheForwardsDirection) {
  nlohmann::json result = {{"event", "result"}, {"case", "c"}, {"status", "error"},
                           {"reason", "in backward: boom"},
                           {"measured", {{"out", tensor_measure(64, 2, 5)}}}};
  judge_worker_event(result);
  EXPECT_EQ(result["status"], "error");
  EXPECT_EQ(result["reason"], "in backward: boom");
  EXPECT_EQ(result["directions"], (nlohmann::json{{"forward", "mismatch"}, {"backward", "error"}}));
}

TEST(JudgeEvent, APhaseGetsItsForwardsVerdict) {
  nlohmann::json phase = {{"event", "phase"}, {"case", "c"}, {"phase", "backward"},
                          {"measured", {{"out", tensor_measure(64)}}}};
  judge_worker_event(phase);
  EXPECT_EQ(phase["forward"], (nlohmann::json{{"status", "pass"}, {"reason", ""}}));
}

TEST(JudgeEvent, MalformedMeasurementsAreTheWorkersErrorNamingTheField) {
  for (const auto& [measured, words] : std::vector<std::pair<nlohmann::json, std::string>>{
           {nlohmann::json::array(), "measured must be an object"},
           {nlohmann::json::object(), "measured has no \"out\""},
           {{{"out", {{"n", 4}}}}, "measured.out.atol must be a number or null"},
           {{{"out", tensor_measure(4, 1, 9)}}, "measured.out counts or indexes past its 4 elements"},
           {{{"out", tensor_measure(4)}, {"dq", tensor_measure(4)}},
            "measured has some gradients of dq, dk and dv but not all"}}) {
    nlohmann::json result = {{"event", "result"}, {"case", "c"}, {"status", "measured"},
                             {"measured", measured}};
    judge_worker_event(result);
    EXPECT_EQ(result["status"], "error") << measured;
    EXPECT_EQ(result["reason"], "the worker's measurements are malformed: " + words) << measured;
  }
  nlohmann::json no_measure = {{"event", "result"}, {"status", "pass"}};
  judge_worker_event(no_measure);
  EXPECT_EQ(no_measure["status"], "pass") << "an event without measurements is left as it is";
}

// --- every call of a case --------------------------------------------------------------------------

TEST(Repeats, EqualCallsPassAndAreCounted) {
  RepeatComparer r({1e-3, 1e-3});
  r.first({0.5f, -0.25f});
  r.later({0.5f, -0.25f});
  r.later({0.5f, -0.25f});
  EXPECT_EQ(r.stats().calls, 3);
  EXPECT_EQ(r.stats().differing_call, 0);
  EXPECT_EQ(judge_repeats(r.stats()).status, Status::pass);
}

// An output must equal the first bit for bit: one ulp is a difference, and the first call that
// differs is the one described, however many follow.
TEST(Repeats, AnOutputAnUlpAwayOnALaterCallFailsNamingTheCall) {
  RepeatComparer r({1e-3, 1e-3});
  r.first({0.5f, -0.25f, 1.0f});
  r.later({0.5f, -0.25f, 1.0f});
  r.later({0.5f, std::nextafter(-0.25f, 0.0f), 1.0f});
  r.later({9.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f});
  EXPECT_EQ(r.stats().calls, 4);
  EXPECT_EQ(r.stats().differing_call, 3);
  EXPECT_EQ(r.stats().tensor, "out");
  EXPECT_EQ(r.stats().differing, 1);
  const Comparison c = judge_repeats(r.stats());
  EXPECT_EQ(c.status, Status::mismatch);
  EXPECT_EQ(c.reason, "call 3 of 4 differs from call 1: 1 element, max |delta| 1.49e-08");
}

TEST(Repeats, ALaterCallWithNaNIsNonfinite) {
  RepeatComparer r({1e-3, 1e-3});
  r.first({0.5f, 0.5f});
  r.later({std::numeric_limits<float>::quiet_NaN(), 0.5f});
  const Comparison c = judge_repeats(r.stats());
  EXPECT_EQ(c.status, Status::nonfinite);
  EXPECT_EQ(c.reason, "call 2 of 2 differs from call 1: 1 element, max |delta| 0, 1 NaN");
}

// Backward kernels add with atomics: a gradient may differ within the gradient tolerance, unless
// deterministic algorithms are asked for.
TEST(Repeats, GradientsDifferWithinTheToleranceUnlessBitwiseIsAsked) {
  const std::vector<float> out{0.5f}, dq{1.0f, 2.0f}, dk{3.0f}, dv{4.0f};
  const std::vector<float> dq_close{1.0f, 2.0f + 1e-6f}, dq_far{1.0f, 2.5f};
  for (bool bitwise : {false, true}) {
    RepeatComparer r({1e-3, 1e-3}, bitwise);
    r.first(out, dq, dk, dv);
    r.later(out, dq_close, dk, dv);
    EXPECT_EQ(r.stats().differing_call, bitwise ? 2 : 0) << bitwise;
  }
  RepeatComparer r({1e-3, 1e-3});
  r.first(out, dq, dk, dv);
  r.later(out, dq_far, dk, dv);
  EXPECT_EQ(r.stats().tensor, "dq");
  const Measured m = [&] {
    Measured x = output_only(measure_tensor(out.data(), std::vector<double>{0.5}.data(), 1,
                                            {1e-3, 1e-3}));
    const std::vector<double> ref{1.0, 2.0}, one{3.0}, four{4.0};
    const Measured g = measure_gradients({"dq", dq.data(), ref.data(), 2}, {"dk", dk.data(), one.data(), 1},
                                         {"dv", dv.data(), four.data(), 1}, {1e-3, 1e-3});
    x.dq = g.dq, x.dk = g.dk, x.dv = g.dv;
    x.repeats = r.stats();
    return x;
  }();
  const Verdict v = judge(m);
  EXPECT_EQ(v.forward.status, Status::pass);
  ASSERT_TRUE(v.backward);
  EXPECT_EQ(v.backward->status, Status::mismatch);
  EXPECT_EQ(v.all.reason, "backward: call 2 of 2 differs from call 1 in dq: 1 element beyond the "
                          "gradient tolerance, max |delta| 0.5");
}

// The default check compiles three quick cases, chosen by what they are: an additive mask, a
// causal backward, and causal decode under GQA whatever its dtype (bottom-right decoding's shape
// joins by itself: grouped heads and a causal bias in one forward).
TEST(CompileFamily, QuickCompilesThreeCasesChosenByWhatTheyAre) {
  auto plan = plan_cases({});
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->compiled,
            (std::vector<std::string>{"fp16-b1-h4-q96-k96-d64-mask_add",
                                      "bf16-b1-h8:2-q1-k129-d64-causal_br",
                                      "fp16-b1-h2-q64-k64-d64-causal-bwd"}));
  Case decode = *parse_case_spec("dtype=bf16,b=1,hq=8,hkv=2,lq=1,lkv=129,d=128,causal");
  EXPECT_TRUE(in_compile_family(decode, "quick"));
  decode.large = true; // the numerics cases stay eager
  EXPECT_FALSE(in_compile_family(decode, "quick"));
  // The full suite compiles more: every plain case of at most 256 x 256 scores.
  CaseSources full_suite;
  full_suite.suite = "full";
  auto full = plan_cases(full_suite);
  ASSERT_TRUE(full.has_value());
  EXPECT_GT(full->compiled.size(), plan->compiled.size());
  for (const std::string& id : full->compiled) EXPECT_TRUE(in_compile_family(*parse_case_id(id), "full")) << id;
  // --mode compiled alone compiles every planned case, custom ones included.
  CaseSources all;
  all.specs = {"dtype=fp32,b=1,h=1,l=8,d=8"};
  all.compile_all = true;
  auto custom = plan_cases(all);
  ASSERT_TRUE(custom.has_value());
  EXPECT_EQ(custom->compiled, (std::vector<std::string>{"fp32-b1-h1-q8-k8-d8"}));
  all.compile_all = false;
  EXPECT_TRUE(plan_cases(all)->compiled.empty());
}

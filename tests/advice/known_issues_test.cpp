#include "advice/advice.hpp"

#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <algorithm>

using namespace sdpa_doctor;
using namespace sdpa_doctor::advice;

namespace {

CaseResult result(const std::string& variant, Status s, const std::string& stderr_tail = "") {
  CaseResult r;
  r.kase = parse_case_spec("dtype=fp16,b=1,h=8,l=128,d=64").value();
  r.case_id = r.kase.id();
  r.device = "cuda:0";
  r.variant = variant;
  r.status = s;
  r.stderr_tail = stderr_tail;
  return r;
}

KnownIssues parse(const std::string& text) {
  auto k = parse_known_issues(text, "test.json");
  EXPECT_TRUE(k) << (k ? "" : k.error().message);
  return k ? *k : KnownIssues{};
}

const char* k_ck = R"([{"id":"ck","title":"CK assert","link":"https://x/1","advice":"use aotriton",
  "match":[{"archs":["gfx1200","gfx1201"],"stderr":"Fatal! Attempting to call a CK SDPA kernel",
            "statuses":["crash"]},
           {"archs":["gfx115*"],"variants":["flash[ck]"],"torch":{"min":"2.7","max":"2.9"}}]}])";

} // namespace

TEST(Versions, CompareNumericallyIgnoringSuffixes) {
  EXPECT_EQ(version_numbers("2.7.0+rocm6.3"), (std::vector<int>{2, 7, 0}));
  EXPECT_EQ(version_numbers("2.14.0a0"), (std::vector<int>{2, 14, 0}));
  EXPECT_EQ(version_numbers("0.11.1b"), (std::vector<int>{0, 11, 1}));
  EXPECT_TRUE(version_numbers("rocm").empty());
  EXPECT_LT(compare_versions("2.9", "2.10"), 0);
  EXPECT_EQ(compare_versions("2.7", "2.7.0"), 0);
  VersionRange r{"2.7", true, "2.9", false};
  EXPECT_FALSE(r.contains("2.6.1"));
  EXPECT_TRUE(r.contains("2.7.0+rocm6.3"));
  EXPECT_TRUE(r.contains("2.8.1"));
  EXPECT_FALSE(r.contains("2.9.0"));
  EXPECT_FALSE(r.contains(""));
  r.max_inclusive = true;
  EXPECT_TRUE(r.contains("2.9.0"));
}

TEST(KnownIssues, MatchByArchAndStderr) {
  const KnownIssues k = parse(k_ck);
  const std::string assert_text = "kentry_pt: Fatal! Attempting to call a CK SDPA kernel on "
                                  "unsupported hardware";
  const CaseResult crash = result("flash[ck]", Status::crash, assert_text);
  EXPECT_TRUE(issue_matches(k.issues[0], crash, {"gfx1201", "2.9.0", ""}));
  EXPECT_TRUE(issue_matches(k.issues[0], crash, {"gfx1200", "", ""}));
  EXPECT_FALSE(issue_matches(k.issues[0], crash, {"gfx1100", "2.9.0", ""})) << "arch";
  EXPECT_FALSE(issue_matches(k.issues[0], crash, {"", "2.9.0", ""})) << "cpu";
  EXPECT_FALSE(issue_matches(k.issues[0], result("flash[ck]", Status::crash, "segfault"),
                             {"gfx1201", "", ""}))
      << "regex";
  EXPECT_FALSE(issue_matches(k.issues[0], result("flash[ck]", Status::error, assert_text),
                             {"gfx1201", "", ""}))
      << "status";
  CaseResult in_warning = result("flash[ck]", Status::crash);
  in_warning.warnings = {assert_text};
  EXPECT_TRUE(issue_matches(k.issues[0], in_warning, {"gfx1201", "", ""}));
}

TEST(KnownIssues, MatchByVersionRangeVariantAndArchPrefix) {
  const KnownIssues k = parse(k_ck);
  const CaseResult err = result("flash[ck]", Status::error);
  EXPECT_TRUE(issue_matches(k.issues[0], err, {"gfx1151", "2.8.0", ""}));
  EXPECT_FALSE(issue_matches(k.issues[0], err, {"gfx1151", "2.9.0", ""})) << "max exclusive";
  EXPECT_FALSE(issue_matches(k.issues[0], err, {"gfx1151", "2.6.0", ""}));
  EXPECT_FALSE(issue_matches(k.issues[0], err, {"gfx1151", "", ""})) << "unknown torch";
  EXPECT_FALSE(issue_matches(k.issues[0], result("flash", Status::error), {"gfx1151", "2.8.0", ""}));
  EXPECT_FALSE(issue_matches(k.issues[0], result("flash[ck]", Status::pass), {"gfx1151", "2.8", ""}))
      << "a pass is never an issue unless asked for";
  EXPECT_TRUE(issue_applies_to(k.issues[0], "gfx1153", "2.8"));
  EXPECT_FALSE(issue_applies_to(k.issues[0], "gfx1100"));
}

TEST(KnownIssues, MatchesAreGroupedPerIssueDeviceAndVariant) {
  const KnownIssues k = parse(k_ck);
  Report report;
  Device d;
  d.index = 0;
  d.gfx_target = "gfx1201";
  report.inventory.devices = {d};
  report.results = {result("flash[ck]", Status::crash, "Fatal! Attempting to call a CK SDPA kernel"),
                    result("flash", Status::pass)};
  CaseResult second = report.results[0];
  second.kase.d = 128;
  second.case_id = second.kase.id();
  report.results.push_back(second);
  const auto m = match_known_issues(report, k);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].issue_id, "ck");
  EXPECT_EQ(m[0].variant, "flash[ck]");
  EXPECT_EQ(m[0].device, "cuda:0");
  EXPECT_EQ(m[0].case_ids.size(), 2u);
  EXPECT_EQ(m[0].link, "https://x/1");
}

TEST(KnownIssues, ArchComesFromTheWorkerWhenTheInventoryLacksIt) {
  const KnownIssues k = parse(k_ck);
  Report report;
  WorkerInfo w;
  w.device = "cuda:0";
  w.variant = "flash[ck]";
  w.facts["gcnArchName"] = "gfx1201:sramecc-:xnack-";
  w.versions["torch"] = "2.8.0";
  report.workers = {w};
  report.results = {result("flash[ck]", Status::crash, "Fatal! Attempting to call a CK SDPA kernel")};
  const CaseFacts f = facts_for(report, report.results[0]);
  EXPECT_EQ(f.arch, "gfx1201");
  EXPECT_EQ(f.torch, "2.8.0");
  EXPECT_EQ(match_known_issues(report, k).size(), 1u);
}

TEST(KnownIssues, LoaderErrorsNameTheEntryOnOneLine) {
  struct Bad {
    const char* text;
    const char* expect;
  };
  const Bad cases[] = {
      {"[{", "invalid JSON"},
      {"{}", "top level must be an array"},
      {R"([{"id":"a","title":"t","advice":"x","match":{"archs":"gfx1201"}}])", "entry 0 ('a')"},
      {R"([{"id":"a","title":"t","advice":"x","match":{"stderr":"(unclosed"}}])",
       "bad 'stderr' regex"},
      {R"([{"id":"a","title":"t","advice":"x","match":{"statuses":["exploded"]}}])",
       "unknown status"},
      {R"([{"id":"a","title":"t","advice":"x","match":{"torch":{"min":"two"}}}])", "'torch.min'"},
      {R"([{"id":"a","title":"t","advice":"x","match":{"arch":["gfx1201"]}}])",
       "unknown key 'match.arch'"},
      {R"([{"id":"a","title":"t","advice":"x","match":{}},{"id":"a","title":"t","advice":"x","match":{}}])",
       "entry 1 ('a'): duplicate id"},
      {R"([{"title":"t","advice":"x","match":{}}])", "entry 0: missing 'id'"},
      {R"([{"id":"a","title":"t","advice":"x","match":{"variants":["flash[bogus]"]}}])",
       "bad variant"},
      {R"([{"id":"a","title":"t","advice":"x","match":{"probes":["gpu"]}}])",
       "unknown probe 'gpu'"},
  };
  for (const Bad& b : cases) {
    auto k = parse_known_issues(b.text, "extra.json");
    ASSERT_FALSE(k) << b.text;
    EXPECT_NE(k.error().message.find(b.expect), std::string::npos) << k.error().message;
    EXPECT_NE(k.error().message.find("extra.json"), std::string::npos);
    EXPECT_EQ(k.error().message.find('\n'), std::string::npos) << k.error().message;
  }
  EXPECT_FALSE(load_known_issues("/nonexistent/known_issues.json"));
}

TEST(KnownIssues, AProbeFilterKeepsTheDoctorsOwnKernelsOutOfTorchIssues) {
  const KnownIssues k = parse(R"([{"id":"fault","title":"GPU memory fault","advice":"avoid it",
    "match":{"probes":["libtorch","python"],"stderr":"Memory access fault","statuses":["crash"]}}])");
  CaseResult ours = result("ref-flash", Status::crash, "Memory access fault by GPU node-1");
  ours.probe = Probe::reference;
  EXPECT_FALSE(issue_matches(k.issues[0], ours, {"gfx1201", "", ""}));
  CaseResult torchs = ours;
  torchs.variant = "flash";
  for (Probe p : {Probe::torch, Probe::python}) {
    torchs.probe = p;
    EXPECT_TRUE(issue_matches(k.issues[0], torchs, {"gfx1201", "", ""})) << to_string(p);
  }
  // Without the filter the same rule would have claimed our kernel's crash.
  const KnownIssues any = parse(R"([{"id":"fault","title":"t","advice":"a",
    "match":{"stderr":"Memory access fault","statuses":["crash"]}}])");
  EXPECT_TRUE(issue_matches(any.issues[0], ours, {"gfx1201", "", ""}));
}

TEST(KnownIssues, MergeAddsAndLaterFilesReplaceById) {
  KnownIssues a = parse(R"([{"id":"x","title":"old","advice":"a","match":{}},
                            {"id":"y","title":"y","advice":"a","match":{}}])");
  KnownIssues b = parse(R"([{"id":"x","title":"new","advice":"a","match":{}},
                            {"id":"z","title":"z","advice":"a","match":{}}])");
  const KnownIssues m = merge_known_issues({a, b});
  ASSERT_EQ(m.issues.size(), 3u);
  EXPECT_EQ(m.issues[0].id, "x");
  EXPECT_EQ(m.issues[0].title, "new");
  EXPECT_EQ(m.issues[2].id, "z");
}

TEST(KnownIssues, ShippedFileLoadsWithTheCkAssertFirst) {
  auto k = load_known_issues(sdpa_test::source_path("data/known_issues.json"));
  ASSERT_TRUE(k) << k.error().message;
  ASSERT_GE(k->issues.size(), 10u);
  EXPECT_EQ(k->issues[0].link, "https://github.com/pytorch/pytorch/issues/188113");
  for (const KnownIssue& i : k->issues) {
    EXPECT_FALSE(i.link.empty()) << i.id;
    EXPECT_FALSE(i.advice.empty()) << i.id;
    // Every shipped issue is torch's: each rule names the torch probes, never the reference one.
    for (const IssueRule& rule : i.rules)
      EXPECT_EQ(rule.probes, (std::set<Probe>{Probe::torch, Probe::python})) << i.id;
  }
  // The RDNA4 crash is recognised from its assert text, and not on an MI300X.
  CaseResult crash = result("flash[ck]", Status::crash,
                            "Fatal! Attempting to call a CK SDPA kernel on unsupported hardware");
  EXPECT_TRUE(issue_matches(k->issues[0], crash, {"gfx1201", "2.14.0a0", "0.12b"}));
  EXPECT_FALSE(issue_matches(k->issues[0], crash, {"gfx942", "2.14.0a0", "0.12b"}));
}

namespace {

const KnownIssues& shipped() {
  static const KnownIssues k = [] {
    auto loaded = load_known_issues(sdpa_test::source_path("data/known_issues.json"));
    EXPECT_TRUE(loaded) << loaded.error().message;
    return loaded ? *loaded : KnownIssues{};
  }();
  return k;
}

const KnownIssue* shipped_issue(const std::string& id) {
  for (const KnownIssue& i : shipped().issues)
    if (i.id == id) return &i;
  return nullptr;
}

bool every_rule_needs_text(const KnownIssue& issue) {
  return std::all_of(issue.rules.begin(), issue.rules.end(), [](const IssueRule& r) {
    return r.stderr_re.has_value() || r.canary_re.has_value();
  });
}

} // namespace

TEST(KnownIssues, EveryShippedEntryMatchesItsOwnVerbatimText) {
  ASSERT_GE(shipped().issues.size(), 25u);
  for (const KnownIssue& issue : shipped().issues) {
    ASSERT_TRUE(issue.verbatim) << issue.id << ": no verbatim text";
    const Verbatim& v = *issue.verbatim;
    EXPECT_FALSE(v.text.empty()) << issue.id;
    if (!v.published) {
      EXPECT_FALSE(v.note.empty()) << issue.id << ": says what its text is";
    }
    CaseResult r = verbatim_result(v);
    EXPECT_TRUE(issue_matches(issue, r, v.facts)) << issue.id << ": '" << v.text << "'";
    // Where every rule reads a text, it is the text that matches: other words do not.
    if (every_rule_needs_text(issue)) {
      Verbatim other = v;
      other.text = "RuntimeError: something else went wrong";
      EXPECT_FALSE(issue_matches(issue, verbatim_result(other), v.facts)) << issue.id;
    }
  }
}

// An entry may name the causal alignment and the query length: the bottom-right decode entries
// match a bottom-right case of one query, not its top-left twin, nor a chunk of 16 queries.
TEST(KnownIssues, CausalAlignmentAndQueryLengthConditions) {
  const KnownIssue* nan = shipped_issue("gfx950-gqa-decode-bottom-right-nan");
  ASSERT_NE(nan, nullptr);
  const CaseFacts gfx950{"gfx950", "2.9.0", ""};
  const auto with_case = [](const std::string& spec) {
    CaseResult r = result("flash", Status::nonfinite, "");
    r.kase = *parse_case_spec(spec);
    r.case_id = r.kase.id();
    return r;
  };
  EXPECT_TRUE(issue_matches(*nan, with_case("hq=8,hkv=2,lq=1,lkv=129,causal=bottom_right"), gfx950));
  EXPECT_FALSE(issue_matches(*nan, with_case("hq=8,hkv=2,lq=1,lkv=129,causal"), gfx950));
  EXPECT_FALSE(issue_matches(*nan, with_case("hq=8,hkv=2,lq=16,lkv=129,causal=bottom_right"), gfx950));
  EXPECT_FALSE(issue_matches(*nan, with_case("hq=8,hkv=8,lq=1,lkv=129,causal=bottom_right"), gfx950));
  const auto entry = [](const std::string& condition) {
    return std::string(R"([{"id":"x","title":"t","link":"https://x/1","advice":"a","match":{)") +
           condition + R"(}}])";
  };
  EXPECT_TRUE(parse_known_issues(entry(R"("causal": "top_left", "query_len": {"min": 2})"), "t"));
  for (const char* bad : {R"("causal": "sideways")", R"("query_len": {"least": 1})",
                          R"("query_len": 1)"})
    EXPECT_FALSE(parse_known_issues(entry(bad), "t")) << bad;
}

TEST(KnownIssues, EveryShippedEntryNamesItsSource) {
  for (const KnownIssue& issue : shipped().issues) {
    EXPECT_EQ(issue.link.rfind("https://", 0), 0u) << issue.id << ": link '" << issue.link << "'";
    EXPECT_FALSE(issue.title.empty()) << issue.id;
  }
}

TEST(KnownIssues, VerbatimIsCheckedWhenTheFileIsRead) {
  const auto entry = [](const std::string& verbatim) {
    return R"([{"id":"x","title":"t","link":"https://x/1","advice":"a","match":{"statuses":["crash"]},
               "verbatim":)" + verbatim + "}]";
  };
  EXPECT_TRUE(parse_known_issues(entry(R"({"text":"boom","published":true,"case":"fp16-b1-h8-q128-k128-d64"})"), "t"));
  const std::pair<std::string, std::string> bad[] = {
      {R"({"text":"boom","published":false,"case":"fp16-b1-h8-q128-k128-d64"})", "verbatim.note"},
      {R"({"text":"boom","case":"fp16-b1-h8-q128-k128-d64"})", "verbatim.published"},
      {R"({"text":"boom","published":true,"case":"not-a-case"})", "verbatim.case"},
      {R"({"text":"boom","published":true,"case":"fp16-b1-h8-q128-k128-d64","in":"stdout"})", "verbatim.in"},
      {R"({"text":"boom","published":true,"case":"fp16-b1-h8-q128-k128-d64","status":"pass"})",
       "verbatim.status"},
      {R"({"text":"boom","published":true,"case":"fp16-b1-h8-q128-k128-d64","url":"x"})", "verbatim.url"},
  };
  for (const auto& [text, expect] : bad) {
    auto k = parse_known_issues(entry(text), "t.json");
    ASSERT_FALSE(k) << text;
    EXPECT_NE(k.error().message.find(expect), std::string::npos) << k.error().message;
    EXPECT_EQ(k.error().message.find('\n'), std::string::npos);
  }
}

TEST(KnownIssues, CanaryMaskAndLayoutConditions) {
  const KnownIssues k = parse(R"([{"id":"c","title":"t","link":"https://x/1","advice":"a",
    "match":{"canary":"invalid argument","masks":["bool"],"layouts":["transposed"]}}])");
  CaseResult r = result("flash", Status::mismatch);
  r.kase = parse_case_spec("dtype=fp16,b=1,h=8,l=128,d=64,mask=bool,layout=transposed").value();
  r.canary = "failed: AcceleratorError: HIP error: invalid argument";
  EXPECT_TRUE(issue_matches(k.issues[0], r, {"gfx1201", "", ""}));
  CaseResult in_stderr = r;
  in_stderr.canary = "ok";
  in_stderr.stderr_tail = r.canary;
  EXPECT_FALSE(issue_matches(k.issues[0], in_stderr, {"gfx1201", "", ""})) << "the canary only";
  CaseResult contiguous = r;
  contiguous.kase.layout = Layout::contiguous;
  EXPECT_FALSE(issue_matches(k.issues[0], contiguous, {"gfx1201", "", ""})) << "layout";
  CaseResult no_mask = r;
  no_mask.kase.mask = Mask::none;
  EXPECT_FALSE(issue_matches(k.issues[0], no_mask, {"gfx1201", "", ""})) << "mask";
  for (const char* bad : {R"("masks":["sometimes"])", R"("layouts":["diagonal"])", R"("canary":"(unclosed")"}) {
    auto e = parse_known_issues(
        std::string(R"([{"id":"c","title":"t","link":"","advice":"a","match":{)") + bad + "}}]", "t");
    EXPECT_FALSE(e) << bad;
  }
}

// Each tensor's own layout, the mask's own dtype and dropout are conditions too: the shipped V-alone
// mismatch, mask-dtype NaN and CK dropout entries hold where the case has that feature only.
TEST(KnownIssues, OwnLayoutMaskDtypeAndDropoutConditions) {
  auto with_case = [](const char* variant, Status s, const char* spec) {
    CaseResult r = result(variant, s);
    r.kase = parse_case_spec(spec).value();
    r.case_id = r.kase.id();
    return r;
  };
  const CaseFacts gfx942{"gfx942", "2.5.1", ""};
  const KnownIssue* v_alone = shipped_issue("v-noncontiguous-mismatch-gfx942");
  ASSERT_NE(v_alone, nullptr);
  for (const char* v : {"v_layout=transposed", "v_layout=strided", "v_layout=offset",
                        "layout=transposed"})
    EXPECT_TRUE(issue_matches(
        *v_alone, with_case("flash", Status::mismatch, (std::string("l=62,d=128,") + v).c_str()),
        gfx942))
        << v;
  for (const char* not_v : {"layout=contiguous", "q_layout=transposed", "k_layout=offset"})
    EXPECT_FALSE(issue_matches(
        *v_alone, with_case("flash", Status::mismatch, (std::string("l=62,d=128,") + not_v).c_str()),
        gfx942))
        << not_v;
  const KnownIssue* mask_dtype = shipped_issue("mem-efficient-mask-dtype-nan");
  ASSERT_NE(mask_dtype, nullptr);
  EXPECT_TRUE(issue_matches(*mask_dtype,
                            with_case("mem_efficient", Status::nonfinite,
                                      "dtype=bf16,l=64,d=64,mask=additive,mask_dtype=fp32"),
                            gfx942));
  EXPECT_FALSE(issue_matches(
      *mask_dtype, with_case("mem_efficient", Status::nonfinite, "dtype=bf16,l=64,d=64,mask=additive"),
      gfx942));
  const KnownIssue* ck_dropout = shipped_issue("ck-dropout-memory-fault");
  ASSERT_NE(ck_dropout, nullptr);
  const std::string fault = "Memory access fault by GPU node-2 (Agent handle: 0x1) on address 0x0.";
  CaseResult dropped = with_case("flash[ck]", Status::crash, "l=64,d=64,dropout=0.1");
  dropped.stderr_tail = fault;
  EXPECT_TRUE(issue_matches(*ck_dropout, dropped, gfx942));
  CaseResult plain = with_case("flash[ck]", Status::crash, "l=64,d=64");
  plain.stderr_tail = fault;
  EXPECT_FALSE(issue_matches(*ck_dropout, plain, gfx942)) << "a CK page fault without dropout";
  for (const char* bad : {R"("v_layouts":["sideways"])", R"("mask_dtype_differs":"yes")"})
    EXPECT_FALSE(parse_known_issues(
        std::string(R"([{"id":"c","title":"t","link":"","advice":"a","match":{)") + bad + "}}]", "t"))
        << bad;
}

// The hipErrorInvalidValue family: text spelled by HIP proves a ROCm build anywhere; "CUDA error:
// invalid argument" and an all-zero output count only on an AMD GPU; math never runs AOTriton.
TEST(KnownIssues, HipInvalidValueIsMatchedFromItsEvidence) {
  const KnownIssue* issue = shipped_issue("aotriton-hip-invalid-value");
  ASSERT_NE(issue, nullptr);
  CaseResult zeros = result("flash", Status::mismatch);
  zeros.reason = "all-zero output where the oracle is not: 65536 of 65536 elements outside atol=0.001";
  const CaseFacts cpu{"", "2.13.0", ""}, gfx{"gfx1201", "2.12.0", ""};
  EXPECT_TRUE(issue_matches(*issue, zeros, gfx));
  EXPECT_FALSE(issue_matches(*issue, zeros, cpu)) << "zeros alone on the CPU are not AOTriton's";
  CaseResult zeros_canary = zeros;
  zeros_canary.canary = "failed: AcceleratorError: HIP error: invalid argument";
  EXPECT_TRUE(issue_matches(*issue, zeros_canary, cpu));
  CaseResult cuda_text = result("default", Status::error,
                                "torch.AcceleratorError: CUDA error: invalid argument");
  EXPECT_TRUE(issue_matches(*issue, cuda_text, gfx));
  EXPECT_FALSE(issue_matches(*issue, cuda_text, cpu)) << "CUDA's words prove no ROCm build";
  CaseResult math = zeros_canary;
  math.variant = "math";
  EXPECT_FALSE(issue_matches(*issue, math, gfx));
  CaseResult later = result("mem_efficient", Status::error);
  later.canary = "failed: RuntimeError: Search for `hipErrorInvalidValue' for more information";
  EXPECT_TRUE(issue_matches(*issue, later, cpu));
}

// Re-checked: a crash of flash[ck] on gfx12 without the guard text is not CK's (stock builds run
// AOTriton there), so only the guard text names the CK assert.
TEST(KnownIssues, CkAssertIsNamedByItsTextOnly) {
  const KnownIssue* issue = shipped_issue("ck-sdpa-unsupported-hw-rdna4");
  ASSERT_NE(issue, nullptr);
  EXPECT_FALSE(issue_matches(*issue, result("flash[ck]", Status::crash), {"gfx1201", "2.12.0", ""}));
}

// The compile family's issues speak of compiled cells only: the same text from an eager call is
// another failure.
TEST(KnownIssues, CompiledIssuesMatchCompiledCellsOnly) {
  for (const char* id : {"compile-flash-wrong-dimensions-rocm", "compile-mem-efficient-bias-logsumexp-shape",
                         "compile-flash-backward-logsumexp-rank"}) {
    const KnownIssue* issue = shipped_issue(id);
    ASSERT_NE(issue, nullptr) << id;
    ASSERT_TRUE(issue->verbatim) << id;
    EXPECT_EQ(issue->verbatim->mode, Mode::compiled) << id;
    CaseResult r = verbatim_result(*issue->verbatim);
    EXPECT_TRUE(issue_matches(*issue, r, issue->verbatim->facts)) << id;
    r.mode = Mode::eager;
    EXPECT_FALSE(issue_matches(*issue, r, issue->verbatim->facts)) << id;
  }
}

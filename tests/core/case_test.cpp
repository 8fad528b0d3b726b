#include "core/case.hpp"
#include "core/status.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace sdpa_doctor;

TEST(CaseSpec, ParsesTheDocumentedForm) {
  auto c = parse_case_spec("dtype=bf16,b=1,h=32,l=4096,d=128,causal");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->dtype, DType::bf16);
  EXPECT_EQ(c->hq, 32);
  EXPECT_EQ(c->hkv, 32);
  EXPECT_EQ(c->lq, 4096);
  EXPECT_EQ(c->lkv, 4096);
  EXPECT_EQ(c->d, 128);
  EXPECT_TRUE(c->causal);
  EXPECT_EQ(c->id(), "bf16-b1-h32-q4096-k4096-d128-causal");
}

TEST(CaseSpec, IdRoundTrips) {
  Case c;
  c.dtype = DType::f16;
  c.b = 2;
  c.hq = 8;
  c.hkv = 2;
  c.lq = 1;
  c.lkv = 77;
  c.mask = Mask::boolean;
  c.layout = Layout::transposed;
  c.seed = 3;
  auto back = parse_case_id(c.id());
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, c);
  EXPECT_EQ(c.id(), "fp16-b2-h8:2-q1-k77-d64-mask_bool-tr-s3");
}

TEST(CaseSpec, RejectsBadInput) {
  for (const char* bad : {"", "dtype=fp8", "d=0", "b=-1", "l=abc", "hq=8,hkv=3", "bogus=1",
                          "causal=maybe", "d", "l=99999999999", "b=1024,h=1024,l=65536"}) {
    auto c = parse_case_spec(bad);
    EXPECT_FALSE(c) << bad;
    if (!c) {
      EXPECT_EQ(c.error().message.find('\n'), std::string::npos) << bad;
    }
  }
}

TEST(CaseSpec, JsonRoundTrips) {
  auto c = parse_case_spec("dtype=fp32,hq=4,hkv=1,lq=3,lkv=9,d=40,mask=additive,seed=7");
  ASSERT_TRUE(c);
  auto back = case_from_json(to_json(*c));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, *c);
  EXPECT_FALSE(case_from_json(nlohmann::json::parse(R"({"d": [1]})")));
  EXPECT_FALSE(case_from_json(nlohmann::json::parse("[1,2]")));
}

TEST(CaseSpec, FlopsAndBytes) {
  auto c = parse_case_spec("dtype=fp16,b=1,h=8,l=512,d=64");
  ASSERT_TRUE(c);
  EXPECT_DOUBLE_EQ(c->flops(), 4.0 * 8 * 512 * 512 * 64);
  c->causal = true;
  EXPECT_DOUBLE_EQ(c->flops(), 2.0 * 8 * 512 * 512 * 64);
  EXPECT_EQ(c->math_scores_bytes(), 2LL * 8 * 512 * 512 * 4);
}

TEST(Status, NamesRoundTripAndFailuresAreTheContract) {
  for (Status s : k_all_statuses) EXPECT_EQ(status_from_string(to_string(s)), s);
  EXPECT_FALSE(status_from_string("passed"));
  EXPECT_FALSE(is_failure_by_default(Status::pass));
  EXPECT_FALSE(is_failure_by_default(Status::unsupported));
  EXPECT_FALSE(is_failure_by_default(Status::skipped));
  for (Status s : {Status::mismatch, Status::nonfinite, Status::error, Status::crash,
                   Status::timeout})
    EXPECT_TRUE(is_failure_by_default(s));
}

TEST(CaseSpec, ABackwardCaseEndsInBwdAndRoundTripsEveryWay) {
  auto c = parse_case_spec("dtype=bf16,hq=8,hkv=2,l=64,d=64,causal,seed=3,backward");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->backward);
  EXPECT_EQ(c->id(), "bf16-b1-h8:2-q64-k64-d64-causal-s3-bwd");
  auto from_id = parse_case_id(c->id());
  ASSERT_TRUE(from_id) << from_id.error().message;
  EXPECT_EQ(*from_id, *c);
  EXPECT_EQ(to_json(*c).at("backward"), true);
  auto from_json = case_from_json(to_json(*c));
  ASSERT_TRUE(from_json);
  EXPECT_EQ(*from_json, *c);
  // A forward case's id and JSON are what they always were (baselines keep matching).
  const Case forward = c->forward_only();
  EXPECT_EQ(forward.id(), "bf16-b1-h8:2-q64-k64-d64-causal-s3");
  EXPECT_FALSE(to_json(forward).contains("backward"));
  // "-bwd" is the last part only.
  EXPECT_FALSE(parse_case_id("bf16-b1-h8-q64-k64-d64-bwd-causal"));
  // Forward and backward: 3.5 times the forward's work; autograd keeps the scores for it.
  EXPECT_DOUBLE_EQ(c->flops(), 3.5 * forward.flops());
  EXPECT_EQ(c->math_scores_bytes(), 2 * forward.math_scores_bytes());
  EXPECT_GT(c->input_bytes(), forward.input_bytes());
}

TEST(CaseSpec, ADropoutCaseSaysItsProbabilityAndRoundTripsEveryWay) {
  auto c = parse_case_spec("dtype=fp16,h=4,lq=96,lkv=64,d=64,dropout=0.25,seed=2");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->dropout_percent, 25);
  EXPECT_DOUBLE_EQ(c->dropout_p(), 0.25);
  EXPECT_EQ(c->id(), "fp16-b1-h4-q96-k64-d64-drop0.25-s2");
  auto from_id = parse_case_id(c->id());
  ASSERT_TRUE(from_id) << from_id.error().message;
  EXPECT_EQ(*from_id, *c);
  EXPECT_DOUBLE_EQ(to_json(*c).at("dropout").get<double>(), 0.25);
  auto from_json = case_from_json(to_json(*c));
  ASSERT_TRUE(from_json) << from_json.error().message;
  EXPECT_EQ(*from_json, *c);
  // The shortest decimal, as a user writes dropout_p; a case without dropout reads as before.
  EXPECT_EQ(parse_case_spec("l=64,d=64,dropout=.1")->id(), "fp16-b1-h8-q64-k64-d64-drop0.1");
  EXPECT_EQ(parse_case_spec("l=64,d=64,dropout=0")->id(), "fp16-b1-h8-q64-k64-d64");
  EXPECT_FALSE(to_json(*parse_case_spec("l=64,d=64")).contains("dropout"));
  // Finer than 0.01, past 0.9, V not square (Lkv != D), a backward: each one clear line.
  for (const char* bad : {"l=64,d=64,dropout=0.125", "l=64,d=64,dropout=0.95",
                          "l=64,d=64,dropout=1", "l=64,d=64,dropout=x", "lq=64,lkv=80,d=64,dropout=0.1",
                          "l=64,d=64,dropout=0.1,backward"}) {
    auto r = parse_case_spec(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
  }
  EXPECT_NE(parse_case_spec("lq=64,lkv=80,d=64,dropout=0.1").error().message.find("lkv = d"),
            std::string::npos);
  nlohmann::json j = to_json(*c);
  j["dropout"] = 0.123;
  EXPECT_FALSE(case_from_json(j));
  EXPECT_FALSE(parse_case_id("fp16-b1-h4-q64-k64-d64-drop0.125"));
}

TEST(CaseLayouts, EachTensorHasItsOwnAndAllThreeTransposedKeepsTr) {
  auto all = parse_case_spec("h=2,l=8,d=16,layout=transposed");
  ASSERT_TRUE(all) << all.error().message;
  EXPECT_EQ(all->id(), "fp16-b1-h2-q8-k8-d16-tr");
  // The same three layouts named one by one are the same case, in its one form.
  auto one_by_one =
      parse_case_spec("h=2,l=8,d=16,q_layout=transposed,k_layout=transposed,v_layout=transposed");
  ASSERT_TRUE(one_by_one) << one_by_one.error().message;
  EXPECT_EQ(*one_by_one, *all);
  auto v_alone = parse_case_spec("h=2,l=8,d=16,v_layout=transposed");
  ASSERT_TRUE(v_alone) << v_alone.error().message;
  EXPECT_EQ(v_alone->id(), "fp16-b1-h2-q8-k8-d16-v_tr");
  EXPECT_EQ(v_alone->qkv_layouts(),
            (std::array{Layout::contiguous, Layout::contiguous, Layout::transposed}));
  // `layout` is the three's default; a tensor's own wins over it, whatever the key order.
  auto mixed = parse_case_spec("k_layout=offset,h=2,l=8,d=16,layout=strided");
  ASSERT_TRUE(mixed) << mixed.error().message;
  EXPECT_EQ(mixed->qkv_layouts(), (std::array{Layout::strided, Layout::offset, Layout::strided}));
  EXPECT_EQ(mixed->id(), "fp16-b1-h2-q8-k8-d16-q_str-k_off-v_str");
  for (const Case& c : {*all, *v_alone, *mixed}) {
    auto back = parse_case_id(c.id());
    ASSERT_TRUE(back) << c.id() << ": " << back.error().message;
    EXPECT_EQ(*back, c);
    auto from_json = case_from_json(to_json(c));
    ASSERT_TRUE(from_json) << from_json.error().message;
    EXPECT_EQ(*from_json, c);
  }
  // A strided tensor's buffer is twice its view.
  EXPECT_EQ(parse_case_spec("h=2,l=8,d=16,v_layout=strided")->input_bytes(),
            parse_case_spec("h=2,l=8,d=16")->input_bytes() + 2 * 8 * 16 * 2);
  // A mask every batch shares is one (Lq,Lkv); one per head is B*H of them, in its own dtype.
  const int64_t plain = parse_case_spec("b=2,h=2,l=8,d=16")->input_bytes();
  EXPECT_EQ(parse_case_spec("b=2,h=2,l=8,d=16,mask=additive")->input_bytes(), plain + 2 * 64 * 2);
  EXPECT_EQ(parse_case_spec("b=2,h=2,l=8,d=16,mask=additive,mask_shape=qk")->input_bytes(),
            plain + 64 * 2);
  EXPECT_EQ(parse_case_spec("b=2,h=2,l=8,d=16,mask=additive,mask_shape=bhqk,mask_dtype=fp32")
                ->input_bytes(),
            plain + 4 * 64 * 4);
  // JSON says which tensor is which, and a plain case reads as it always did.
  const nlohmann::json j = to_json(*mixed);
  EXPECT_EQ(j.at("q_layout"), "strided");
  EXPECT_EQ(j.at("k_layout"), "offset");
  EXPECT_EQ(j.at("v_layout"), "strided");
  EXPECT_EQ(to_json(*all).count("q_layout"), 0u);
  EXPECT_EQ(to_json(Case{}).dump(),
            R"({"b":1,"causal":false,"d":64,"dtype":"fp16","hkv":8,"hq":8,"layout":"contiguous",)"
            R"("lkv":128,"lq":128,"mask":"none","seed":0})");
}

TEST(CaseMasks, DtypeShapeLayoutWindowAndLargeRoundTrip) {
  const char* specs[] = {
      "dtype=bf16,h=2,l=8,d=16,mask=additive,mask_dtype=fp32",
      "dtype=fp16,b=2,hq=4,hkv=2,l=8,d=16,mask=bool,mask_shape=bhqk,mask_layout=strided",
      "dtype=fp16,h=2,lq=8,lkv=20,d=16,mask=additive,mask_shape=11qk,mask_layout=offset",
      "dtype=fp32,h=2,l=8,d=16,mask=additive,mask_shape=qk",
      "dtype=bf16,h=2,l=32,d=16,window=8",
      "dtype=fp16,h=2,l=8,d=16,large,seed=4"};
  const char* ids[] = {"bf16-b1-h2-q8-k8-d16-mask_add-mask_fp32",
                       "fp16-b2-h4:2-q8-k8-d16-mask_bool-mask_bhqk-mask_str",
                       "fp16-b1-h2-q8-k20-d16-mask_add-mask_11qk-mask_off",
                       "fp32-b1-h2-q8-k8-d16-mask_add-mask_qk", "bf16-b1-h2-q32-k32-d16-win8",
                       "fp16-b1-h2-q8-k8-d16-large-s4"};
  for (size_t i = 0; i < std::size(specs); ++i) {
    auto c = parse_case_spec(specs[i]);
    ASSERT_TRUE(c) << specs[i] << ": " << c.error().message;
    EXPECT_EQ(c->id(), ids[i]);
    auto back = parse_case_id(c->id());
    ASSERT_TRUE(back) << c->id() << ": " << back.error().message;
    EXPECT_EQ(*back, *c) << c->id();
    auto from_json = case_from_json(to_json(*c));
    ASSERT_TRUE(from_json) << from_json.error().message;
    EXPECT_EQ(*from_json, *c) << c->id();
  }
  auto window = parse_case_spec("h=2,l=32,d=16,window=8");
  ASSERT_TRUE(window);
  EXPECT_EQ(window->mask, Mask::boolean);
  EXPECT_EQ(to_json(*window).at("window"), 8);
  // A mask dtype equal to q's is no dtype of its own.
  auto same = parse_case_spec("dtype=fp16,h=2,l=8,d=16,mask=additive,mask_dtype=fp16");
  ASSERT_TRUE(same);
  EXPECT_FALSE(same->mask_dtype.has_value());
  EXPECT_EQ(same->id(), "fp16-b1-h2-q8-k8-d16-mask_add");
}

TEST(CaseMasks, RejectsWhatNoMaskOrLayoutCanBe) {
  for (const char* bad :
       {"l=8,d=16,mask_dtype=fp32", "l=8,d=16,mask=bool,mask_dtype=fp32",
        "l=8,d=16,mask_shape=bhqk", "l=8,d=16,mask_layout=offset",
        "l=8,d=16,mask=bool,mask_layout=transposed", "l=8,d=16,mask=additive,window=4",
        "l=8,d=16,window=-1", "l=8,d=16,q_layout=diagonal", "l=8,d=16,mask_shape=hq"}) {
    EXPECT_FALSE(parse_case_spec(bad)) << bad;
  }
  for (const char* bad : {"fp16-b1-h2-q8-k8-d16-x_tr", "fp16-b1-h2-q8-k8-d16-q_xx",
                          "fp16-b1-h2-q8-k8-d16-mask_fp8", "fp16-b1-h2-q8-k8-d16-winx"})
    EXPECT_FALSE(parse_case_id(bad)) << bad;
}

TEST(CaseMaskedRows, IdSpecAndJsonRoundTripAndOnlyWithAMask) {
  auto c = parse_case_spec("dtype=bf16,h=4,lq=64,lkv=80,d=64,mask=bool,masked_rows,backward");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->masked_rows);
  // Just before "-bwd".
  EXPECT_EQ(c->id(), "bf16-b1-h4-q64-k80-d64-mask_bool-mrows-bwd");
  auto from_id = parse_case_id(c->id());
  ASSERT_TRUE(from_id) << from_id.error().message;
  EXPECT_EQ(*from_id, *c);
  EXPECT_EQ(to_json(*c).at("masked_rows"), true);
  auto from_json = case_from_json(to_json(*c));
  ASSERT_TRUE(from_json) << from_json.error().message;
  EXPECT_EQ(*from_json, *c);
  const auto add = parse_case_spec("dtype=fp16,l=32,d=16,mask=additive,masked_rows=1,seed=2");
  ASSERT_TRUE(add) << add.error().message;
  EXPECT_EQ(add->id(), "fp16-b1-h8-q32-k32-d16-mask_add-s2-mrows");
  EXPECT_EQ(*parse_case_id(add->id()), *add);
  // Without it, ids and JSON are what they always were.
  const auto plain = parse_case_spec("dtype=fp16,l=32,d=16,mask=additive,masked_rows=0");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->id(), "fp16-b1-h8-q32-k32-d16-mask_add");
  EXPECT_FALSE(to_json(*plain).contains("masked_rows"));
  // A mask is needed, and no window.
  const auto none = parse_case_spec("dtype=fp16,l=32,d=16,masked_rows");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("masked_rows needs a mask"), std::string::npos);
  EXPECT_FALSE(parse_case_spec("dtype=fp16,l=32,d=16,window=4,masked_rows"));
  EXPECT_FALSE(parse_case_id("fp16-b1-h8-q32-k32-d16-mrows"));
  EXPECT_FALSE(parse_case_spec("dtype=fp16,l=32,d=16,mask=bool,masked_rows=2"));
  EXPECT_EQ(to_string(MaskedRowSemantics::zero), "zero");
  EXPECT_EQ(to_string(MaskedRowSemantics::nan), "nan");
  EXPECT_EQ(masked_row_semantics_from_string("nan"), MaskedRowSemantics::nan);
  EXPECT_FALSE(masked_row_semantics_from_string("NaN"));
}

// Decoding and chunked prefill align causal bottom-right: the id says so ("-causal_br"), every
// form reads it back, and a top-left case's id and JSON are what they always were.
TEST(CaseCausal, BottomRightRoundTripsEveryWayAndTopLeftIsUnchanged) {
  auto c = parse_case_spec("dtype=bf16,hq=8,hkv=2,lq=16,lkv=80,d=64,causal=bottom_right,seed=4");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_TRUE(c->causal);
  EXPECT_TRUE(c->causal_bottom_right);
  EXPECT_EQ(c->causal_offset(), 64);
  EXPECT_EQ(c->id(), "bf16-b1-h8:2-q16-k80-d64-causal_br-s4");
  auto from_id = parse_case_id(c->id());
  ASSERT_TRUE(from_id) << from_id.error().message;
  EXPECT_EQ(*from_id, *c);
  EXPECT_EQ(to_json(*c).at("causal"), "bottom_right");
  auto from_json = case_from_json(to_json(*c));
  ASSERT_TRUE(from_json) << from_json.error().message;
  EXPECT_EQ(*from_json, *c);
  // Row i sees 65 + i keys: 16 * 64 + 16 * 17 / 2 of the 16 * 80 scores.
  EXPECT_DOUBLE_EQ(c->flops(), 4.0 * 8 * 64 * (16 * 64 + 16 * 17 / 2));

  for (const char* top_left : {"lq=16,lkv=80,d=64,causal", "lq=16,lkv=80,d=64,causal=1",
                               "lq=16,lkv=80,d=64,causal=top_left"}) {
    auto t = parse_case_spec(top_left);
    ASSERT_TRUE(t) << top_left;
    EXPECT_FALSE(t->causal_bottom_right) << top_left;
    EXPECT_EQ(t->causal_offset(), 0);
    EXPECT_EQ(t->id(), "fp16-b1-h8-q16-k80-d64-causal");
    EXPECT_EQ(to_json(*t).at("causal"), true);
  }
  // An old case file's boolean still reads; a case file may name the alignment.
  EXPECT_FALSE(case_from_json(nlohmann::json::parse(R"({"lq":2,"lkv":9,"causal":true})"))
                   ->causal_bottom_right);
  EXPECT_TRUE(case_from_json(nlohmann::json::parse(R"({"lq":2,"lkv":9,"causal":"bottom_right"})"))
                  ->causal_bottom_right);
}

TEST(CaseCausal, BottomRightIsTopLeftAtEqualLengthsAndRefusedPastThem) {
  // At lq = lkv the two alignments are one: the top-left case, its id unchanged.
  auto square = parse_case_spec("l=64,d=64,causal=bottom_right");
  ASSERT_TRUE(square) << square.error().message;
  EXPECT_FALSE(square->causal_bottom_right);
  EXPECT_EQ(square->id(), "fp16-b1-h8-q64-k64-d64-causal");
  EXPECT_FALSE(parse_case_id("fp16-b1-h8-q64-k64-d64-causal_br")->causal_bottom_right);
  // More queries than keys: torch leaves the first rows undefined.
  auto past = parse_case_spec("lq=65,lkv=64,d=64,causal=bottom_right");
  ASSERT_FALSE(past);
  EXPECT_NE(past.error().message.find("needs lq <= lkv, got lq=65 lkv=64"), std::string::npos)
      << past.error().message;
  EXPECT_FALSE(parse_case_id("fp16-b1-h8-q65-k64-d64-causal_br"));
  // A case built in code is held to the same rule.
  Case c = *parse_case_spec("lq=64,lkv=64,d=64,causal");
  c.causal_bottom_right = true;
  EXPECT_NE(validate(c), "");
  c.causal = false;
  c.lkv = 80;
  EXPECT_NE(validate(c), "");
}

// The cases a command line plans, through the real binary: `cases` lists exactly what `check`
// runs (one planning rule), model configs (multimodal, unnamed), and the JSON of `cases` and
// `devices` against their schemas.
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

using nlohmann::json;
using sdpa_test::doctor;
using sdpa_test::run_binary;

namespace {

// Small enough for the reference kernels to run every planned case in seconds.
const char* const k_tiny_model =
    R"({"num_attention_heads":2,"num_key_value_heads":1,"hidden_size":32,)"
    R"("max_position_embeddings":64,"torch_dtype":"float16"})";

json cases_json(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {doctor(), "cases", "--json", "-"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const auto run = run_binary(argv);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  return json::parse(run.out, nullptr, false);
}

std::vector<std::string> ids_of(const json& cases) {
  std::vector<std::string> ids;
  for (const json& c : cases.at("cases")) ids.push_back(c.at("id"));
  return ids;
}

// `check` with the same flags on the reference probe: the cases its one run measured, in order,
// and the report's suite.
std::pair<std::vector<std::string>, std::string> checked(const std::vector<std::string>& flags) {
  sdpa_test::TempDir dir;
  std::vector<std::string> argv = {doctor(),   "check",    "--probe", "reference",
                                   "--variant", "ref-math", "--device", "cpu",
                                   "--json",    dir.file("r.json")};
  argv.insert(argv.end(), flags.begin(), flags.end());
  sdpa_test::RunOptions options;
  options.timeout_s = 300;
  const auto run = run_binary(argv, options);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  const json report = json::parse(sdpa_test::read_file(dir.file("r.json")), nullptr, false);
  std::vector<std::string> ids;
  if (!report.is_object()) return {ids, ""};
  for (const json& r : report.at("results")) ids.push_back(r.at("case_id"));
  return {ids, report.at("suite")};
}

TEST(CasePlan, CasesListsWhatCheckRuns) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("tiny.json"), k_tiny_model);
  sdpa_test::write_file(dir.file("cases.jsonl"),
                        "{\"dtype\":\"fp32\",\"l\":8,\"d\":8}\n"
                        "{\"dtype\":\"fp16\",\"l\":9,\"d\":8}\n");
  const std::vector<std::vector<std::string>> command_lines = {
      // --suite beside --case: both, in each command (check used to drop the suite).
      {"--suite", "quick", "--case", "dtype=fp32,b=1,h=1,l=8,d=8", "--dtype", "fp32"},
      // --model beside --case, in the --dtype asked for; a case planned twice runs once.
      {"--model", dir.file("tiny.json"), "--max-len", "64", "--case", "dtype=fp32,l=8,d=8",
       "--case-file", dir.file("cases.jsonl"), "--dtype", "fp32"},
      // --model alone, in its own dtype.
      {"--model", dir.file("tiny.json"), "--max-len", "64"},
  };
  for (const auto& flags : command_lines) {
    std::string shown;
    for (const auto& f : flags) shown += " " + f;
    const json listed = cases_json(flags);
    ASSERT_TRUE(listed.is_object()) << shown;
    const auto [ran, suite] = checked(flags);
    EXPECT_EQ(ids_of(listed), ran) << shown;
    EXPECT_EQ(listed.at("suite"), suite) << shown;
  }
}

TEST(CasePlan, SuiteBesideCasesIsTheirUnionAndDtypeFilters) {
  const json quick = cases_json({"--dtype", "fp32"});
  const json both = cases_json({"--suite", "quick", "--case", "dtype=fp32,b=1,h=1,l=8,d=8",
                                "--dtype", "fp32"});
  std::vector<std::string> expected = ids_of(quick);
  expected.push_back("fp32-b1-h1-q8-k8-d8");
  EXPECT_EQ(ids_of(both), expected);
  EXPECT_EQ(both.at("suite"), "quick+custom");
  EXPECT_FALSE(quick.at("cases").empty());
  for (const json& c : quick.at("cases")) EXPECT_EQ(c.at("dtype"), "fp32") << c;
  // Without --suite, a --case replaces it.
  EXPECT_EQ(ids_of(cases_json({"--case", "dtype=fp32,b=1,h=1,l=8,d=8"})),
            std::vector<std::string>{"fp32-b1-h1-q8-k8-d8"});
}

TEST(CasePlan, ModelCasesComeInEachDtypeAsked) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("tiny.json"), k_tiny_model);
  const json planned = cases_json({"--model", dir.file("tiny.json"), "--dtype", "bf16,fp32"});
  std::vector<std::string> dtypes;
  for (const json& c : planned.at("cases")) dtypes.push_back(c.at("dtype"));
  // Prefill at 64 (the config's longest), its chunked prefill (16 queries against 64 keys,
  // causal aligned bottom-right) and its decode, in each dtype.
  EXPECT_EQ(dtypes, (std::vector<std::string>{"bf16", "bf16", "bf16", "fp32", "fp32", "fp32"}));
  EXPECT_EQ(planned.at("cases").at(1).at("causal"), "bottom_right") << planned.at("cases").at(1);
}

// A multimodal config keeps its language model's attention under text_config.
TEST(ModelConfigs, MultimodalConfigIsReadFromTextConfig) {
  sdpa_test::TempDir dir;
  sdpa_test::write_file(
      dir.file("llava.json"),
      R"({"_name_or_path":"llava-hf/llava-1.5-7b-hf",)"
      R"("architectures":["LlavaForConditionalGeneration"],)"
      R"("torch_dtype":"float16","vision_config":{"num_attention_heads":16,"hidden_size":1024},)"
      R"("text_config":{"num_attention_heads":32,"num_key_value_heads":8,"hidden_size":4096,)"
      R"("max_position_embeddings":4096,"torch_dtype":"bfloat16","sliding_window":null}})");
  const json planned = cases_json({"--model", dir.file("llava.json")});
  ASSERT_TRUE(planned.is_object());
  EXPECT_EQ(planned.at("model"), "llava-hf/llava-1.5-7b-hf (32 heads, 8 kv heads, d=128)");
  ASSERT_FALSE(planned.at("cases").empty());
  for (const json& c : planned.at("cases")) {
    EXPECT_EQ(c.at("hq"), 32) << c;
    EXPECT_EQ(c.at("hkv"), 8) << c;
    EXPECT_EQ(c.at("d"), 128) << c;
    EXPECT_EQ(c.at("dtype"), "bf16") << c; // the language model's own dtype wins
  }
  // A text_config without heads is named in the error.
  sdpa_test::write_file(dir.file("broken.json"),
                        R"({"text_config":{"hidden_size":4096,"max_position_embeddings":4096}})");
  const auto run = run_binary({doctor(), "cases", "--model", dir.file("broken.json")});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("missing text_config.num_attention_heads"), std::string::npos) << run.err;
}

TEST(ModelConfigs, ConfigWithoutNameIsNamedByItsFile) {
  sdpa_test::TempDir dir;
  std::filesystem::create_directories(dir.file("Tiny-Model"));
  // Hugging Face calls every config config.json: its folder tells them apart.
  sdpa_test::write_file(dir.file("Tiny-Model/config.json"),
                        R"({"architectures":["LlamaForCausalLM"],"model_type":"llama",)"
                        R"("num_attention_heads":4,"hidden_size":256,)"
                        R"("max_position_embeddings":64})");
  sdpa_test::write_file(dir.file("tiny.json"), k_tiny_model);
  const auto run = run_binary({doctor(), "cases", "--model", dir.file("Tiny-Model/config.json")});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out.rfind("model Tiny-Model/config.json (4 heads, 4 kv heads, d=64)\n", 0), 0u)
      << run.out;
  EXPECT_EQ(cases_json({"--model", dir.file("tiny.json")}).at("model"),
            "tiny.json (2 heads, 1 kv heads, d=16)");
}

// ---- schemas ------------------------------------------------------------------------------------

json schema(const std::string& name) {
  return json::parse(sdpa_test::read_file(sdpa_test::source_path("data/" + name)));
}

// Validates a JSON output against its schema in data/; false when jsonschema is missing.
bool validate(const std::string& schema_name, const std::string& file) {
  const auto r = run_binary({SDPA_DOCTOR_TEST_PYTHON,
                             sdpa_test::source_path("tests/report/validate_report.py"), "--schema",
                             sdpa_test::source_path("data/" + schema_name), "--json", file});
  if (r.exit_code == 77) return false;
  EXPECT_EQ(r.exit_code, 0) << file << " against " << schema_name << ":\n" << r.out << r.err;
  return true;
}

TEST(Schemas, DevicesAndCasesJsonValidate) {
  if (std::string(SDPA_DOCTOR_TEST_PYTHON).empty()) GTEST_SKIP() << "no python configured";
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("tiny.json"), k_tiny_model);
  const auto devices = run_binary({doctor(), "devices", "--no-hip", "--no-rocm-smi", "--json",
                                   dir.file("devices.json")});
  ASSERT_EQ(devices.exit_code, 0) << devices.err;
  const auto quick = run_binary({doctor(), "cases", "--json", dir.file("quick.json")});
  ASSERT_EQ(quick.exit_code, 0) << quick.err;
  const auto model = run_binary({doctor(), "cases", "--model", dir.file("tiny.json"), "--case",
                                 "dtype=bf16,hq=4,hkv=2,l=16,d=32,mask=bool,layout=transposed",
                                 "--json", dir.file("model.json")});
  ASSERT_EQ(model.exit_code, 0) << model.err;
  if (!validate("devices.schema.json", dir.file("devices.json")))
    GTEST_SKIP() << "no jsonschema in " << SDPA_DOCTOR_TEST_PYTHON;
  validate("cases.schema.json", dir.file("quick.json"));
  validate("cases.schema.json", dir.file("model.json"));
  // A listing of another kind does not pass for one.
  const auto r = run_binary({SDPA_DOCTOR_TEST_PYTHON,
                             sdpa_test::source_path("tests/report/validate_report.py"), "--schema",
                             sdpa_test::source_path("data/cases.schema.json"), "--json",
                             dir.file("devices.json")});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
}

// The inventory and the case have one shape wherever they appear: the listings' schemas carry the
// report schema's definitions unchanged.
TEST(Schemas, ListingsShareTheReportsDefinitions) {
  const json report = schema("report.schema.json");
  const json devices = schema("devices.schema.json");
  for (const char* def : {"inventory", "device", "finding"})
    EXPECT_EQ(devices.at("$defs").at(def), report.at("$defs").at(def)) << def;
  const json listed = schema("cases.schema.json").at("$defs").at("case");
  const json& kase = report.at("$defs").at("case");
  for (const auto& [key, value] : kase.at("properties").items())
    EXPECT_EQ(listed.at("properties").at(key), value) << key;
  for (const json& key : kase.at("required"))
    EXPECT_NE(std::find(listed.at("required").begin(), listed.at("required").end(), key),
              listed.at("required").end())
        << key;
}

} // namespace

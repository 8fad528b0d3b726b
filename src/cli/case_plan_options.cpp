// The case-planning flags of `check` and `cases`, declared once so that both plan alike.
#include "cases/cases.hpp"
#include "cli/commands.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iterator>

namespace sdpa_doctor::cli {

void add_case_plan_options(CLI::App& sub, const CasePlanFlags& f) {
  const std::vector<std::string> suites(std::begin(cases::k_suites), std::end(cases::k_suites));
  sub.add_option("--suite", f.suite,
                 fmt::format("Case suite: {} (quick: seconds on a CPU; full: hundreds of cases); "
                             "planned by default only without --case, --case-file and --model, "
                             "beside them when given",
                             fmt::join(suites, ", ")))
      ->check(CLI::IsMember(suites))
      ->type_name("NAME")
      ->default_str("quick");
  sub.add_option("--case", f.case_specs,
                 "A case, e.g. \"dtype=bf16,b=1,h=32,l=4096,d=128,causal\" (repeatable)")
      ->type_name("SPEC");
  sub.add_option("--case-file", f.case_file, "Cases as JSON lines, one object a line (\"-\": stdin)")
      ->type_name("FILE");
  sub.add_option("--model", f.model_config,
                 "Plan the attention shapes of this Hugging Face config.json: causal prefill and "
                 "decode, its heads, KV heads, head dim and dtype (or each --dtype)")
      ->type_name("CONFIG");
  sub.add_option("--max-len", f.max_len,
                 "Longest sequence --model plans (prefill length and decode KV length)")
      ->check(CLI::Range(int64_t{1}, k_max_dim))
      ->default_str(std::to_string(cases::k_default_model_max_len));
  sub.add_flag("--train", f.train,
               "Also plan the backward of each case with more than one query (training: dq, dk, "
               "dv checked against float64 oracle gradients)");
  sub.add_option("--dtype", f.dtypes, "Only cases of these dtypes: fp16, bf16, fp32 (default all)")
      ->type_name("LIST");
}

} // namespace sdpa_doctor::cli

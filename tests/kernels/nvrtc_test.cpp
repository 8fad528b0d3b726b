// The kernels' one source compiled by the real NVRTC (PyPI's nvidia-cuda-nvrtc, which needs no
// GPU; the nvrtc_tools.sh fixture lays it out as a torch's site-packages): cubins for sm_80 and
// sm_90, PTX for a card newer than it knows, a broken source's finding with the log, and the
// reference worker on a fake NVIDIA card (fake/fake_cuda.cpp) running what NVRTC compiled.
#include "cases/cases.hpp"
#include "kernels/rtc.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>

namespace sdpa_doctor::kernels::rtc {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const std::string k_site = SDPA_TEST_NVRTC_SITE;

class Nvrtc : public ::testing::Test {
protected:
  void SetUp() override {
    loader::SearchContext context;
    context.torch_lib_dirs = {k_site + "/torch/lib"};
    auto compiler = open_nvrtc(context);
    ASSERT_TRUE(compiler) << compiler.error().message << " (run the kernels_nvrtc_tools test)";
    m_compiler = std::move(*compiler);
  }
  std::string cache() const { return m_dir.file("cache"); }

  sdpa_test::TempDir m_dir;
  std::unique_ptr<Compiler> m_compiler;
};

TEST_F(Nvrtc, IsFoundWhereTheTorchWheelKeepsIt) {
  EXPECT_EQ(m_compiler->library().why, "PyPI's NVRTC beside the torch under test");
  EXPECT_EQ(m_compiler->library().path.rfind(fs::weakly_canonical(k_site).string(), 0), 0u)
      << m_compiler->library().path;
  EXPECT_EQ(m_compiler->name().rfind("NVRTC 1", 0), 0u) << m_compiler->name();
}

// A cubin is an ELF whose e_flags name its sm (bits 8-15 since CUDA 12.x, 0-7 before).
int cubin_sm(const std::string& image) {
  uint32_t flags = 0;
  std::memcpy(&flags, image.data() + 0x30, 4);
  const int sm = int((flags >> 8) & 0xff);
  return sm != 0 ? sm : int(flags & 0xff);
}

TEST_F(Nvrtc, CompilesCubinsForSm80AndSm90AndKeepsThem) {
  for (int sm : {80, 90}) {
    SCOPED_TRACE(sm);
    const std::string arch = "sm_" + std::to_string(sm);
    const Build build = build_kernels(*m_compiler, arch, Entries::all, cache());
    ASSERT_TRUE(build.image) << build.failure << "\n" << build.log;
    EXPECT_EQ(build.image->format, "cubin");
    EXPECT_EQ(build.image->target, arch);
    ASSERT_GT(build.image->bytes.size(), 0x40u);
    EXPECT_EQ(build.image->bytes.substr(0, 4), "\x7f" "ELF");
    EXPECT_EQ(cubin_sm(build.image->bytes), sm);
    for (const char* entry : {"sdpa_flash_f32_d64", "sdpa_flash_f16_d128", "sdpa_flash_bf16_d256",
                              "sdpa_math_scores_f32", "sdpa_math_softmax", "sdpa_math_pv_bf16"})
      EXPECT_TRUE(contains(build.image->bytes, entry)) << entry;
    EXPECT_FALSE(build.from_cache);
    const Build again = build_kernels(*m_compiler, arch, Entries::all, cache());
    EXPECT_TRUE(again.from_cache);
    EXPECT_EQ(again.image->bytes, build.image->bytes);
  }
}

// A card newer than every arch this NVRTC knows gets PTX for the newest it knows, which the
// driver compiles for the card.
TEST_F(Nvrtc, GivesPtxForACardNewerThanItKnows) {
  const Build build = build_kernels(*m_compiler, "sm_990", Entries::flash, cache());
  ASSERT_TRUE(build.image) << build.failure << "\n" << build.log;
  EXPECT_EQ(build.image->format, "ptx");
  EXPECT_EQ(build.image->target.rfind("compute_", 0), 0u);
  const std::string sm = build.image->target.substr(8);
  EXPECT_TRUE(contains(build.image->bytes, ".target sm_" + sm)) << build.image->target;
  EXPECT_TRUE(contains(build.image->bytes, ".entry sdpa_flash_f32_d64"));
  EXPECT_FALSE(contains(build.image->bytes, "sdpa_math_softmax")) << "flash entries only";
  EXPECT_EQ(build.image->bytes.back(), '\0') << "the driver reads PTX as a C string";
}

TEST_F(Nvrtc, ABrokenSourceIsOurFindingWithTheLog) {
  std::vector<SourceFile> broken = kernel_sources();
  broken[0].text += "\nnot_a_type broken_declaration;\n";
  const Build build = build_kernels(*m_compiler, "sm_90", Entries::math, cache(), broken);
  EXPECT_FALSE(build.image);
  EXPECT_TRUE(build.compile_failed);
  const std::string prefix =
      "our reference kernel did not compile for sm_90 (" + m_compiler->name() + "): ";
  EXPECT_EQ(build.failure.rfind(prefix, 0), 0u) << build.failure;
  EXPECT_TRUE(contains(build.failure, "error")) << build.failure;
  EXPECT_TRUE(contains(build.log, "not_a_type")) << build.log;
  EXPECT_FALSE(fs::exists(cache()));
}

// --- the reference worker on a fake NVIDIA card, with what the real NVRTC compiled ---------------
const std::string k_cases =
    R"({"v":1,"id":"c1","case":{"dtype":"fp16","b":1,"hq":4,"hkv":2,"lq":33,"lkv":70,"d":40,"causal":true,"mask":"none","layout":"transposed","seed":3},"tolerance":{"atol":2e-3,"rtol":2e-3},"gradient_tolerance":{"atol":0.1,"rtol":0.1},"oracle":null,"warmup":1,"repeat":2})"
    "\n"
    R"({"v":1,"id":"c2","case":{"dtype":"bf16","b":2,"hq":2,"hkv":2,"lq":1,"lkv":17,"d":64,"causal":false,"mask":"bool","layout":"contiguous","seed":0},"tolerance":{"atol":1.6e-2,"rtol":1.6e-2},"gradient_tolerance":{"atol":0.1,"rtol":0.1},"oracle":null,"warmup":0,"repeat":1})"
    "\n";

std::vector<nlohmann::json> run_worker(const std::string& variant, const sdpa_test::TempDir& dir,
                                       int* exit_code) {
  sdpa_test::write_file(dir.file("cases.jsonl"), k_cases);
  const std::string cmd = "exec \"$0\" --device cuda:0 --variant " + variant +
                          " --results-fd 3 --cases \"$1\" 3>\"$2\"";
  // The CUDA driver comes from the system's library path only: the fake one is put there.
  sdpa_test::RunOptions options;
  options.set_env = {{"LD_LIBRARY_PATH", SDPA_TEST_FAKE_NVIDIA},
                     {"SDPA_DOCTOR_TORCH_LIB_DIRS", k_site + "/torch/lib"},
                     {"SDPA_DOCTOR_KERNEL_CACHE", dir.file("cache")}};
  options.timeout_s = 600;
  const auto r = sdpa_test::run_binary({"/bin/sh", "-c", cmd,
                                        sdpa_test::build_path("sdpa-doctor-ref-worker"),
                                        dir.file("cases.jsonl"), dir.file("events.jsonl")},
                                       options);
  *exit_code = r.exit_code;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<nlohmann::json> events;
  std::istringstream lines(sdpa_test::read_file(dir.file("events.jsonl")));
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json event = nlohmann::json::parse(line);
    sdpa_doctor::cases::judge_worker_event(event); // as the doctor reads it
    events.push_back(std::move(event));
  }
  return events;
}

TEST(NvrtcWorker, RunsOnAnNvidiaCardWhatNvrtcCompiledForIt) {
  sdpa_test::TempDir dir;
  int rc = -1;
  const auto ev = run_worker("ref-flash", dir, &rc);
  ASSERT_EQ(ev.size(), 6u);
  const auto& facts = ev[0]["facts"];
  EXPECT_EQ(facts["gpu_arch"], "sm_90") << ev[0].dump();
  EXPECT_EQ(facts["rtc_target"], "sm_90 (cubin)");
  EXPECT_EQ(facts["rtc_compiler"].get<std::string>().rfind("NVRTC 1", 0), 0u);
  EXPECT_TRUE(contains(facts["gpu_runtime"], "CUDA driver 13.0 (")) << facts["gpu_runtime"];
  EXPECT_TRUE(contains(facts["gpu_runtime"], SDPA_TEST_FAKE_NVIDIA));
  EXPECT_FALSE(ev[0].contains("unavailable"));
  for (size_t i : {2u, 4u}) {
    EXPECT_EQ(ev[i]["status"], "pass") << ev[i].dump();
    EXPECT_EQ(ev[i]["backend_chosen"], "ref-flash");
  }
  EXPECT_EQ(ev[2]["metrics"]["timed_runs"], 2);

  // The health check goes through the same runtime.
  sdpa_test::RunOptions options;
  options.set_env = {{"LD_LIBRARY_PATH", SDPA_TEST_FAKE_NVIDIA}};
  const auto health = sdpa_test::run_binary(
      {sdpa_test::build_path("sdpa-doctor-ref-worker"), "--health-check", "--device", "cuda:0"},
      options);
  EXPECT_EQ(health.exit_code, 0) << health.err;
  const auto missing = sdpa_test::run_binary(
      {sdpa_test::build_path("sdpa-doctor-ref-worker"), "--health-check", "--device", "cuda:3"},
      options);
  EXPECT_EQ(missing.exit_code, 1) << missing.err;
  EXPECT_TRUE(contains(missing.err, "no GPU device cuda:3 (1 visible to CUDA driver 13.0"))
      << missing.err;
}

} // namespace
} // namespace sdpa_doctor::kernels::rtc

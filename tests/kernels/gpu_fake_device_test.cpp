// Our GPU kernels through the product's whole GPU path (loader -> hipRTC -> HIP module ->
// launches -> copies back) on a fake AMD gfx1201 (fake/fake_hip.cpp, fake/fake_hiprtc.cpp) whose
// kernels are attention_gpu.cu itself, run by the CPU emulator: every dtype, mask kind, layout,
// GQA ratio, causal alignment and head-dim bucket against the float64 oracle, the launch
// geometry, the health check and the refusals.
#include "kernels/gpu_launch.hpp"
#include "kernels/kernels.hpp"
#include "oracle_compare.hpp"
#include "cases/tolerance.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

namespace sdpa_doctor::kernels {
namespace {

// Before anything opens a GPU library: the fake AMD GPU first on the search path, an empty kernel
// cache, and the fakes' records.
class FakeAmdGpu : public ::testing::Environment {
public:
  void SetUp() override {
    m_dir = std::make_unique<sdpa_test::TempDir>();
    ::setenv("SDPA_DOCTOR_TORCH_LIB_DIRS", SDPA_TEST_FAKE_AMD, 1);
    ::setenv("SDPA_DOCTOR_KERNEL_CACHE", m_dir->file("cache").c_str(), 1);
    ::setenv("FAKE_HIPRTC_RECORD", m_dir->file("hiprtc.log").c_str(), 1);
    ::setenv("FAKE_GPU_RECORD", m_dir->file("launches.log").c_str(), 1);
    ::unsetenv("FAKE_GPU_ARCH");
    ::unsetenv("FAKE_HIPRTC_FAIL");
  }
  void TearDown() override { m_dir.reset(); }
  static std::string record(const char* name) {
    return sdpa_test::read_file(std::getenv(name));
  }

private:
  std::unique_ptr<sdpa_test::TempDir> m_dir;
};
[[maybe_unused]] auto* const g_environment = ::testing::AddGlobalTestEnvironment(new FakeAmdGpu);

void expect_matches_oracle(RefKernel kernel, const Case& c, const HostInputs& in) {
  SCOPED_TRACE(std::string(to_string(kernel)) + " " + c.id());
  auto run = run_gpu(kernel, 0, c, in, 1, 2);
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_EQ(run->times_ms.size(), 2u);
  const Errors e = compare(run->out, oracle_attention(c, in), cases::default_tolerance(c.dtype));
  EXPECT_EQ(e.nonfinite, 0);
  EXPECT_EQ(e.outside, 0) << "max abs " << e.max_abs;
}

TEST(FakeAmdGpu, KernelsAreCompiledByHipRtcForTheDevicesArch) {
  const GpuKernels& flash = gpu_kernels(RefKernel::flash, 0);
  ASSERT_EQ(flash.failure, "");
  EXPECT_EQ(flash.facts.at("gpu_arch"), "gfx1201");
  EXPECT_EQ(flash.facts.at("rtc_target"), "gfx1201 (hsaco)");
  EXPECT_EQ(flash.facts.at("rtc_compiler").rfind("hipRTC 7.1 (", 0), 0u);
  EXPECT_NE(flash.facts.at("rtc_compiler").find(SDPA_TEST_FAKE_AMD), std::string::npos);
  EXPECT_NE(flash.facts.at("gpu_runtime").find("HIP runtime 7.1"), std::string::npos);
  const std::string compiles = FakeAmdGpu::record("FAKE_HIPRTC_RECORD");
  EXPECT_NE(compiles.find("--offload-arch=gfx1201"), std::string::npos) << compiles;
  EXPECT_NE(compiles.find("-DSDPA_WITH_MATH=0"), std::string::npos) << compiles;
  EXPECT_NE(compiles.find("-DSDPA_HOST_PARAMS_SIZE=" + std::to_string(sizeof(AttnParams))),
            std::string::npos);
  EXPECT_NE(compiles.find("compile attention_gpu.cu headers= "), std::string::npos)
      << "one translation unit, no header to hand over: " << compiles;
}

TEST(FakeAmdGpu, BothKernelsMatchTheOracle) {
  // Past every tile edge: 32/16 query rows per block, 64/32/16 keys per tile, the three head-dim
  // buckets, D not a multiple of 16, Lq or Lkv of 1, causal with Lq < Lkv and Lq > Lkv, and
  // causal aligned bottom-right.
  for (const char* spec : {"dtype=fp32,b=1,h=1,lq=1,lkv=1,d=8",
                           "dtype=fp32,b=2,hq=4,hkv=2,lq=33,lkv=70,d=40,causal",
                           "dtype=fp16,b=1,h=2,lq=17,lkv=65,d=64,mask=bool",
                           "dtype=bf16,b=1,hq=3,hkv=1,lq=40,lkv=9,d=72,causal",
                           "dtype=fp16,b=2,h=1,lq=5,lkv=33,d=128,mask=additive,layout=transposed",
                           "dtype=bf16,b=1,h=2,lq=20,lkv=20,d=160,mask=bool,layout=transposed",
                           "dtype=fp32,b=1,hq=2,hkv=1,lq=18,lkv=40,d=256,causal",
                           // Aligned bottom-right: decode under GQA, a chunk past a tile edge.
                           "dtype=bf16,b=1,hq=8,hkv=2,lq=1,lkv=129,d=64,causal=bottom_right",
                           "dtype=fp32,b=1,h=2,lq=33,lkv=80,d=40,causal=bottom_right"}) {
    auto c = parse_case_spec(spec);
    ASSERT_TRUE(c) << spec;
    const HostInputs in = make_inputs(*c);
    for (RefKernel kernel : {RefKernel::flash, RefKernel::math})
      expect_matches_oracle(kernel, *c, in);
  }
}

TEST(FakeAmdGpu, RowsWithNothingVisibleEndAsZeros) {
  auto c = parse_case_spec("dtype=fp32,b=1,h=2,lq=6,lkv=20,d=16,mask=bool");
  ASSERT_TRUE(c);
  HostInputs in = make_inputs(*c);
  for (int64_t j = 0; j < c->lkv; ++j) in.mask[size_t(3 * c->lkv + j)] = 0.0f; // row 3 sees nothing
  for (RefKernel kernel : {RefKernel::flash, RefKernel::math}) {
    auto run = run_gpu(kernel, 0, *c, in, 0, 1);
    ASSERT_TRUE(run) << run.error().message;
    for (int64_t h = 0; h < c->hq; ++h)
      for (int64_t e = 0; e < c->d; ++e)
        EXPECT_EQ(run->out[size_t((h * c->lq + 3) * c->d + e)], 0.0f) << to_string(kernel);
    expect_matches_oracle(kernel, *c, in);
  }
}

TEST(FakeAmdGpu, FlashRefusesHeadDimsPastItsLargestBucketAndMathTakesThem) {
  auto c = parse_case_spec("dtype=fp16,b=1,h=1,lq=3,lkv=7,d=300");
  ASSERT_TRUE(c);
  const HostInputs in = make_inputs(*c);
  auto flash = run_gpu(RefKernel::flash, 0, *c, in, 0, 1);
  ASSERT_FALSE(flash);
  EXPECT_EQ(flash.error().message, "no ref-flash GPU instance for head dim 300 (max 256)");
  expect_matches_oracle(RefKernel::math, *c, in);
}

// The host launches what the kernel source was written for (gpu_launch.hpp): the fake runtime
// records each launch as the device would see it.
TEST(FakeAmdGpu, LaunchGeometryFollowsTheSharedTable) {
  auto c = parse_case_spec("dtype=fp32,b=2,hq=4,hkv=2,lq=33,lkv=70,d=72");
  ASSERT_TRUE(c);
  const std::string before = FakeAmdGpu::record("FAKE_GPU_RECORD");
  ASSERT_TRUE(run_gpu(RefKernel::flash, 0, *c, make_inputs(*c), 0, 1));
  const std::string launches = FakeAmdGpu::record("FAKE_GPU_RECORD").substr(before.size());
  const int rows = gpu::flash_rows(128);
  const std::string want = "launch sdpa_flash_f32_d128 grid " +
                           std::to_string(2 * 4 * ((33 + rows - 1) / rows)) + " 1 block " +
                           std::to_string(gpu::k_flash_threads) + " shared " +
                           std::to_string(gpu::flash_shared_bytes(128, 72)) + "\n";
  EXPECT_EQ(launches, want);
}

TEST(FakeAmdGpu, HealthCheckRunsOnTheDeviceAndNamesAMissingOne) {
  const GpuHealth healthy = gpu_health_check(0);
  EXPECT_TRUE(healthy.known);
  EXPECT_EQ(healthy.problem, "");
  EXPECT_EQ(gpu_unavailable_reason(0), "");
  const std::string missing = gpu_unavailable_reason(1);
  EXPECT_EQ(missing.rfind("no GPU device cuda:1 (1 visible to HIP runtime 7.1 (", 0), 0u)
      << missing;
}

} // namespace
} // namespace sdpa_doctor::kernels

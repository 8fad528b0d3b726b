// The run-time compile layer (kernels/rtc.hpp) without a GPU: the embedded source, NVRTC's target
// choice, the compile options, the cache's key and directory, and the AMD path against a fake
// hipRTC (fake/fake_hiprtc.cpp) that records what it was asked: no hipRTC reachable here knows
// gfx12, and Debian's crashes without a device.
#include "kernels/attn_params.hpp"
#include "kernels/rtc.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>

namespace sdpa_doctor::kernels::rtc {
namespace {

namespace fs = std::filesystem;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The run-time compilers see one translation unit: the kernel file with every project header it
// includes written in place once, between #line directives that keep the real names and lines.
TEST(KernelSources, AreTheKernelFileWithItsHeadersWrittenInPlace) {
  const auto& sources = kernel_sources();
  ASSERT_EQ(sources.size(), 1u);
  const std::string& text = sources[0].text;
  EXPECT_EQ(sources[0].name, "attention_gpu.cu");
  EXPECT_EQ(text.rfind("#line 1 \"kernels/attention_gpu.cu\"\n", 0), 0u);
  for (const char* header : {"kernels/gpu_dialect.hpp", "kernels/gpu_launch.hpp",
                             "kernels/attn_params.hpp", "kernels/attention_core.hpp"}) {
    EXPECT_FALSE(contains(text, std::string("#include \"") + header)) << header;
    const std::string line = std::string("#line 1 \"") + header + "\"";
    EXPECT_TRUE(contains(text, line)) << header;
    EXPECT_EQ(text.find(line), text.rfind(line)) << header << " written twice";
  }
  EXPECT_FALSE(contains(text, "#pragma once"));
  for (const char* part : {"struct AttnParams", "row_rescale", "flash_shared_bytes",
                           "sdpa_shfl_xor", "flash_forward"})
    EXPECT_TRUE(contains(text, part)) << part;
  // After a header, the numbering goes on where the include was: the line after each
  // `#line N "kernels/attention_gpu.cu"` is line N of the file as written (or, where that line
  // includes a header written above, the note that says so).
  std::vector<std::string> original;
  std::istringstream file(
      sdpa_test::read_file(sdpa_test::source_path("src/kernels/attention_gpu.cu")));
  for (std::string line; std::getline(file, line);) original.push_back(line);
  const std::regex back(R"re(#line ([0-9]+) "kernels/attention_gpu.cu"\n([^\n]*))re");
  int resumed = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), back), end; it != end; ++it, ++resumed) {
    const size_t n = std::stoul((*it)[1]);
    ASSERT_LE(n, original.size());
    const std::string& written = original[n - 1];
    if (written.rfind("#include \"kernels/", 0) == 0) {
      const size_t open = written.find('"') + 1;
      const std::string header = written.substr(open, written.find('"', open) - open);
      EXPECT_EQ((*it)[2].str().rfind("// " + header + ": written above", 0), 0u) << "line " << n;
    } else {
      EXPECT_EQ((*it)[2].str(), written) << "line " << n;
    }
  }
  EXPECT_GE(resumed, 3) << "the kernel file's own headers, each followed by a resumption";
}

TEST(NvidiaTarget, CubinForAKnownCardPtxBelowANewerOne) {
  const std::vector<int> archs{75, 80, 86, 87, 89, 90, 100, 103, 120};
  EXPECT_EQ(*nvidia_target(90, archs, "NVRTC 13.0"), "sm_90");
  EXPECT_EQ(*nvidia_target(80, archs, "NVRTC 13.0"), "sm_80");
  EXPECT_EQ(*nvidia_target(121, archs, "NVRTC 13.0"), "compute_120");
  EXPECT_EQ(*nvidia_target(88, archs, "NVRTC 13.0"), "compute_87");
  auto too_old = nvidia_target(70, archs, "NVRTC 13.0");
  ASSERT_FALSE(too_old);
  EXPECT_EQ(too_old.error().message,
            "no NVRTC 13.0 target for sm_70: it builds for sm_75 and newer only");
}

TEST(KernelOptions, NameTheTargetTheHostLayoutAndTheEntries) {
  const std::string size = "-DSDPA_HOST_PARAMS_SIZE=" + std::to_string(sizeof(AttnParams));
  const auto amd = kernel_options(Vendor::amd, "gfx1201", Entries::flash);
  EXPECT_EQ(amd, (std::vector<std::string>{"--offload-arch=gfx1201", "-O3", "-std=c++17", size,
                                           "-DSDPA_WITH_MATH=0"}));
  const auto nvidia = kernel_options(Vendor::nvidia, "sm_90", Entries::all);
  EXPECT_EQ(nvidia, (std::vector<std::string>{"--gpu-architecture=sm_90", "-std=c++17", size}));
  EXPECT_EQ(kernel_options(Vendor::nvidia, "sm_90", Entries::math).back(), "-DSDPA_WITH_FLASH=0");
}

TEST(CacheFileName, ChangesWithSourceOptionsTargetAndCompiler) {
  std::vector<SourceFile> sources{{"a.cu", "int x;"}, {"h.hpp", "int y;"}};
  const std::vector<std::string> options{"-O3"};
  const std::string arch = "gfx90a:sramecc+:xnack-";
  const std::string base = cache_file_name(sources, options, arch, "hipRTC 7.1", "hsaco");
  EXPECT_EQ(base, cache_file_name(sources, options, arch, "hipRTC 7.1", "hsaco"));
  EXPECT_TRUE(std::regex_match(
      base, std::regex(R"(sdpa-gfx90a_sramecc__xnack--hipRTC_7.1-[0-9a-f]{16}\.hsaco)")))
      << base;
  EXPECT_NE(base, cache_file_name(sources, {"-O2"}, arch, "hipRTC 7.1", "hsaco"));
  EXPECT_NE(base, cache_file_name(sources, options, "gfx90a", "hipRTC 7.1", "hsaco"));
  EXPECT_NE(base, cache_file_name(sources, options, arch, "hipRTC 7.2", "hsaco"));
  sources[1].text = "int z;";
  EXPECT_NE(base, cache_file_name(sources, options, arch, "hipRTC 7.1", "hsaco"));
  // Where one file ends and the next begins counts too.
  EXPECT_NE(cache_file_name({{"a", "bc"}}, {}, "t", "c", "f"),
            cache_file_name({{"ab", "c"}}, {}, "t", "c", "f"));
}

TEST(CacheDir, FollowsTheEnvironmentLikeTheOracleCache) {
  sdpa_test::TempDir dir;
  ::setenv("SDPA_DOCTOR_KERNEL_CACHE", "off", 1);
  EXPECT_EQ(default_cache_dir(), "");
  ::setenv("SDPA_DOCTOR_KERNEL_CACHE", dir.path().c_str(), 1);
  EXPECT_EQ(default_cache_dir(), dir.path());
  ::unsetenv("SDPA_DOCTOR_KERNEL_CACHE");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(default_cache_dir(), "/xdg/sdpa-doctor/kernels");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(default_cache_dir(), "/home/someone/.cache/sdpa-doctor/kernels");
}

// --- the AMD path against the fake hipRTC -------------------------------------------------------
class FakeHipRtc : public ::testing::Test {
protected:
  void SetUp() override {
    ::setenv("FAKE_HIPRTC_RECORD", m_dir.file("hiprtc.log").c_str(), 1);
    ::unsetenv("FAKE_HIPRTC_FAIL");
    m_context.torch_lib_dirs = {SDPA_TEST_FAKE_AMD};
    m_context.opt_root = m_dir.path(); // no /opt/rocm* of this machine's in the way
    auto compiler = open_hiprtc(m_context);
    ASSERT_TRUE(compiler) << compiler.error().message;
    m_compiler = std::move(*compiler);
  }
  int compiles() const {
    const std::string log = sdpa_test::read_file(m_dir.file("hiprtc.log"));
    return int(std::count(log.begin(), log.end(), '\n'));
  }
  std::string cache() const { return m_dir.file("cache"); }

  sdpa_test::TempDir m_dir;
  loader::SearchContext m_context;
  std::unique_ptr<Compiler> m_compiler;
};

TEST_F(FakeHipRtc, IsFoundBesideTheTorchAndSaysItsVersion) {
  EXPECT_EQ(m_compiler->name(), "hipRTC 7.1");
  EXPECT_EQ(m_compiler->vendor(), Vendor::amd);
  EXPECT_EQ(m_compiler->library().why, "torch/lib of the torch under test");
  EXPECT_EQ(fs::path(m_compiler->library().path).parent_path(), fs::path(SDPA_TEST_FAKE_AMD));
  auto wrong = m_compiler->target_for("sm_90");
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().message, "hipRTC 7.1 builds for gfx targets, not 'sm_90'");
}

TEST_F(FakeHipRtc, CompilesForTheFullArchNameOnceThenFromTheCache) {
  const std::string arch = "gfx90a:sramecc+:xnack-";
  const Build first = build_kernels(*m_compiler, arch, Entries::flash, cache());
  ASSERT_TRUE(first.image) << first.failure;
  EXPECT_EQ(first.image->target, arch); // feature flags kept: the code must match the device
  EXPECT_EQ(first.image->format, "hsaco");
  const std::string code = "FAKE-HSACO " + arch + " --offload-arch=" + arch + " -O3";
  EXPECT_EQ(first.image->bytes.rfind(code, 0), 0u) << first.image->bytes;
  EXPECT_FALSE(first.from_cache);
  EXPECT_EQ(fs::path(first.cache_file).parent_path(), fs::path(cache()));
  EXPECT_TRUE(fs::exists(first.cache_file));
  EXPECT_EQ(first.compiler.rfind("hipRTC 7.1 (" + std::string(SDPA_TEST_FAKE_AMD), 0), 0u);
  EXPECT_EQ(compiles(), 1);

  const Build again = build_kernels(*m_compiler, arch, Entries::flash, cache());
  ASSERT_TRUE(again.image);
  EXPECT_TRUE(again.from_cache);
  EXPECT_EQ(again.image->bytes, first.image->bytes);
  EXPECT_EQ(again.cache_file, first.cache_file);
  EXPECT_EQ(again.compile_ms, 0);
  EXPECT_EQ(compiles(), 1);

  // Another arch, another set of entries: another file, compiled afresh.
  const Build other = build_kernels(*m_compiler, "gfx1201", Entries::math, cache());
  ASSERT_TRUE(other.image);
  EXPECT_FALSE(other.from_cache);
  EXPECT_NE(other.cache_file, first.cache_file);
  EXPECT_EQ(compiles(), 2);
  const std::string log = sdpa_test::read_file(m_dir.file("hiprtc.log"));
  EXPECT_TRUE(contains(log, "--offload-arch=gfx1201 -O3 -std=c++17")) << log;
  EXPECT_TRUE(contains(log, "-DSDPA_WITH_FLASH=0")) << log;

  // A cached image the runtime refused is forgotten: the next build compiles.
  evict(again);
  EXPECT_FALSE(fs::exists(first.cache_file));
  EXPECT_FALSE(build_kernels(*m_compiler, arch, Entries::flash, cache()).from_cache);
  EXPECT_EQ(compiles(), 3);
}

TEST_F(FakeHipRtc, ARefusedSourceIsOursWithTheCompilersLog) {
  std::vector<SourceFile> broken = kernel_sources();
  broken[0].text += "\n#error a defect of our own\n";
  const Build build = build_kernels(*m_compiler, "gfx1201", Entries::all, cache(), broken);
  EXPECT_FALSE(build.image);
  EXPECT_TRUE(build.compile_failed);
  EXPECT_EQ(build.failure, "our reference kernel did not compile for gfx1201 (hipRTC 7.1): "
                           "attention_gpu.cu:1:2: error: the fake hipRTC refuses this source");
  EXPECT_TRUE(contains(build.log, "1 error generated when compiling for gfx1201")) << build.log;
  EXPECT_FALSE(fs::exists(cache())) << "nothing is cached of a failed compile";
}

// HIP 5 shipped hipRTC inside libamdhip64: with no libhiprtc to be found, the runtime's own
// hiprtc* calls serve.
TEST_F(FakeHipRtc, FallsBackToTheHipRuntimesOwnHipRtc) {
  loader::SearchContext nowhere;
  nowhere.torch_lib_dirs = {m_dir.path()};
  nowhere.opt_root = m_dir.path();
  if (loader::open(loader::Library::hiprtc, nowhere))
    GTEST_SKIP() << "this machine has a libhiprtc on its library path";
  // Any library that exports hiprtc* stands in for such a runtime: the fake hipRTC itself.
  auto as_runtime = loader::open(loader::Library::hiprtc, m_context);
  ASSERT_TRUE(as_runtime);
  auto compiler = open_hiprtc(nowhere, &*as_runtime);
  ASSERT_TRUE(compiler) << compiler.error().message;
  EXPECT_EQ((*compiler)->library().path, as_runtime->path);
  auto none = open_hiprtc(nowhere);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().message.rfind("no hipRTC: ", 0), 0u) << none.error().message;
  EXPECT_NE(none.error().message.find("libhiprtc.so.7"), std::string::npos);
}

} // namespace
} // namespace sdpa_doctor::kernels::rtc

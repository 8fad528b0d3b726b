// The loader through the real dlopen: where it looks and in which order, which file it opens and
// why, what it says about a file that does not load, and which files a process has mapped.
#include "loader/loader.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <filesystem>

namespace fs = std::filesystem;
namespace loader = sdpa_doctor::loader;
using loader::Library;

namespace {

std::vector<std::string> dirs(const std::vector<loader::SearchPlace>& places) {
  std::vector<std::string> out;
  for (const auto& p : places)
    out.push_back(p.dir);
  return out;
}

// A folder under `root` holding our test library under `name`.
std::string folder_with(const sdpa_test::TempDir& root, const std::string& folder,
                        const std::string& name) {
  const fs::path dir = fs::path(root.path()) / folder;
  fs::create_directories(dir);
  fs::copy_file(SDPA_TEST_LOADER_LIBRARY, dir / name, fs::copy_options::overwrite_existing);
  return dir.string();
}

std::string canonical(const std::string& path) { return fs::canonical(path).string(); }

} // namespace

TEST(Loader, SearchesTorchsFoldersThenRocmPathThenOptRocmNewestFirstThenTheSystem) {
  sdpa_test::TempDir root;
  for (const char* d :
       {"venv/torch/lib", "venv/_rocm_sdk_core/lib", "rocm-env/lib", "opt/rocm/lib",
        "opt/rocm-6.4.0/lib", "opt/rocm-7.1.0/lib", "opt/rocm-6.10.1/lib", "opt/other/lib"})
    fs::create_directories(fs::path(root.path()) / d);
  loader::SearchContext context;
  context.torch_lib_dirs = {root.file("venv/torch/lib"), root.file("venv/_rocm_sdk_core/lib"),
                            root.file("venv/missing/lib")};
  context.rocm_path = root.file("rocm-env");
  context.opt_root = root.file("opt");
  const auto places = loader::search_places(Library::hip_runtime, context);
  EXPECT_EQ(dirs(places), (std::vector<std::string>{
                              root.file("venv/torch/lib"), root.file("venv/_rocm_sdk_core/lib"),
                              root.file("rocm-env/lib"), root.file("opt/rocm/lib"),
                              root.file("opt/rocm-7.1.0/lib"), root.file("opt/rocm-6.10.1/lib"),
                              root.file("opt/rocm-6.4.0/lib"), ""}));
  EXPECT_EQ(places[0].why, "torch/lib of the torch under test");
  EXPECT_EQ(places[1].why, "TheRock package _rocm_sdk_core of the torch under test");
  EXPECT_EQ(places[2].why, "$ROCM_PATH/lib");
  EXPECT_NE(places.back().why.find("system"), std::string::npos);

  // One folder reached twice is searched once, where it first comes.
  context.rocm_path = root.file("opt/rocm");
  EXPECT_EQ(dirs(loader::search_places(Library::rocm_smi, context)).at(2),
            root.file("opt/rocm/lib"));
  EXPECT_EQ(loader::search_places(Library::rocm_smi, context).at(2).why, "$ROCM_PATH/lib");
  EXPECT_EQ(loader::search_places(Library::rocm_smi, context).size(), places.size() - 1);
  // The CUDA driver matches the kernel module: only the system's copy counts.
  EXPECT_EQ(dirs(loader::search_places(Library::cuda_driver, context)),
            std::vector<std::string>{""});
  // So does NVML, which the driver installs beside it.
  EXPECT_EQ(dirs(loader::search_places(Library::nvml, context)), std::vector<std::string>{""});
  EXPECT_EQ(loader::sonames(Library::nvml), std::vector<std::string>{"libnvidia-ml.so.1"});
}

// NVRTC: torch's own folder, then PyPI's CUDA 13 and CUDA 12 packages beside it in
// site-packages, then a CUDA toolkit, then the system.
TEST(Loader, NvrtcIsLookedForBesideTheTorchWheelThenInTheCudaToolkit) {
  sdpa_test::TempDir root;
  for (const char* d : {"site/torch/lib", "site/nvidia/cu13/lib", "site/nvidia/cuda_nvrtc/lib",
                        "cuda-13.0/lib64"})
    fs::create_directories(fs::path(root.path()) / d);
  loader::SearchContext context;
  context.torch_lib_dirs = {root.file("site/torch/lib")};
  context.cuda_path = root.file("cuda-13.0");
  const auto places = loader::search_places(Library::nvrtc, context);
  ASSERT_GE(places.size(), 5u);
  const std::vector<std::string> searched = dirs(places);
  EXPECT_EQ(std::vector<std::string>(searched.begin(), searched.begin() + 4),
            (std::vector<std::string>{root.file("site/torch/lib"), root.file("site/nvidia/cu13/lib"),
                                      root.file("site/nvidia/cuda_nvrtc/lib"),
                                      root.file("cuda-13.0/lib64")}));
  EXPECT_EQ(places[1].why, "PyPI's NVRTC beside the torch under test");
  EXPECT_EQ(places.back().dir, "");
}

TEST(Loader, OpensTheFirstFileThatLoadsAndSaysWhichAndWhy) {
  sdpa_test::TempDir root;
  loader::SearchContext context;
  context.opt_root = root.file("no-opt");
  folder_with(root, "rocm/lib", "libamdhip64.so.6");
  context.rocm_path = root.file("rocm");
  context.torch_lib_dirs = {folder_with(root, "venv/torch/lib", "libamdhip64.so.7")};
  const auto opened = loader::open(Library::hip_runtime, context);
  ASSERT_TRUE(opened) << opened.error().message;
  EXPECT_EQ(opened->path, canonical(root.file("venv/torch/lib/libamdhip64.so.7")));
  EXPECT_EQ(opened->soname, "libamdhip64.so.7");
  EXPECT_EQ(opened->why, "torch/lib of the torch under test");
  EXPECT_TRUE(opened->tried.empty());
  const auto answer = loader::symbol_as<int (*)()>(*opened, "sdpa_loader_test_answer");
  ASSERT_NE(answer, nullptr);
  EXPECT_EQ(answer(), 42);
  EXPECT_EQ(loader::symbol(*opened, "hipGetDevicePropertiesR0600"), nullptr); // absent: nullptr
}

TEST(Loader, AFileThatDoesNotLoadIsRecordedAndTheSearchGoesOn) {
  sdpa_test::TempDir root;
  fs::create_directories(root.file("venv/torch/lib"));
  sdpa_test::write_file(root.file("venv/torch/lib/libamdhip64.so.6"), "this is not a library\n");
  loader::SearchContext context;
  context.opt_root = root.file("no-opt");
  context.torch_lib_dirs = {root.file("venv/torch/lib")};
  folder_with(root, "rocm/lib", "libamdhip64.so.6");
  context.rocm_path = root.file("rocm");
  const auto opened = loader::open(Library::hip_runtime, context);
  ASSERT_TRUE(opened) << opened.error().message;
  EXPECT_EQ(opened->why, "$ROCM_PATH/lib");
  ASSERT_EQ(opened->tried.size(), 1u);
  EXPECT_EQ(opened->tried[0].rfind(root.file("venv/torch/lib/libamdhip64.so.6") + ": ", 0), 0u)
      << opened->tried[0];
}

TEST(Loader, NothingThatLoadsIsAnErrorListingEveryPlaceAndFailure) {
  sdpa_test::TempDir root;
  fs::create_directories(root.file("venv/torch/lib"));
  sdpa_test::write_file(root.file("venv/torch/lib/libamd_smi.so"), "garbage");
  loader::SearchContext context;
  context.opt_root = root.file("no-opt");
  context.torch_lib_dirs = {root.file("venv/torch/lib")};
  const auto opened = loader::open(Library::amd_smi, context);
  if (opened) GTEST_SKIP() << "this machine has AMD SMI on its library path: " << opened->path;
  const std::string& message = opened.error().message;
  EXPECT_EQ(message.rfind("no libamd_smi opened (looked for libamd_smi.so.26", 0), 0u) << message;
  EXPECT_NE(message.find(root.file("venv/torch/lib") + " (torch/lib of the torch under test)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("failed to load: " + root.file("venv/torch/lib/libamd_smi.so") + ": "),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
}

TEST(Loader, TheSystemsHipRuntimeOpensByItsSoname) {
  loader::SearchContext context;
  context.opt_root = "/nonexistent";
  const auto opened = loader::open(Library::hip_runtime, context);
  if (!opened) GTEST_SKIP() << opened.error().message;
  EXPECT_NE(loader::symbol(*opened, "hipRuntimeGetVersion"), nullptr);
  EXPECT_EQ(opened->path, canonical(opened->path)); // the real file, not a symlink to it
  EXPECT_EQ(fs::path(opened->path).filename().string().rfind("libamdhip64.so", 0), 0u);
  EXPECT_NE(opened->why.find("system"), std::string::npos) << opened->why;
}

TEST(Loader, MappedFilesSeesTwoCopiesOfOneLibrary) {
  sdpa_test::TempDir root;
  const std::string a = folder_with(root, "a", "libsdpa-mapped-twice.so");
  const std::string b = folder_with(root, "b", "libsdpa-mapped-twice.so");
  EXPECT_TRUE(loader::mapped_files("libsdpa-mapped-twice").empty());
  // Two files with one name, as a runtime preloaded beside torch's own copy would be.
  ASSERT_NE(::dlopen((a + "/libsdpa-mapped-twice.so").c_str(), RTLD_NOW | RTLD_LOCAL), nullptr);
  EXPECT_EQ(loader::mapped_files("libsdpa-mapped-twice").size(), 1u);
  ASSERT_NE(::dlopen((b + "/libsdpa-mapped-twice.so").c_str(), RTLD_NOW | RTLD_LOCAL), nullptr);
  EXPECT_EQ(loader::mapped_files("libsdpa-mapped-twice"),
            (std::vector<std::string>{canonical(a + "/libsdpa-mapped-twice.so"),
                                      canonical(b + "/libsdpa-mapped-twice.so")}));
}

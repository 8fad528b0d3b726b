// Which LibTorch plugin a check loads: a torch told apart without importing it, the sidecar of the
// plugin built with the doctor, what torch_facts.py says, and the one compiler call.
#include "run/torch_plugin.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace sdpa_doctor::run;

namespace {

// A torch install as far as its identity goes: torch/version.py and torch/lib/libtorch_cpu.so.
struct FakeTorch {
  fs::path root = fs::temp_directory_path() / ("fake-torch-" + std::to_string(::getpid()));
  FakeTorch(const std::string& version_py, size_t library_bytes) {
    fs::create_directories(root / "torch" / "lib");
    std::ofstream(root / "torch" / "version.py") << version_py;
    std::ofstream(root / "torch" / "lib" / "libtorch_cpu.so") << std::string(library_bytes, 'x');
  }
  ~FakeTorch() { fs::remove_all(root); }
  std::string lib() const { return (root / "torch" / "lib").string(); }
};

bool has(const std::vector<std::string>& argv, const std::string& word) {
  return std::find(argv.begin(), argv.end(), word) != argv.end();
}

} // namespace

TEST(TorchIdentity, IsReadFromVersionPyAndTheLibrarysSize) {
  FakeTorch torch("from typing import Optional\n__version__ = '2.9.1+rocm6.4'\ndebug = False\n"
                  "git_version: str = \"abc123\"\nhip: Optional[str] = '6.4'\n",
                  1234);
  const auto id = torch_identity(torch.lib());
  ASSERT_TRUE(id);
  EXPECT_EQ(id->version, "2.9.1+rocm6.4");
  EXPECT_EQ(id->git_version, "abc123");
  EXPECT_EQ(id->libtorch_cpu_size, 1234);
  EXPECT_EQ(id->lib_dir, fs::canonical(torch.lib()).string());
}

TEST(TorchIdentity, AnotherBuildOfTheSameVersionIsAnotherTorch) {
  const auto a = [] {
    FakeTorch t("__version__ = '2.13.0'\ngit_version = 'one'\n", 10);
    return torch_identity(t.lib());
  }();
  const auto b = [] {
    FakeTorch t("__version__ = '2.13.0'\ngit_version = 'one'\n", 11);
    return torch_identity(t.lib());
  }();
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(*a == *b);
}

TEST(TorchIdentity, NoVersionOrNoLibraryIsNone) {
  {
    FakeTorch t("debug = False\n", 10);
    EXPECT_FALSE(torch_identity(t.lib()));
  }
  FakeTorch t("__version__ = '2.13.0'\n", 10);
  fs::remove(fs::path(t.lib()) / "libtorch_cpu.so");
  EXPECT_FALSE(torch_identity(t.lib()));
  EXPECT_FALSE(torch_identity("/nonexistent/torch/lib"));
}

TEST(TorchIdentity, TheSidecarNamesTheSameFields) {
  const auto id = identity_from_sidecar(
      R"({"torch_lib": "/v/torch/lib", "version": "2.13.0+cpu", "git_version": "cf30",)"
      R"( "libtorch_cpu_size": 434184800, "abi": 1})");
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, (TorchIdentity{"/v/torch/lib", "2.13.0+cpu", "cf30", 434184800}));
  EXPECT_FALSE(identity_from_sidecar(""));
  EXPECT_FALSE(identity_from_sidecar("[1]"));
  EXPECT_FALSE(identity_from_sidecar(R"({"torch_lib": "/v", "version": "2.13.0"})"));
}

TEST(TorchBuildFacts, ParsedFromTheScriptsLines) {
  const auto facts = parse_torch_facts("version=2.13.0+cpu\ngit_version=cf30\n"
                                       "include=/t/include;/t/include/torch/csrc/api/include\n"
                                       "lib=/t/lib\nabi=0\n");
  ASSERT_TRUE(facts);
  EXPECT_EQ(facts->version, "2.13.0+cpu");
  EXPECT_EQ(facts->include_dirs,
            (std::vector<std::string>{"/t/include", "/t/include/torch/csrc/api/include"}));
  EXPECT_EQ(facts->lib_dir, "/t/lib");
  EXPECT_EQ(facts->abi, 0);
  EXPECT_FALSE(parse_torch_facts("version=2.13.0\ninclude=/t/include\nlib=/t/lib\n")); // no ABI
  EXPECT_FALSE(parse_torch_facts("version=2.13.0\ninclude=/t/include\nlib=/t/lib\nabi=2\n"));
  EXPECT_FALSE(parse_torch_facts("version=2.13.0\nlib=/t/lib\nabi=1\n")); // no includes
}

TEST(PluginCompileCommand, BuildsAgainstThatTorchAsItsExtensionsAre) {
  TorchBuildFacts facts;
  facts.version = "2.13.0";
  facts.include_dirs = {"/t/include", "/t/include/api"};
  facts.lib_dir = "/t/lib";
  facts.abi = 0;
  const auto argv = plugin_compile_command({"ccache", "g++"}, facts, "/s/torch_plugin.cpp", "/o/p.so");
  ASSERT_GE(argv.size(), 2u);
  EXPECT_EQ(argv[0], "ccache");
  EXPECT_EQ(argv[1], "g++");
  EXPECT_TRUE(has(argv, "-D_GLIBCXX_USE_CXX11_ABI=0"));
  EXPECT_TRUE(has(argv, "-shared"));
  EXPECT_TRUE(has(argv, "-fPIC"));
  EXPECT_TRUE(has(argv, "/t/include/api"));
  EXPECT_TRUE(has(argv, "/t/lib/libc10.so"));
  EXPECT_TRUE(has(argv, "/t/lib/libtorch_cpu.so"));
  EXPECT_TRUE(has(argv, "-Wl,-rpath,/t/lib"));
  const auto out = std::find(argv.begin(), argv.end(), "-o");
  ASSERT_NE(out, argv.end());
  EXPECT_EQ(*(out + 1), "/o/p.so");
  // The libraries are linked whatever the linker's --as-needed default.
  const auto push = std::find(argv.begin(), argv.end(), "-Wl,--push-state,--no-as-needed");
  const auto lib = std::find(argv.begin(), argv.end(), "/t/lib/libtorch.so");
  EXPECT_LT(push, lib);
}

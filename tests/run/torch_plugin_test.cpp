// Which LibTorch plugin a check loads: a torch told apart without importing it, the sidecar of the
// plugin built with the doctor, what torch_facts.py says, and the one compiler call.
#include "run/torch_plugin.hpp"

#include "core/paths.hpp"
#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sys/stat.h>
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
  // What was wrong is said.
  const std::string good_start = "version=2.13.0\nlib=/t/lib\n";
  for (const auto& [text, words] : std::vector<std::pair<std::string, std::string>>{
           {good_start + "include=/t/include\n", "no abi= line"},
           {good_start + "include=/t/include\nabi=2\n", "abi=2, which is neither 0 nor 1"},
           {good_start + "abi=1\n", "no include= line"},
           {good_start + "abi=1\ninclude=\n", "include= line names no folder"},
           {good_start + "abi=1\ninclude=/t/i" + std::string(1, '\0') + "nclude\n", "NUL byte"},
           {good_start + "abi=1\ninclude=/t/include\n" + std::string(70'000, 'x'), "more than"},
           {"lib=/t/lib\nabi=1\ninclude=/t/include\n", "no version= line"}}) {
    const auto parsed = parse_torch_facts(text);
    ASSERT_FALSE(parsed) << text.substr(0, 80);
    EXPECT_NE(parsed.error().message.find(words), std::string::npos) << parsed.error().message;
  }
  // Windows line ends are read as line ends.
  const auto crlf = parse_torch_facts("version=2.13.0\r\nlib=/t/lib\r\nabi=1\r\ninclude=/t/i\r\n");
  ASSERT_TRUE(crlf) << crlf.error().message;
  EXPECT_EQ(crlf->include_dirs, std::vector<std::string>{"/t/i"});
  EXPECT_EQ(crlf->abi, 1);
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
  const auto rpath = std::find(argv.begin(), argv.end(), "-rpath");
  ASSERT_NE(rpath, argv.end());
  ASSERT_LT(rpath + 2, argv.end());
  EXPECT_EQ(*(rpath - 1), "-Xlinker");
  EXPECT_EQ(*(rpath + 1), "-Xlinker");
  EXPECT_EQ(*(rpath + 2), "/t/lib");
  const auto out = std::find(argv.begin(), argv.end(), "-o");
  ASSERT_NE(out, argv.end());
  EXPECT_EQ(*(out + 1), "/o/p.so");
  // The libraries are linked whatever the linker's --as-needed default.
  const auto push = std::find(argv.begin(), argv.end(), "-Wl,--push-state,--no-as-needed");
  const auto lib = std::find(argv.begin(), argv.end(), "/t/lib/libtorch.so");
  EXPECT_LT(push, lib);
}

// ---- a plugin file verified before it is loaded -----------------------------------------------

namespace {

// A real shared library of this machine: the C library this test runs with.
std::string some_shared_library() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&::puts), &info) == 0 || !info.dli_fname) return {};
  return info.dli_fname;
}

std::string bytes_of(const std::string& path) { return sdpa_test::read_file(path); }

void patch(const std::string& path, size_t at, std::string_view with) {
  std::string bytes = bytes_of(path);
  bytes.replace(at, with.size(), with);
  sdpa_test::write_file(path, bytes);
}

struct BadPlugin {
  const char* name;
  const char* problem; // what plugin_file_problem says of it
  std::function<void(const std::string& plugin, const std::string& library)> make;
};

std::vector<BadPlugin> bad_plugins() {
  const auto good_copy = [](const std::string& p, const std::string& lib) {
    fs::copy_file(lib, p);
    ASSERT_TRUE(record_plugin_sum(p));
  };
  return {
      {"random bytes", "not an ELF file",
       [](const std::string& p, const std::string&) {
         std::mt19937 gen(7);
         std::string bytes(4096, '\0');
         for (char& c : bytes) c = char(gen());
         sdpa_test::write_file(p, bytes);
         ASSERT_TRUE(record_plugin_sum(p));
       }},
      {"truncated copy", "its content is not what was built there",
       [good_copy](const std::string& p, const std::string& lib) {
         good_copy(p, lib);
         fs::resize_file(p, fs::file_size(p) / 2);
       }},
      {"empty file", "an empty file",
       [](const std::string& p, const std::string&) { sdpa_test::write_file(p, ""); }},
      {"directory", "is a directory",
       [](const std::string& p, const std::string&) { fs::create_directory(p); }},
      {"/dev/zero link", "not a regular file",
       [](const std::string& p, const std::string&) { fs::create_symlink("/dev/zero", p); }},
      {"FIFO", "not a regular file",
       [](const std::string& p, const std::string&) { ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0); }},
      {"another library than was built", "its content is not what was built there",
       [good_copy](const std::string& p, const std::string& lib) {
         good_copy(p, lib);
         patch(p, 64, "another build");
       }},
      {"no recorded hash", "no content hash was recorded",
       [](const std::string& p, const std::string& lib) { fs::copy_file(lib, p); }},
      {"an ELF object that is not a shared library", "not a shared library",
       [](const std::string& p, const std::string& lib) {
         fs::copy_file(lib, p);
         patch(p, 16, std::string("\x01\x00", 2)); // ET_REL
         ASSERT_TRUE(record_plugin_sum(p));
       }},
      {"a library for another machine", "for another machine",
       [](const std::string& p, const std::string& lib) {
         fs::copy_file(lib, p);
         patch(p, 18, std::string("\x08\x00", 2)); // EM_MIPS
         ASSERT_TRUE(record_plugin_sum(p));
       }},
  };
}

} // namespace

TEST(PluginFile, EachBadPluginIsNamedWithoutLoadingIt) {
  const std::string library = some_shared_library();
  if (library.empty()) GTEST_SKIP() << "dladdr names no C library";
  for (const BadPlugin& bad : bad_plugins()) {
    sdpa_test::TempDir dir;
    const std::string plugin = dir.file("torch-plugin.so");
    bad.make(plugin, library);
    const std::string problem = plugin_file_problem(plugin);
    EXPECT_NE(problem.find(bad.problem), std::string::npos) << bad.name << ": " << problem;
  }
}

TEST(PluginFile, APluginWhoseRecordedHashMatchesIsUsable) {
  const std::string library = some_shared_library();
  if (library.empty()) GTEST_SKIP() << "dladdr names no C library";
  sdpa_test::TempDir dir;
  const std::string plugin = dir.file("torch-plugin.so");
  fs::copy_file(library, plugin);
  ASSERT_TRUE(record_plugin_sum(plugin));
  EXPECT_EQ(plugin_file_problem(plugin), "");
  EXPECT_NE(plugin_file_problem(dir.file("missing.so")), "");
}

// ---- any legal path: a torch under a folder with a comma, a space or a quote ------------------

TEST(PluginCompileCommand, ATorchUnderAPathWithACommaASpaceOrAQuoteLinks) {
  const auto cxx = sdpa_doctor::find_on_path("c++");
  if (!cxx) GTEST_SKIP() << "no c++ on PATH";
  sdpa_test::TempDir dir;
  sdpa_test::write_file(dir.file("empty.cpp"), "int torch_stand_in() { return 0; }\n");
  sdpa_test::write_file(dir.file("plugin.cpp"), "extern \"C\" int plugin_entry() { return 1; }\n");
  for (const std::string folder : {"ft_c,omma", "with space", "it's \"quoted\""}) {
    const fs::path torch = fs::path(dir.path()) / folder / "site" / "torch";
    fs::create_directories(torch / "lib");
    fs::create_directories(torch / "include");
    for (const char* lib : {"torch", "torch_cpu", "c10"}) {
      const auto made = sdpa_test::run_binary(
          {cxx->string(), "-shared", "-fPIC", dir.file("empty.cpp"), "-o",
           (torch / "lib" / (std::string("lib") + lib + ".so")).string()});
      ASSERT_EQ(made.exit_code, 0) << made.err;
    }
    TorchBuildFacts facts;
    facts.version = "2.13.0";
    facts.include_dirs = {(torch / "include").string()};
    facts.lib_dir = (torch / "lib").string();
    facts.abi = 1;
    const std::string out = (fs::path(dir.path()) / folder / "plugin.so").string();
    const auto built = sdpa_test::run_binary(
        plugin_compile_command({cxx->string()}, facts, dir.file("plugin.cpp"), out));
    ASSERT_EQ(built.exit_code, 0) << folder << ": " << built.err;
    const auto dynamic = sdpa_test::run_binary({"readelf", "-d", out});
    if (dynamic.exit_code == 0) {
      EXPECT_NE(dynamic.out.find("[" + facts.lib_dir + "]"), std::string::npos) << dynamic.out;
    }
  }
}

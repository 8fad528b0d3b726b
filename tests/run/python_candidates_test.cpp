// The default interpreter of the python probe: $SDPA_DOCTOR_PYTHON first, then the environment a
// pip install put the doctor in, the active venv, python3 on PATH, and the build-time interpreter
// only for a run from the build tree.
#include "run/run.hpp"

#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace sdpa_doctor::run;
namespace fs = std::filesystem;

namespace {

// An executable stand-in at `path` (its content never runs).
void make_executable(const std::string& path) {
  sdpa_test::write_file(path, "#!/bin/sh\n");
  ::chmod(path.c_str(), 0755);
}

PythonSearch everything(const std::string& exe_dir) {
  PythonSearch s;
  s.env_python = "/env/python";
  s.exe_dir = exe_dir;
  s.virtual_env = "/active-venv";
  s.path_python3 = "/usr/bin/python3";
  s.build_python = "/build-machine/.venv/bin/python";
  return s;
}

TEST(PythonCandidates, InstalledInAVenvItsInterpreterComesRightAfterTheEnvironmentVariable) {
  sdpa_test::TempDir venv;
  fs::create_directories(venv.file("bin"));
  sdpa_test::write_file(venv.file("pyvenv.cfg"), "home = /usr/bin\n");
  make_executable(venv.file("bin/python3"));
  make_executable(venv.file("bin/python"));
  EXPECT_EQ(python_candidates(everything(venv.file("bin"))),
            (std::vector<std::string>{"/env/python", venv.file("bin/python3"),
                                      "/active-venv/bin/python", "/usr/bin/python3"}));
}

TEST(PythonCandidates, ACondaEnvironmentCountsToo) {
  sdpa_test::TempDir conda;
  fs::create_directories(conda.file("bin"));
  fs::create_directories(conda.file("conda-meta"));
  make_executable(conda.file("bin/python"));
  PythonSearch s = everything(conda.file("bin"));
  s.env_python.clear();
  EXPECT_EQ(python_candidates(s),
            (std::vector<std::string>{conda.file("bin/python"), "/active-venv/bin/python",
                                      "/usr/bin/python3"}));
}

TEST(PythonCandidates, AnInstallPrefixThatIsNoEnvironmentAddsNothingOfItsOwn) {
  sdpa_test::TempDir prefix; // /usr/local-like: a python3 beside the doctor, no pyvenv.cfg
  fs::create_directories(prefix.file("bin"));
  make_executable(prefix.file("bin/python3"));
  EXPECT_EQ(python_candidates(everything(prefix.file("bin"))),
            (std::vector<std::string>{"/env/python", "/active-venv/bin/python",
                                      "/usr/bin/python3"}));
}

TEST(PythonCandidates, TheBuildTimeInterpreterOnlyForARunFromTheBuildTree) {
  sdpa_test::TempDir build;
  sdpa_test::write_file(build.file("CMakeCache.txt"), "");
  PythonSearch s = everything(build.path());
  s.env_python.clear();
  s.virtual_env.clear();
  EXPECT_EQ(python_candidates(s), (std::vector<std::string>{"/usr/bin/python3",
                                                            "/build-machine/.venv/bin/python"}));
}

TEST(PythonCandidates, NoEmptyEntriesAndNoDuplicates) {
  PythonSearch s;
  s.env_python = "/usr/bin/python3";
  s.path_python3 = "/usr/bin/python3";
  EXPECT_EQ(python_candidates(s), (std::vector<std::string>{"/usr/bin/python3"}));
  EXPECT_TRUE(python_candidates(PythonSearch{}).empty());
}

} // namespace

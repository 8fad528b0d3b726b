// Unit tests for isolate's pure parts: wait-status decoding, keep-last buffers, capped log files,
// signatures and the environment allow-list.
#include "isolate/isolate.hpp"
#include "isolate/process.hpp"

#include "support/run_binary.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <sys/wait.h>

using namespace sdpa_doctor;
using namespace sdpa_doctor::isolate;

namespace {

struct WaitRow {
  int status;
  std::optional<int> exit_code;
  std::optional<int> signal;
  const char* name;
  bool core;
};

TEST(WaitStatus, DecodesTheTable) {
  const WaitRow rows[] = {
      {W_EXITCODE(0, 0), 0, std::nullopt, "", false},
      {W_EXITCODE(3, 0), 3, std::nullopt, "", false},
      {W_EXITCODE(255, 0), 255, std::nullopt, "", false},
      {W_EXITCODE(0, SIGSEGV), std::nullopt, SIGSEGV, "SIGSEGV", false},
      {W_EXITCODE(0, SIGABRT) | 0x80, std::nullopt, SIGABRT, "SIGABRT", true},
      {W_EXITCODE(0, SIGKILL), std::nullopt, SIGKILL, "SIGKILL", false},
      {W_EXITCODE(0, SIGBUS), std::nullopt, SIGBUS, "SIGBUS", false},
      {W_EXITCODE(0, SIGILL) | 0x80, std::nullopt, SIGILL, "SIGILL", true},
      {W_EXITCODE(0, SIGFPE), std::nullopt, SIGFPE, "SIGFPE", false},
      {W_EXITCODE(0, SIGTERM), std::nullopt, SIGTERM, "SIGTERM", false},
  };
  for (const auto& row : rows) {
    ProcessEnd end = decode_wait_status(row.status);
    EXPECT_EQ(end.exit_code, row.exit_code) << row.status;
    EXPECT_EQ(end.signal, row.signal) << row.status;
    EXPECT_EQ(end.signal_name, row.name) << row.status;
    EXPECT_EQ(end.core_dumped, row.core) << row.status;
    EXPECT_FALSE(end.killed_by_doctor);
  }
}

TEST(WaitStatus, NamesAndDescriptions) {
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGPIPE), "SIGPIPE");
  EXPECT_EQ(signal_name(77), "SIG77");
  EXPECT_EQ(describe(decode_wait_status(W_EXITCODE(3, 0))), "exited with code 3");
  EXPECT_EQ(describe(decode_wait_status(W_EXITCODE(0, SIGABRT) | 0x80)),
            "killed by SIGABRT (core dumped)");
  ProcessEnd killed = decode_wait_status(W_EXITCODE(0, SIGKILL));
  killed.killed_by_doctor = true;
  EXPECT_EQ(describe(killed), "killed by SIGKILL after the doctor stopped it");
}

TEST(TailBuffer, KeepsTheLastBytes) {
  detail::TailBuffer t(8);
  t.append("0123");
  EXPECT_EQ(t.str(), "0123");
  t.append("456789ab");
  EXPECT_EQ(t.str(), "456789ab");
  for (int i = 0; i < 1000; ++i) t.append("xyz");
  EXPECT_EQ(t.str().size(), 8u);
  EXPECT_LE(t.kept(), 16u);
  EXPECT_EQ(t.total(), 12u + 3000u);
  EXPECT_EQ(t.since(t.total() - 2), "yz");
  EXPECT_EQ(t.since(t.total()), "");
  t.append(std::string(100, 'q'));
  EXPECT_EQ(t.str(), std::string(8, 'q'));
}

TEST(LogSink, KeepsTheHeadAndTheTailAndSaysWhatWasCut) {
  sdpa_test::TempDir dir;
  const std::string path = dir.file("worker.stderr.log");
  std::string stream; // everything the sink was given, notes as it writes them
  {
    detail::LogSink sink(path, 1000); // 500 bytes of head, 500 of tail
    const auto write = [&](const std::string& data) {
      sink.write(data);
      stream += data;
    };
    write(std::string(300, 'a'));
    write(std::string(400, 'b'));
    sink.note("attempt 1: pid 42");
    stream += "\n[sdpa-doctor: attempt 1: pid 42]\n";
    for (int i = 0; i < 30; ++i) write(std::string(100, 'c'));
    write(std::string(490, 'd') + "the end\n");
  }
  const std::string text = sdpa_test::read_file(path);
  const std::string head = stream.substr(0, 500), tail = stream.substr(stream.size() - 500);
  ASSERT_GT(text.size(), 1000u);
  EXPECT_EQ(text.substr(0, 500), head);
  EXPECT_EQ(text.substr(text.size() - 500), tail);
  const std::string cut_line =
      "[sdpa-doctor: " + std::to_string(stream.size() - 1000) + " bytes cut here";
  EXPECT_NE(text.find(cut_line), std::string::npos) << text.substr(500, text.size() - 1000);
  EXPECT_LT(text.size(), 1000u + 200u);
}

TEST(LogSink, UnderItsCapKeepsEveryByteAndNoCutLine) {
  sdpa_test::TempDir dir;
  const std::string path = dir.file("worker.stderr.log");
  std::string written;
  {
    detail::LogSink sink(path, 1000);
    for (int i = 0; i < 9; ++i) {
      const std::string piece(100, char('0' + i));
      sink.write(piece);
      written += piece;
    }
  }
  EXPECT_EQ(sdpa_test::read_file(path), written);
}

TEST(Signatures, EachKnownTextMatchesItsId) {
  const std::pair<const char*, const char*> samples[] = {
      {"ck-unsupported-arch", "Device-side assertion `false && \"Fatal! Attempting to call a CK "
                              "SDPA kernel on unsupported hardware\"' failed."},
      {"gpu-memory-fault", "Memory access fault by GPU node-1 (Agent handle: 0x5) on address (nil)."},
      {"gpu-hang", "HW Exception by GPU node-9 (Agent handle: 0x631351bb5a20) reason :GPU Hang"},
      {"hsa-status", "aborting with error : HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation"},
      {"device-assert", "vectoradd_hip.cpp:50: Device-side assertion `0' failed."},
      {"hip-error", "torch.AcceleratorError: HIP error: an illegal memory access"},
      {"no-available-kernel", "RuntimeError: No available kernel. Aborting execution."},
      {"out-of-memory", "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2 GiB"},
  };
  for (const auto& [id, text] : samples) {
    auto ids = match_signatures(text);
    EXPECT_NE(std::find(ids.begin(), ids.end(), id), ids.end()) << id;
  }
  EXPECT_TRUE(match_signatures("all good\npass\n").empty());
  EXPECT_TRUE(match_signatures("").empty());
  for (const auto& s : known_signatures()) {
    EXPECT_FALSE(s.id.empty());
    EXPECT_FALSE(s.meaning.empty());
  }
}

TEST(Environment, ForwardsOnlyTheAllowList) {
  for (const char* yes : {"PATH", "HOME", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH",
                          "HIP_VISIBLE_DEVICES",
                          "HSA_OVERRIDE_GFX_VERSION", "ROCR_VISIBLE_DEVICES", "AMD_SERIALIZE_KERNEL",
                          "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "PYTORCH_TUNABLEOP_ENABLED",
                          "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "SDPA_DOCTOR_TEST_FAULT",
                          "LC_ALL", "SDPA_DOCTOR_TORCH_LIB_DIRS", "SDPA_DOCTOR_KERNEL_CACHE",
                          "XDG_CACHE_HOME", "CUDA_PATH", "CUDA_HOME"})
    EXPECT_TRUE(is_forwarded_variable(yes)) << yes;
  for (const char* no : {"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "http_proxy", "EDITOR", "HIP_",
                         "PATHX", "DISPLAY"})
    EXPECT_FALSE(is_forwarded_variable(no)) << no;

  char a[] = "PATH=/bin", b[] = "GITHUB_TOKEN=secret", c[] = "HIP_VISIBLE_DEVICES=0", d[] = "odd";
  char* parent[] = {a, b, c, d, nullptr};
  Command cmd{{"x"}, {{"HIP_VISIBLE_DEVICES", "1"}, {"EXTRA", "y"}}, true};
  EXPECT_EQ(child_environment(cmd, parent),
            (std::vector<std::string>{"EXTRA=y", "HIP_VISIBLE_DEVICES=1", "PATH=/bin"}));
  cmd.inherit_env = false;
  EXPECT_EQ(child_environment(cmd, parent),
            (std::vector<std::string>{"EXTRA=y", "HIP_VISIBLE_DEVICES=1"}));
}

TEST(FaultTable, CoversEveryFailureClass) {
  const auto& table = fault_table();
  ASSERT_FALSE(table.empty());
  EXPECT_EQ(table.front().name, "ok");
  int crash = 0, timeout = 0, error = 0;
  for (const auto& f : table) {
    crash += f.expected == Status::crash;
    timeout += f.expected == Status::timeout;
    error += f.expected == Status::error;
  }
  EXPECT_GE(crash, 5);
  EXPECT_GE(timeout, 2);
  EXPECT_GE(error, 3);
}

} // namespace

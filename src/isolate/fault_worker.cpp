// The fault-injection worker: speaks protocol v1 like a real worker and, per case line, makes a
// real failure happen, so the runner is tested against the kernel's behaviour, not a model of it.
#include "isolate/isolate.hpp"
#include "core/status.hpp"
#include "core/io.hpp"
#include "protocol/protocol.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>

namespace sdpa_doctor::isolate {

const std::vector<FaultSpec>& fault_table() {
  static const std::vector<FaultSpec> table = {
      {"ok", Status::pass, 0, -1, "", "a clean pass"},
      {"unsupported", Status::unsupported, 0, -1, "", "a clean refusal"},
      {"error", Status::error, 0, -1, "", "an error reported by the worker"},
      {"abort", Status::crash, SIGABRT, -1, "", "abort()"},
      {"segv", Status::crash, SIGSEGV, -1, "", "write through a null pointer"},
      {"bus", Status::crash, SIGBUS, -1, "", "read past the end of a mapped file"},
      {"ill", Status::crash, SIGILL, -1, "", "illegal instruction"},
      {"fpe", Status::crash, SIGFPE, -1, "", "integer division by zero"},
      {"exit3", Status::error, 0, 3, "", "_exit(3) mid-case"},
      {"hang", Status::timeout, SIGTERM, -1, "", "sleeps forever"},
      {"hang-ignore-term", Status::timeout, SIGKILL, -1, "", "sleeps forever, ignores SIGTERM"},
      {"grandchild", Status::crash, SIGABRT, -1, "", "a grandchild holds the pipes, then abort()"},
      {"stderr-flood", Status::pass, 0, -1, "", "200 MiB on stderr, then a pass"},
      {"broken-line", Status::error, 0, -1, "", "a broken protocol line"},
      {"endless-line", Status::error, 0, -1, "", "a protocol line that never ends"},
      {"close-results", Status::error, 0, -1, "", "closes the results fd and lives on"},
      {"ck-assert", Status::crash, SIGABRT, -1, "ck-unsupported-arch", "CK arch assert, abort()"},
      {"gpu-fault", Status::crash, SIGABRT, -1, "gpu-memory-fault", "GPU memory-fault text, abort()"},
  };
  return table;
}

namespace {


[[noreturn]] void sleep_forever() {
  for (;;) ::pause();
}

// One write per event (protocol::ProtocolWriter): a line reaches the runner whole or not at all,
// even if we die next.
void result(int fd, const std::string& id, Status status, const std::string& reason) {
  protocol::ResultEvent e;
  e.case_id = id;
  e.status = status;
  e.reason = reason;
  e.metrics.time_ms = 0.0;
  protocol::ProtocolWriter(fd).result(e);
}

// Returns only for the faults that end in a result. UBSan stays out: a null write or a division
// by zero must reach the runner as the signal it is, not as a sanitizer report.
__attribute__((no_sanitize("undefined"))) void inject(const std::string& fault, const std::string& id, int fd) {
  if (fault == "ok") return result(fd, id, Status::pass, "");
  if (fault == "unsupported")
    return result(fd, id, Status::unsupported, "No available kernel. Aborting execution.");
  if (fault == "error") return result(fd, id, Status::error, "RuntimeError: injected");
  if (fault == "abort") std::abort();
  if (fault == "segv") {
    int* volatile target = nullptr;
    *target = 42;
  }
  if (fault == "bus") {
    // Touching a mapped page past the end of a file is SIGBUS, as on a truncated mapping.
    char path[] = "/tmp/sdpa-doctor-bus-XXXXXX";
    int file = ::mkstemp(path);
    if (file >= 0) {
      ::unlink(path);
      void* map = ::mmap(nullptr, 8192, PROT_READ, MAP_SHARED, file, 0);
      if (map != MAP_FAILED) {
        volatile const char* p = static_cast<const char*>(map);
        char c = p[4096];
        (void)c;
      }
    }
    ::raise(SIGBUS);
  }
  if (fault == "ill") {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("ud2");
#endif
    ::raise(SIGILL);
  }
  if (fault == "fpe") {
#if defined(__x86_64__) || defined(__i386__)
    volatile int zero = 0;
    volatile int quotient = 1 / zero;
    (void)quotient;
#endif
    ::raise(SIGFPE);
  }
  if (fault == "exit3") ::_exit(3);
  if (fault == "hang") sleep_forever();
  if (fault == "hang-ignore-term") {
    ::signal(SIGTERM, SIG_IGN);
    sleep_forever();
  }
  if (fault == "grandchild") {
    // The grandchild inherits stdout, stderr and the results pipe and outlives us.
    if (::fork() == 0) sleep_forever();
    std::abort();
  }
  if (fault == "stderr-flood") {
    std::string block(1 << 20, 'x');
    for (int i = 0; i < 200; ++i) {
      block.back() = '\n';
      write_all(STDERR_FILENO, block);
    }
    return result(fd, id, Status::pass, "");
  }
  if (fault == "broken-line") {
    write_all(fd, "{\"v\":1,\"event\":\"result\",\"case\":\n");
    sleep_forever();
  }
  if (fault == "endless-line") {
    std::string block(1 << 16, 'y');
    for (;;) write_all(fd, block);
  }
  if (fault == "close-results") {
    ::close(fd);
    sleep_forever();
  }
  if (fault == "ck-assert") {
    std::fprintf(stderr,
                 "/pytorch/aten/src/ATen/native/transformers/hip/flash_attn/ck/me_ck_api.h:42: "
                 "void kentry_pt(): Device-side assertion `false && \"%s\"' failed.\n",
                 k_ck_assert_text);
    std::fflush(stderr);
    std::abort();
  }
  if (fault == "gpu-fault") {
    std::fputs("Memory access fault by GPU node-1 (Agent handle: 0x55b017570c40) on address "
               "(nil). Reason: Page not present or supervisor privilege.\n",
               stderr);
    std::fflush(stderr);
    std::abort();
  }
  result(fd, id, Status::error, "unknown fault '" + fault + "'");
}

} // namespace

int run_fault_worker(int results_fd, const std::string& cases_path) {
  std::ifstream cases(cases_path);
  if (!cases) {
    std::fprintf(stderr, "fault worker: cannot read %s\n", cases_path.c_str());
    return exit_code::usage;
  }
  protocol::ProtocolWriter out(results_fd);
  out.hello({"fault", "cpu", "fault", {}, {{"pid", std::to_string(::getpid())}}});
  std::string line;
  while (std::getline(cases, line)) {
    if (line.empty()) continue;
    nlohmann::json c = nlohmann::json::parse(line, nullptr, false);
    if (!c.is_object() || !c.contains("id") || !c["id"].is_string()) {
      std::fprintf(stderr, "fault worker: bad case line\n");
      return exit_code::usage;
    }
    const std::string id = c["id"].get<std::string>();
    out.begin(id);
    inject(c.value("fault", std::string("ok")), id, results_fd);
  }
  out.bye();
  return 0;
}

} // namespace sdpa_doctor::isolate

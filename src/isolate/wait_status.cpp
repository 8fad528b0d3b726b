#include "isolate/isolate.hpp"

#include <fmt/format.h>

#include <csignal>
#include <sys/wait.h>

namespace sdpa_doctor::isolate {

namespace {

struct SignalEntry {
  int number;
  const char* name;
};

// Linux numbering; glibc's sigabbrev_np is too new to rely on.
constexpr SignalEntry k_signals[] = {
    {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
    {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"},     {SIGTSTP, "SIGTSTP"}, {SIGTTIN, "SIGTTIN"},
    {SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"},       {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"},
    {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGIO, "SIGIO"},
    {SIGPWR, "SIGPWR"},   {SIGSYS, "SIGSYS"},
};

} // namespace

std::string signal_name(int signal_number) {
  for (const auto& entry : k_signals)
    if (entry.number == signal_number) return entry.name;
  return fmt::format("SIG{}", signal_number);
}

ProcessEnd decode_wait_status(int wait_status) {
  ProcessEnd end;
  if (WIFEXITED(wait_status)) {
    end.exit_code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    end.signal = WTERMSIG(wait_status);
    end.signal_name = signal_name(*end.signal);
    end.core_dumped = WCOREDUMP(wait_status) != 0;
  } else if (WIFSTOPPED(wait_status)) {
    // Only reachable with WUNTRACED, which the runner never passes; kept total for the table.
    end.signal = WSTOPSIG(wait_status);
    end.signal_name = signal_name(*end.signal);
  }
  return end;
}

std::string describe(const ProcessEnd& end) {
  std::string text;
  if (end.signal) {
    text = fmt::format("killed by {}", end.signal_name.empty() ? signal_name(*end.signal)
                                                               : end.signal_name);
    if (end.core_dumped) text += " (core dumped)";
  } else if (end.exit_code) {
    text = fmt::format("exited with code {}", *end.exit_code);
  } else {
    text = "ended in an unknown way";
  }
  if (end.killed_by_doctor) text += " after the doctor stopped it";
  return text;
}

} // namespace sdpa_doctor::isolate

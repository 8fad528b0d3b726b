// A fake hipRTC (installed by the tests as libhiprtc.so.7, version 7.1) for the AMD path where no
// hipRTC that knows gfx12 runs: it records every compile's options and header names
// (FAKE_HIPRTC_RECORD=file, one line each), refuses a source holding "#error" or any source when
// FAKE_HIPRTC_FAIL is set (with a compiler-like log), and otherwise returns a code object that
// fake_hip.cpp loads: "FAKE-HSACO <arch of --offload-arch> <options>". Each record line reads
// "compile NAME headers=H1,H2, options= O1 O2 ...".
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Program {
  std::string name;
  std::string source;
  std::vector<std::string> header_names;
  std::string log;
  std::string code;
};

void record(const std::string& line) {
  const char* path = std::getenv("FAKE_HIPRTC_RECORD");
  if (!path || !*path) return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s\n", line.c_str());
    std::fclose(f);
  }
}

} // namespace

extern "C" {

const char* hiprtcGetErrorString(int result) {
  switch (result) {
  case 0: return "HIPRTC_SUCCESS";
  case 3: return "HIPRTC_ERROR_INVALID_INPUT";
  case 6: return "HIPRTC_ERROR_COMPILATION";
  }
  return "HIPRTC_ERROR_INTERNAL_ERROR";
}

int hiprtcVersion(int* major, int* minor) {
  *major = 7;
  *minor = 1;
  return 0;
}

int hiprtcCreateProgram(void** program, const char* source, const char* name, int headers,
                        const char* const* texts, const char* const* names) {
  if (!source || !name || headers < 0 || (headers > 0 && (!texts || !names))) return 3;
  auto* p = new Program{name, source, {}, {}, {}};
  for (int i = 0; i < headers; ++i) p->header_names.emplace_back(names[i]);
  *program = p;
  return 0;
}

int hiprtcCompileProgram(void* program, int count, const char* const* options) {
  auto* p = static_cast<Program*>(program);
  std::string line = "compile " + p->name + " headers=";
  for (const std::string& h : p->header_names) line += h + ",";
  line += " options=";
  std::string arch, joined;
  for (int i = 0; i < count; ++i) {
    const std::string o = options[i];
    joined += " " + o;
    if (o.rfind("--offload-arch=", 0) == 0) arch = o.substr(15);
  }
  record(line + joined);
  const size_t bad = p->source.find("#error");
  if (std::getenv("FAKE_HIPRTC_FAIL") || bad != std::string::npos || arch.empty()) {
    p->log = "attention_gpu.cu:1:2: error: the fake hipRTC refuses this source\n1 error generated "
             "when compiling for " + arch + ".\n";
    return 6;
  }
  p->code = "FAKE-HSACO " + arch + joined;
  return 0;
}

int hiprtcGetProgramLogSize(void* program, size_t* size) {
  *size = static_cast<Program*>(program)->log.size() + 1;
  return 0;
}
int hiprtcGetProgramLog(void* program, char* out) {
  const std::string& log = static_cast<Program*>(program)->log;
  std::memcpy(out, log.c_str(), log.size() + 1);
  return 0;
}
int hiprtcGetCodeSize(void* program, size_t* size) {
  *size = static_cast<Program*>(program)->code.size() + 1;
  return 0;
}
int hiprtcGetCode(void* program, char* out) {
  const std::string& code = static_cast<Program*>(program)->code;
  std::memcpy(out, code.c_str(), code.size() + 1);
  return 0;
}
int hiprtcDestroyProgram(void** program) {
  delete static_cast<Program*>(*program);
  *program = nullptr;
  return 0;
}

} // extern "C"

// kernels/rtc: the GPU kernels' one source (attention_gpu.cu, embedded at build time) compiled at
// run time for the device at hand: hipRTC for an AMD gcnArchName (--offload-arch=gfx1201), NVRTC
// for an NVIDIA sm_XX (a cubin, or PTX the driver finishes when NVRTC is older than the card).
// What it compiled is kept on disk by (source hash, target, compiler version). Internal to
// kernels (and its tests); depends on core and the loader, never on a vendor header.
#pragma once

#include "core/expected.hpp"
#include "loader/loader.hpp"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sdpa_doctor::kernels::rtc {

enum class Vendor { amd, nvidia };

// One file the compiler sees by name: the file compiled, or a header it includes.
struct SourceFile {
  std::string name; // "attention_gpu.cu", "kernels/attn_params.hpp"
  std::string text;
};
// attention_gpu.cu as it was at build time, its project headers written in place between #line
// directives (embed_sources.cmake): one translation unit that needs no header of ours, whose
// compiler logs still name the real file and line.
const std::vector<SourceFile>& kernel_sources();

// What a compiler made, ready for the module loader of its vendor's runtime.
struct CodeImage {
  std::string bytes;
  std::string format; // "hsaco" (AMD code object), "cubin", "ptx"
  std::string target; // what it was compiled for: "gfx1201", "sm_90", "compute_90"
};

struct CompileOutput {
  std::optional<CodeImage> image; // absent when the compiler refused the source
  std::string status;             // the compiler's status name, e.g. "NVRTC_ERROR_COMPILATION"
  std::string log;                // the compiler's own log (errors when refused; may be empty)
};

// A run-time compiler opened through the loader. The two vendors' APIs are the same calls under
// two prefixes (hiprtc*, nvrtc*), so one implementation serves both.
class Compiler {
public:
  virtual ~Compiler() = default;
  virtual Vendor vendor() const = 0;
  virtual std::string name() const = 0; // with its version: "hipRTC 7.1", "NVRTC 13.0"
  virtual const loader::Opened& library() const = 0;
  // What this compiler builds for a device of arch `device_arch` ("gfx1201", "sm_90"), or why it
  // cannot (an NVRTC that knows no arch as old as the card's).
  virtual Expected<std::string> target_for(const std::string& device_arch) const = 0;
  // Compiles sources[0] for `target`; the other sources are headers it includes by name.
  virtual CompileOutput compile(const std::vector<SourceFile>& sources, const std::string& target,
                                const std::vector<std::string>& options) const = 0;
};

// hipRTC: libhiprtc, or the HIP runtime itself (HIP 5 exports hipRTC from libamdhip64); pass the
// HIP runtime already opened, if any, for that fallback.
Expected<std::unique_ptr<Compiler>> open_hiprtc(const loader::SearchContext& context,
                                                const loader::Opened* hip_runtime = nullptr);
Expected<std::unique_ptr<Compiler>> open_nvrtc(const loader::SearchContext& context);

// NVRTC's target for a card of compute capability `sm` (e.g. 90 for sm_90) when it can build for
// the archs `supported`: a cubin "sm_90" when it knows the card, else PTX for the newest arch it
// knows below it ("compute_90" for an sm_120 card), which the driver compiles for the card.
Expected<std::string> nvidia_target(int sm, const std::vector<int>& supported,
                                    const std::string& compiler_name);

// --- the kernels, compiled once and cached ------------------------------------------------------
// Which entry points a compile builds (the reference worker runs one kernel per process).
enum class Entries { all, flash, math };

// The options every compile of the kernels gets: the target, the language, the host's layout of
// AttnParams (the source refuses to compile against another), the entries.
std::vector<std::string> kernel_options(Vendor vendor, const std::string& target, Entries entries);

// The cache's file name of one compile: "<vendor>-<target>-<compiler>-<hash of sources and
// options>.<format>", every byte outside [A-Za-z0-9._-] replaced by '_'.
std::string cache_file_name(const std::vector<SourceFile>& sources,
                            const std::vector<std::string>& options, const std::string& target,
                            const std::string& compiler, const std::string& format);

// $SDPA_DOCTOR_KERNEL_CACHE (a directory; "off" for none), else $XDG_CACHE_HOME/sdpa-doctor/
// kernels, else ~/.cache/sdpa-doctor/kernels; empty when none can be named.
std::string default_cache_dir();

struct Build {
  std::optional<CodeImage> image; // the kernels, when ready
  std::string compiler;           // "NVRTC 13.0 (/path/libnvrtc.so.13)"
  std::string cache_file;         // where the image is kept; empty without a cache
  bool from_cache = false;
  double compile_ms = 0; // 0 when it came from the cache
  // When there is no image: one line. `compile_failed` says the compiler ran and refused our
  // source (the log is its reason) rather than that no target could be chosen.
  std::string failure;
  bool compile_failed = false;
  std::string log;
};

// The kernels for a device of arch `device_arch`: from `cache_dir` (empty = no cache) when an
// earlier run compiled the same source with the same compiler for the same target, else compiled
// and stored there (a cache that cannot be written is only noted, never a failure).
Build build_kernels(const Compiler& compiler, const std::string& device_arch, Entries entries,
                    const std::string& cache_dir,
                    const std::vector<SourceFile>& sources = kernel_sources());

// Forgets a cached image the runtime refused to load, so the next build compiles afresh.
void evict(const Build& build);

} // namespace sdpa_doctor::kernels::rtc

// core/variant: a backend plus the flags and environment it runs under, e.g.
// "flash[aotriton,experimental]". Pure data; depends on the standard library only.
#pragma once

#include "core/expected.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sdpa_doctor {

// Probe kinds: which worker runs a variant.
enum class Probe { torch, python, reference, fault };
std::string_view to_string(Probe probe); // "libtorch", "python", "reference", "fault"
std::optional<Probe> probe_from_string(std::string_view text);

// How a cell calls SDPA: as eager code does, or inside torch.compile(fullgraph=True,
// dynamic=False) (the python probe only; a cell is probe x variant x mode x case).
enum class Mode { eager, compiled };
std::string_view to_string(Mode mode); // "eager", "compiled"
std::optional<Mode> mode_from_string(std::string_view text);
// The matrix row of a variant's cells in `mode`: "flash", or "flash · compiled".
std::string variant_row(std::string_view variant, Mode mode);

struct Variant {
  std::string backend;            // math, flash, mem_efficient, cudnn, default, ref-math, ref-flash
  std::vector<std::string> flags; // ck, aotriton, experimental (sorted as written)

  // "flash[aotriton,experimental]"; just the backend when there are no flags.
  std::string name() const;
  // Environment the worker is started with, e.g. TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 for
  // "experimental" (read once per process by PyTorch, hence one process per variant).
  std::vector<std::pair<std::string, std::string>> environment() const;
  bool has_flag(std::string_view flag) const;
  bool operator==(const Variant&) const = default;
};

// Parses "flash", "flash[ck]", "mem_efficient[aotriton,experimental]": a backend of the lists
// below and known flags only, anything else is an error naming what is known.
Expected<Variant> parse_variant(std::string_view text);

// Backends the torch probes know, and the flags they take.
inline constexpr std::string_view k_torch_backends[] = {"math", "flash", "mem_efficient", "cudnn",
                                                        "default"};
inline constexpr std::string_view k_reference_backends[] = {"ref-math", "ref-flash"};
inline constexpr std::string_view k_variant_flags[] = {"ck", "aotriton", "experimental"};
bool is_known_backend(std::string_view backend); // one of the two lists above

} // namespace sdpa_doctor

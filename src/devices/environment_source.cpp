#include "devices/sources.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

namespace sdpa_doctor::devices {

namespace {

namespace fs = std::filesystem;

std::string group_name(gid_t gid) {
  if (const group* g = ::getgrgid(gid)) return g->gr_name;
  return std::to_string(gid);
}

// Names of the groups this process is in (real, effective and supplementary).
std::vector<std::string> my_groups() {
  std::vector<gid_t> gids(static_cast<std::size_t>(std::max(0, ::getgroups(0, nullptr))) + 2);
  const int n = ::getgroups(static_cast<int>(gids.size()), gids.data());
  gids.resize(static_cast<std::size_t>(std::max(0, n)));
  gids.push_back(::getgid());
  gids.push_back(::getegid());
  std::sort(gids.begin(), gids.end());
  gids.erase(std::unique(gids.begin(), gids.end()), gids.end());
  std::vector<std::string> names;
  for (gid_t gid : gids) names.push_back(group_name(gid));
  return names;
}

bool in_group(gid_t gid) {
  if (::getegid() == gid || ::getgid() == gid) return true;
  std::vector<gid_t> gids(static_cast<std::size_t>(std::max(0, ::getgroups(0, nullptr))) + 1);
  const int n = ::getgroups(static_cast<int>(gids.size()), gids.data());
  return std::find(gids.begin(), gids.begin() + std::max(0, n), gid) != gids.begin() + std::max(0, n);
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

struct OpenCheck {
  bool exists = false;
  int error = 0; // errno of open(O_RDWR); 0 = opened
  gid_t gid = 0;
  mode_t mode = 0;
};

// Really opening the node is the only check that tells ACLs, groups and seccomp apart from
// "works"; access(2) would answer for the real uid, not what the HIP runtime will see.
OpenCheck try_open(const fs::path& path) {
  OpenCheck check;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    check.error = errno;
    // EACCES on a parent directory: the node may well exist, this user just cannot reach it.
    check.exists = errno != ENOENT && errno != ENOTDIR;
    return check;
  }
  check.exists = true;
  check.gid = st.st_gid;
  check.mode = st.st_mode;
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    check.error = errno;
  } else {
    ::close(fd);
  }
  return check;
}

std::string access_remedy(const OpenCheck& check, const std::string& node, bool container) {
  if (check.error == EACCES || check.error == EPERM) {
    const std::string group = check.gid == 0 ? std::string("render") : group_name(check.gid);
    std::string remedy = fmt::format(
        "add your user to the '{}' group: sudo usermod -aG {} $USER (then log out and in)", group,
        group);
    if (container)
      remedy += fmt::format("; in a container, also pass --group-add {} (or the host's gid)",
                            group);
    return remedy;
  }
  return fmt::format("{} exists but cannot be opened ({}); check `ls -l {}` and the kernel log",
                     node, std::strerror(check.error), node);
}

class EnvironmentSource final : public DeviceSource {
public:
  std::string_view name() const override { return "environment"; }
  std::string skip_reason(const EnumerateOptions&) const override { return {}; }
  SourceResult read(const EnumerateOptions& options) override;

private:
  void check_container(const EnumerateOptions& options, SourceResult& out);
  void check_device_nodes(const EnumerateOptions& options, SourceResult& out);
  void check_variables(const EnumerateOptions& options, SourceResult& out);
  std::string m_container; // "docker", "podman", ... empty when none seen
};

void EnvironmentSource::check_container(const EnumerateOptions& options, SourceResult& out) {
  const fs::path root = options.sysfs_root.empty() ? fs::path("/") : fs::path(options.sysfs_root);
  std::error_code ec;
  if (fs::exists(root / ".dockerenv", ec)) {
    m_container = "docker";
  } else if (fs::exists(root / "run/.containerenv", ec)) {
    m_container = "podman";
  } else if (auto it = options.environment.find("container"); it != options.environment.end() &&
                                                              !it->second.empty()) {
    m_container = it->second; // systemd-nspawn, podman, lxc set this for PID 1's children
  } else if (auto cgroup = read_capped(root / "proc/1/cgroup")) {
    for (const char* marker : {"docker", "kubepods", "containerd", "lxc", "libpod"}) {
      if (cgroup->text.find(marker) != std::string::npos) {
        m_container = marker;
        break;
      }
    }
  }
  out.facts["container"] = m_container.empty() ? "none" : m_container;
  if (!m_container.empty())
    out.findings.push_back(
        {"in-container", Severity::ok,
         fmt::format("running in a container ({})", m_container),
         "the GPU must be passed in: docker run --device=/dev/kfd --device=/dev/dri "
         "--group-add video --group-add render ...",
         {}, {}});
}

void EnvironmentSource::check_device_nodes(const EnumerateOptions& options, SourceResult& out) {
  if (options.dev_root.empty()) {
    out.facts["dev_kfd"] = "not checked";
    return;
  }
  const bool container = !m_container.empty();
  const fs::path dev(options.dev_root);
  const std::string kfd_name = (dev / "kfd").string();
  const OpenCheck kfd = try_open(dev / "kfd");
  if (!kfd.exists) {
    out.facts["dev_kfd"] = "missing";
    out.findings.push_back(
        {"kfd-missing", Severity::problem,
         fmt::format("{} does not exist: no ROCm compute device is available", kfd_name),
         container ? "start the container with --device=/dev/kfd --device=/dev/dri"
                   : "load the amdgpu driver (sudo modprobe amdgpu) on a machine with an AMD GPU; "
                     "ROCm needs a kernel with KFD (CONFIG_HSA_AMD)",
         {}, {}});
  } else if (kfd.error != 0) {
    out.facts["dev_kfd"] = "inaccessible";
    out.findings.push_back({"kfd-not-accessible", Severity::problem,
                            fmt::format("{} not readable and writable by this user: {}", kfd_name,
                                        std::strerror(kfd.error)),
                            access_remedy(kfd, kfd_name, container), {}, {}});
  } else {
    out.facts["dev_kfd"] = "ok";
    out.findings.push_back({"kfd-accessible", Severity::ok,
                            fmt::format("{} opens read-write for this user", kfd_name), "", {},
                            {}});
  }

  std::vector<std::string> ok_nodes;
  int nodes = 0;
  std::error_code ec;
  std::vector<fs::path> paths;
  for (fs::directory_iterator it(dev / "dri", ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind("renderD", 0) == 0) paths.push_back(it->path());
  std::sort(paths.begin(), paths.end());
  for (const fs::path& path : paths) {
    if (++nodes > 64) break;
    const OpenCheck check = try_open(path);
    if (check.error == 0) {
      ok_nodes.push_back(path.filename().string());
      continue;
    }
    out.findings.push_back({"render-node-not-accessible", Severity::problem,
                            fmt::format("{} not readable and writable by this user: {}",
                                        path.string(), std::strerror(check.error)),
                            access_remedy(check, path.string(), container), {}, {}});
  }
  out.facts["dev_render_nodes"] = std::to_string(nodes);
  if (nodes == 0 && kfd.exists) {
    out.findings.push_back({"render-nodes-missing", Severity::problem,
                            fmt::format("{}/dri has no renderD* node although {} exists",
                                        dev.string(), kfd_name),
                            container ? "also pass --device=/dev/dri to the container"
                                      : "check that amdgpu finished loading (sudo dmesg | grep amdgpu)",
                            {}, {}});
  } else if (!ok_nodes.empty()) {
    out.findings.push_back({"render-nodes-accessible", Severity::ok,
                            fmt::format("{} open read-write for this user", join(ok_nodes, ", ")),
                            "", {}, {}});
  }

  // Group membership matters once the nodes exist; udev ACLs can grant access without it.
  if (kfd.exists && ::geteuid() != 0) {
    const group* render = ::getgrnam("render");
    const group* video = ::getgrnam("video");
    const bool member = (render && in_group(render->gr_gid)) || (video && in_group(video->gr_gid));
    out.facts["groups"] = join(my_groups(), ",");
    if (!member)
      out.findings.push_back(
          {"not-in-render-group", kfd.error == 0 ? Severity::warning : Severity::problem,
           fmt::format("this user is in neither the render nor the video group (groups: {})",
                       join(my_groups(), ", ")),
           "sudo usermod -aG render,video $USER (then log out and in)", {}, {}});
  }
}

struct VariableRule {
  std::string_view name;
  Severity severity;
  std::string_view meaning;
  std::string_view remedy;
};

// Variables that change what PyTorch's SDPA sees or how it runs. HSA_OVERRIDE_GFX_VERSION and
// the *_VISIBLE_DEVICES family get their own checks below.
constexpr VariableRule k_variable_rules[] = {
    {"PYTORCH_ROCM_ARCH", Severity::ok,
     "is read when PyTorch is built; it does not change what an installed PyTorch runs", ""},
    {"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", Severity::ok,
     "admits GPUs that AOTriton supports only experimentally to the flash and memory-efficient "
     "backends",
     ""},
    {"TORCH_ROCM_FA_PREFER_CK", Severity::warning,
     "makes PyTorch prefer Composable Kernel flash attention, which supports only gfx90a, gfx942 "
     "and gfx950 (on RDNA4 the CK kernel asserts and kills the process)",
     "unset TORCH_ROCM_FA_PREFER_CK unless every GPU is gfx90a/gfx942/gfx950"},
    {"AMD_SERIALIZE_KERNEL", Severity::warning,
     "serialises every kernel launch: useful to locate a fault, slow for timings",
     "unset it for benchmarks"},
    {"HIP_LAUNCH_BLOCKING", Severity::warning,
     "makes every kernel launch synchronous: useful to locate a fault, slow for timings",
     "unset it for benchmarks"},
    {"AMD_LOG_LEVEL", Severity::ok,
     "makes the HIP runtime log to stderr (3 and above log every kernel dispatch)", ""},
};

void EnvironmentSource::check_variables(const EnumerateOptions& options, SourceResult& out) {
  const auto& env = options.environment;
  auto get = [&](std::string_view name) -> const std::string* {
    auto it = env.find(std::string(name));
    return it == env.end() ? nullptr : &it->second;
  };

  if (const std::string* value = get("HSA_OVERRIDE_GFX_VERSION")) {
    const auto target = gfx_target_from_override(*value);
    out.facts["hsa_override_gfx_version"] = *value;
    if (target) {
      out.facts["hsa_override_target"] = *target;
      out.findings.push_back(
          {"hsa-override-gfx-version", Severity::warning,
           fmt::format("HSA_OVERRIDE_GFX_VERSION={} spoofs the GPU architecture: the HIP runtime "
                       "and PyTorch treat every GPU as {} and load kernels built for it",
                       *value, *target),
           "unset HSA_OVERRIDE_GFX_VERSION on GPUs that PyTorch supports natively (RDNA3, RDNA4, "
           "CDNA); keep it only for an unsupported card whose nearest supported target it names",
           {}, {}});
    } else {
      out.findings.push_back(
          {"hsa-override-gfx-version-malformed", Severity::problem,
           fmt::format("HSA_OVERRIDE_GFX_VERSION='{}' is not MAJOR.MINOR.STEPPING (e.g. 11.0.0)",
                       *value),
           "unset HSA_OVERRIDE_GFX_VERSION or give a version such as 11.0.0", {}, {}});
    }
  }

  for (std::string_view name : {"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                "CUDA_VISIBLE_DEVICES"}) {
    const std::string* value = get(name);
    if (!value) continue;
    out.facts[std::string(name)] = *value;
    const bool none = value->empty() || *value == "-1";
    out.findings.push_back(
        {"visible-devices", none ? Severity::problem : Severity::warning,
         none ? fmt::format("{}='{}' hides every GPU from HIP and PyTorch", name, *value)
              : fmt::format("{}={} limits the GPUs HIP and PyTorch see and renumbers them "
                            "(cuda:0 is the first one listed)",
                            name, *value),
         none ? fmt::format("unset {}", name)
              : std::string("make sure this is intended; the HIP indices below are after it"),
         {}, {}});
  }
  const std::string* hip = get("HIP_VISIBLE_DEVICES");
  const std::string* cuda = get("CUDA_VISIBLE_DEVICES");
  if (hip && cuda && *hip != *cuda)
    out.findings.push_back(
        {"visible-devices-conflict", Severity::warning,
         fmt::format("HIP_VISIBLE_DEVICES={} and CUDA_VISIBLE_DEVICES={} disagree", *hip, *cuda),
         "set only one of them (on Linux ROCm recommends ROCR_VISIBLE_DEVICES)", {}, {}});

  for (const VariableRule& rule : k_variable_rules) {
    const std::string* value = get(rule.name);
    if (!value) continue;
    out.facts[std::string(rule.name)] = *value;
    std::string id = "env-";
    for (char c : rule.name) id += c == '_' ? '-' : static_cast<char>(std::tolower(c));
    out.findings.push_back({id, rule.severity,
                            fmt::format("{}={} {}", rule.name, *value, rule.meaning),
                            std::string(rule.remedy), {}, {}});
  }
}

SourceResult EnvironmentSource::read(const EnumerateOptions& options) {
  SourceResult out;
  m_container.clear();
  check_container(options, out);
  check_device_nodes(options, out);
  check_variables(options, out);
  return out;
}

} // namespace

std::unique_ptr<DeviceSource> make_environment_source() {
  return std::make_unique<EnvironmentSource>();
}

} // namespace sdpa_doctor::devices

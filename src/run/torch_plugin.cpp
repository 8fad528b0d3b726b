#include "run/torch_plugin.hpp"

#include "core/cache.hpp"
#include "core/io.hpp"
#include "core/paths.hpp"
#include "core/text.hpp"
#include "isolate/isolate.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <sys/statvfs.h>
#include <unistd.h>

namespace sdpa_doctor::run {

namespace fs = std::filesystem;

namespace {

constexpr const char* k_source = "torch_plugin/torch_plugin.cpp";
constexpr const char* k_header = "torch_plugin/torch_plugin.h";
constexpr const char* k_facts_script = "torch_plugin/torch_facts.py";
// A plugin is a few MB; this keeps a dozen torch installs and compilers.
constexpr int64_t k_cache_bytes = int64_t{256} << 20;
constexpr std::chrono::seconds k_heartbeat{15};

// A plugin's sources, its sidecar and version.py are small; a failed build's log is the largest.
constexpr int64_t k_max_read_bytes = int64_t{16} << 20;
// A plugin is under 10 MB even with debug information; anything far past that is not one.
constexpr int64_t k_max_plugin_bytes = int64_t{1} << 30;
constexpr const char* k_sum_format = "fnv1a64";
// The libtorch cells' reason when an interrupt ended the wait or the build: as the run's own.
constexpr const char* k_interrupted = "interrupted";

// The text of `path`, or the one line that says why there is none (a FIFO, /dev/zero, a file
// over k_max_read_bytes: the torch under test and the cache are the user's).
Expected<std::string> read_file_or_why(const fs::path& path) {
  return read_regular_file(path.string(), escape_to_one_line(path.string()), k_max_read_bytes);
}

// The text of `path`; empty when it cannot be read.
std::string read_file(const fs::path& path) {
  auto text = read_file_or_why(path);
  return text ? std::move(*text) : std::string();
}

// `name = 'value'` (or `name: str = "value"`) in torch/version.py.
std::string python_assignment(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0) continue;
    const std::string rest = line.substr(name.size());
    if (rest.empty() || (rest[0] != ' ' && rest[0] != '=' && rest[0] != ':')) continue;
    const auto open = rest.find_first_of("'\"");
    if (open == std::string::npos) continue;
    const auto close = rest.find(rest[open], open + 1);
    if (close != std::string::npos) return rest.substr(open + 1, close - open - 1);
  }
  return {};
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// $CXX (a command, perhaps with arguments), else the first of c++, g++, clang++ on PATH.
std::vector<std::string> find_compiler() {
  if (const char* cxx = std::getenv("CXX"); cxx && *cxx) {
    auto words = split_words(cxx);
    if (!words.empty() && (words[0].find('/') != std::string::npos || find_on_path(words[0])))
      return words;
  }
  for (const char* name : {"c++", "g++", "clang++"})
    if (auto found = find_on_path(name)) return {found->string()};
  return {};
}

// "g++ (Debian 12.2.0-14) 12.2.0": the compiler's own first line, part of the cache key.
std::string compiler_version(const std::vector<std::string>& compiler,
                             const std::atomic<bool>* interrupted) {
  isolate::Command cmd;
  cmd.argv = compiler;
  cmd.argv.emplace_back("--version");
  auto run = isolate::run_simple(cmd, std::chrono::seconds(20), interrupted);
  if (!run || run->end.exit_code != 0) return {};
  return std::string(trim_blanks(run->out.substr(0, run->out.find('\n'))));
}

std::string file_safe(std::string text) {
  for (char& ch : text)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '-') ch = '_';
  return text;
}

// The last lines of a compiler's output, as one line for a finding.
std::string log_tail(const std::string& log) {
  constexpr size_t k_tail = 600;
  const std::string tail = log.size() > k_tail ? "..." + log.substr(log.size() - k_tail) : log;
  return escape_to_one_line(tail);
}

Finding plugin_finding(const std::string& id, std::string message, std::string remedy) {
  return Finding{id, Severity::warning, std::move(message), std::move(remedy), {}, ""};
}

void say(const PluginBuildOptions& options, const std::string& line) {
  if (options.progress) options.progress(line);
}

// The compiler run, with a line every k_heartbeat while it works.
Expected<isolate::SimpleRun> compile(const std::vector<std::string>& argv,
                                     const PluginBuildOptions& options) {
  isolate::Command cmd;
  cmd.argv = argv;
  auto running = std::async(std::launch::async, [&] {
    return isolate::run_simple(cmd, options.deadline, options.interrupted);
  });
  const auto start = std::chrono::steady_clock::now();
  while (running.wait_for(k_heartbeat) != std::future_status::ready)
    say(options, fmt::format("still building the LibTorch plugin ({:.0f} s)", ms_since(start) / 1000));
  return running.get();
}

// What one plugin build is for and with what: the same for the cache and a private folder.
struct Recipe {
  std::string torch_name; // "torch 2.13.0 (/venv/.../torch/lib)"
  std::string version;
  std::vector<std::string> compiler;
  fs::path data;    // the doctor's data directory: the plugin's source and torch_facts.py
  std::string stem; // the file name without suffix: torch version and the key's hash
};

// Why the compiler gave no plugin, and whether a next check should not try again: only the
// compiler's own diagnostic is a lasting answer; a full disk, a signal or a deadline may pass.
struct BuildFailure {
  std::string cause;
  bool lasting = false;
};

bool disk_full(const std::string& dir, const std::string& log) {
  struct statvfs fs_info {};
  const bool no_blocks = ::statvfs(dir.c_str(), &fs_info) == 0 && fs_info.f_bavail == 0;
  return no_blocks || log.find(std::strerror(ENOSPC)) != std::string::npos ||
         log.find(std::strerror(EDQUOT)) != std::string::npos;
}

BuildFailure build_failure(const Expected<isolate::SimpleRun>& built, const std::string& log,
                           const Recipe& recipe, const PluginBuildOptions& options,
                           const std::string& dir) {
  const std::string& cxx = recipe.compiler.front();
  if (!built) return {fmt::format("the compiler {} did not start", cxx)};
  if (built->stopped) return {k_interrupted};
  if (built->timed_out)
    return {fmt::format("the compiler {} did not finish in {} s (--plugin-build-timeout), so it "
                        "and its children were killed",
                        cxx, std::chrono::duration_cast<std::chrono::seconds>(options.deadline).count())};
  if (built->end.signal)
    return {fmt::format("the compiler {} was killed by {}", cxx, built->end.signal_name)};
  if (disk_full(dir, log)) return {fmt::format("the disk that holds {} is full", dir)};
  if (built->end.exit_code == 0) return {fmt::format("the compiler {} wrote no plugin", cxx)};
  return {fmt::format("the compiler {} failed", cxx), true};
}

// What the compiler said, for the finding: its silence matters only when it refused.
std::string said_by_compiler(const std::string& log, bool refused) {
  if (!log.empty()) return ": " + log_tail(log);
  return refused ? ": it printed nothing" : "";
}

// The ELF identity of a file's first bytes: class, byte order, machine (the type is checked
// apart). The doctor's own is what a plugin it loads must have.
std::string elf_identity(std::string_view head) {
  if (head.size() < 20 || head.substr(0, 4) != "\x7f" "ELF") return {};
  return std::string(head.substr(4, 2)) + std::string(head.substr(18, 2));
}

const std::string& own_elf_identity() {
  static const std::string identity = [] {
    std::ifstream self("/proc/self/exe", std::ios::binary);
    char head[20] = {};
    self.read(head, sizeof head);
    return elf_identity(std::string_view(head, size_t(self.gcount())));
  }();
  return identity;
}

// Why `bytes` is not a shared object this process could load; empty when it is one.
std::string elf_problem(std::string_view bytes) {
  if (bytes.empty()) return "an empty file";
  const std::string identity = elf_identity(bytes);
  if (identity.empty()) return "not an ELF file";
  constexpr unsigned char k_et_dyn = 3; // e_type, little or big endian
  const bool shared = bytes[16 + (bytes[5] == 2 ? 1 : 0)] == char(k_et_dyn);
  if (!shared) return "an ELF file that is not a shared library";
  if (identity != own_elf_identity()) return "a shared library for another machine";
  return {};
}

// The bytes of the plugin file at `path`, or why it is no shared library this process could load.
Expected<std::string> loadable_bytes(const std::string& path) {
  auto bytes = read_regular_file(path, "the plugin", k_max_plugin_bytes);
  if (!bytes) return bytes.error();
  if (std::string problem = elf_problem(*bytes); !problem.empty()) return make_error(problem);
  return bytes;
}

std::string sum_line(std::string_view bytes) {
  return fmt::format("{} {:016x} {}\n", k_sum_format, cache::content_hash(bytes), bytes.size());
}

std::string sum_path(const std::string& plugin) { return plugin + ".sum"; }

TorchPlugin unavailable(std::string why, std::optional<Finding> finding = std::nullopt) {
  TorchPlugin p;
  p.why_not = std::move(why);
  p.finding = std::move(finding);
  return p;
}

TorchPlugin usable(const fs::path& plugin, std::string origin) {
  TorchPlugin p;
  p.in_use = cache::FileInUse(plugin);
  p.path = plugin.string();
  p.origin = std::move(origin);
  return p;
}

TorchPlugin unusable_plugin(const fs::path& plugin, const std::string& problem) {
  std::string why = fmt::format("the LibTorch plugin {} cannot be used: {}; it was built again "
                                "once and still is",
                                escape_to_one_line(plugin.string()), problem);
  return unavailable(why, plugin_finding("torch-plugin-unusable", why,
                                         "check that CXX names a working C++ compiler, then run "
                                         "the check again; the other probes ran"));
}

// The cache's lock: who holds it is said while this waits; interrupts and the deadline end it.
cache::LockWait cache_lock_wait(const Recipe& recipe, const PluginBuildOptions& options) {
  cache::LockWait wait;
  wait.doing = "building the LibTorch plugin for torch " + recipe.version;
  wait.deadline = options.lock_deadline;
  wait.interrupted = options.interrupted;
  wait.on_wait = [&options](const std::string& line) { say(options, line); };
  return wait;
}

// What the build needs, asked of that torch itself, as CMake asks it at configure time.
Expected<TorchBuildFacts> ask_torch_facts(const Recipe& recipe, const PluginBuildOptions& options) {
  isolate::Command ask;
  ask.argv = {options.python, (recipe.data / k_facts_script).string()};
  auto asked = isolate::run_simple(ask, std::chrono::seconds(120), options.interrupted);
  if (asked && asked->stopped) return make_error(k_interrupted);
  if (asked && asked->end.exit_code == 0) {
    auto facts = parse_torch_facts(asked->out);
    if (facts) return *facts;
    return make_error(fmt::format("{} could not say how to build against its torch: {}",
                                  options.python, facts.error().message));
  }
  const std::string said = asked ? log_tail(asked->err.empty() ? asked->out : asked->err)
                                 : asked.error().message;
  return make_error(fmt::format("{} could not say how to build against its torch: {}",
                                options.python, said));
}

} // namespace

Expected<TorchIdentity> torch_identity(const std::string& lib_dir) {
  std::error_code ec;
  const fs::path lib = fs::canonical(lib_dir, ec);
  if (ec) return make_error(fmt::format("{}: {}", escape_to_one_line(lib_dir), ec.message()));
  TorchIdentity id;
  id.lib_dir = lib.string();
  const auto size = fs::file_size(lib / "libtorch_cpu.so", ec);
  if (ec) return make_error(fmt::format("{} holds no libtorch_cpu.so", escape_to_one_line(id.lib_dir)));
  id.libtorch_cpu_size = static_cast<int64_t>(size);
  const fs::path version_file = lib.parent_path() / "version.py";
  const auto version_py = read_file_or_why(version_file);
  if (!version_py) return version_py.error();
  id.version = python_assignment(*version_py, "__version__");
  id.git_version = python_assignment(*version_py, "git_version");
  if (id.version.empty())
    return make_error(fmt::format("{} names no __version__", escape_to_one_line(version_file.string())));
  return id;
}

std::optional<TorchIdentity> identity_from_sidecar(const std::string& json_text) {
  const nlohmann::json j = nlohmann::json::parse(json_text, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  const auto text = [&](const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  TorchIdentity id;
  id.lib_dir = text("torch_lib");
  id.version = text("version");
  id.git_version = text("git_version");
  if (const auto it = j.find("libtorch_cpu_size"); it != j.end() && it->is_number_integer())
    id.libtorch_cpu_size = it->get<int64_t>();
  if (id.lib_dir.empty() || id.version.empty() || id.libtorch_cpu_size < 0) return std::nullopt;
  return id;
}

Expected<TorchBuildFacts> parse_torch_facts(const std::string& text) {
  if (text.size() > k_max_torch_facts_bytes)
    return make_error(fmt::format("its build facts are {}, more than {} can be",
                                  format_bytes(int64_t(text.size())),
                                  format_bytes(int64_t(k_max_torch_facts_bytes))));
  if (text.find('\0') != std::string::npos) return make_error("its build facts hold a NUL byte");
  TorchBuildFacts facts;
  bool have_include = false;
  std::string abi;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq);
    const std::string value = line.substr(eq + 1);
    if (key == "version") facts.version = value;
    else if (key == "lib") facts.lib_dir = value;
    else if (key == "abi") abi = value;
    else if (key == "include") {
      have_include = true;
      std::istringstream dirs(value);
      for (std::string dir; std::getline(dirs, dir, ';');)
        if (!dir.empty()) facts.include_dirs.push_back(dir);
    }
  }
  for (const auto& [key, missing] : {std::pair{"version", facts.version.empty()},
                                     std::pair{"lib", facts.lib_dir.empty()},
                                     std::pair{"include", !have_include},
                                     std::pair{"abi", abi.empty()}})
    if (missing) return make_error(fmt::format("its build facts have no {}= line", key));
  if (facts.include_dirs.empty()) return make_error("its build facts' include= line names no folder");
  if (abi != "0" && abi != "1")
    return make_error(fmt::format("its build facts say abi={}, which is neither 0 nor 1",
                                  escape_to_one_line(excerpt(abi, 40))));
  facts.abi = abi == "1" ? 1 : 0;
  return facts;
}

std::vector<std::string> plugin_compile_command(const std::vector<std::string>& compiler,
                                                const TorchBuildFacts& facts,
                                                const std::string& source,
                                                const std::string& output) {
  std::vector<std::string> argv = compiler;
  argv.insert(argv.end(), {"-std=c++20", "-O2", "-DNDEBUG", "-fPIC", "-shared",
                           "-fvisibility=hidden", "-fvisibility-inlines-hidden",
                           fmt::format("-D_GLIBCXX_USE_CXX11_ABI={}", facts.abi)});
  for (const std::string& dir : facts.include_dirs) argv.insert(argv.end(), {"-isystem", dir});
  argv.insert(argv.end(), {source, "-o", output});
  // libtorch holds no symbol the plugin calls, but a GPU torch loads its GPU operators through
  // what libtorch NEEDS: kept where --as-needed is the linker's default.
  argv.emplace_back("-Wl,--push-state,--no-as-needed");
  for (const char* lib : {"torch", "torch_cpu", "c10"})
    argv.push_back((fs::path(facts.lib_dir) / fmt::format("lib{}.so", lib)).string());
  argv.emplace_back("-Wl,--pop-state");
  // -Xlinker hands the folder over whole: -Wl, would split a path with a comma.
  argv.insert(argv.end(), {"-Xlinker", "-rpath", "-Xlinker", facts.lib_dir});
  argv.emplace_back("-ldl");
  return argv;
}

std::string plugin_file_problem(const std::string& path) {
  const auto bytes = loadable_bytes(path);
  if (!bytes) return bytes.error().message;
  const auto recorded = read_regular_file(sum_path(path), "its content hash", 4096);
  if (!recorded) return "no content hash was recorded when it was built";
  if (*recorded != sum_line(*bytes)) return "its content is not what was built there";
  return {};
}

bool record_plugin_sum(const std::string& path) {
  const auto bytes = read_regular_file(path, "the plugin", k_max_plugin_bytes);
  return bytes && write_file_atomically(sum_path(path), sum_line(*bytes)).has_value();
}

namespace {

// Why what the compiler just wrote at `path` is no plugin (a compiler can exit 0 with junk); when
// it is one, its content hash is recorded for the checks of later runs. A hash that cannot be
// written (a full disk) costs only a rebuild next time.
std::string built_plugin_problem(const std::string& path) {
  const auto bytes = loadable_bytes(path);
  if (!bytes) return bytes.error().message;
  (void)write_file_atomically(sum_path(path), sum_line(*bytes));
  return {};
}

// The libtorch cells' reason and the finding when the compiler gave no plugin; only its own
// refusal is remembered (beside a cached plugin), so the next check does not try again.
TorchPlugin failed_build(const Expected<isolate::SimpleRun>& built, const Recipe& recipe,
                         const std::string& dir, bool cached, const PluginBuildOptions& options) {
  const std::string log = built ? built->err + built->out : built.error().message;
  const BuildFailure failure = build_failure(built, log, recipe, options, dir);
  if (failure.cause == k_interrupted) return unavailable(failure.cause);
  if (failure.lasting && cached)
    (void)write_file_atomically((fs::path(dir) / (recipe.stem + ".failed")).string(), log);
  std::string why = fmt::format("the LibTorch plugin did not build against {}: {}",
                                recipe.torch_name, failure.cause);
  return unavailable(why, plugin_finding("torch-plugin-build-failed",
                                         why + said_by_compiler(log, failure.lasting),
                                         failure.lasting
                                             ? "install torch's C++ headers with it (a full "
                                               "wheel has torch/include) or another compiler "
                                               "(CXX=...)"
                                             : "the next check builds it again"));
}

// Builds the plugin into `dir` (the cache's folder, held locked, or this run's own).
TorchPlugin build_plugin(const Recipe& recipe, const std::string& dir, bool cached,
                         const PluginBuildOptions& options) {
  const auto facts = ask_torch_facts(recipe, options);
  if (!facts) {
    const std::string& why = facts.error().message;
    if (why == k_interrupted) return unavailable(why);
    return unavailable(why, plugin_finding("torch-plugin-build-failed", why,
                                           "check that `import torch` works in that interpreter"));
  }
  say(options, fmt::format("building the LibTorch plugin for {} with {}: {} {} (about a minute)",
                           recipe.torch_name, recipe.compiler.front(),
                           cached ? "once, then kept in" : "for this run only, in", dir));
  const fs::path plugin = fs::path(dir) / (recipe.stem + ".so");
  const fs::path partial = fs::path(dir) / fmt::format("{}.so.{}.partial", recipe.stem, ::getpid());
  const auto start = std::chrono::steady_clock::now();
  auto built = compile(plugin_compile_command(recipe.compiler, *facts,
                                              (recipe.data / k_source).string(), partial.string()),
                       options);
  const double seconds = ms_since(start) / 1000;
  std::error_code ec;
  if (!built || built->timed_out || built->stopped || built->end.exit_code != 0 ||
      !fs::exists(partial, ec)) {
    fs::remove(partial, ec);
    return failed_build(built, recipe, dir, cached, options);
  }
  fs::rename(partial, plugin, ec);
  if (ec) {
    fs::remove(partial, ec);
    return unavailable(fmt::format("the LibTorch plugin built but could not be kept in {}: {}", dir,
                                   ec.message()));
  }
  if (std::string problem = built_plugin_problem(plugin.string()); !problem.empty())
    return unusable_plugin(plugin, problem);
  say(options, fmt::format("built the LibTorch plugin in {:.0f} s", seconds));
  TorchPlugin p = usable(plugin, fmt::format("built now in {:.0f} s", seconds));
  if (cached)
    (void)cache::evict_least_recently_used(dir, ".so", k_cache_bytes,
                                           fs::file_time_type::clock::now() - std::chrono::minutes(1));
  return p;
}

// The plugin kept in the cache's folder `dir` (locked by the caller), verified, else built there.
TorchPlugin cached_plugin(const Recipe& recipe, const std::string& dir,
                          const PluginBuildOptions& options) {
  const fs::path plugin = fs::path(dir) / (recipe.stem + ".so");
  const fs::path failed = fs::path(dir) / (recipe.stem + ".failed");
  std::error_code ec;
  if (fs::exists(fs::symlink_status(plugin, ec))) {
    const std::string problem = plugin_file_problem(plugin.string());
    if (problem.empty()) {
      cache::mark_used(plugin);
      return usable(plugin, "built earlier for this torch (" + dir + ")");
    }
    say(options, fmt::format("the cached LibTorch plugin {} cannot be used ({}): building it again",
                             escape_to_one_line(plugin.string()), problem));
    fs::remove_all(plugin, ec);
    fs::remove(sum_path(plugin.string()), ec);
  }
  if (fs::exists(fs::symlink_status(failed, ec))) {
    std::string why = fmt::format("the LibTorch plugin did not build against {} (log: {})",
                                  recipe.torch_name, failed.string());
    const auto log = read_file_or_why(failed);
    return unavailable(why, plugin_finding("torch-plugin-build-failed",
                                           why + ": " + (log ? log_tail(*log) : log.error().message),
                                           "delete " + failed.string() +
                                               " to build it again, e.g. after installing "
                                               "torch's headers or another compiler"));
  }
  return build_plugin(recipe, dir, true, options);
}

// The cache when it can be locked and written; else a build in this run's own folder.
TorchPlugin plugin_from_cache_or_private(const Recipe& recipe, const PluginBuildOptions& options) {
  const std::string& dir = options.cache_dir;
  if (!dir.empty()) {
    const cache::FolderLock lock(dir, cache_lock_wait(recipe, options));
    if (lock.state() == cache::FolderLock::State::interrupted) return unavailable(k_interrupted);
    if (lock.held() && ::access(dir.c_str(), W_OK | X_OK) == 0)
      return cached_plugin(recipe, dir, options);
    say(options, lock.state() == cache::FolderLock::State::timed_out
                     ? fmt::format("the plugin cache {} is still locked: going on without it",
                                   escape_to_one_line(dir))
                     : fmt::format("the plugin cache {} cannot be used: going on without it",
                                   escape_to_one_line(dir)));
  }
  return build_plugin(recipe, options.scratch_dir, false, options);
}

} // namespace

TorchPlugin torch_plugin_for(const std::string& lib_dir, const PluginBuildOptions& options) {
  const auto built_in = built_in_torch_plugin();
  const auto use_built_in = [&] {
    TorchPlugin p;
    p.path = built_in->string();
    p.origin = "built with the doctor";
    return p;
  };
  if (lib_dir.empty()) {
    if (built_in) return use_built_in();
    // The libtorch probe never runs: its cells are skipped, and this is the one finding.
    const std::string why = "no torch was found to build the LibTorch plugin against";
    return unavailable(why + " (use --python)",
                       plugin_finding("torch-plugin-unusable", "the libtorch probe did not run: " + why,
                                      "point --python at an interpreter whose torch imports, or "
                                      "leave the probe out with --probe reference,python"));
  }
  const auto identity = torch_identity(lib_dir);
  if (!identity)
    return unavailable(fmt::format("{} is not a torch install the LibTorch plugin can be built "
                                   "against: {}",
                                   escape_to_one_line(lib_dir), identity.error().message));
  if (built_in) {
    fs::path sidecar = *built_in;
    sidecar.replace_extension(".json");
    if (identity_from_sidecar(read_file(sidecar)) == *identity) return use_built_in();
  }

  const auto data = data_dir();
  if (!data || !fs::exists(*data / k_source) || !fs::exists(*data / k_facts_script))
    return unavailable("the LibTorch plugin's source is missing from the doctor's data directory");
  Recipe recipe;
  recipe.torch_name = fmt::format("torch {} ({})", identity->version, identity->lib_dir);
  recipe.version = identity->version;
  recipe.data = *data;
  recipe.compiler = find_compiler();
  if (recipe.compiler.empty()) {
    std::string why = fmt::format(
        "the libtorch probe needs its plugin built against {}, and no C++ compiler was found "
        "($CXX, c++, g++, clang++)",
        recipe.torch_name);
    return unavailable(why, plugin_finding("no-cxx-compiler", why,
                                           "install a C++ compiler (Debian, Ubuntu: apt-get install "
                                           "g++) or set CXX; the other probes ran"));
  }
  cache::KeyHash key;
  for (const std::string& part : {identity->lib_dir, identity->version, identity->git_version,
                                  std::to_string(identity->libtorch_cpu_size),
                                  read_file(*data / k_source), read_file(*data / k_header),
                                  compiler_version(recipe.compiler, options.interrupted)})
    key.add(part);
  for (const std::string& word : recipe.compiler) key.add(word);
  recipe.stem = file_safe(fmt::format("torch-{}-{:016x}", identity->version, key.value));
  return plugin_from_cache_or_private(recipe, options);
}

} // namespace sdpa_doctor::run

#include "run/torch_plugin.hpp"

#include "core/cache.hpp"
#include "core/io.hpp"
#include "core/paths.hpp"
#include "core/text.hpp"
#include "isolate/isolate.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
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
std::string compiler_version(const std::vector<std::string>& compiler) {
  isolate::Command cmd;
  cmd.argv = compiler;
  cmd.argv.emplace_back("--version");
  auto run = isolate::run_simple(cmd, std::chrono::seconds(20));
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
  auto running = std::async(std::launch::async, [&] { return isolate::run_simple(cmd, options.deadline); });
  const auto start = std::chrono::steady_clock::now();
  while (running.wait_for(k_heartbeat) != std::future_status::ready)
    say(options, fmt::format("still building the LibTorch plugin ({:.0f} s)", ms_since(start) / 1000));
  return running.get();
}

TorchPlugin unavailable(std::string why, std::optional<Finding> finding = std::nullopt) {
  TorchPlugin p;
  p.why_not = std::move(why);
  p.finding = std::move(finding);
  return p;
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

std::optional<TorchBuildFacts> parse_torch_facts(const std::string& text) {
  TorchBuildFacts facts;
  bool have_include = false;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq);
    const std::string value = line.substr(eq + 1);
    if (key == "version") facts.version = value;
    else if (key == "lib") facts.lib_dir = value;
    else if (key == "abi" && (value == "0" || value == "1")) facts.abi = value == "1" ? 1 : 0;
    else if (key == "include") {
      have_include = true;
      std::istringstream dirs(value);
      for (std::string dir; std::getline(dirs, dir, ';');)
        if (!dir.empty()) facts.include_dirs.push_back(dir);
    }
  }
  if (facts.version.empty() || facts.lib_dir.empty() || facts.abi < 0 || !have_include ||
      facts.include_dirs.empty())
    return std::nullopt;
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
  argv.push_back("-Wl,-rpath," + facts.lib_dir);
  argv.emplace_back("-ldl");
  return argv;
}

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
    return unavailable("no torch was found to build the LibTorch plugin against (use --python)");
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
  const std::string torch_name = fmt::format("torch {} ({})", identity->version, identity->lib_dir);
  const std::vector<std::string> compiler = find_compiler();
  if (compiler.empty()) {
    std::string why = fmt::format(
        "the libtorch probe needs its plugin built against {}, and no C++ compiler was found "
        "($CXX, c++, g++, clang++)",
        torch_name);
    return unavailable(why, plugin_finding("no-cxx-compiler", why,
                                           "install a C++ compiler (Debian, Ubuntu: apt-get install "
                                           "g++) or set CXX; the other probes ran"));
  }

  cache::KeyHash key;
  for (const std::string& part : {identity->lib_dir, identity->version, identity->git_version,
                                  std::to_string(identity->libtorch_cpu_size),
                                  read_file(*data / k_source), read_file(*data / k_header),
                                  compiler_version(compiler)})
    key.add(part);
  for (const std::string& word : compiler) key.add(word);
  const std::string dir = options.cache_dir.empty() ? options.scratch_dir : options.cache_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string stem = file_safe(fmt::format("torch-{}-{:016x}", identity->version, key.value));
  const fs::path plugin = fs::path(dir) / (stem + ".so");
  const fs::path failed = fs::path(dir) / (stem + ".failed");
  const cache::FolderLock lock(dir); // one build at a time; the next check finds it built
  const auto cached = [&] {
    cache::mark_used(plugin);
    TorchPlugin p;
    p.path = plugin.string();
    p.origin = "built earlier for this torch (" + dir + ")";
    return p;
  };
  if (fs::exists(plugin, ec)) return cached();
  if (fs::exists(failed, ec)) {
    std::string why = fmt::format("the LibTorch plugin did not build against {} (log: {})",
                                  torch_name, failed.string());
    const auto log = read_file_or_why(failed);
    return unavailable(why, plugin_finding("torch-plugin-build-failed",
                                           why + ": " + (log ? log_tail(*log) : log.error().message),
                                           "delete " + failed.string() +
                                               " to build it again, e.g. after installing "
                                               "torch's headers or another compiler"));
  }

  // What the build needs is asked of that torch itself, as CMake asks it at configure time.
  isolate::Command ask;
  ask.argv = {options.python, (*data / k_facts_script).string()};
  auto asked = isolate::run_simple(ask, std::chrono::seconds(120));
  const auto facts = asked && asked->end.exit_code == 0 ? parse_torch_facts(asked->out)
                                                         : std::nullopt;
  if (!facts) {
    const std::string said = asked ? log_tail(asked->err.empty() ? asked->out : asked->err)
                                   : asked.error().message;
    std::string why = fmt::format("{} could not say how to build against its torch: {}",
                                  options.python, said);
    return unavailable(why, plugin_finding("torch-plugin-build-failed", why,
                                           "check that `import torch` works in that interpreter"));
  }

  say(options, fmt::format("building the LibTorch plugin for {} with {}: once, then kept in {} "
                           "(about a minute)",
                           torch_name, compiler.front(), dir));
  const fs::path partial = fs::path(dir) / fmt::format("{}.so.{}.partial", stem, ::getpid());
  const auto start = std::chrono::steady_clock::now();
  auto built = compile(plugin_compile_command(compiler, *facts, (*data / k_source).string(),
                                              partial.string()),
                       options);
  const double seconds = ms_since(start) / 1000;
  if (!built || built->timed_out || built->end.exit_code != 0 || !fs::exists(partial, ec)) {
    fs::remove(partial, ec);
    const std::string log = built ? built->err + built->out : built.error().message;
    const std::string cause = !built             ? "the compiler did not start"
                              : built->timed_out ? fmt::format("it took over {} s", options.deadline.count())
                                                 : "the compiler failed";
    // A timeout may pass on a quieter machine: only a refusal is kept as failed.
    if (built && !built->timed_out) (void)write_file_atomically(failed.string(), log);
    std::string why = fmt::format("the LibTorch plugin did not build against {}: {}", torch_name, cause);
    return unavailable(why, plugin_finding("torch-plugin-build-failed", why + ": " + log_tail(log),
                                           "install torch's C++ headers with it (a full wheel has "
                                           "torch/include) or another compiler (CXX=...)"));
  }
  fs::rename(partial, plugin, ec);
  if (ec) {
    fs::remove(partial, ec);
    return unavailable(fmt::format("the LibTorch plugin built but could not be kept in {}: {}", dir,
                                   ec.message()));
  }
  say(options, fmt::format("built the LibTorch plugin in {:.0f} s", seconds));
  if (!options.cache_dir.empty())
    (void)cache::evict_least_recently_used(dir, ".so", k_cache_bytes,
                                           fs::file_time_type::clock::now() - std::chrono::minutes(1));
  TorchPlugin p;
  p.path = plugin.string();
  p.origin = fmt::format("built now in {:.0f} s", seconds);
  return p;
}

} // namespace sdpa_doctor::run

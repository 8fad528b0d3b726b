// A Hugging Face config.json -> the attention shapes that model runs (`check --model`).
#include "core/text.hpp"
#include "cases/cases.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

namespace sdpa_doctor::cases {

namespace {

using nlohmann::json;

// A present, non-null field. Configs write `null` for "not set" (head_dim, sliding_window).
const json* field(const json& config, const char* key) {
  auto it = config.find(key);
  return it == config.end() || it->is_null() ? nullptr : &*it;
}

// The part of a config that holds the attention settings, and where it is (for errors): the
// top level, or a multimodal model's `text_config` when the top level has no heads of its own.
struct Section {
  const json& config;
  std::string prefix; // "" or "text_config."
};

Section attention_section(const json& config) {
  const json* text = field(config, "text_config");
  if (!field(config, "num_attention_heads") && text && text->is_object())
    return {*text, "text_config."};
  return {config, ""};
}

// A positive whole number, at most `max`; nullopt when absent or null.
Expected<std::optional<int64_t>> positive(const Section& s, const char* key, int64_t max) {
  const json* v = field(s.config, key);
  if (!v) return std::optional<int64_t>{};
  if (!v->is_number_integer())
    return make_error(fmt::format("{}{} must be a whole number, got {}", s.prefix, key, v->dump()));
  if (v->is_number_unsigned() ? v->get<uint64_t>() > uint64_t(max) : v->get<int64_t>() > max)
    return make_error(fmt::format("{}{} is {}; the limit is {}", s.prefix, key, v->dump(), max));
  const auto n = v->get<int64_t>();
  if (n <= 0) return make_error(fmt::format("{}{} must be positive, got {}", s.prefix, key, n));
  return std::optional<int64_t>{n};
}

// Hugging Face names every config config.json: its folder is what tells one model from another.
std::string file_name(const std::string& path) {
  const std::filesystem::path p(path);
  const std::filesystem::path folder = p.parent_path().filename();
  if (p.filename() == "config.json" && !folder.empty() && folder != "." && folder != "..")
    return (folder / p.filename()).string();
  return p.filename().string();
}

std::string model_name(const json& config, const std::string& path) {
  if (const json* v = field(config, "_name_or_path"); v && v->is_string() && !v->empty())
    return v->get<std::string>();
  return file_name(path);
}

// The attention section's own dtype, else the top level's.
Expected<DType> model_dtype(const json& config, const Section& s) {
  // Newer transformers write `dtype`; older ones `torch_dtype`.
  const json* v = nullptr;
  for (const json* where : {&s.config, &config})
    for (const char* key : {"torch_dtype", "dtype"})
      if (!v) v = field(*where, key);
  if (!v) return DType::bf16;
  const auto d = v->is_string() ? dtype_from_string(v->get<std::string>()) : std::nullopt;
  if (!d)
    return make_error(
        fmt::format("torch_dtype {}: expected float16, bfloat16 or float32", v->dump()));
  return *d;
}

// The sizes, each checked; the error names the field.
Expected<ModelShapes> shapes_from_json(const json& config) {
  ModelShapes m;
  const Section s = attention_section(config);
  auto heads = positive(s, "num_attention_heads", k_max_dim);
  auto kv = positive(s, "num_key_value_heads", k_max_dim);
  auto head_dim = positive(s, "head_dim", k_max_dim);
  auto hidden = positive(s, "hidden_size", k_max_dim * k_max_dim);
  // Long-context models go past k_max_dim; only the cases planned from it must stay below.
  auto positions = positive(s, "max_position_embeddings", int64_t{1} << 40);
  // A config that turns the window off may leave its size at 0: that is no window.
  const json* use_window = field(s.config, "use_sliding_window");
  const bool window_on = !use_window || !use_window->is_boolean() || use_window->get<bool>();
  const json* window_size = field(s.config, "sliding_window");
  const bool zero_and_off = !window_on && window_size && window_size->is_number_integer() &&
                            window_size->get<int64_t>() == 0;
  auto window = zero_and_off ? Expected<std::optional<int64_t>>{std::optional<int64_t>{}}
                             : positive(s, "sliding_window", int64_t{1} << 40);
  for (const auto* r : {&heads, &kv, &head_dim, &hidden, &positions, &window})
    if (!*r) return r->error();
  if (!*heads) return make_error(fmt::format("missing {}num_attention_heads", s.prefix));
  if (!*positions) return make_error(fmt::format("missing {}max_position_embeddings", s.prefix));
  m.heads = **heads;
  m.kv_heads = kv->value_or(m.heads);
  if (m.heads % m.kv_heads != 0)
    return make_error(fmt::format("{0}num_key_value_heads {1} does not divide "
                                  "{0}num_attention_heads {2}",
                                  s.prefix, m.kv_heads, m.heads));
  if (*head_dim) {
    m.head_dim = **head_dim;
  } else if (!*hidden) {
    return make_error(fmt::format("missing {0}head_dim and {0}hidden_size (the head dim is one "
                                  "or the other)",
                                  s.prefix));
  } else if (**hidden % m.heads != 0) {
    return make_error(fmt::format("{0}num_attention_heads {1} does not divide {0}hidden_size {2}",
                                  s.prefix, m.heads, **hidden));
  } else {
    m.head_dim = **hidden / m.heads;
  }
  m.max_positions = **positions;
  m.sliding_window = window_on ? window->value_or(0) : 0;
  auto dtype = model_dtype(config, s);
  if (!dtype) return dtype.error();
  m.dtype = *dtype;
  return m;
}

Case model_case(const ModelShapes& m, int64_t lq, int64_t lkv, bool causal) {
  Case c;
  c.dtype = m.dtype;
  c.b = 1;
  c.hq = m.heads;
  c.hkv = m.kv_heads;
  c.lq = lq;
  c.lkv = lkv;
  c.d = m.head_dim;
  c.causal = causal;
  return c;
}

} // namespace

std::string ModelShapes::describe() const {
  std::string out = fmt::format("{} ({} heads, {} kv heads, d={}", name, heads, kv_heads, head_dim);
  if (sliding_window > 0) out += fmt::format(", window {}", sliding_window);
  return out + ")";
}

Expected<ModelShapes> load_model_config(const std::string& path) {
  auto text = read_input_file(path, "model config");
  if (!text) return text.error();
  json config;
  try {
    config = json::parse(*text);
  } catch (const json::exception& e) {
    return make_error(
        fmt::format("model config '{}': not JSON: {}", path, json_error_text(e.what())));
  }
  if (!config.is_object())
    return make_error(fmt::format("model config '{}': expected a JSON object (a config.json), "
                                  "got {}", path, config.type_name()));
  auto shapes = shapes_from_json(config);
  if (!shapes) return make_error(fmt::format("model config '{}': {}", path, shapes.error().message));
  shapes->name = escape_to_one_line(model_name(config, path));
  return shapes;
}

std::vector<Case> model_cases(const ModelShapes& model, int64_t max_len) {
  const int64_t longest = std::min(max_len, model.max_positions);
  // Prefill: the whole prompt at once, causal. Lengths sorted, each once.
  std::set<int64_t> lengths;
  for (int64_t l : {int64_t{64}, int64_t{128}, longest})
    if (l <= longest) lengths.insert(l);
  std::vector<Case> out;
  for (int64_t l : lengths) out.push_back(model_case(model, l, l, true));
  // Chunked prefill: the prompt's last quarter against the cache its first three filled, causal
  // aligned bottom-right (causal_lower_right), as serving engines run long prompts.
  if (const int64_t chunk = longest / 4; chunk >= 1) {
    Case c = model_case(model, chunk, longest, true);
    c.causal_bottom_right = true;
    out.push_back(c);
  }
  // Decode: one new token against the cache. Not causal: PyTorch aligns is_causal top-left, so
  // a causal Lq = 1 query would see only the first key; the one query sees every cached key.
  out.push_back(model_case(model, 1, longest, false));
  return out;
}

Case model_target_case(const ModelShapes& model) {
  const int64_t l = std::min(model.max_positions, k_max_dim);
  return model_case(model, l, l, true);
}

} // namespace sdpa_doctor::cases

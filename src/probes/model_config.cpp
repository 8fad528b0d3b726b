// A Hugging Face config.json -> the attention shapes that model runs (`check --model`).
#include "core/text.hpp"
#include "probes/probes.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <set>

namespace sdpa_doctor::probes {

namespace {

using nlohmann::json;

// A present, non-null field. Configs write `null` for "not set" (head_dim, sliding_window).
const json* field(const json& config, const char* key) {
  auto it = config.find(key);
  return it == config.end() || it->is_null() ? nullptr : &*it;
}

// A positive whole number, at most `max`; nullopt when absent or null.
Expected<std::optional<int64_t>> positive(const json& config, const char* key, int64_t max) {
  const json* v = field(config, key);
  if (!v) return std::optional<int64_t>{};
  if (!v->is_number_integer())
    return make_error(fmt::format("{} must be a whole number, got {}", key, v->dump()));
  if (v->is_number_unsigned() ? v->get<uint64_t>() > uint64_t(max) : v->get<int64_t>() > max)
    return make_error(fmt::format("{} is {}; the limit is {}", key, v->dump(), max));
  const auto n = v->get<int64_t>();
  if (n <= 0) return make_error(fmt::format("{} must be positive, got {}", key, n));
  return std::optional<int64_t>{n};
}

std::string model_name(const json& config) {
  if (const json* v = field(config, "_name_or_path"); v && v->is_string() && !v->empty())
    return v->get<std::string>();
  if (const json* v = field(config, "architectures");
      v && v->is_array() && !v->empty() && v->front().is_string())
    return v->front().get<std::string>();
  if (const json* v = field(config, "model_type"); v && v->is_string() && !v->empty())
    return v->get<std::string>();
  return "model";
}

Expected<DType> model_dtype(const json& config) {
  // Newer transformers write `dtype`; older ones `torch_dtype`.
  const json* v = field(config, "torch_dtype");
  if (!v) v = field(config, "dtype");
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
  auto heads = positive(config, "num_attention_heads", k_max_dim);
  auto kv = positive(config, "num_key_value_heads", k_max_dim);
  auto head_dim = positive(config, "head_dim", k_max_dim);
  auto hidden = positive(config, "hidden_size", k_max_dim * k_max_dim);
  // Long-context models go past k_max_dim; only the cases planned from it must stay below.
  auto positions = positive(config, "max_position_embeddings", int64_t{1} << 40);
  auto window = positive(config, "sliding_window", int64_t{1} << 40);
  for (const auto* r : {&heads, &kv, &head_dim, &hidden, &positions, &window})
    if (!*r) return r->error();
  if (!*heads) return make_error("missing num_attention_heads");
  if (!*positions) return make_error("missing max_position_embeddings");
  m.heads = **heads;
  m.kv_heads = kv->value_or(m.heads);
  if (m.heads % m.kv_heads != 0)
    return make_error(fmt::format("num_key_value_heads {} does not divide num_attention_heads {}",
                                  m.kv_heads, m.heads));
  if (*head_dim) {
    m.head_dim = **head_dim;
  } else if (!*hidden) {
    return make_error("missing head_dim and hidden_size (the head dim is one or the other)");
  } else if (**hidden % m.heads != 0) {
    return make_error(fmt::format("num_attention_heads {} does not divide hidden_size {}",
                                  m.heads, **hidden));
  } else {
    m.head_dim = **hidden / m.heads;
  }
  m.max_positions = **positions;
  const json* use_window = field(config, "use_sliding_window");
  const bool window_on = !use_window || !use_window->is_boolean() || use_window->get<bool>();
  m.sliding_window = window_on ? window->value_or(0) : 0;
  auto dtype = model_dtype(config);
  if (!dtype) return dtype.error();
  m.dtype = *dtype;
  m.name = model_name(config);
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
  shapes->name = escape_to_one_line(shapes->name);
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
  // Decode: one new token against the cache. Not causal: PyTorch aligns is_causal top-left, so
  // a causal Lq = 1 query would see only the first key; the one query sees every cached key.
  out.push_back(model_case(model, 1, longest, false));
  return out;
}

Case model_target_case(const ModelShapes& model) {
  const int64_t l = std::min(model.max_positions, k_max_dim);
  return model_case(model, l, l, true);
}

} // namespace sdpa_doctor::probes

// Llama hyperparameters: the one place they are checked, whatever file they came from.
#include <cmath>
#include <string>

#include "core/errors.h"
#include "partix/models/llama.h"

namespace partix::models::llama {

namespace {

// Bounds well above any released Llama, low enough that nothing sized by them (layer names,
// caches, the rope table) can exhaust memory before the tensors are checked.
constexpr int64_t kMaxVocab = int64_t{1} << 22;
constexpr int64_t kMaxHidden = int64_t{1} << 17;
constexpr int64_t kMaxIntermediate = int64_t{1} << 19;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxPositions = int64_t{1} << 24;

}  // namespace

ConfigKeys config_field_keys() {
  return {"vocab_size",
          "hidden_size",
          "intermediate_size",
          "num_layers",
          "num_heads",
          "num_kv_heads",
          "head_dim",
          "rms_norm_eps",
          "rope_theta",
          "max_position",
          "bos_token_id",
          "eos_token_id",
          "rope_scaling.factor",
          "rope_scaling.low_freq_factor",
          "rope_scaling.high_freq_factor",
          "rope_scaling.original_max_position"};
}

ConfigKeys hf_config_keys() {
  return {"vocab_size",
          "hidden_size",
          "intermediate_size",
          "num_hidden_layers",
          "num_attention_heads",
          "num_key_value_heads",
          "head_dim",
          "rms_norm_eps",
          "rope_theta",
          "max_position_embeddings",
          "bos_token_id",
          "eos_token_id",
          "rope_scaling.factor",
          "rope_scaling.low_freq_factor",
          "rope_scaling.high_freq_factor",
          "rope_scaling.original_max_position_embeddings"};
}

ConfigKeys gguf_config_keys() {
  return {"llama.vocab_size",
          "llama.embedding_length",
          "llama.feed_forward_length",
          "llama.block_count",
          "llama.attention.head_count",
          "llama.attention.head_count_kv",
          "llama.rope.dimension_count",
          "llama.attention.layer_norm_rms_epsilon",
          "llama.rope.freq_base",
          "llama.context_length",
          "tokenizer.ggml.bos_token_id",
          "tokenizer.ggml.eos_token_id",
          "llama.rope.scaling.factor",
          "llama.rope.scaling.low_freq_factor",
          "llama.rope.scaling.high_freq_factor",
          "llama.rope.scaling.original_context_length"};
}

void validate_config(const Config& c, const ConfigSource& src) {
  const ConfigKeys& k = src.keys;
  const std::string where = src.file.empty() ? "" : fmt::format("'{}': ", src.file);
  auto bad = [&](const std::string& key, const std::string& value, std::string_view why) {
    detail::fail(src.api, "{}{} is {}, {}", where, key, value, why);
  };
  auto count = [&](const std::string& key, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) {
      bad(key, std::to_string(v), fmt::format("must be in [{}, {}]", lo, hi));
    }
  };
  count(k.vocab_size, c.vocab_size, 1, kMaxVocab);
  count(k.hidden_size, c.hidden_size, 1, kMaxHidden);
  count(k.intermediate_size, c.intermediate_size, 1, kMaxIntermediate);
  count(k.num_layers, c.num_layers, 1, kMaxLayers);
  count(k.num_heads, c.num_heads, 1, kMaxHeads);
  count(k.num_kv_heads, c.num_kv_heads, 1, c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0) {
    bad(k.num_kv_heads, std::to_string(c.num_kv_heads),
        fmt::format("must divide {} ({})", k.num_heads, c.num_heads));
  }
  if (src.head_dim_derived && c.hidden_size % c.num_heads != 0) {
    bad(k.hidden_size, std::to_string(c.hidden_size),
        fmt::format("not a multiple of {} ({}), and there is no {} to give the head size",
                    k.num_heads, c.num_heads, k.head_dim));
  }
  count(k.head_dim, c.head_dim, 2, kMaxHeadDim);
  if (c.head_dim % 2 != 0) {
    bad(k.head_dim, std::to_string(c.head_dim), "must be even (RoPE rotates pairs)");
  }
  if (!std::isfinite(c.rms_norm_eps) || c.rms_norm_eps <= 0 || c.rms_norm_eps >= 1) {
    bad(k.rms_norm_eps, fmt::format("{}", c.rms_norm_eps), "must be finite and in (0, 1)");
  }
  // theta^(-2i/D) must fall with i: a base of 1 or less gives no positional signal.
  if (!std::isfinite(c.rope_theta) || c.rope_theta <= 1) {
    bad(k.rope_theta, fmt::format("{}", c.rope_theta), "must be finite and greater than 1");
  }
  count(k.max_position, c.max_position, 1, kMaxPositions);
  count(k.bos_token_id, c.bos_token_id, 0, c.vocab_size - 1);
  count(k.eos_token_id, c.eos_token_id, 0, c.vocab_size - 1);
  if (c.rope_scaling) {
    const RopeScaling& s = *c.rope_scaling;
    if (!std::isfinite(s.factor) || s.factor < 1) {
      bad(k.rope_factor, fmt::format("{}", s.factor), "must be finite and at least 1");
    }
    if (!std::isfinite(s.low_freq_factor) || s.low_freq_factor <= 0) {
      bad(k.rope_low_freq_factor, fmt::format("{}", s.low_freq_factor),
          "must be finite and positive");
    }
    // The smoothing divides by high - low.
    if (!std::isfinite(s.high_freq_factor) || s.high_freq_factor <= s.low_freq_factor) {
      bad(k.rope_high_freq_factor, fmt::format("{}", s.high_freq_factor),
          fmt::format("must be finite and greater than {} ({})", k.rope_low_freq_factor,
                      s.low_freq_factor));
    }
    count(k.rope_original_max, s.original_max_position, 1, kMaxPositions);
  }
}

}  // namespace partix::models::llama

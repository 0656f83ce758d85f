#include "models/gpt2/gpt2.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "partix/ops.h"
#include "partix/random.h"
#include "partix/transforms.h"

namespace partix::models::gpt2 {

Config tiny() {
  Config c;
  c.vocab_size = 256;
  c.n_positions = 64;
  c.n_embd = 64;
  c.n_layer = 2;
  c.n_head = 4;
  c.dropout = 0.0;
  return c;
}

Config small() { return Config{}; }

namespace {

std::string layer(int64_t i) { return "transformer.h." + std::to_string(i) + "."; }

void check_config(const Config& c) {
  detail::check(c.vocab_size > 0 && c.n_positions > 0 && c.n_embd > 0 && c.n_layer > 0 && c.n_head > 0,
                "gpt2", "sizes must be positive");
  detail::check(c.n_embd % c.n_head == 0, "gpt2", "n_embd {} is not divisible by n_head {}",
                c.n_embd, c.n_head);
}

}  // namespace

nn::ParamSpecs param_specs(const Config& c) {
  check_config(c);
  const int64_t C = c.n_embd, F = 4 * C;
  const double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  auto w = [&](Shape s, nn::LogicalAxes axes, double scale = 0.02) {
    return nn::ParamSpec{std::move(s), std::move(axes), nn::Init::kNormal, scale, c.dtype};
  };
  auto ones = [&](Shape s, nn::LogicalAxes axes) {
    return nn::ParamSpec{std::move(s), std::move(axes), nn::Init::kOnes, 0, c.dtype};
  };
  auto zeros = [&](Shape s, nn::LogicalAxes axes) {
    return nn::ParamSpec{std::move(s), std::move(axes), nn::Init::kZeros, 0, c.dtype};
  };
  nn::ParamSpecs p;
  p["transformer.wte.weight"] = w({c.vocab_size, C}, {"vocab", "embed"}, std);
  p["transformer.wpe.weight"] = w({c.n_positions, C}, {"", "embed"}, 0.01);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    std::string l = layer(i);
    p[l + "ln_1.weight"] = ones({C}, {"norm"});
    p[l + "ln_1.bias"] = zeros({C}, {"norm"});
    p[l + "attn.c_attn.weight"] = w({C, 3, C}, {"embed", "", "heads"});
    p[l + "attn.c_attn.bias"] = zeros({3, C}, {"", "heads"});
    p[l + "attn.c_proj.weight"] = w({C, C}, {"heads", "embed"}, proj_std);
    p[l + "attn.c_proj.bias"] = zeros({C}, {"norm"});
    p[l + "ln_2.weight"] = ones({C}, {"norm"});
    p[l + "ln_2.bias"] = zeros({C}, {"norm"});
    p[l + "mlp.c_fc.weight"] = w({C, F}, {"embed", "mlp"});
    p[l + "mlp.c_fc.bias"] = zeros({F}, {"mlp"});
    p[l + "mlp.c_proj.weight"] = w({F, C}, {"mlp", "embed"}, proj_std);
    p[l + "mlp.c_proj.bias"] = zeros({C}, {"norm"});
  }
  p["transformer.ln_f.weight"] = ones({C}, {"norm"});
  p["transformer.ln_f.bias"] = zeros({C}, {"norm"});
  return p;
}

nn::LogicalRules sharding_rules(bool fsdp) {
  nn::LogicalRules r;
  r.rules = {{"batch", Axes{"data"}}, {"vocab", Axes{"model"}}, {"heads", Axes{"model"}},
             {"mlp", Axes{"model"}}};
  if (fsdp) {
    // Parameters split over 'data' along their embedding (or, failing that, any) dimension.
    r.rules.push_back({"embed", Axes{"data"}});
    r.rules.push_back({"norm", Axes{"data"}});
    r.rules.push_back({"vocab", Axes{"data"}});
  }
  r.rules.push_back({"embed", std::nullopt});
  r.rules.push_back({"act", std::nullopt});
  return r;
}

namespace {

Array dropout(const Array& x, double rate, const std::optional<Array>& key, int64_t salt) {
  if (!key || rate <= 0.0) return x;
  Array keep = random::bernoulli(random::fold_in(*key, salt), 1.0 - rate, x.shape());
  return where(keep, x / (1.0 - rate), 0.0);
}

Array constrain(const Array& x, const nn::LogicalAxes& axes, const ForwardOptions& o) {
  if (!o.mesh || !o.rules || !detail::is_tracing()) return x;
  return nn::logical_constraint(x, axes, *o.rules, *o.mesh);
}

Array attention(const Params& p, const std::string& l, const Array& x, const Config& c,
                const ForwardOptions& o, int64_t salt) {
  NamedScope scope("attn");
  const int64_t B = x.shape()[0], T = x.shape()[1], C = c.n_embd, H = c.n_head, D = C / H;
  // qkv[B, T, 3, C]: the heads of q, k and v split alike under tensor parallelism.
  Array qkv = einsum("btc,csk->btsk", {x, p.at(l + "attn.c_attn.weight")}) + p.at(l + "attn.c_attn.bias");
  qkv = reshape(qkv, {B, T, 3, H, D});
  qkv = constrain(qkv, {"batch", "", "", "heads", ""}, o);
  Array q = reshape(slice_axis(qkv, 2, 0, 1), {B, T, H, D});
  Array k = reshape(slice_axis(qkv, 2, 1, 2), {B, T, H, D});
  Array v = reshape(slice_axis(qkv, 2, 2, 3), {B, T, H, D});
  Array scores = einsum("bthd,bshd->bhts", {q, k}) * (1.0 / std::sqrt(static_cast<double>(D)));
  scores = where(causal_mask(T, T), scores, -1e9);
  Array att = dropout(softmax(scores, -1), c.dropout, o.dropout_key, salt);
  Array y = reshape(einsum("bhts,bshd->bthd", {att, v}), {B, T, C});
  return matmul(y, p.at(l + "attn.c_proj.weight")) + p.at(l + "attn.c_proj.bias");
}

Array mlp(const Params& p, const std::string& l, const Array& x) {
  NamedScope scope("mlp");
  Array h = gelu(matmul(x, p.at(l + "mlp.c_fc.weight")) + p.at(l + "mlp.c_fc.bias"), true);
  return matmul(h, p.at(l + "mlp.c_proj.weight")) + p.at(l + "mlp.c_proj.bias");
}

}  // namespace

Array forward(const Params& p, const Array& ids, const Config& c, const ForwardOptions& o) {
  check_config(c);
  detail::check(ids.ndim() == 2 && is_integral(ids.dtype()), "gpt2.forward",
                "token ids must be an integer [B, T] array, got {}{}", dtype_name(ids.dtype()),
                shape_to_string(ids.shape()));
  const int64_t T = ids.shape()[1];
  detail::check(T <= c.n_positions, "gpt2.forward", "sequence length {} exceeds n_positions {}", T,
                c.n_positions);
  Array pos = slice_axis(p.at("transformer.wpe.weight"), 0, 0, T);
  Array x = take(p.at("transformer.wte.weight"), ids, 0) + pos;
  x = dropout(x, c.dropout, o.dropout_key, 1);
  x = constrain(x, {"batch", "", "act"}, o);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    NamedScope scope("h" + std::to_string(i));
    std::string l = layer(i);
    Array a = attention(p, l, layer_norm(x, p.at(l + "ln_1.weight"), p.at(l + "ln_1.bias"), c.layer_norm_epsilon),
                        c, o, 100 + 3 * i);
    x = x + dropout(a, c.dropout, o.dropout_key, 101 + 3 * i);
    x = constrain(x, {"batch", "", "act"}, o);
    Array m = mlp(p, l, layer_norm(x, p.at(l + "ln_2.weight"), p.at(l + "ln_2.bias"), c.layer_norm_epsilon));
    x = x + dropout(m, c.dropout, o.dropout_key, 102 + 3 * i);
    x = constrain(x, {"batch", "", "act"}, o);
  }
  x = layer_norm(x, p.at("transformer.ln_f.weight"), p.at("transformer.ln_f.bias"), c.layer_norm_epsilon);
  // Tied embeddings: logits = x @ wte^T (split over the vocab under tensor parallelism).
  return einsum("btc,vc->btv", {x, p.at("transformer.wte.weight")});
}

Array loss(const Params& p, const Array& ids, const Array& targets, const Config& c,
           const ForwardOptions& o) {
  Array logits = forward(p, ids, c, o);
  return mean(cross_entropy(logits, targets));
}

Config config_from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    detail::fail("gpt2.config", "config.json is not valid JSON: {}", e.what());
  }
  Config c;
  auto get = [&](const char* k, int64_t& dst) {
    if (j.contains(k)) {
      detail::check(j[k].is_number_integer(), "gpt2.config", "'{}' must be an integer", k);
      dst = j[k].get<int64_t>();
    }
  };
  get("vocab_size", c.vocab_size);
  get("n_positions", c.n_positions);
  get("n_embd", c.n_embd);
  get("n_layer", c.n_layer);
  get("n_head", c.n_head);
  if (j.contains("layer_norm_epsilon")) c.layer_norm_epsilon = j["layer_norm_epsilon"].get<double>();
  if (j.contains("resid_pdrop")) c.dropout = j["resid_pdrop"].get<double>();
  check_config(c);
  return c;
}

std::string config_to_json(const Config& c) {
  nlohmann::json j{{"architectures", {"GPT2LMHeadModel"}},
                   {"model_type", "gpt2"},
                   {"vocab_size", c.vocab_size},
                   {"n_positions", c.n_positions},
                   {"n_ctx", c.n_positions},
                   {"n_embd", c.n_embd},
                   {"n_layer", c.n_layer},
                   {"n_head", c.n_head},
                   {"n_inner", nullptr},
                   {"activation_function", "gelu_new"},
                   {"layer_norm_epsilon", c.layer_norm_epsilon},
                   {"resid_pdrop", c.dropout},
                   {"embd_pdrop", c.dropout},
                   {"attn_pdrop", c.dropout},
                   {"initializer_range", 0.02},
                   {"tie_word_embeddings", true},
                   {"bos_token_id", c.vocab_size - 1},
                   {"eos_token_id", c.vocab_size - 1},
                   {"torch_dtype", "float32"}};
  return j.dump(2);
}

}  // namespace partix::models::gpt2

#include "partix/models/gpt2.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "files/json_util.h"
#include "models/gpt2/block.h"
#include "models/gpt2/layout.h"
#include "partix/control.h"
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

// Bounds far above any GPT-2, low enough that nothing sized by them exhausts memory before the
// tensors are checked.
constexpr int64_t kMaxVocab = int64_t{1} << 22;
constexpr int64_t kMaxPositions = int64_t{1} << 20;
constexpr int64_t kMaxEmbd = int64_t{1} << 16;
constexpr int64_t kMaxLayers = 1024;

}  // namespace

void validate_config(const Config& c, std::string_view api, std::string_view file) {
  const std::string where = file.empty() ? "" : fmt::format("'{}': ", file);
  auto bad = [&](std::string_view key, const std::string& value, std::string_view why) {
    detail::fail(api, "{}{} is {}, {}", where, key, value, why);
  };
  auto count = [&](std::string_view key, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) bad(key, std::to_string(v), fmt::format("must be in [{}, {}]", lo, hi));
  };
  count("vocab_size", c.vocab_size, 1, kMaxVocab);
  count("n_positions", c.n_positions, 1, kMaxPositions);
  count("n_embd", c.n_embd, 1, kMaxEmbd);
  count("n_layer", c.n_layer, 1, kMaxLayers);
  count("n_head", c.n_head, 1, c.n_embd);
  if (c.n_embd % c.n_head != 0) {
    bad("n_embd", std::to_string(c.n_embd), fmt::format("not a multiple of n_head ({})", c.n_head));
  }
  if (!std::isfinite(c.layer_norm_epsilon) || c.layer_norm_epsilon <= 0 ||
      c.layer_norm_epsilon >= 1) {
    bad("layer_norm_epsilon", fmt::format("{}", c.layer_norm_epsilon),
        "must be finite and in (0, 1)");
  }
  if (!std::isfinite(c.dropout) || c.dropout < 0 || c.dropout >= 1) {
    bad("resid_pdrop", fmt::format("{}", c.dropout), "must be in [0, 1)");
  }
  if (!is_floating(c.dtype)) {
    detail::fail(api, "{}dtype {} is not a floating type", where, dtype_name(c.dtype));
  }
}

std::map<std::string, Shape> stored_shapes(const Config& c) {
  validate_config(c);
  const int64_t C = c.n_embd, F = 4 * C;
  std::map<std::string, Shape> s;
  s["wte.weight"] = {c.vocab_size, C};
  s["wpe.weight"] = {c.n_positions, C};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string l = "h." + std::to_string(i) + ".";
    s[l + "ln_1.weight"] = s[l + "ln_1.bias"] = {C};
    s[l + "attn.c_attn.weight"] = {C, 3 * C};
    s[l + "attn.c_attn.bias"] = {3 * C};
    s[l + "attn.c_proj.weight"] = {C, C};
    s[l + "attn.c_proj.bias"] = {C};
    s[l + "ln_2.weight"] = s[l + "ln_2.bias"] = {C};
    s[l + "mlp.c_fc.weight"] = {C, F};
    s[l + "mlp.c_fc.bias"] = {F};
    s[l + "mlp.c_proj.weight"] = {F, C};
    s[l + "mlp.c_proj.bias"] = {C};
  }
  s["ln_f.weight"] = s["ln_f.bias"] = {C};
  return s;
}

nn::ParamSpecs param_specs(const Config& c, bool stacked) {
  validate_config(c);
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
    std::string l = layer_prefix(i);
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
  return stacked ? stacked_specs(std::move(p), c.n_layer, layer_names()) : p;
}

nn::LogicalRules sharding_rules(bool fsdp) {
  nn::LogicalRules r;
  r.rules = {{"batch", Axes{"data"}},
             {"vocab", Axes{"model"}},
             {"heads", Axes{"model"}},
             {"mlp", Axes{"model"}}};
  if (fsdp) {
    // Parameters split over 'data' along their embedding (or, failing that, any) dimension.
    r.rules.push_back({"embed", Axes{"data"}});
    r.rules.push_back({"norm", Axes{"data"}});
    r.rules.push_back({"vocab", Axes{"data"}});
  }
  r.rules.push_back({"embed", std::nullopt});
  r.rules.push_back({"act", std::nullopt});
  // Pipeline parallelism: the stacked layers split over 'stage' where the mesh has one.
  r.rules.push_back({"layers", Axes{"stage"}});
  r.rules.push_back({"layers", std::nullopt});
  return r;
}

Params init(const Config& c, const Array& key, const Mesh& mesh, const nn::LogicalRules& rules,
            bool stacked) {
  Params per_layer = nn::init_params(param_specs(c), key, mesh, rules);
  return stacked ? to_layout(per_layer, c, true, mesh, rules) : per_layer;
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

// Explicit sharding: a mesh with Explicit axes types every activation while tracing.
bool explicit_mode(const ForwardOptions& o) {
  if (!o.mesh || !o.rules) return false;
  for (AxisType t : o.mesh->axis_types()) {
    if (t == AxisType::Explicit) return true;
  }
  return false;
}

// x @ w for the output projections, whose contraction is split over 'model' in both operands
// under tensor parallelism: in Explicit mode that is ambiguous, and the result is stated to be
// sharded as the activations are (the partial sums reduced over 'model').
Array project(const Array& x, const Array& w, const ForwardOptions& o) {
  if (!explicit_mode(o)) return matmul(x, w);
  return matmul(x, w, OutSharding{nn::logical_to_spec({"batch", "", "act"}, *o.rules, *o.mesh)});
}

// Explicit mode with FSDP: a parameter stored split over 'data' is used whole along it, as
// FSDP gathers it for use (a split weight would put 'data' on two dimensions of its product
// with the batch-split activations). Each block reshards its own parameters, so one layer's
// are gathered at a time.
Array for_use(const Array& w, const ForwardOptions& o) {
  if (!explicit_mode(o)) return w;
  const PartitionSpec spec = type_of(w).spec();
  std::vector<PartitionSpec::Entry> entries;
  bool split = false;
  for (const PartitionSpec::Entry& e : spec.entries()) {
    PartitionSpec::Entry kept;
    for (const std::string& a : e) {
      if (a == "data") {
        split = true;
      } else {
        kept.push_back(a);
      }
    }
    entries.push_back(kept);
  }
  return split ? reshard(w, NamedSharding(*o.mesh, PartitionSpec(entries))) : w;
}

Params for_use(const Params& ps, const ForwardOptions& o) {
  if (!explicit_mode(o)) return ps;
  Params out;
  for (const auto& [name, w] : ps) out.emplace(name, for_use(w, o));
  return out;
}

// Under manual tensor parallelism (inside shard_map, `tp` names the axis) the weights are this
// device's heads and MLP columns: head counts come from the weights' shapes, and the row-parallel
// projections' partial sums are summed over `tp` before their bias is added.
Array project_sum(const Array& x, const Array& w, const ForwardOptions& o, const std::string& tp) {
  return tp.empty() ? project(x, w, o) : psum(matmul(x, w), tp);
}

Array attention(const Params& p, const std::string& l, const Array& x, const Config& c,
                const ForwardOptions& o, int64_t salt, const std::string& tp) {
  NamedScope scope("attn");
  const Array& w_qkv = p.at(l + "attn.c_attn.weight");  // [C, 3, C / tp]
  const int64_t B = x.shape()[0], T = x.shape()[1], D = c.n_embd / c.n_head;
  const int64_t Cl = w_qkv.shape()[2], H = Cl / D;
  // qkv[B, T, 3, C]: the heads of q, k and v split alike under tensor parallelism.
  Array qkv = einsum("btc,csk->btsk", {x, w_qkv}) + p.at(l + "attn.c_attn.bias");
  qkv = reshape(qkv, {B, T, 3, H, D});
  qkv = constrain(qkv, {"batch", "", "", "heads", ""}, o);
  Array q = reshape(slice_axis(qkv, 2, 0, 1), {B, T, H, D});
  Array k = reshape(slice_axis(qkv, 2, 1, 2), {B, T, H, D});
  Array v = reshape(slice_axis(qkv, 2, 2, 3), {B, T, H, D});
  Array scores = einsum("bthd,bshd->bhts", {q, k}) * (1.0 / std::sqrt(static_cast<double>(D)));
  scores = where(causal_mask(T, T), scores, -1e9);
  Array att = dropout(softmax(scores, -1), c.dropout, o.dropout_key, salt);
  Array y = reshape(einsum("bhts,bshd->bthd", {att, v}), {B, T, Cl});
  return project_sum(y, p.at(l + "attn.c_proj.weight"), o, tp) + p.at(l + "attn.c_proj.bias");
}

Array mlp(const Params& p, const std::string& l, const Array& x, const ForwardOptions& o,
          const std::string& tp) {
  NamedScope scope("mlp");
  Array h = gelu(matmul(x, p.at(l + "mlp.c_fc.weight")) + p.at(l + "mlp.c_fc.bias"), true);
  return project_sum(h, p.at(l + "mlp.c_proj.weight"), o, tp) + p.at(l + "mlp.c_proj.bias");
}

}  // namespace

Array block(const Params& lp_in, const std::string& l, const Array& x_in, const Config& c,
            const ForwardOptions& o, int64_t i, const std::optional<Array>& key,
            const std::string& tp) {
  const Params lp = for_use(lp_in, o);
  ForwardOptions oi = o;
  oi.dropout_key = key;
  Array h = x_in;
  Array a = attention(
      lp, l, layer_norm(h, lp.at(l + "ln_1.weight"), lp.at(l + "ln_1.bias"), c.layer_norm_epsilon),
      c, oi, 100 + 3 * i, tp);
  h = h + dropout(a, c.dropout, oi.dropout_key, 101 + 3 * i);
  h = constrain(h, {"batch", "", "act"}, oi);
  Array m = mlp(lp, l,
                layer_norm(h, lp.at(l + "ln_2.weight"), lp.at(l + "ln_2.bias"), c.layer_norm_epsilon),
                oi, tp);
  h = h + dropout(m, c.dropout, oi.dropout_key, 102 + 3 * i);
  return constrain(h, {"batch", "", "act"}, oi);
}

Array embed_dropout(const Array& x, const Config& c, const std::optional<Array>& key) {
  return dropout(x, c.dropout, key, 1);
}

void check_params(std::string_view api, const Params& p, const Config& c) {
  const bool stacked = p.count(std::string(kStackedPrefix) + block_parameters().front()) > 0;
  for (const auto& [name, spec] : param_specs(c, stacked)) {
    auto it = p.find(name);
    if (it == p.end()) {
      detail::fail(api, "params has no '{}' ({} {}, as the config needs)", name,
                   stacked ? "stacked layout," : "per-layer layout,", shape_to_string(spec.shape));
    }
    if (it->second.shape() != spec.shape) {
      detail::fail(api, "parameter '{}' is {}{}, but the config needs shape {}", name,
                   dtype_name(it->second.dtype()), shape_to_string(it->second.shape()),
                   shape_to_string(spec.shape));
    }
  }
}

Array forward(const Params& p, const Array& ids, const Config& c, const ForwardOptions& o) {
  validate_config(c);
  check_params("gpt2.forward", p, c);
  if (!(ids.ndim() == 2 && is_integral(ids.dtype()))) {
    detail::fail("gpt2.forward", "token ids must be an integer [B, T] array, got {}{}",
                 dtype_name(ids.dtype()), shape_to_string(ids.shape()));
  }
  const int64_t T = ids.shape()[1];
  detail::check(T <= c.n_positions, "gpt2.forward", "sequence length {} exceeds n_positions {}", T,
                c.n_positions);
  Array pos = slice_axis(for_use(p.at("transformer.wpe.weight"), o), 0, 0, T);
  // The embedding lookup: a gather from a table split over the vocabulary, whose result
  // sharding Explicit mode needs stated.
  const Array wte = for_use(p.at("transformer.wte.weight"), o);
  Array x = (explicit_mode(o) ? take(wte, ids, 0, OutSharding{nn::logical_to_spec({"batch", "", "act"}, *o.rules, *o.mesh)})
                              : take(wte, ids, 0)) +
            pos;
  x = dropout(x, c.dropout, o.dropout_key, 1);
  x = constrain(x, {"batch", "", "act"}, o);
  // One block; `key` holds the dropout key when there is one (an argument, so that a
  // rematerialised block recomputes the same masks).
  auto make_block = [&c, &o](const std::string& l, int64_t i) {
    return [&c, &o, l, i](const Array& x_in, const Params& lp_in, const std::vector<Array>& key) {
      return block(lp_in, l, x_in, c, o, i,
                   key.empty() ? std::nullopt : std::optional<Array>(key[0]), "");
    };
  };
  if (o.scan_layers) {
    // One block traced and scanned L times over the parameters stacked over layers [L, ...]
    // (stacked here when they come per layer): the program's size does not grow with depth.
    const Params stacked_params = stack_layers(p, c);
    Params stacked;
    for (const std::string& suffix : block_parameters()) {
      const std::string name = std::string(kStackedPrefix) + suffix;
      stacked.emplace(name, stacked_params.at(name));
    }
    auto layer = make_block(std::string(kStackedPrefix), 0);
    x = scan(
            [&](const Array& h, const std::pair<Params, Array>& layer_in) {
              NamedScope scope("h");
              // Each layer draws its own dropout masks: the key folded with the layer index.
              std::vector<Array> key;
              if (o.dropout_key) key.push_back(random::fold_in(*o.dropout_key, layer_in.second));
              Array out = o.remat ? checkpoint(layer)(h, layer_in.first, key)
                                  : layer(h, layer_in.first, key);
              return std::pair{out, std::vector<Array>{}};
            },
            x, std::pair{stacked, arange(c.n_layer, DType::I32)})
            .first;
  } else {
    const Params per_layer = unstack_layers(p, c);
    for (int64_t i = 0; i < c.n_layer; ++i) {
      NamedScope scope("h" + std::to_string(i));
      const std::string l = layer_prefix(i);
      // Layer i draws the masks the scanned model's layer i draws: the key folded with i.
      auto layer = make_block(l, 0);
      Params lp;
      for (auto it = per_layer.lower_bound(l); it != per_layer.end() && it->first.starts_with(l);
           ++it)
        lp.emplace(it->first, it->second);
      std::vector<Array> key;
      if (o.dropout_key) key.push_back(random::fold_in(*o.dropout_key, i));
      x = o.remat ? checkpoint(layer)(x, lp, key) : layer(x, lp, key);
    }
  }
  x = layer_norm(x, for_use(p.at("transformer.ln_f.weight"), o), for_use(p.at("transformer.ln_f.bias"), o),
                 c.layer_norm_epsilon);
  // Tied embeddings: logits = x @ wte^T (split over the vocab under tensor parallelism).
  return einsum("btc,vc->btv", {x, wte});
}

Array loss(const Params& p, const Array& ids, const Array& targets, const Config& c,
           const ForwardOptions& o) {
  Array logits = forward(p, ids, c, o);
  return mean(cross_entropy(logits, targets));
}

Config config_from_json(const std::string& text, const std::string& file) {
  constexpr std::string_view api = "gpt2.config";
  nlohmann::json j = detail::parse_untrusted_json(text, api, file);
  if (!j.is_object())
    detail::fail(api, "'{}' is a JSON {}, not an object", file, detail::json_kind(j));
  auto find = [&](const char* k) -> const nlohmann::json* {
    auto it = j.find(k);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  };
  auto wrong = [&](const char* k, const nlohmann::json& v, std::string_view expected) {
    detail::fail(api, "'{}': {} is {} ({}), not {}", file, k, v.dump(), detail::json_kind(v),
                 expected);
  };
  auto integer = [&](const char* k, int64_t& dst) {
    const nlohmann::json* v = find(k);
    if (!v) return;
    if (!v->is_number_integer() ||
        (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
      wrong(k, *v, "an integer");
    }
    dst = v->get<int64_t>();
  };
  auto number = [&](const char* k, double& dst) {
    const nlohmann::json* v = find(k);
    if (!v) return;
    if (!v->is_number()) wrong(k, *v, "a number");
    dst = v->get<double>();
  };
  auto text_of = [&](const char* k, const std::string& fallback) {
    const nlohmann::json* v = find(k);
    if (!v) return fallback;
    if (!v->is_string()) wrong(k, *v, "a string");
    return v->get<std::string>();
  };
  auto flag = [&](const char* k, bool fallback) {
    const nlohmann::json* v = find(k);
    if (!v) return fallback;
    if (!v->is_boolean()) wrong(k, *v, "true or false");
    return v->get<bool>();
  };
  Config c;
  integer("vocab_size", c.vocab_size);
  integer("n_positions", c.n_positions);
  integer("n_embd", c.n_embd);
  integer("n_layer", c.n_layer);
  integer("n_head", c.n_head);
  number("layer_norm_epsilon", c.layer_norm_epsilon);
  number("resid_pdrop", c.dropout);
  // Keys that select another architecture than the one partix computes.
  const std::string type = text_of("model_type", "gpt2");
  if (type != "gpt2") detail::fail(api, "'{}': model_type is '{}', not gpt2", file, type);
  const std::string act = text_of("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    detail::fail(api, "'{}': activation_function is '{}'; partix's GPT-2 uses gelu_new", file, act);
  }
  int64_t inner = 4 * c.n_embd;
  integer("n_inner", inner);
  if (inner != 4 * c.n_embd) {
    detail::fail(api, "'{}': n_inner is {}; partix's GPT-2 uses 4 * n_embd ({})", file, inner,
                 4 * c.n_embd);
  }
  if (!flag("scale_attn_weights", true) || flag("scale_attn_by_inverse_layer_idx", false) ||
      flag("add_cross_attention", false) || !flag("tie_word_embeddings", true)) {
    detail::fail(api,
                 "'{}': partix's GPT-2 needs scale_attn_weights true, "
                 "scale_attn_by_inverse_layer_idx false, add_cross_attention false and "
                 "tie_word_embeddings true",
                 file);
  }
  validate_config(c, api, file);
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

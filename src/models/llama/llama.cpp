#include "partix/models/llama.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/errors.h"
#include "models/llama/layout.h"
#include "partix/control.h"
#include "partix/ops.h"
#include "partix/random.h"
#include "partix/transforms.h"
#include "trace/trace.h"

namespace partix::models::llama {

Config tiny() {
  Config c;
  c.vocab_size = 96;
  c.hidden_size = 48;
  c.intermediate_size = 64;
  c.num_layers = 2;
  c.num_heads = 6;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.rope_theta = 10000.0;
  c.max_position = 128;
  return c;
}

namespace {
// Every parameter's shape, with the attention projections' given: the two layouts below
// differ only there.
std::map<std::string, Shape> shapes_with(const Config& c, const Shape& q, const Shape& kv,
                                         const Shape& o) {
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  std::map<std::string, Shape> s;
  s["model.embed_tokens.weight"] = {c.vocab_size, C};
  for (int64_t i = 0; i < c.num_layers; ++i) {
    std::string l = layer_prefix(i);
    s[l + "input_layernorm.weight"] = {C};
    s[l + "self_attn.q_proj.weight"] = q;
    s[l + "self_attn.k_proj.weight"] = kv;
    s[l + "self_attn.v_proj.weight"] = kv;
    s[l + "self_attn.o_proj.weight"] = o;
    s[l + "post_attention_layernorm.weight"] = {C};
    s[l + "mlp.gate_proj.weight"] = {F, C};
    s[l + "mlp.up_proj.weight"] = {F, C};
    s[l + "mlp.down_proj.weight"] = {C, F};
  }
  s["model.norm.weight"] = {C};
  if (!c.tie_word_embeddings) s["lm_head.weight"] = {c.vocab_size, C};
  return s;
}
}  // namespace

std::map<std::string, Shape> param_shapes(const Config& c, bool stacked) {
  validate_config(c);
  const int64_t C = c.hidden_size, KV = c.num_kv_heads, D = c.head_dim;
  const int64_t G = c.num_heads / c.num_kv_heads;
  std::map<std::string, Shape> s = shapes_with(c, {KV, G, D, C}, {KV, D, C}, {C, KV, G, D});
  if (!stacked) return s;
  return stack_entries(std::move(s), c.num_layers, layer_names(), [&](std::vector<Shape> l) {
    Shape one = std::move(l.front());
    one.insert(one.begin(), c.num_layers);
    return one;
  });
}

std::map<std::string, Shape> stored_shapes(const Config& c) {
  validate_config(c);
  const int64_t C = c.hidden_size;
  const int64_t Q = c.num_heads * c.head_dim, KV = c.num_kv_heads * c.head_dim;
  return shapes_with(c, {Q, C}, {KV, C}, {C, Q});
}

nn::ParamSpecs param_specs(const Config& c, bool stacked) {
  nn::ParamSpecs specs;
  for (const auto& [name, shape] : param_shapes(c, false)) {
    nn::ParamSpec s{shape, {}, nn::Init::kNormal, 0.2, DType::F32};
    if (name.ends_with("norm.weight")) {
      s.axes = {"norm"};
      s.init = nn::Init::kOnes;
      s.scale = 0;
    } else if (name.ends_with("q_proj.weight")) {
      s.axes = {"heads", "head_group", "head_dim", "embed"};
    } else if (name.ends_with("k_proj.weight") || name.ends_with("v_proj.weight")) {
      s.axes = {"heads", "head_dim", "embed"};
    } else if (name.ends_with("o_proj.weight")) {
      s.axes = {"embed", "heads", "head_group", "head_dim"};
    } else if (name.ends_with("down_proj.weight")) {
      s.axes = {"embed", "mlp"};
    } else if (name.ends_with("gate_proj.weight") || name.ends_with("up_proj.weight")) {
      s.axes = {"mlp", "embed"};
    } else {
      s.axes = {"vocab", "embed"};  // embed_tokens, lm_head
    }
    specs.emplace(name, std::move(s));
  }
  if (!stacked) return specs;
  // Each layer parameter once, with the layers first (never split: a scan reads one layer of
  // it per step).
  return stacked_specs(std::move(specs), c.num_layers, layer_names());
}

nn::LogicalRules sharding_rules(const std::string& axis) {
  nn::LogicalRules r;
  r.rules = {{"vocab", Axes{axis}},  // vocab-parallel embedding and logits
             // Key/value heads, each with its group of query heads: q/k/v by column, o by
             // row, the KV cache by head. A group never straddles devices.
             {"heads", Axes{axis}},
             {"head_group", std::nullopt},
             {"mlp", Axes{axis}},    // gate/up by column, down by row
             {"embed", std::nullopt},
             {"head_dim", std::nullopt},
             {"norm", std::nullopt},
             {"layers", std::nullopt}};
  return r;
}

std::map<std::string, NamedSharding> param_shardings(const Config& c, const nn::LogicalRules& rules,
                                                     const Mesh& mesh, bool stacked) {
  return nn::param_shardings(param_specs(c, stacked), rules, mesh);
}

std::string describe(const Config& c, const nn::LogicalRules& rules, const Mesh& mesh,
                     bool stacked) {
  return nn::describe(param_specs(c, stacked), rules, mesh);
}

Params init(const Config& c, const Array& key, const Mesh& mesh, const nn::LogicalRules& rules,
            bool stacked) {
  // Drawn per layer (a value depends on its per-layer name), stacked in the same program.
  const nn::ParamSpecs specs = param_specs(c, false);
  const auto shardings = nn::param_shardings(specs, rules, mesh);
  const auto stacked_shardings = nn::param_shardings(param_specs(c, true), rules, mesh);
  if (!(key.dtype() == DType::I32 && key.shape() == Shape{2})) {
    detail::fail("llama.init", "key must be an i32[2] key (from random::key), got {}{}",
                 dtype_name(key.dtype()), shape_to_string(key.shape()));
  }
  JitOptions o;
  o.name = "llama_init";
  for (const auto& [name, s] : stacked ? stacked_shardings : shardings)
    o.out_shardings.push_back(s);
  auto f = jit(
      [&](const Array& k0) {
        Params p;
        for (const auto& [name, spec] : specs) {
          Array k = random::fold_in(k0, nn::name_hash(name));
          Array v;
          if (spec.init == nn::Init::kOnes) {
            v = 1.0 + random::normal(k, spec.shape) * 0.1;  // not exactly one: tests see the norm
          } else {
            v = random::normal(k, spec.shape) * spec.scale;
          }
          p[name] = with_sharding_constraint(v, shardings.at(name));
        }
        return stacked ? stack_layers(p, c) : p;
      },
      o);
  return f(device_put(key, NamedSharding(mesh, P())));
}

ShapeDtypeStruct cache_layer_spec(const Config& c, int64_t batch, int64_t length, const Mesh& mesh,
                                  const nn::LogicalRules& rules) {
  return ShapeDtypeStruct{
      {batch, c.num_kv_heads, length, c.head_dim},
      DType::F32,
      nn::logical_sharding({"batch", "heads", "length", "head_dim"}, rules, mesh)};
}

ShapeDtypeStruct cache_spec(const Config& c, int64_t batch, int64_t length, const Mesh& mesh,
                            const nn::LogicalRules& rules) {
  return ShapeDtypeStruct{
      {c.num_layers, batch, c.num_kv_heads, length, c.head_dim},
      DType::F32,
      nn::logical_sharding({"layers", "batch", "heads", "length", "head_dim"}, rules, mesh)};
}

KVCache make_cache(const Config& c, int64_t batch, int64_t length, const Mesh& mesh,
                   const nn::LogicalRules& rules, bool stacked) {
  const ShapeDtypeStruct spec = stacked ? cache_spec(c, batch, length, mesh, rules)
                                        : cache_layer_spec(c, batch, length, mesh, rules);
  auto zero = jit([&] {
    KVCache kv;
    for (int64_t i = 0; i < (stacked ? 1 : c.num_layers); ++i) {
      kv.k.push_back(with_sharding_constraint(broadcast_to(zeros({}), spec.shape), *spec.sharding));
      kv.v.push_back(with_sharding_constraint(broadcast_to(zeros({}), spec.shape), *spec.sharding));
    }
    return kv;
  });
  return zero();
}

namespace {

// Inverse frequencies of the rotary embedding, with Llama-3 scaling when configured.
std::vector<float> inverse_frequencies(const Config& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> out;
  for (int64_t i = 0; i < half; ++i) {
    double f =
        1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.head_dim));
    if (c.rope_scaling) {
      const RopeScaling& s = *c.rope_scaling;
      const double old = static_cast<double>(s.original_max_position);
      const double low_wavelen = old / s.low_freq_factor, high_wavelen = old / s.high_freq_factor;
      const double wavelen = 2 * M_PI / f;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_wavelen) {
        double smooth =
            (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

// The rotate-half form of Hugging Face Llama's rotary embedding, as x cos + swap(x) sin with
// swap(x) = [x2, x1] and the tables widened to D once per step: cos [c, c], sin [-s, s], times
// an optional scale, shaped [B, T, 1 per head dim..., D] for x of rank `rank`.
struct Rotary {
  Array cos, sin;
};
Rotary rotary_tables(const Array& angles, double scale, int rank) {
  Array c = cos(angles), s = sin(angles);
  Rotary r{concatenate({c, c}, 2), concatenate({-s, s}, 2)};
  if (scale != 1.0) r = {r.cos * scale, r.sin * scale};
  const Shape& a = r.cos.shape();
  Shape to{a[0], a[1]};
  for (int d = 2; d < rank - 1; ++d) to.push_back(1);
  to.push_back(a[2]);
  return {reshape(r.cos, to), reshape(r.sin, to)};
}
// x [B, T, heads..., D], tables from rotary_tables for x's rank.
Array rope(const Array& x, const Rotary& r) {
  const int last = x.ndim() - 1;
  const int64_t D = x.shape()[static_cast<size_t>(last)];
  Array swapped = concatenate({slice_axis(x, last, D / 2, D), slice_axis(x, last, 0, D / 2)}, last);
  return x * r.cos + swapped * r.sin;
}

}  // namespace

namespace {

// One decoder layer on x [B, T, C]: `w(suffix)` is the layer's weight, `write_kv(k, v)` stores
// the new keys and values ([B, KV, T, D]) in the cache and returns the layer's whole cache
// ([B, KV, S, D] each) for attention to read.
Array decoder_layer(const Config& c, const Array& x,
                    const std::function<const Array&(const std::string&)>& w,
                    const std::function<std::pair<Array, Array>(const Array&, const Array&)>& write_kv,
                    const Rotary& rot_q, const Rotary& rot_k, const Array& bias) {
  Array h = rms_norm(x, w("input_layernorm.weight"), c.rms_norm_eps);
  // Grouped-query attention: KV key/value heads, each read by its G query heads.
  Array q = rope(einsum("btc,kgdc->btkgd", {h, w("self_attn.q_proj.weight")}), rot_q);
  Array k = rope(einsum("btc,kdc->btkd", {h, w("self_attn.k_proj.weight")}), rot_k);
  Array v = einsum("btc,kdc->btkd", {h, w("self_attn.v_proj.weight")});
  auto [ck, cv] = write_kv(transpose(k, {0, 2, 1, 3}), transpose(v, {0, 2, 1, 3}));
  // [B, KV, T, G, S]: the order dot_general produces, so no transpose follows.
  Array scores = einsum("btkgd,bksd->bktgs", {q, ck}) + bias;
  Array probs = softmax(scores, -1);
  Array o = einsum("bktgs,bksd->btkgd", {probs, cv});
  Array y = x + einsum("btkgd,ckgd->btc", {o, w("self_attn.o_proj.weight")});
  Array h2 = rms_norm(y, w("post_attention_layernorm.weight"), c.rms_norm_eps);
  Array g = einsum("btc,fc->btf", {h2, w("mlp.gate_proj.weight")});
  Array u = einsum("btc,fc->btf", {h2, w("mlp.up_proj.weight")});
  return y + einsum("btf,cf->btc", {silu(g) * u, w("mlp.down_proj.weight")});
}

}  // namespace

StepResult forward(const Params& p, const Config& c, const Array& tokens, const Array& pos,
                   const Array& start, const KVCache& cache, const ForwardProbe& probe,
                   bool last_only) {
  validate_config(c);
  if (!(tokens.ndim() == 2 && is_integral(tokens.dtype()))) {
    detail::fail("llama.forward", "tokens must be an integer [B, T] array, got {}",
                 shape_to_string(tokens.shape()));
  }
  const int64_t B = tokens.shape()[0], T = tokens.shape()[1];
  const int64_t D = c.head_dim;
  const bool stacked = is_stacked(p);
  detail::check(cache.stacked() == stacked, "llama.forward",
                "the parameters are {} but the cache is {}: make_cache(..., stacked={})",
                stacked ? "stacked over layers" : "per layer",
                cache.stacked() ? "stacked" : "per layer", stacked ? "true" : "false");
  const int64_t S = cache.k.empty() ? 0 : cache.k[0].shape()[stacked ? 3 : 2];
  if (stacked) {
    if (!(cache.v.size() == 1 && cache.k[0].shape()[0] == c.num_layers && S >= T)) {
      detail::fail("llama.forward", "the stacked cache needs {} layers of length >= {}, got {}",
                   c.num_layers, T, shape_to_string(cache.k[0].shape()));
    }
  } else {
    detail::check(static_cast<int64_t>(cache.k.size()) == c.num_layers &&
                      cache.v.size() == cache.k.size() && S >= T,
                  "llama.forward", "the cache needs {} layers of length >= {}", c.num_layers, T);
  }
  // Positions: absolute (cache slots) and relative to each row's start (RoPE).
  Array steps = iota({B, T}, 1, DType::I32) + astype(pos, DType::I32);  // [B, T]
  Array rel = steps - expand_dims(astype(start, DType::I32), 1);        // [B, T]
  std::vector<float> inv = inverse_frequencies(c);
  Array inv_freq = from_vector(inv, {static_cast<int64_t>(inv.size())});
  Array angles = expand_dims(astype(rel, DType::F32), 2) * inv_freq;  // [B, T, D/2]
  // The queries' tables carry the attention scale 1/sqrt(D), so the scores need no scaling.
  const Rotary rot_k = rotary_tables(angles, 1.0, 4);  // k [B, T, KV, D]
  const Rotary rot_q = rotary_tables(angles, 1.0 / std::sqrt(static_cast<double>(D)), 5);
  // Key slot s is visible to query t of row b when start[b] <= s <= pos + t: an additive bias
  // [B, 1, T, 1, S] over the scores [B, KV, T, G, S].
  Array slot = iota({B, T, S}, 2, DType::I32);
  Array visible = logical_and(slot <= expand_dims(steps, 2),
                              slot >= expand_dims(expand_dims(astype(start, DType::I32), 1), 2));
  Array bias = reshape(where(visible, zeros({}), -1e30), {B, 1, T, 1, S});
  Array zero = astype(zeros({}), DType::I32);
  Array x = take(p.at("model.embed_tokens.weight"), tokens, 0);  // [B, T, C]
  if (x.dtype() != DType::F32) x = astype(x, DType::F32);  // a quantized or 16-bit table
  if (probe) probe("model.embed_tokens", x);
  KVCache out;
  if (stacked) {
    // One traced layer scanned over the stacked weights; the stacked cache is carried, each
    // layer's keys and values written in place and its block read as a view.
    const int64_t KVh = c.num_kv_heads;
    Params layers;
    for (const std::string& suffix : layer_parameters()) {
      layers.emplace(suffix, p.at(std::string(kStackedPrefix) + suffix));
    }
    using Carry = std::tuple<Array, Array, Array>;
    auto [carry, ys] = scan(
        [&](const Carry& in, const std::pair<Params, Array>& layer_in) {
          NamedScope scope("layers");
          // Named references, not a structured binding: clang before 16 cannot capture those.
          const Array& h = std::get<0>(in);
          const Array& K = std::get<1>(in);
          const Array& V = std::get<2>(in);
          const Params& lp = layer_in.first;
          const Array& i = layer_in.second;
          Array K2, V2;
          auto write_kv = [&](const Array& k, const Array& v) {
            K2 = dynamic_update_slice(K, expand_dims(k, 0), {i, zero, zero, pos, zero});
            V2 = dynamic_update_slice(V, expand_dims(v, 0), {i, zero, zero, pos, zero});
            const Shape one{1, B, KVh, S, D}, block{B, KVh, S, D};
            return std::pair{reshape(dynamic_slice(K2, {i, zero, zero, zero, zero}, one), block),
                             reshape(dynamic_slice(V2, {i, zero, zero, zero, zero}, one), block)};
          };
          Array y = decoder_layer(
              c, h, [&](const std::string& n) -> const Array& { return lp.at(n); }, write_kv,
              rot_q, rot_k, bias);
          std::vector<Array> seen;
          if (probe) seen.push_back(y);  // each layer's output, reported after the scan
          return std::pair{Carry{y, K2, V2}, seen};
        },
        Carry{x, cache.k[0], cache.v[0]}, std::pair{layers, arange(c.num_layers, DType::I32)});
    x = std::get<0>(carry);
    out.k.push_back(std::get<1>(carry));
    out.v.push_back(std::get<2>(carry));
    if (probe) {
      for (int64_t i = 0; i < c.num_layers; ++i) {
        probe("model.layers." + std::to_string(i), squeeze(slice_axis(ys[0], 0, i, i + 1), {0}));
      }
    }
  } else {
    for (int64_t i = 0; i < c.num_layers; ++i) {
      NamedScope scope("layer" + std::to_string(i));
      const std::string l = layer_prefix(i);
      const auto li = static_cast<size_t>(i);
      auto write_kv = [&](const Array& k, const Array& v) {
        Array ck = dynamic_update_slice(cache.k[li], k, {zero, zero, pos, zero});
        Array cv = dynamic_update_slice(cache.v[li], v, {zero, zero, pos, zero});
        out.k.push_back(ck);
        out.v.push_back(cv);
        return std::pair{ck, cv};
      };
      x = decoder_layer(
          c, x, [&](const std::string& n) -> const Array& { return p.at(l + n); }, write_kv,
          rot_q, rot_k, bias);
      if (probe) probe("model.layers." + std::to_string(i), x);
    }
  }
  if (last_only) x = slice_axis(x, 1, T - 1, T);  // [B, 1, C]
  x = rms_norm(x, p.at("model.norm.weight"), c.rms_norm_eps);
  if (probe) probe("model.norm", x);
  // A tied model may still carry its own lm_head (a vocab-split copy of a replicated
  // quantized embedding).
  const Array& head = !c.tie_word_embeddings || p.count("lm_head.weight")
                          ? p.at("lm_head.weight")
                          : p.at("model.embed_tokens.weight");
  Array logits = einsum("btc,vc->btv", {x, head});
  if (probe) probe("lm_head", logits);
  return {logits, out};
}

Array sample(const Array& logits, const Sampling& s, const Array& key) {
  if (logits.ndim() != 2) {
    detail::fail("llama.sample", "logits must be [B, V], got {}", shape_to_string(logits.shape()));
  }
  if (s.temperature <= 0.0) return argmax(logits, -1);
  // Scaled from the best logit down: the best token is 0 whatever the temperature, the others
  // at most 0, so a tiny temperature overflows only to -inf (never probability) and sampling
  // tends to greedy, instead of inf - inf = NaN. The factor is clamped to a finite f32.
  const double inv_t =
      std::min(1.0 / s.temperature, static_cast<double>(std::numeric_limits<float>::max()));
  Array f = astype(logits, DType::F32);
  Array l = (f - max(f, {1}, true)) * inv_t;
  const int64_t V = l.shape()[1];
  // Dropped tokens get -inf: any finite sentinel could exceed kept logits scaled by 1 / T.
  const double dropped = -std::numeric_limits<double>::infinity();
  if (s.top_k > 0 && s.top_k < V) {
    Array kth = slice_axis(top_k(l, s.top_k).first, 1, s.top_k - 1, s.top_k);  // [B, 1]
    l = where(l >= kth, l, dropped);
  }
  if (s.top_p < 1.0) {
    // Keep the smallest set of most likely tokens whose probability reaches top_p.
    Array sorted = top_k(l, V).first;  // descending
    Array probs = softmax(sorted, -1);
    Array before = cumsum(probs, 1) - probs;  // mass of better tokens
    Array keep_count = sum(astype(before < s.top_p, DType::I32), {1}, true);  // >= 1
    Array threshold = take_along_axis(sorted, keep_count - 1.0, 1);           // [B, 1]
    l = where(l >= threshold, l, dropped);
  }
  return random::categorical(key, l, -1);
}

}  // namespace partix::models::llama

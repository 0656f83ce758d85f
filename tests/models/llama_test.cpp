// The Llama model on a small random configuration: prefill equals token-by-token decoding,
// sharding does not change results, left-padded batches equal single prompts, sampling.
#include <algorithm>
#include <cmath>

#include "partix/models/llama.h"
#include "test_util.h"

using namespace partix;
namespace L = partix::models::llama;

namespace {

L::Model tiny_model(const Mesh& mesh, const nn::LogicalRules& rules, bool stacked = true) {
  L::Model m;
  m.config = L::tiny();
  m.params = L::init(m.config, random::key(7), mesh, rules, stacked);
  return m;
}

}  // namespace

TEST(Llama, ShardingRulesAreLogicalAxisRules) {
  // The same rule system as GPT-2's: logical axes per parameter, rules to mesh axes.
  auto rules = L::sharding_rules();
  Mesh mesh({8}, {"model"});
  const L::Config c = L::tiny();
  auto shardings = L::param_shardings(c, rules, mesh, /*stacked=*/false);
  EXPECT_EQ(shardings.at("model.layers.0.self_attn.q_proj.weight").spec(), P("model"));
  EXPECT_EQ(shardings.at("model.layers.1.self_attn.k_proj.weight").spec(), P("model"));
  EXPECT_EQ(shardings.at("model.layers.0.self_attn.o_proj.weight").spec(), P(None, "model"));
  EXPECT_EQ(shardings.at("model.layers.0.mlp.gate_proj.weight").spec(), P("model"));
  EXPECT_EQ(shardings.at("model.layers.0.mlp.down_proj.weight").spec(), P(None, "model"));
  EXPECT_EQ(shardings.at("model.embed_tokens.weight").spec(), P("model"));
  EXPECT_EQ(shardings.at("model.norm.weight").spec(), P());
  EXPECT_EQ(shardings.size(), L::param_shapes(c, false).size());
  // Stacked (the default): the same splits behind an unsplit layer dimension.
  auto stacked = L::param_shardings(c, rules, mesh);
  EXPECT_EQ(stacked.size(), 9u + 2u);
  EXPECT_EQ(stacked.at("model.layers.self_attn.q_proj.weight").spec(), P(None, "model"));
  EXPECT_EQ(stacked.at("model.layers.self_attn.o_proj.weight").spec(), P(None, None, "model"));
  EXPECT_EQ(stacked.at("model.layers.input_layernorm.weight").spec(), P());
  EXPECT_EQ(L::param_shapes(c).at("model.layers.mlp.down_proj.weight"),
            (Shape{c.num_layers, c.hidden_size, c.intermediate_size}));
  // Printable: the rules and the per-parameter table.
  EXPECT_NE(nn::to_string(rules).find("heads"), std::string::npos);
  EXPECT_NE(nn::to_string(rules).find("'model'"), std::string::npos);
  std::string table = L::describe(c, rules, mesh, false);
  EXPECT_NE(table.find("model.layers.0.self_attn.o_proj.weight"), std::string::npos);
  EXPECT_NE(table.find("embed, heads, head_group, head_dim"), std::string::npos);
  EXPECT_NE(L::describe(c, rules, mesh).find("layers, embed, heads, head_group, head_dim"),
            std::string::npos);
  // Another axis name, and a mesh without it: everything replicated.
  auto tp = L::param_shardings(c, L::sharding_rules("tp"), Mesh({2, 4}, {"data", "tp"}), false);
  EXPECT_EQ(tp.at("model.layers.0.mlp.up_proj.weight").spec(), P("tp"));
  auto none = L::param_shardings(c, rules, Mesh({8}, {"data"}));
  for (const auto& [name, s] : none) EXPECT_EQ(s.spec(), P()) << name;
}

TEST(Llama, InitIsTheSameOnEveryMeshAndNeverWholeOnADevice) {
  const L::Config c = L::tiny();
  auto rules = L::sharding_rules();
  Params one = L::init(c, random::key(3), Mesh({1}, {"model"}), rules, false);
  Mesh mesh({8}, {"model"});
  Params eight = L::init(c, random::key(3), mesh, rules, false);
  auto want = L::param_shardings(c, rules, mesh, false);
  for (const auto& [name, a] : eight) {
    EXPECT_EQ(a.sharding(), want.at(name)) << name;
    EXPECT_EQ(a.to_vector<float>(), one.at(name).to_vector<float>()) << name;
  }
  // Stacked: the per-layer values, layer i at row i, in the stacked shardings.
  Params stacked = L::init(c, random::key(3), mesh, rules);
  EXPECT_TRUE(L::is_stacked(stacked));
  EXPECT_FALSE(L::is_stacked(one));
  auto want_stacked = L::param_shardings(c, rules, mesh);
  ASSERT_EQ(stacked.size(), want_stacked.size());
  Params unstacked = L::unstack_layers(stacked, c);
  ASSERT_EQ(unstacked.size(), one.size());
  for (const auto& [name, a] : stacked) EXPECT_EQ(a.sharding(), want_stacked.at(name)) << name;
  for (const auto& [name, a] : one) {
    EXPECT_EQ(unstacked.at(name).to_vector<float>(), a.to_vector<float>()) << name;
  }
  EXPECT_EQ(L::stack_layers(one, c).at("model.layers.mlp.up_proj.weight").to_vector<float>(),
            stacked.at("model.layers.mlp.up_proj.weight").to_vector<float>());
  Params missing = one;
  missing.erase("model.layers.1.mlp.up_proj.weight");
  EXPECT_PARTIX_ERROR(L::stack_layers(missing, c),
                      "[llama.stack_layers] the parameters lack 'model.layers.1.mlp.up_proj.weight'");
  // Key/value heads are stored once, each with its group of G = 3 query heads.
  EXPECT_EQ(one.at("model.layers.0.self_attn.k_proj.weight").shape(),
            (Shape{c.num_kv_heads, c.head_dim, c.hidden_size}));
  EXPECT_EQ(one.at("model.layers.0.self_attn.q_proj.weight").shape(),
            (Shape{c.num_kv_heads, 3, c.head_dim, c.hidden_size}));
  EXPECT_THROW(L::init(c, zeros({3}), mesh, rules), Error);
}

TEST(Llama, PrefillEqualsDecodingAndShardingChangesNothing) {
  auto rules = L::sharding_rules();
  std::vector<int32_t> prompt{5, 17, 42, 8, 90, 3};
  std::vector<std::vector<float>> last;
  for (int n : {1, 2, 8})
  for (bool stacked : {true, false}) {
    SCOPED_TRACE(std::to_string(n) + (stacked ? " stacked" : " per layer"));
    Mesh mesh({n}, {"model"});
    L::Model m = tiny_model(mesh, rules, stacked);
    NamedSharding rep(mesh, P());
    auto step = jit([&](const Params& p, const Array& t, const Array& pos, const L::KVCache& kv) {
      auto r = L::forward(p, m.config, t, pos, zeros({1}, DType::I32), kv);
      return std::make_pair(r.logits, r.cache);
    });
    const int64_t T = static_cast<int64_t>(prompt.size());
    auto [all, c0] =
        step(m.params, device_put(from_vector(prompt, {1, T}), rep),
             device_put(scalar<int32_t>(0), rep),
             L::make_cache(m.config, 1, 16, mesh, rules, stacked));
    L::KVCache cache = L::make_cache(m.config, 1, 16, mesh, rules, stacked);
    for (int64_t t = 0; t < T; ++t) {
      auto [lg, c] = step(
          m.params, device_put(from_vector<int32_t>({prompt[static_cast<size_t>(t)]}, {1, 1}), rep),
          device_put(scalar<int32_t>(static_cast<int32_t>(t)), rep), cache);
      cache = c;
      auto want = slice_axis(all, 1, t, t + 1).to_vector<float>();
      auto got = lg.to_vector<float>();
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-4) << "position " << t;
    }
    last.push_back(slice_axis(all, 1, T - 1, T).to_vector<float>());
  }
  for (size_t k = 1; k < last.size(); ++k) {
    for (size_t i = 0; i < last[0].size(); ++i) ASSERT_NEAR(last[k][i], last[0][i], 1e-4);
  }
}

TEST(Llama, LeftPaddedBatchesMatchSinglePrompts) {
  Mesh mesh({4}, {"model"});
  auto rules = L::sharding_rules();
  L::Model m = tiny_model(mesh, rules);
  L::Generator gen(m, mesh, rules);
  L::GenerateOptions o;
  o.max_tokens = 8;
  o.stop_at_eos = false;
  std::vector<int32_t> a{5, 17, 42, 8, 90, 3}, b{11, 12};
  auto both = gen.generate({a, b}, o);
  auto only_a = gen.generate({a}, o);
  auto only_b = gen.generate({b}, o);
  EXPECT_EQ(both.tokens[0], only_a.tokens[0]);
  EXPECT_EQ(both.tokens[1], only_b.tokens[0]);
  EXPECT_EQ(both.prefill_tokens, 12);
  EXPECT_EQ(both.decode_tokens, 14);
}

TEST(Llama, DecodeLoopInOneProgramMatchesStreaming) {
  Mesh mesh({4}, {"model"});
  auto rules = L::sharding_rules();
  L::Model m = tiny_model(mesh, rules);
  L::Generator gen(m, mesh, rules);
  std::vector<int32_t> a{5, 17, 42, 8, 90, 3}, b{11, 12};
  for (bool greedy : {true, false}) {
    L::GenerateOptions o;
    o.max_tokens = 6;
    o.seed = 3;
    o.stop_at_eos = false;
    if (!greedy) o.sampling = {0.8, 0, 0.9};
    auto streamed = gen.generate({a, b}, o);
    o.decode_loop = true;
    int calls = 0;
    auto looped = gen.generate({a, b}, o, [&](int64_t, const std::vector<int32_t>&) { calls++; });
    EXPECT_EQ(looped.tokens, streamed.tokens) << (greedy ? "greedy" : "sampled");
    EXPECT_EQ(looped.tokens[0].size(), 6u);
    EXPECT_GE(calls, 1);
  }
}

TEST(Llama, SamplingRespectsTemperatureTopKAndTopP) {
  // logits for 4 tokens: probabilities 0.1, 0.2, 0.3, 0.4 at temperature 1.
  const int64_t rows = 4000;
  std::vector<float> l;
  for (int64_t r = 0; r < rows; ++r) {
    for (float p : {0.1f, 0.2f, 0.3f, 0.4f}) l.push_back(std::log(p));
  }
  Array logits = from_vector(l, {rows, 4});
  auto freq = [&](const L::Sampling& s) {
    auto ids = L::sample(logits, s, random::key(3)).to_vector<int32_t>();
    std::vector<double> f(4, 0);
    for (int32_t i : ids) f[static_cast<size_t>(i)] += 1.0 / rows;
    return f;
  };
  auto f = freq({0.0, 0, 1.0});  // greedy
  EXPECT_NEAR(f[3], 1.0, 1e-9);
  EXPECT_NEAR(f[0] + f[1] + f[2], 0.0, 1e-9);
  f = freq({1.0, 0, 1.0});
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[static_cast<size_t>(i)], 0.1 * (i + 1), 0.03);
  f = freq({1.0, 2, 1.0});  // top-2: 0.3 and 0.4 renormalised
  EXPECT_NEAR(f[0] + f[1], 0.0, 1e-9);
  EXPECT_NEAR(f[2], 3.0 / 7, 0.03);
  f = freq({1.0, 0, 0.5});  // top-p 0.5: 0.4 alone is short of it, 0.4 + 0.3 covers it
  EXPECT_NEAR(f[0] + f[1], 0.0, 1e-9);
  EXPECT_NEAR(f[3], 4.0 / 7, 0.03);
  f = freq({0.25, 0, 1.0});  // low temperature sharpens towards the best token
  EXPECT_GT(f[3], 0.6);
}

TEST(Llama, TinyTemperaturesSampleTheGreedyToken) {
  // logits / T overflowed f32 for tiny T (inf - inf = NaN in the softmax): no token, or any.
  // Rows of varied scale; the best token differs per row.
  const int64_t rows = 64, V = 50;
  std::vector<float> l;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t v = 0; v < V; ++v) {
      const float scale = r % 3 == 0 ? 1e4f : (r % 3 == 1 ? 1.0f : 1e-3f);
      l.push_back(scale * std::sin(static_cast<float>(r * 7 + v * 13)));
    }
  }
  Array logits = from_vector(l, {rows, V});
  const auto greedy = L::sample(logits, {0.0, 0, 1.0}, random::key(1)).to_vector<int32_t>();
  for (double t : {1e-300, 1e-40, 1e-38, 1e-30, 1e-12}) {
    for (const L::Sampling& s : {L::Sampling{t, 0, 1.0}, L::Sampling{t, 5, 1.0},
                                 L::Sampling{t, 0, 0.5}, L::Sampling{t, 3, 0.9}}) {
      EXPECT_EQ(L::sample(logits, s, random::key(2)).to_vector<int32_t>(), greedy)
          << "temperature " << t << " top_k " << s.top_k << " top_p " << s.top_p;
    }
  }
  // Through the generator, streamed and in one program: the greedy text.
  Mesh mesh({2}, {"model"});
  auto rules = L::sharding_rules();
  L::Model m = tiny_model(mesh, rules);
  L::Generator gen(m, mesh, rules);
  L::GenerateOptions o;
  o.max_tokens = 6;
  o.stop_at_eos = false;
  const auto expected = gen.generate({{5, 17, 42}, {8, 90}}, o).tokens;
  for (bool loop : {false, true}) {
    o.decode_loop = loop;
    o.sampling = {1e-300, 0, 0.9};
    EXPECT_EQ(gen.generate({{5, 17, 42}, {8, 90}}, o).tokens, expected) << "loop " << loop;
  }
}

TEST(Llama, CacheLayerSpecHoldsKeyValueHeads) {
  // Grouped-query attention: the cache has one entry per key/value head, not per query head.
  L::Config c = L::tiny();
  ASSERT_LT(c.num_kv_heads, c.num_heads);
  auto rules = L::sharding_rules();
  Mesh mesh({2}, {"model"});
  const ShapeDtypeStruct spec = L::cache_layer_spec(c, 3, 40, mesh, rules);
  EXPECT_EQ(spec.shape, (Shape{3, c.num_kv_heads, 40, c.head_dim}));
  ASSERT_TRUE(spec.sharding.has_value());
  EXPECT_EQ(spec.sharding->shard_shape(spec.shape), (Shape{3, c.num_kv_heads / 2, 40, c.head_dim}));
  const L::KVCache cache = L::make_cache(c, 3, 40, mesh, rules, /*stacked=*/false);
  ASSERT_EQ(cache.k.size(), static_cast<size_t>(c.num_layers));
  EXPECT_FALSE(cache.stacked());
  EXPECT_EQ(cache.k[0].shape(), spec.shape);
  EXPECT_EQ(cache.v[0].sharding(), *spec.sharding);
  // Stacked (the default): one array of every layer, split over heads the same way.
  const ShapeDtypeStruct all = L::cache_spec(c, 3, 40, mesh, rules);
  EXPECT_EQ(all.shape, (Shape{c.num_layers, 3, c.num_kv_heads, 40, c.head_dim}));
  EXPECT_EQ(all.sharding->shard_shape(all.shape),
            (Shape{c.num_layers, 3, c.num_kv_heads / 2, 40, c.head_dim}));
  const L::KVCache one = L::make_cache(c, 3, 40, mesh, rules);
  ASSERT_TRUE(one.stacked());
  ASSERT_EQ(one.v.size(), 1u);
  EXPECT_EQ(one.k[0].shape(), all.shape);
  EXPECT_EQ(one.k[0].sharding(), *all.sharding);
  // A cache of the other layout is refused by name.
  Params p = L::init(c, random::key(1), mesh, rules);
  Array tok = zeros({3, 1}, DType::I32), pos = scalar<int32_t>(0), st = zeros({3}, DType::I32);
  EXPECT_PARTIX_ERROR(L::forward(p, c, tok, pos, st, cache),
                      "[llama.forward] the parameters are stacked over layers but the cache is "
                      "per layer: make_cache(..., stacked=true)");
  EXPECT_PARTIX_ERROR(L::forward(L::unstack_layers(p, c), c, tok, pos, st, one),
                      "make_cache(..., stacked=false)");
  L::Config deeper = c;
  deeper.num_layers = 3;
  EXPECT_PARTIX_ERROR(L::forward(p, c, tok, pos, st, L::make_cache(deeper, 3, 40, mesh, rules)),
                      "[llama.forward] the stacked cache needs 2 layers of length >= 1, got [3,3,2,40,8]");
  EXPECT_PARTIX_ERROR(L::unstack_layers(p, deeper),
                      "[llama.unstack_layers] 'model.layers.input_layernorm.weight' has shape [2,48], "
                      "not 3 layers first");
}

TEST(Llama, NonFiniteLogitsAreAnErrorNamingTheStepAndOnRequestTheLayer) {
  auto rules = L::sharding_rules();
  Mesh mesh({2}, {"model"});
  L::Model m = tiny_model(mesh, rules);
  const std::vector<std::vector<int32_t>> prompts{{5, 17, 42}, {8, 90}};
  L::GenerateOptions o;
  o.max_tokens = 4;
  o.stop_at_eos = false;
  // Layer 1's MLP output weights turned to NaN: every logit after it is NaN, in both layouts
  // (stacked, the layer is found among the scan's outputs).
  const std::string w = "model.layers.1.mlp.down_proj.weight";
  for (bool stacked : {false, true}) {
    SCOPED_TRACE(stacked ? "stacked" : "per layer");
    L::Model broken = m;
    broken.params = L::unstack_layers(m.params, m.config);
    broken.params[w] = broken.params.at(w) * std::nan("");
    if (stacked) broken.params = L::stack_layers(broken.params, m.config);
    o.debug_nans = false;
    L::Generator gen(broken, mesh, rules);
    EXPECT_PARTIX_ERROR(gen.generate(prompts, o), "[generate] step 0 (prefill)",
                        "96 of the 96 logits of prompt 0 are NaN or infinite", "--debug-nans");
    o.debug_nans = true;
    EXPECT_PARTIX_ERROR(gen.generate(prompts, o),
                        "they first appear in the output of model.layers.1");
  }
  // Infinity in the final norm: found there, not earlier.
  L::Model broken = m;
  broken.params["model.norm.weight"] = m.params.at("model.norm.weight") * INFINITY;
  L::Generator gen(broken, mesh, rules);
  EXPECT_PARTIX_ERROR(gen.generate(prompts, o), "step 0 (prefill)",
                      "they first appear in the output of model.norm");
  // A healthy model generates with debug_nans on and off alike.
  L::Generator ok(m, mesh, rules);
  auto a = ok.generate(prompts, o);
  o.debug_nans = false;
  EXPECT_EQ(ok.generate(prompts, o).tokens, a.tokens);
}

TEST(Llama, StackedLayersRunAsAScanWithTheUnrolledModelsTokens) {
  // Stacked parameters and cache (the default) scan one traced layer; per-layer ones unroll.
  // Both give the same tokens, greedy and sampled, streamed and in one program, on a mesh that
  // pads the 2 key/value heads over 8 devices.
  Mesh mesh({8}, {"model"});
  auto rules = L::sharding_rules();
  L::Model stacked = tiny_model(mesh, rules, true), unrolled = tiny_model(mesh, rules, false);
  L::Generator gs(stacked, mesh, rules), gu(unrolled, mesh, rules);
  const std::vector<std::vector<int32_t>> prompts{{5, 17, 42, 8, 90, 3}, {11, 12}};
  for (bool greedy : {true, false}) {
    for (bool loop : {false, true}) {
      L::GenerateOptions o;
      o.max_tokens = 7;
      o.seed = 5;
      o.stop_at_eos = false;
      o.decode_loop = loop;
      if (!greedy) o.sampling = {0.9, 0, 0.95};
      EXPECT_EQ(gs.generate(prompts, o).tokens, gu.generate(prompts, o).tokens)
          << (greedy ? "greedy" : "sampled") << (loop ? ", one program" : ", streamed");
    }
  }
  // The logits agree to rounding.
  NamedSharding rep(mesh, P());
  Array tokens = device_put(from_vector<int32_t>({5, 17, 42, 8}, {1, 4}), rep);
  auto run = [&](const L::Model& m, bool s) {
    return L::forward(m.params, m.config, tokens, device_put(scalar<int32_t>(0), rep),
                      device_put(zeros({1}, DType::I32), rep),
                      L::make_cache(m.config, 1, 16, mesh, rules, s))
        .logits.to_vector<float>();
  };
  const std::vector<float> a = run(stacked, true), b = run(unrolled, false);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << i;
  // The decode program does not grow with depth when stacked; unrolled, it does.
  auto program_lines = [&](int64_t layers, bool s) {
    L::Model m;
    m.config = L::tiny();
    m.config.num_layers = layers;
    for (const auto& [name, spec] : L::param_specs(m.config, s)) {
      m.params[name] = ShapeDtypeStruct{spec.shape, spec.dtype,
                                        L::param_shardings(m.config, rules, mesh, s).at(name)};
    }
    const std::string text = L::Generator(m, mesh, rules).lower_decode(1, 32).as_text();
    return std::count(text.begin(), text.end(), '\n');
  };
  EXPECT_EQ(program_lines(2, true), program_lines(12, true));
  EXPECT_GT(program_lines(12, false), program_lines(2, false) + 100);
}

TEST(Llama, StackedGradientsEqualTheUnrolledModels) {
  // The scan's backward pass through the carried cache (updated in place, read as views)
  // against the unrolled layers', on 8 devices with padded key/value heads.
  Mesh mesh({8}, {"model"});
  auto rules = L::sharding_rules();
  const L::Config c = L::tiny();
  NamedSharding rep(mesh, P());
  Array tokens = device_put(from_vector<int32_t>({5, 17, 42, 8, 90, 3, 11, 12}, {2, 4}), rep);
  Array weights = device_put(random::normal(random::key(9), {2, 4, c.vocab_size}), rep);
  auto gradients = [&](bool stacked) {
    Params p = L::init(c, random::key(7), mesh, rules, stacked);
    auto loss = [&](const Params& q) {
      L::StepResult r = L::forward(q, c, tokens, scalar<int32_t>(2), zeros({2}, DType::I32),
                                   L::make_cache(c, 2, 16, mesh, rules, stacked));
      Array total = sum(r.logits * weights);
      for (const Array& k : r.cache.k) total = total + sum(k) * 0.5;  // every layer's keys
      return total;
    };
    return L::unstack_layers(jit(grad(loss))(p), c);
  };
  const Params a = gradients(true), b = gradients(false);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, g] : b) {
    const std::vector<float> x = a.at(name).to_vector<float>(), y = g.to_vector<float>();
    double scale = 1e-6;
    for (float v : y) scale = std::max(scale, std::abs(static_cast<double>(v)));
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(x[i], y[i], 1e-4 * scale) << name << " [" << i << "]";
    }
  }
}

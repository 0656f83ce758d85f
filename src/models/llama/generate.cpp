#include "partix/models/llama.h"

#include <chrono>

#include "core/errors.h"
#include "partix/control.h"
#include "partix/ops.h"
#include "partix/random.h"

namespace partix::models::llama {

// (next tokens [B], cache, non-finite logits per prompt [B]).
using StepFn = std::function<std::tuple<Array, KVCache, Array>(
    const Params&, const Array&, const Array&, const Array&, const KVCache&, const Array&)>;

struct Generator::Fns {
  Sampling sampling;
  bool donate;
  Jitted<StepFn> step;
};

namespace {

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Per row of x [B, ...], how many elements are NaN or infinite (|x| <= max fails for both).
Array count_non_finite(const Array& x) {
  std::vector<int> axes;
  for (int d = 1; d < x.ndim(); ++d) axes.push_back(d);
  Array bad = astype(logical_not(abs(astype(x, DType::F32)) <= 3.4028234663852886e38), DType::I32);
  return sum(bad, axes);
}

// Replays one step op by op and names the first stage whose output is not finite.
std::string first_non_finite_stage(const Params& p, const Config& c, const Array& tokens,
                                   const Array& pos, const Array& start, const KVCache& cache) {
  std::string first;
  forward(p, c, tokens, pos, start, cache, [&](const std::string& stage, const Array& x) {
    if (!first.empty()) return;
    for (int32_t n : count_non_finite(x).to_vector<int32_t>()) {
      if (n > 0) first = stage;
    }
  });
  return first;
}

}  // namespace

Generator::Generator(const Model& model, Mesh mesh, nn::LogicalRules rules)
    : model_(model), mesh_(std::move(mesh)), rules_(std::move(rules)) {}

Generator::~Generator() = default;

Generator::Fns& Generator::fns(const Sampling& s, bool donate) {
  for (auto& f : cache_) {
    if (f->sampling.temperature == s.temperature && f->sampling.top_k == s.top_k &&
        f->sampling.top_p == s.top_p && f->donate == donate) {
      return *f;
    }
  }
  const Config cfg = model_.config;
  // One program serves prefill (T = prompt length) and decode (T = 1): tokens at pos, then
  // the next token sampled from the last position's logits.
  const NamedSharding replicated(mesh_, P());
  StepFn f = [cfg, s, replicated](const Params& p, const Array& tokens, const Array& pos,
                                  const Array& start, const KVCache& cache, const Array& key) {
    StepResult r = forward(p, cfg, tokens, pos, start, cache, {}, /*last_only=*/true);
    Array last = reshape(r.logits, {tokens.shape()[0], cfg.vocab_size});
    // Counted where the vocabulary is split, each device over its own block, then summed (one
    // all-reduce of B integers): after the gather every device would count all V logits.
    Array bad = count_non_finite(last);
    // Sampling needs every logit on every device.
    last = with_sharding_constraint(last, replicated);
    // The sampling key of the step at `pos`, folded in the program (an eager fold per step
    // would cost a dispatch of its own).
    Array step_key = random::fold_in(key, astype(pos, DType::I64));
    return std::make_tuple(sample(last, s, step_key), r.cache, bad);
  };
  JitOptions jo{.name = "llama_step"};
  if (donate) jo.donate_argnums = {4};
  cache_.push_back(std::make_unique<Fns>(Fns{s, donate, jit(f, jo)}));
  return *cache_.back();
}

Generated Generator::generate(
    const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o,
    const std::function<void(int64_t, const std::vector<int32_t>&)>& on_token) {
  detail::check(!prompts.empty(), "generate", "needs at least one prompt");
  detail::check(o.max_tokens >= 1, "generate", "max_tokens must be positive, got {}", o.max_tokens);
  const int64_t B = static_cast<int64_t>(prompts.size());
  int64_t Tp = 0;
  const int64_t V = model_.config.vocab_size;
  for (size_t b = 0; b < prompts.size(); ++b) {
    const auto& p = prompts[b];
    detail::check(!p.empty(), "generate", "a prompt is empty");
    Tp = std::max<int64_t>(Tp, static_cast<int64_t>(p.size()));
    // An id outside the vocabulary would read a clamped row of the embedding.
    for (size_t i = 0; i < p.size(); ++i) {
      detail::check(p[i] >= 0 && p[i] < V, "generate",
                    "token {} of prompt {} is {}, outside the vocabulary [0, {})", i, b, p[i], V);
    }
  }
  // Cache length rounded up so that nearby lengths share compiled programs.
  const int64_t S = (Tp + o.max_tokens + 15) / 16 * 16;
  detail::check(S <= model_.config.max_position, "generate",
                "prompt ({}) + max_tokens ({}) exceeds the model's {} positions", Tp, o.max_tokens,
                model_.config.max_position);
  std::vector<int32_t> flat, start;
  for (const auto& p : prompts) {
    int64_t pad = Tp - static_cast<int64_t>(p.size());
    start.push_back(static_cast<int32_t>(pad));
    for (int64_t i = 0; i < pad; ++i)
      flat.push_back(static_cast<int32_t>(model_.config.eos_token_id));
    flat.insert(flat.end(), p.begin(), p.end());
  }
  NamedSharding rep(mesh_, P());
  Array tokens = device_put(from_vector(flat, {B, Tp}), rep);
  Array starts = device_put(from_vector(start, {B}), rep);
  Array base_key = random::key(o.seed);
  KVCache cache = make_cache(model_.config, B, S, mesh_, rules_, is_stacked(model_.params));
  Fns& f = fns(o.sampling, !o.debug_nans);
  Generated out;
  out.tokens.assign(static_cast<size_t>(B), {});
  const Array key = device_put(base_key, rep);  // each step folds in its position
  auto pos_at = [&](int64_t p) {
    return device_put(scalar<int32_t>(static_cast<int32_t>(p)), rep);
  };
  // Compile first, so the timings are execution only.
  auto tc = std::chrono::steady_clock::now();
  f.step.lower(model_.params, tokens, pos_at(0), starts, cache, key);
  Array one = device_put(zeros({B, 1}, DType::I32), rep);
  f.step.lower(model_.params, one, pos_at(Tp), starts, cache, key);
  out.compile_seconds = since(tc);
  std::vector<bool> done(static_cast<size_t>(B), false);
  auto t0 = std::chrono::steady_clock::now();
  // Garbage logits would be sampled into garbage (or no) text: a step whose logits are not
  // finite is an error naming the step and the prompt.
  auto check_finite = [&](int64_t step, const Array& bad, const Array& step_tokens,
                          const Array& pos, const KVCache& before) {
    const std::vector<int32_t> counts = bad.to_vector<int32_t>();
    for (size_t b = 0; b < counts.size(); ++b) {
      if (counts[b] == 0) continue;
      std::string where =
          "; set GenerateOptions::debug_nans (partix generate --debug-nans) to find the layer "
          "where they first appear";
      if (o.debug_nans) {
        const std::string stage =
            first_non_finite_stage(model_.params, model_.config, step_tokens, pos, starts, before);
        where = stage.empty() ? "; replaying the step op by op gave finite values"
                              : fmt::format("; they first appear in the output of {}", stage);
      }
      detail::fail("generate",
                   "step {} ({}): {} of the {} logits of prompt {} are NaN or infinite{}", step,
                   step == 0 ? "prefill" : "decode", counts[b], model_.config.vocab_size, b, where);
    }
  };
  const Array pos0 = pos_at(0);
  auto [next, c1, bad1] = f.step(model_.params, tokens, pos0, starts, cache, key);
  check_finite(0, bad1, tokens, pos0, cache);
  cache = std::move(c1);
  std::vector<int32_t> ids = next.to_vector<int32_t>();
  out.prefill_seconds = since(t0);
  out.prefill_tokens = B * Tp;
  if (o.decode_loop)
    return decode_in_program(o, next, ids, Tp, starts, cache, base_key, on_token, out);
  auto t1 = std::chrono::steady_clock::now();
  for (int64_t step = 0;; ++step) {
    for (int64_t b = 0; b < B; ++b) {
      if (done[static_cast<size_t>(b)]) continue;
      out.tokens[static_cast<size_t>(b)].push_back(ids[static_cast<size_t>(b)]);
      if (o.stop_at_eos && ids[static_cast<size_t>(b)] == model_.config.eos_token_id)
        done[static_cast<size_t>(b)] = true;
    }
    if (on_token) on_token(step, ids);
    bool all_done = std::all_of(done.begin(), done.end(), [](bool d) { return d; });
    if (step + 1 >= o.max_tokens || all_done) break;
    Array cur = device_put(from_vector(ids, {B, 1}), rep);
    const Array pos = pos_at(Tp + step);
    auto [n2, c2, bad2] = f.step(model_.params, cur, pos, starts, cache, key);
    check_finite(step + 1, bad2, cur, pos, cache);
    cache = std::move(c2);
    ids = n2.to_vector<int32_t>();
    out.decode_tokens += B;
  }
  out.decode_seconds = since(t1);
  return out;
}

Generated& Generator::decode_in_program(
    const GenerateOptions& o, const Array& first, const std::vector<int32_t>& first_ids, int64_t Tp,
    const Array& starts, const KVCache& cache, const Array& base_key,
    const std::function<void(int64_t, const std::vector<int32_t>&)>& on_token, Generated& out) {
  const int64_t B = static_cast<int64_t>(first_ids.size()), N = o.max_tokens - 1;
  const Config cfg = model_.config;
  const Sampling s = o.sampling;
  const NamedSharding rep(mesh_, P());
  // tokens [B, N] and, per prompt, how many logits were not finite over the N steps.
  using LoopFn = std::function<std::tuple<Array, Array>(
      const Params&, const Array&, const Array&, const Array&, const KVCache&, const Array&)>;
  LoopFn loop = [cfg, s, rep, B, N](const Params& p, const Array& tok0, const Array& pos0,
                                    const Array& start, const KVCache& kv, const Array& key) {
    using Carry = std::tuple<Array, KVCache, Array, Array>;
    Carry init{tok0, kv, zeros({B, N}, DType::I32), zeros({B}, DType::I32)};
    Carry done = fori_loop(
        0, N,
        [&](const Array& i, const Carry& c) {
          const auto& [tok, cache_in, toks, bad] = c;
          StepResult r = forward(p, cfg, reshape(tok, {B, 1}), pos0 + i, start, cache_in);
          Array split = reshape(r.logits, {B, cfg.vocab_size});
          Array counted = bad + count_non_finite(split);  // over each device's block, as above
          Array last = with_sharding_constraint(split, rep);
          // The streaming loop's key: the base key folded with the step's position.
          Array next = sample(last, s, random::fold_in(key, astype(pos0 + i, DType::I64)));
          Array written = dynamic_update_slice_in_dim(toks, reshape(next, {B, 1}), i, 1);
          return Carry{next, r.cache, written, counted};
        },
        init);
    return std::make_tuple(std::get<2>(done), std::get<3>(done));
  };
  auto step = jit(loop, {.name = "llama_decode_loop"});
  std::vector<std::vector<int32_t>> steps{first_ids};
  if (N > 0) {
    const Array pos = device_put(scalar<int32_t>(static_cast<int32_t>(Tp)), rep);
    auto tc = std::chrono::steady_clock::now();
    step.lower(model_.params, first, pos, starts, cache, base_key);
    out.compile_seconds += since(tc);
    auto t1 = std::chrono::steady_clock::now();
    auto [toks, bad] = step(model_.params, first, pos, starts, cache, base_key);
    const std::vector<int32_t> flat = toks.to_vector<int32_t>(), counts = bad.to_vector<int32_t>();
    out.decode_seconds = since(t1);
    out.decode_tokens = B * N;
    for (size_t b = 0; b < counts.size(); ++b) {
      detail::check(counts[b] == 0, "generate",
                    "decode loop: {} logits of prompt {} were NaN or infinite over {} steps "
                    "(stream the steps, without decode_loop, to find the first)",
                    counts[b], b, N);
    }
    for (int64_t t = 0; t < N; ++t) {
      std::vector<int32_t> ids(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b)
        ids[static_cast<size_t>(b)] = flat[static_cast<size_t>(b * N + t)];
      steps.push_back(std::move(ids));
    }
  }
  // The tokens as the streaming loop reports them: each prompt's up to its end-of-sequence.
  std::vector<bool> stopped(static_cast<size_t>(B), false);
  for (size_t t = 0; t < steps.size(); ++t) {
    for (size_t b = 0; b < static_cast<size_t>(B); ++b) {
      if (stopped[b]) continue;
      out.tokens[b].push_back(steps[t][b]);
      if (o.stop_at_eos && steps[t][b] == cfg.eos_token_id) stopped[b] = true;
    }
    if (on_token) on_token(static_cast<int64_t>(t), steps[t]);
    if (std::all_of(stopped.begin(), stopped.end(), [](bool d) { return d; })) break;
  }
  return out;
}

Lowered Generator::lower_step(int64_t batch, int64_t tokens, int64_t cache_length,
                              const Sampling& s) {
  // Lowering needs shapes and shardings only: every argument but the parameters is abstract
  // (and the parameters may be), so this works on abstract meshes too.
  const NamedSharding rep(mesh_, P());
  const bool stacked = is_stacked(model_.params);
  const ShapeDtypeStruct kv =
      stacked ? cache_spec(model_.config, batch, cache_length, mesh_, rules_)
              : cache_layer_spec(model_.config, batch, cache_length, mesh_, rules_);
  KVCache cache;
  for (int64_t i = 0; i < (stacked ? 1 : model_.config.num_layers); ++i) {
    cache.k.emplace_back(kv);
    cache.v.emplace_back(kv);
  }
  return fns(s, true).step.lower(model_.params, ShapeDtypeStruct{{batch, tokens}, DType::I32, rep},
                                 ShapeDtypeStruct{{}, DType::I32, rep},
                                 ShapeDtypeStruct{{batch}, DType::I32, rep}, cache,
                                 ShapeDtypeStruct{{2}, DType::I32, rep});
}

Lowered Generator::lower_decode(int64_t batch, int64_t cache_length, const Sampling& s) {
  return lower_step(batch, 1, cache_length, s);
}

Lowered Generator::lower_prefill(int64_t batch, int64_t prompt_length, int64_t cache_length,
                                 const Sampling& s) {
  return lower_step(batch, prompt_length, cache_length, s);
}

}  // namespace partix::models::llama

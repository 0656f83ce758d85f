// The model library (partix.models): Llama loading and generation, GPT-2 parameters, loss and
// training, and the AdamW optimizer the training step uses. Long calls (loading, generation,
// training steps) run with the GIL released.
#include <partix/io.h>
#include <partix/models/gpt2.h>
#include <partix/models/llama.h>
#include <partix/optim.h>

#include "bind.h"

namespace partix::python {

namespace {

namespace L = models::llama;
namespace G = models::gpt2;

// A loaded Llama with its mesh, rules and (built on first use) generator; the generator keeps a
// reference to the model, so both live here at a stable address.
struct LlamaHandle {
  L::Model model;
  Mesh mesh;
  nn::LogicalRules rules;
  std::unique_ptr<L::Generator> gen;

  LlamaHandle(L::Model m, Mesh me, nn::LogicalRules r)
      : model(std::move(m)), mesh(std::move(me)), rules(std::move(r)) {}
  L::Generator& generator() {
    if (!gen) gen = std::make_unique<L::Generator>(model, mesh, rules);
    return *gen;
  }
  const Tokenizer& tokenizer() const {
    if (!model.tokenizer)
      throw Error("[llama] the checkpoint '" + model.source + "' has no tokenizer");
    return *model.tokenizer;
  }
};

nb::dict llama_config_dict(const L::Config& c) {
  nb::dict d;
  d["vocab_size"] = c.vocab_size;
  d["hidden_size"] = c.hidden_size;
  d["intermediate_size"] = c.intermediate_size;
  d["num_layers"] = c.num_layers;
  d["num_heads"] = c.num_heads;
  d["num_kv_heads"] = c.num_kv_heads;
  d["head_dim"] = c.head_dim;
  d["rms_norm_eps"] = c.rms_norm_eps;
  d["rope_theta"] = c.rope_theta;
  d["tie_word_embeddings"] = c.tie_word_embeddings;
  d["max_position"] = c.max_position;
  d["bos_token_id"] = c.bos_token_id;
  d["eos_token_id"] = c.eos_token_id;
  return d;
}

using AdamWTuple = std::tuple<Params, Params, Params, Array>;  // mu, nu, master, count

optim::AdamWState to_state(const AdamWTuple& t) {
  return {std::get<0>(t), std::get<1>(t), std::get<2>(t), std::get<3>(t)};
}
AdamWTuple from_state(const optim::AdamWState& s) { return {s.mu, s.nu, s.master, s.count}; }

void bind_llama(nb::module_& m) {
  // ---- Llama ----
  nb::class_<LlamaHandle>(m, "LlamaModel")
      .def_prop_ro("config", [](const LlamaHandle& h) { return llama_config_dict(h.model.config); })
      .def_prop_ro("params", [](const LlamaHandle& h) { return h.model.params; })
      .def_prop_ro("source", [](const LlamaHandle& h) { return h.model.source; })
      .def_prop_ro("mesh", [](const LlamaHandle& h) { return h.mesh; })
      .def("has_tokenizer", [](const LlamaHandle& h) { return h.model.tokenizer != nullptr; })
      .def("encode",
           [](const LlamaHandle& h, const std::string& text) { return h.tokenizer().encode(text); })
      .def("decode", [](const LlamaHandle& h, const std::vector<int32_t>& ids,
                        bool skip_special) { return h.tokenizer().decode(ids, skip_special); })
      .def("apply_chat_template",
           [](const LlamaHandle& h, const std::vector<std::pair<std::string, std::string>>& msgs,
              bool add_generation_prompt) {
             std::vector<ChatMessage> cm;
             for (const auto& [role, content] : msgs) cm.push_back({role, content});
             return h.tokenizer().apply_chat_template(cm, add_generation_prompt);
           })
      .def("generate", [](LlamaHandle& h, const std::vector<std::vector<int32_t>>& prompts,
                          int64_t max_tokens, double temperature, int64_t top_k, double top_p,
                          uint64_t seed, bool stop_at_eos, bool decode_loop) {
        L::GenerateOptions o;
        o.max_tokens = max_tokens;
        o.sampling = {temperature, top_k, top_p};
        o.seed = seed;
        o.stop_at_eos = stop_at_eos;
        o.decode_loop = decode_loop;
        nb::gil_scoped_release release;
        return h.generator().generate(prompts, o).tokens;
      });
  m.def(
      "llama_load",
      [](const std::string& path, const Mesh& mesh, const std::string& axis, bool quantized,
         const std::string& dtype, bool stacked) {
        nn::LogicalRules rules = L::sharding_rules(axis);
        L::LoadOptions o{quantized, to_dtype(dtype), stacked};
        L::Model model;
        {
          nb::gil_scoped_release release;
          model = L::load(path, mesh, rules, o);
        }
        return new LlamaHandle(std::move(model), mesh, std::move(rules));
      },
      nb::rv_policy::take_ownership);
  m.def("llama_default_model_path", &L::default_model_path);
}

void bind_gpt2(nb::module_& m) {
  // ---- GPT-2 ----
  nb::class_<G::Config>(m, "Gpt2Config")
      .def(nb::init<>())
      .def_rw("vocab_size", &G::Config::vocab_size)
      .def_rw("n_positions", &G::Config::n_positions)
      .def_rw("n_embd", &G::Config::n_embd)
      .def_rw("n_layer", &G::Config::n_layer)
      .def_rw("n_head", &G::Config::n_head)
      .def_rw("layer_norm_epsilon", &G::Config::layer_norm_epsilon)
      .def_rw("dropout", &G::Config::dropout)
      .def("validate", [](const G::Config& c) { G::validate_config(c, "gpt2.Config"); })
      .def("__repr__", [](const G::Config& c) {
        return "gpt2.Config(vocab_size=" + std::to_string(c.vocab_size) +
               ", n_positions=" + std::to_string(c.n_positions) +
               ", n_embd=" + std::to_string(c.n_embd) + ", n_layer=" + std::to_string(c.n_layer) +
               ", n_head=" + std::to_string(c.n_head) + ")";
      });
  m.def("gpt2_tiny", &G::tiny);
  m.def("gpt2_small", &G::small);
  m.def("gpt2_init", [](const G::Config& c, const Array& key, const Mesh& mesh, bool fsdp) {
    G::validate_config(c, "gpt2.init");
    nb::gil_scoped_release release;
    return G::init(c, key, mesh, G::sharding_rules(fsdp));
  });
  m.def("gpt2_param_shardings", [](const G::Config& c, const Mesh& mesh, bool fsdp) {
    return nn::param_shardings(G::param_specs(c), G::sharding_rules(fsdp), mesh);
  });
  // Traceable (callable inside jit and grad): the dropout key turns dropout on.
  m.def("gpt2_loss", [](const Params& p, const Array& ids, const Array& targets, const G::Config& c,
                        std::optional<Array> dropout_key) {
    G::ForwardOptions fo;
    fo.dropout_key = dropout_key;
    return G::loss(p, ids, targets, c, fo);
  });
  m.def("gpt2_forward", [](const Params& p, const Array& ids, const G::Config& c) {
    return G::forward(p, ids, c);
  });

  // The Trainer's step body run eagerly by C++ (value_and_grad, clipping, AdamW with the
  // Trainer's b1 0.9, b2 0.95): the reference a step written in Python is checked against.
  m.def("gpt2_reference_step", [](const Params& p, const AdamWTuple& s, const Array& ids,
                                  const Array& targets, const Array& lr, std::optional<Array> key,
                                  const G::Config& c, double clip, double weight_decay) {
    nb::gil_scoped_release release;
    G::ForwardOptions fo;
    fo.dropout_key = key;
    auto [loss_value, g] =
        value_and_grad([&](const Params& pp) { return G::loss(pp, ids, targets, c, fo); })(p);
    auto [clipped, norm] = optim::clip_by_global_norm(Params(g), clip);
    auto [np, ns] =
        optim::adamw_update(p, clipped, to_state(s), lr, {0.9, 0.95, 1e-8, weight_decay});
    return std::make_tuple(np, from_state(ns), loss_value);
  });
}

// The GPT-2 Trainer: the training loop partix train runs.
void bind_gpt2_trainer(nb::module_& m) {
  nb::class_<G::Trainer>(m, "Gpt2Trainer")
      .def("__init__",
           [](G::Trainer* t, const G::Config& c, int64_t data, int64_t model, bool fsdp,
              int64_t steps, int64_t batch, int64_t seq, double lr, int64_t warmup, double clip,
              double weight_decay, uint64_t seed, bool scan_layers,
              const std::vector<std::string>& corpus, int64_t stages, int64_t microbatches,
              const std::string& schedule, int64_t virtual_stages) {
             G::TrainOptions o;
             o.model = c;
             o.data = data;
             o.model_parallel = model;
             o.fsdp = fsdp;
             o.steps = steps;
             o.batch = batch;
             o.seq = seq;
             o.lr = lr;
             o.warmup = warmup;
             o.clip = clip;
             o.weight_decay = weight_decay;
             o.seed = seed;
             o.scan_layers = scan_layers;
             o.stages = stages;
             o.microbatches = microbatches;
             o.schedule = pipeline::parse_schedule(schedule);
             o.virtual_stages = virtual_stages;
             if (!corpus.empty()) o.corpus = corpus;
             nb::gil_scoped_release release;
             new (t) G::Trainer(std::move(o));
           })
      .def("step",
           [](G::Trainer& t) {
             nb::gil_scoped_release release;
             return t.step().loss;
           })
      .def("params",
           [](const G::Trainer& t) { return G::unstack_layers(t.params(), t.options().model); })
      .def_prop_ro("mesh", &G::Trainer::mesh)
      .def("step_count", &G::Trainer::step_count)
      .def("sharding_table", &G::Trainer::sharding_table)
      .def("lower_step", &G::Trainer::lower_step);
}

void bind_optimizers(nb::module_& m) {
  // ---- optimizers ----
  m.def("adamw_init", [](const Params& p) { return from_state(optim::adamw_init(p)); });
  m.def("adamw_update", [](const Params& p, const Params& g, const AdamWTuple& s, const Array& lr,
                           double b1, double b2, double eps, double weight_decay) {
    auto [np, ns] = optim::adamw_update(p, g, to_state(s), lr, {b1, b2, eps, weight_decay});
    return std::make_pair(np, from_state(ns));
  });
  m.def("clip_by_global_norm",
        [](const Params& g, double max_norm) { return optim::clip_by_global_norm(g, max_norm); });
  m.def("global_norm", &optim::global_norm);
  m.def("warmup_cosine", &optim::warmup_cosine);
}

}  // namespace

void bind_models(nb::module_& m) {
  bind_llama(m);
  bind_gpt2(m);
  bind_gpt2_trainer(m);
  bind_optimizers(m);
}

}  // namespace partix::python

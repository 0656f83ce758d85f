// partix generate: Llama text generation with Megatron tensor parallelism.
#include <fmt/format.h>

#include <fstream>
#include <iostream>

#include "commands.h"
#include "models/llama/generate.h"
#include "partix/partix.h"

namespace partix::cli {

namespace {

struct GenerateArgs {
  std::string model;
  int devices = 8;
  std::string mesh;
  std::vector<std::string> prompts;
  int64_t max_tokens = 64;
  bool greedy = false, chat = false, quiet = false;
  double temperature = 0.2, top_p = 0.9;  // SmolLM2 model card's suggestion
  int64_t top_k = 0;
  uint64_t seed = 0;
  std::string output, trace;
};

std::string mib(int64_t bytes) { return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20)); }

void run_generate(const GenerateArgs& a) {
  int n = a.devices;
  if (!a.mesh.empty()) {
    try {
      n = std::stoi(a.mesh);
    } catch (const std::exception&) {
      throw Error("[generate] --mesh must be the number of tensor-parallel devices, got '" + a.mesh + "'");
    }
  }
  if (n < 1) throw Error("[generate] --devices must be positive");
  init({.num_cpu_devices = std::max(n, 1)});
  Mesh mesh = make_mesh({n}, {"model"});
  auto rules = models::llama::tensor_parallel_rules("model");
  std::string path = a.model.empty() ? models::llama::default_model_path() : a.model;
  fmt::print("loading {} onto {}\n", path, mesh.to_string());
  models::llama::Model m = models::llama::load(path, mesh, rules);
  const auto& c = m.config;
  fmt::print("Llama: {} layers, hidden {}, {} heads ({} key/value), vocab {}\n", c.num_layers,
             c.hidden_size, c.num_heads, c.num_kv_heads, c.vocab_size);
  fmt::print("sharding table (first match wins):\n{}", models::llama::rules_to_string(rules));
  if (!m.tokenizer) throw Error("[generate] the checkpoint has no tokenizer");
  std::vector<std::string> prompts = a.prompts.empty() ? std::vector<std::string>{"What is the capital of France?"} : a.prompts;
  std::vector<std::vector<int32_t>> ids;
  for (const auto& p : prompts) {
    std::string text = a.chat ? m.tokenizer->apply_chat_template({{"user", p}}, true) : p;
    ids.push_back(m.tokenizer->encode(text));
  }
  models::llama::GenerateOptions o;
  o.max_tokens = a.max_tokens;
  o.seed = a.seed;
  if (!a.greedy) o.sampling = {a.temperature, a.top_k, a.top_p};
  models::llama::Generator gen(m, mesh, rules);
  if (!a.trace.empty()) profiler::start();
  std::vector<std::string> texts(prompts.size());
  std::vector<std::vector<int32_t>> so_far(prompts.size());
  const bool stream = prompts.size() == 1 && !a.quiet;
  if (stream) fmt::print("\n{}", a.chat ? "" : prompts[0]);
  auto result = gen.generate(ids, o, [&](int64_t, const std::vector<int32_t>& t) {
    for (size_t b = 0; b < t.size(); ++b) {
      if (static_cast<int64_t>(t[b]) == c.eos_token_id) continue;
      std::string before = m.tokenizer->decode(so_far[b], true);
      so_far[b].push_back(t[b]);
      std::string after = m.tokenizer->decode(so_far[b], true);
      // Print only what this token added (a token may complete a UTF-8 sequence).
      if (stream && after.size() >= before.size()) std::cout << after.substr(before.size()) << std::flush;
    }
  });
  if (!a.trace.empty()) {
    profiler::stop();
    profiler::write_chrome_trace(a.trace);
  }
  if (stream) fmt::print("\n\n");
  for (size_t b = 0; b < prompts.size(); ++b) {
    texts[b] = m.tokenizer->decode(result.tokens[b], true);
    if (!stream && !a.quiet) fmt::print("[{}] {}\n", b, texts[b]);
  }
  fmt::print("prefill: {} tokens in {:.3f} s ({:.1f} tokens/s)\n", result.prefill_tokens,
             result.prefill_seconds, static_cast<double>(result.prefill_tokens) / result.prefill_seconds);
  if (result.decode_tokens > 0) {
    fmt::print("decode:  {} tokens in {:.3f} s ({:.1f} tokens/s)\n", result.decode_tokens,
               result.decode_seconds, static_cast<double>(result.decode_tokens) / result.decode_seconds);
  }
  fmt::print("compile: {:.2f} s\n", result.compile_seconds);
  std::string mem;
  for (const Device& d : mesh.devices()) mem += fmt::format(" {}:{}", d.id, mib(memory_stats(d.id).peak_bytes_in_use));
  fmt::print("peak memory per device:{}\n", mem);
  if (!a.output.empty()) {
    std::ofstream f(a.output);
    if (!f) throw Error("[generate] cannot write '" + a.output + "'");
    for (const auto& t : texts) f << t << "\n";
  }
  if (!a.trace.empty()) fmt::print("trace written to {} (open in ui.perfetto.dev)\n", a.trace);
}

}  // namespace

void add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text with a Llama model, tensor-parallel over virtual devices");
  cmd->add_option("--model", a->model, "GGUF file or Hugging Face directory (default: the SmolLM2 cache)");
  cmd->add_option("--devices", a->devices, "Tensor-parallel devices")->capture_default_str()->check(CLI::Range(1, 4096));
  cmd->add_option("--mesh", a->mesh, "Same as --devices (one 'model' axis)");
  cmd->add_option("--prompt", a->prompts, "Prompt (repeat for a batch)");
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens to generate")->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_flag("--greedy", a->greedy, "Greedy decoding");
  cmd->add_option("--temperature", a->temperature, "Sampling temperature")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0: off)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", a->top_p, "Nucleus sampling mass (1: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
  cmd->add_flag("--chat", a->chat, "Apply the model's chat template");
  cmd->add_option("--output", a->output, "Write the generated text to this file");
  cmd->add_option("--trace", a->trace, "Write a Chrome/Perfetto trace (one track per device)");
  cmd->add_flag("--quiet", a->quiet, "Print only the statistics");
  cmd->callback([a] { run_generate(*a); });
}

}  // namespace partix::cli

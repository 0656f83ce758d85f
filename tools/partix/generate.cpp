// partix generate: Llama text generation with Megatron tensor parallelism.
#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "core/errors.h"
#include "flags.h"
#include "report.h"
#include "files/atomic_file.h"
#include "partix/models/llama.h"
#include "partix/partix.h"

namespace partix::cli {

namespace {

struct GenerateArgs {
  std::string model;
  int devices = 8;
  int mesh = 0;  // --mesh: the same as --devices
  bool devices_given = false;
  std::vector<std::string> prompts;
  int64_t max_tokens = 64;
  bool greedy = false, chat = false, quiet = false, debug_nans = false, decode_loop = false;
  bool ignore_eos = false;
  std::string weights = "f32";
  std::string dtype = "f32";
  double temperature = 0.2, top_p = 0.9;  // SmolLM2 model card's suggestion
  int64_t top_k = 0;
  uint64_t seed = 0;
  std::string output, trace;
};

// Checks between flags, before anything runs.
void check_flags(const GenerateArgs& a) {
  if (a.mesh != 0 && a.devices_given && a.mesh != a.devices) {
    throw Error(
        fmt::format("[generate] --mesh {} and --devices {} disagree (they are the same setting)",
                    a.mesh, a.devices));
  }
}

void run_generate(const GenerateArgs& a) {
  const int n = a.mesh != 0 ? a.mesh : a.devices;
  const bool lead = distributed::launch_process_index() == 0;
  // Destinations are checked before the model loads, so a typo costs no generation.
  if (!a.output.empty() && lead) detail::check_writable_file(a.output, "generate");
  if (!a.trace.empty() && lead) detail::check_writable_file(a.trace, "generate");
  init({.num_cpu_devices = devices_per_process("generate", n)});
  Mesh mesh = make_mesh({n}, {"model"});
  auto rules = models::llama::sharding_rules("model");
  std::string path = a.model.empty() ? models::llama::default_model_path() : a.model;
  fmt::print("loading {} onto {}\n", path, mesh.to_string());
  models::llama::Model m =
      models::llama::load(path, mesh, rules,
                          {.quantized = a.weights == "quantized",
                           .dtype = a.dtype == "bf16" ? DType::BF16 : DType::F32});
  const auto& c = m.config;
  fmt::print("Llama: {} layers, hidden {}, {} heads ({} key/value), vocab {}\n", c.num_layers,
             c.hidden_size, c.num_heads, c.num_kv_heads, c.vocab_size);
  fmt::print("sharding rules (logical axis -> mesh axes):\n{}", nn::to_string(rules));
  if (!m.tokenizer) throw Error("[generate] the checkpoint has no tokenizer");
  std::vector<std::string> prompts =
      a.prompts.empty() ? std::vector<std::string>{"What is the capital of France?"} : a.prompts;
  std::vector<std::vector<int32_t>> ids;
  for (const auto& p : prompts) {
    std::string text = a.chat ? m.tokenizer->apply_chat_template({{"user", p}}, true) : p;
    ids.push_back(m.tokenizer->encode(text));
  }
  models::llama::GenerateOptions o;
  o.max_tokens = a.max_tokens;
  o.seed = a.seed;
  o.debug_nans = a.debug_nans;
  o.decode_loop = a.decode_loop;
  o.stop_at_eos = !a.ignore_eos;
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
      if (stream && after.size() >= before.size())
        std::cout << after.substr(before.size()) << std::flush;
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
             result.prefill_seconds,
             static_cast<double>(result.prefill_tokens) / result.prefill_seconds);
  if (result.decode_tokens > 0) {
    fmt::print("decode:  {} tokens in {:.3f} s ({:.1f} tokens/s)\n", result.decode_tokens,
               result.decode_seconds,
               static_cast<double>(result.decode_tokens) / result.decode_seconds);
  }
  fmt::print("compile: {:.2f} s\n", result.compile_seconds);
  fmt::print("peak memory per device:{}\n", peak_memory_per_device(mesh));
  if (!a.output.empty() && lead) {
    std::string all;
    for (const auto& t : texts) all += t + "\n";
    detail::write_file_atomic(a.output, "generate", all);
  }
  if (!a.trace.empty()) fmt::print("trace written to {} (open in ui.perfetto.dev)\n", a.trace);
}

}  // namespace

void add_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate text with a Llama model, tensor-parallel over virtual devices");
  cmd->add_option("--model", a->model,
                  "GGUF file or Hugging Face directory (default: the SmolLM2 cache)");
  add_int(cmd, "--devices", a->devices, 1, static_cast<int>(kMaxDevices),
          "Tensor-parallel devices");
  add_int(cmd, "--mesh", a->mesh, 1, static_cast<int>(kMaxDevices),
          "Same as --devices (one 'model' axis: a single integer)")
      ->default_str("");
  cmd->add_option("--prompt", a->prompts, "Prompt (repeat for a batch)");
  add_int(cmd, "--max-tokens", a->max_tokens, 1, int64_t{1} << 20, "Tokens to generate");
  cmd->add_flag("--greedy", a->greedy, "Greedy decoding");
  add_real(cmd, "--temperature", a->temperature, {.lo = 0}, "Sampling temperature (0: greedy)");
  add_int(cmd, "--top-k", a->top_k, 0, int64_t{1} << 31, "Keep the k most likely tokens (0: off)");
  add_real(cmd, "--top-p", a->top_p, {.lo = 0, .hi = 1, .lo_open = true},
           "Nucleus sampling mass (1: off)");
  add_seed(cmd, "--seed", a->seed, "Sampling seed");
  cmd->add_flag("--chat", a->chat, "Apply the model's chat template");
  cmd->add_option("--weights", a->weights,
                  "f32: dequantize every weight at load; quantized: keep a GGUF file's quantized "
                  "matrices as they are (matmuls decode them block by block, with 8-bit "
                  "activations: a fifth of the memory, slightly different logits)")
      ->check(CLI::IsMember({"quantized", "f32"}))
      ->capture_default_str();
  cmd->add_option("--dtype", a->dtype,
                  "Dtype of the weight matrices not kept quantized: f32, or bf16 (half the "
                  "memory and memory traffic; matmuls widen it to f32 in registers, exactly)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", a->ignore_eos,
                "Generate exactly --max-tokens tokens, past the end-of-sequence token");
  cmd->add_option("--output", a->output, "Write the generated text to this file");
  cmd->add_option("--trace", a->trace, "Write a Chrome/Perfetto trace (one track per device)");
  cmd->add_flag("--quiet", a->quiet, "Print only the statistics");
  cmd->add_flag("--debug-nans", a->debug_nans,
                "When the logits are not finite, name the layer where that starts (slower)");
  cmd->add_flag("--decode-loop", a->decode_loop,
                "Decode all tokens in one program (a fori_loop over tokens) instead of streaming");
  cmd->callback([a, cmd] {
    a->devices_given = cmd->count("--devices") > 0;
    check_flags(*a);
    if (!parse_only()) run_generate(*a);
  });
}

}  // namespace partix::cli

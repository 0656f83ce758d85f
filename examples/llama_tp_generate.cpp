// Megatron tensor-parallel generation with a Llama model, written against the public headers
// only. With a model (a GGUF file or a Hugging Face folder: argument 1, else the cached
// SmolLM2-135M-Instruct) it prints a greedy continuation on 8 devices and checks that one
// device writes the same tokens. Without one it does the same with a small random Llama.
#include <partix/io.h>
#include <partix/models/llama.h>
#include <partix/partix.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

using namespace partix;
namespace llama = partix::models::llama;

struct Run {
  std::vector<int32_t> tokens;
  llama::Model model;
};

// Greedy tokens for `text` with the weights sharded over the first `devices` devices.
Run generate_on(int devices, const std::string& path, const std::string& text) {
  std::vector<Device> chosen(partix::devices().begin(), partix::devices().begin() + devices);
  Mesh mesh({devices}, {"model"}, chosen);
  auto rules = llama::sharding_rules("model");  // heads, MLP units and vocabulary split
  Run run;
  if (path.empty()) {
    run.model.config = llama::tiny();
    run.model.params = llama::init(run.model.config, random::key(7), mesh, rules);
  } else {
    run.model = llama::load(path, mesh, rules);
  }
  std::vector<int32_t> prompt = {1, 17, 42, 5, 9};
  if (run.model.tokenizer) prompt = run.model.tokenizer->encode(text);
  llama::Generator generator(run.model, mesh, rules);
  llama::GenerateOptions options{.max_tokens = 12, .stop_at_eos = false};
  run.tokens = generator.generate({prompt}, options).tokens[0];
  return run;
}

int main(int argc, char** argv) {
  init({.num_cpu_devices = 8});
  std::string path = argc > 1 ? argv[1] : llama::default_model_path();
  if (!std::filesystem::exists(path)) path.clear();  // nothing cached: a random tiny Llama

  const std::string text = "The capital of France is";
  Run sharded = generate_on(8, path, text);
  Run single = generate_on(1, path, text);
  const llama::Config& c = sharded.model.config;
  std::printf("%s: %lld layers, %lld heads (%lld key/value) on 8 devices\n",
              path.empty() ? "a random tiny Llama" : path.c_str(),
              static_cast<long long>(c.num_layers), static_cast<long long>(c.num_heads),
              static_cast<long long>(c.num_kv_heads));
  if (sharded.model.tokenizer) {
    std::printf("%s%s\n", text.c_str(), sharded.model.tokenizer->decode(sharded.tokens).c_str());
  }
  const bool same = sharded.tokens == single.tokens;
  std::printf("8 devices and 1 device wrote %s tokens\n", same ? "the same" : "DIFFERENT");
  return same ? 0 : 1;
}

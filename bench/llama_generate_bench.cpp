// Llama generation speed, driven line by line from stdin so that bench/llama_vs_jax.py can
// interleave partix and JAX repetitions in one run:
//   partix_bench_llama_generate --devices 8 --max-tokens 32 [--prompt TEXT] [--raw] [--model PATH]
// prints one JSON line {"prompt_ids": [...]} after loading, one {"weight_bytes", "read_gbs"}, then for every line "run" on stdin
// one generation (greedy, exactly max-tokens new tokens: EOS does not stop it) as
// {"prefill_tok_s":..., "decode_tok_s":..., "tokens":[...]}; "quit" or EOF ends. The first run
// compiles (Generator excludes compilation from its timings either way).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <vector>
#include <string>

#include "partix/models/llama.h"
#include "partix/partix.h"

namespace {

struct Args {
  int devices = 8;
  int64_t max_tokens = 32;
  std::string prompt = "What is the capital of France?";
  bool chat = true;
  std::string model;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw partix::Error("[llama_generate_bench] " + k + " needs a value");
      return argv[++i];
    };
    if (k == "--devices") a.devices = std::stoi(value());
    else if (k == "--max-tokens") a.max_tokens = std::stoll(value());
    else if (k == "--prompt") a.prompt = value();
    else if (k == "--model") a.model = value();
    else if (k == "--raw") a.chat = false;
    else throw partix::Error("[llama_generate_bench] unknown argument " + k);
  }
  return a;
}

// Two threads each sum half of a buffer of `bytes` (as 32-bit words, into 64-bit sums, which
// vectorises), 5 times; the best pass's bytes per second.
double two_thread_read_gbs(int64_t bytes) {
  const size_t n = static_cast<size_t>(bytes) / sizeof(uint32_t);
  std::vector<uint32_t> buf(n, 1u);
  auto sum = [&](size_t lo, size_t hi) {
    uint64_t s = 0;
    for (size_t i = lo; i < hi; ++i) s += buf[i];
    return s;
  };
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    uint64_t upper = 0;
    const auto t0 = std::chrono::steady_clock::now();
    std::thread other([&] { upper = sum(n / 2, n); });
    const uint64_t lower = sum(0, n / 2);
    other.join();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (lower + upper != n) std::abort();  // every word read
    best = std::max(best, static_cast<double>(n * sizeof(uint32_t)) / sec / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace partix;
  try {
    Args a = parse(argc, argv);
    init({.num_cpu_devices = a.devices});
    Mesh mesh = make_mesh({a.devices}, {"model"});
    auto rules = models::llama::sharding_rules("model");
    std::string path = a.model.empty() ? models::llama::default_model_path() : a.model;
    models::llama::Model m = models::llama::load(path, mesh, rules);
    std::string text = a.chat ? m.tokenizer->apply_chat_template({{"user", a.prompt}}, true) : a.prompt;
    std::vector<int32_t> ids = m.tokenizer->encode(text);
    fmt::print("{{\"prompt_ids\": [{}]}}\n", fmt::join(ids, ", "));
    std::cout << std::flush;
    // A decode step reads every weight once (the tied embedding as lm_head), so its bytes per
    // second are weight_bytes x decode tokens/s; read_gbs is what two threads reading the same
    // number of bytes (summing them) reach, for comparison.
    int64_t weight_bytes = 0;
    for (const auto& [name, p] : m.params) weight_bytes += p.nbytes();
    fmt::print("{{\"weight_bytes\": {}, \"read_gbs\": {:.2f}}}\n", weight_bytes,
               two_thread_read_gbs(weight_bytes));
    std::cout << std::flush;
    models::llama::Generator gen(m, mesh, rules);
    models::llama::GenerateOptions o;
    o.max_tokens = a.max_tokens;
    o.stop_at_eos = false;
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line == "quit") break;
      if (line != "run") continue;
      auto r = gen.generate({ids}, o);
      fmt::print("{{\"prefill_tok_s\": {:.4f}, \"decode_tok_s\": {:.4f}, \"compile_s\": {:.3f}, "
                 "\"tokens\": [{}]}}\n",
                 static_cast<double>(r.prefill_tokens) / r.prefill_seconds,
                 static_cast<double>(r.decode_tokens) / r.decode_seconds, r.compile_seconds,
                 fmt::join(r.tokens[0], ", "));
      std::cout << std::flush;
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}

// Compiled with -Wall -Wextra -Werror and nothing turned off, as user code is: the option
// structs take partial designated initialisers without -Wmissing-field-initializers firing.
// A build failure here means a member lost its default member initialiser.
#include "partix/models/gpt2.h"
#include "partix/models/llama.h"
#include "partix/partix.h"

namespace {

using namespace partix;

[[maybe_unused]] void designated_initialisers() {
  Mesh m = make_mesh({8}, {"x"});
  auto twice = [](const Array& a) { return a * 2.0; };
  auto f = jit(twice, {.out_shardings = {NamedSharding(m, P("x"))}});
  auto g = jit(twice, {.donate_argnums = {0}, .name = "twice"});
  auto h = jit(twice, {.in_shardings = {NamedSharding(m, P())}});
  init({.num_cpu_devices = 8});
  init({.device_memory_bytes = int64_t{1} << 30});
  ckpt::ArraySpec spec{
      .shape = {8, 4}, .dtype = DType::BF16, .sharding = NamedSharding(m, P("x"))};
  ckpt::SaveOptions save{.metadata = {{"note", "x"}}};
  ckpt::RestoreOptions restore{.partial = true};
  CheckpointManagerOptions manager{.keep = 2};
  optim::AdamWConfig adamw{.weight_decay = 0.0};
  optim::SgdConfig sgd{.nesterov = true};
  models::gpt2::ForwardOptions forward{.mesh = &m};
  models::gpt2::TrainOptions train{.data = 4, .model_parallel = 2, .fsdp = true};
  models::llama::GenerateOptions generate{.max_tokens = 8, .stop_at_eos = false};
  models::llama::Config llama{.num_layers = 2};
  (void)forward, (void)train, (void)generate, (void)llama;
  (void)f, (void)g, (void)h, (void)spec, (void)save, (void)restore, (void)manager, (void)adamw,
      (void)sgd;
}

}  // namespace

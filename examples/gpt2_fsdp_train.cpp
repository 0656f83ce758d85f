// A GPT-2 training loop with FSDP and tensor parallelism on a 4x2 mesh, written against the
// public headers only: parameters and AdamW state split over 'data' as well as 'model', one
// jitted step (value_and_grad of the loss, AdamW) compiled once and called with its state
// donated. The task is learnable (each token is its predecessor plus one), so the loss falls.
#include <partix/models/gpt2.h>
#include <partix/partix.h>

#include <cstdio>
#include <tuple>
#include <vector>

using namespace partix;
namespace gpt2 = partix::models::gpt2;

// Rows of consecutive byte tokens from varying starts, split over 'data'.
std::pair<Array, Array> batch(int64_t step, int64_t rows, int64_t len, const NamedSharding& s) {
  std::vector<int32_t> ids, targets;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t t = 0; t < len; ++t) {
      const int64_t token = (r * 37 + step * 11 + t) % 256;
      ids.push_back(static_cast<int32_t>(token));
      targets.push_back(static_cast<int32_t>((token + 1) % 256));
    }
  }
  return {device_put(from_vector(ids, {rows, len}), s),
          device_put(from_vector(targets, {rows, len}), s)};
}

int main() {
  init({.num_cpu_devices = 8});
  Mesh mesh = make_mesh({4, 2}, {"data", "model"});
  gpt2::Config config = gpt2::tiny();  // 256 byte tokens, 2 layers, 64 channels
  config.dropout = 0.0;
  nn::LogicalRules rules = gpt2::sharding_rules(/*fsdp=*/true);
  std::printf("%s", nn::describe(gpt2::param_specs(config), rules, mesh).c_str());
  Params params = gpt2::init(config, random::key(0), mesh, rules);  // drawn in its shardings
  optim::AdamWState opt = optim::adamw_init(params);

  auto train_step = jit(
      [&](const Params& p, const optim::AdamWState& s, const Array& ids, const Array& targets) {
        auto loss_of = [&](const Params& q) {
          return gpt2::loss(q, ids, targets, config, {.mesh = &mesh, .rules = &rules});
        };
        auto [loss, grads] = value_and_grad(loss_of)(p);
        auto [new_p, new_s] = optim::adamw_update(p, grads, s, full({}, 3e-3));
        return std::make_tuple(loss, new_p, new_s);
      },
      {.donate_argnums = {0, 1}, .name = "train_step"});

  const NamedSharding rows(mesh, P("data"));
  float first = 0, last = 0;
  for (int64_t step = 0; step < 40; ++step) {
    auto [ids, targets] = batch(step, 16, 32, rows);
    auto [loss, new_params, new_opt] = train_step(params, opt, ids, targets);
    params = new_params;
    opt = new_opt;
    last = loss.item<float>();
    if (step == 0) first = last;
    if (step % 10 == 0 || step == 39)
      std::printf("step %2lld  loss %.4f\n", static_cast<long long>(step), last);
  }
  std::printf("compiled %d time(s); loss %.3f -> %.3f\n", train_step.trace_count(), first, last);
  return train_step.trace_count() == 1 && last < 0.5f * first ? 0 : 1;
}

// Optimizers as pure functions over Params. Their state is Params shaped and sharded like the
// parameters, so FSDP shards it too. Half-precision parameters keep f32 master weights.
#pragma once

#include <cstdint>
#include <utility>

#include "partix/array.h"
#include "partix/tree.h"

namespace partix::optim {

// ---- learning-rate schedules (host-side: pass the value to a jitted step as a scalar) ----
// Linear warmup from 0 to peak over `warmup` steps, then cosine decay to final_fraction * peak
// at `total` steps (and constant after).
double warmup_cosine(int64_t step, double peak, int64_t warmup, int64_t total,
                     double final_fraction = 0.1);

// ---- gradient clipping ----
// Grads scaled so their global L2 norm is at most max_norm; also returns the norm before.
std::pair<Params, Array> clip_by_global_norm(const Params& grads, double max_norm);
Array global_norm(const Params& tree);

// ---- SGD with momentum ----
struct SgdConfig {
  double momentum = 0.9;
  bool nesterov = false;
};
struct SgdState {
  Params momentum;
};
SgdState sgd_init(const Params& params);
// lr: a scalar Array (or a plain number via the overload below).
std::pair<Params, SgdState> sgd_update(const Params& params, const Params& grads,
                                       const SgdState& state, const Array& lr,
                                       const SgdConfig& config = {});

// ---- AdamW (decoupled weight decay, bias correction) ----
struct AdamWConfig {
  double b1 = 0.9;
  double b2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};
struct AdamWState {
  Params mu, nu;  // f32 moments, sharded like the parameters
  Params master;  // f32 copies of half-precision parameters (empty for f32 parameters)
  Array count;    // i32 scalar: steps taken
};
AdamWState adamw_init(const Params& params);
std::pair<Params, AdamWState> adamw_update(const Params& params, const Params& grads,
                                           const AdamWState& state, const Array& lr,
                                           const AdamWConfig& config = {});

}  // namespace partix::optim

namespace partix {

template <>
struct TreeDef<optim::SgdState> {
  static void flatten(const optim::SgdState& s, std::vector<Array>& out) {
    TreeDef<Params>::flatten(s.momentum, out);
  }
  static optim::SgdState unflatten(const optim::SgdState& p, const Array*& it) {
    return {TreeDef<Params>::unflatten(p.momentum, it)};
  }
  static std::string key(const optim::SgdState& s) { return "sgd" + TreeDef<Params>::key(s.momentum); }
  static void paths(const optim::SgdState& s, const std::string& at, std::vector<std::string>& out) {
    TreeDef<Params>::paths(s.momentum, at + ".momentum", out);
  }
};

template <>
struct TreeDef<optim::AdamWState> {
  static void flatten(const optim::AdamWState& s, std::vector<Array>& out) {
    TreeDef<Params>::flatten(s.mu, out);
    TreeDef<Params>::flatten(s.nu, out);
    TreeDef<Params>::flatten(s.master, out);
    out.push_back(s.count);
  }
  static optim::AdamWState unflatten(const optim::AdamWState& p, const Array*& it) {
    optim::AdamWState s;
    s.mu = TreeDef<Params>::unflatten(p.mu, it);
    s.nu = TreeDef<Params>::unflatten(p.nu, it);
    s.master = TreeDef<Params>::unflatten(p.master, it);
    s.count = *it++;
    return s;
  }
  static std::string key(const optim::AdamWState& s) {
    return "adamw" + TreeDef<Params>::key(s.mu) + TreeDef<Params>::key(s.master);
  }
  static void paths(const optim::AdamWState& s, const std::string& at,
                    std::vector<std::string>& out) {
    TreeDef<Params>::paths(s.mu, at + ".mu", out);
    TreeDef<Params>::paths(s.nu, at + ".nu", out);
    TreeDef<Params>::paths(s.master, at + ".master", out);
    out.push_back(at + ".count");
  }
};

}  // namespace partix

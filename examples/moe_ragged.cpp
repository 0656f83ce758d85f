// Mixture-of-experts dispatch without a worst-case capacity: one expert per device, tokens
// routed top-1 by a skewed router, and instead of one all_to_all sized for the busiest
// (source, expert) pair, a while_loop sends them in rounds of at most C tokens per pair. Each
// round every device packs its next tokens for each expert, exchanges them (and their counts)
// with all_to_all, the experts transform what they received, and a second all_to_all brings the
// results home. The loop stops when no device has anything left, so the trip count follows the
// actual load, and the result equals the dense reference.
#include <partix/partix.h>

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "example_check.h"

using namespace partix;

namespace {

constexpr int64_t E = 8;    // experts = devices on the 'expert' axis
constexpr int64_t N = 256;  // tokens, N / E on each device
constexpr int64_t D = 16;   // model width
constexpr int64_t C = 4;    // rows per (source, expert) pair in one round

// Per device: the one-hot routing mask [n, E] and each token's rank among this device's tokens
// for the same expert [n] (int32): rank r travels in round r / C, in slot r % C.
std::pair<Array, Array> route(const Array& tok, const Array& router, const Array& bias) {
  Array mask = one_hot(argmax(matmul(tok, router) + bias, -1), E);  // [n, E]
  // cumsum counts the token itself, hence - 1; summing over E keeps the chosen expert's entry.
  Array rank = astype(sum((cumsum(mask, 0) - 1.0) * mask, {1}), DType::I32);
  return {mask, rank};
}

struct Exchange {
  Array result;  // [n, D]: the expert outputs of the tokens sent this time, zero elsewhere
  Array load;    // [1]: rows this device's expert transformed
};

// One exchange carrying, for each expert, the tokens of rank in [lo, lo + cap). A token outside
// that window gets an all-zero one_hot row (its slot is out of range), so it neither goes out
// nor takes anything back: no separate "already sent" mask is needed.
Exchange exchange(const Array& tok, const Array& mask, const Array& rank, const Array& lo,
                  int64_t cap, const Array& w) {
  Array dispatch = expand_dims(mask, -1) * expand_dims(one_hot(rank - lo, cap), 1);  // [n, E, cap]
  Array buf = einsum("iec,id->ecd", {dispatch, tok});                                // [E, cap, D]
  // How many of the cap rows are real: all_to_all'd alongside so the expert can tell its
  // tokens from padding (here to mask its output and count its load; an expert with a bias or a
  // nonlinearity would otherwise produce values in the padding rows).
  Array count = astype(sum(mask, {0}), DType::I32);  // [E] tokens per expert
  Array sent = minimum(maximum(count - lo, 0.0), static_cast<double>(cap));
  Array got = all_to_all(reshape(sent, {E, 1}), "expert", 0, 0, true);  // [E (source), 1]
  Array in = all_to_all(buf, "expert", 0, 0, true);                     // [E (source), cap, D]
  Array valid = expand_dims(iota({E, cap}, 1) < got, -1);               // [E, cap, 1]
  Array out = where(valid, einsum("scd,df->scf", {in, reshape(w, {D, D})}), 0.0);
  Array back = all_to_all(out, "expert", 0, 0, true);  // [E (expert), cap, D]
  return {einsum("iec,ecd->id", {dispatch, back}), reshape(astype(sum(got), DType::F32), {1})};
}

}  // namespace

int main() {
  init({.num_cpu_devices = 8});
  Mesh mesh = make_mesh({E}, {"expert"});
  Array tokens = random::normal(random::key(3), {N, D});
  Array router = random::normal(random::key(4), {D, E});
  // The skew: a few experts are favoured, the last two are never chosen.
  Array bias =
      from_vector(std::vector<float>{2.5f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -30.0f, -30.0f}, {E});
  Array experts = random::normal(random::key(5), {E, D, D}) * 0.3;

  // Ragged dispatch: round r sends ranks [r*C, (r+1)*C). The loop runs while some device still
  // has a token of rank >= r*C for some expert; pmax makes every device see the same answer, so
  // all take part in the same number of all_to_alls.
  auto ragged = shard_map(
      [](const Array& tok, const Array& r, const Array& b, const Array& w) {
        auto [mask, rank] = route(tok, r, b);
        Array most = max(astype(sum(mask, {0}), DType::I32));  // this device's busiest pair
        using Carry = std::tuple<Array, Array, Array>;         // round, result, load
        // The result and the load are each device's own from the first round: they vary.
        Carry init{zeros({}, DType::I32), pvary(zeros(tok.shape()), Axes{"expert"}),
                   pvary(zeros({1}), Axes{"expert"})};
        Carry done = while_loop(
            [&](const Carry& c) {
              return pmax(most - std::get<0>(c) * static_cast<double>(C), "expert") > 0.0;
            },
            [&](const Carry& c) {
              const auto& [round, result, load] = c;
              Exchange x = exchange(tok, mask, rank, round * static_cast<double>(C), C, w);
              return Carry{round + 1.0, result + x.result, load + x.load};
            },
            init);
        return done;
      },
      mesh, {P("expert"), P(), P(), P("expert")}, {P(), P("expert"), P("expert")});

  // The same exchange done once with capacity = all local tokens: the only static capacity
  // that never drops a token whatever the routing.
  auto single = shard_map(
      [](const Array& tok, const Array& r, const Array& b, const Array& w) {
        auto [mask, rank] = route(tok, r, b);
        Exchange x = exchange(tok, mask, rank, zeros({}, DType::I32), tok.shape()[0], w);
        return std::pair<Array, Array>{x.result, x.load};
      },
      mesh, {P("expert"), P(), P(), P("expert")}, {P("expert"), P("expert")});

  Array tok_s = device_put(tokens, NamedSharding(mesh, P("expert")));
  Array exp_s = device_put(experts, NamedSharding(mesh, P("expert")));
  auto [rounds, got, load] = jit(ragged)(tok_s, router, bias, exp_s);
  auto [got_single, load_single] = jit(single)(tok_s, router, bias, exp_s);

  // Dense reference: each token times its chosen expert's matrix.
  Array choice = argmax(matmul(tokens, router) + bias, -1);
  Array want = einsum("nd,ndf->nf", {tokens, take(experts, choice, 0)});
  bool ok = close_to(got.to_vector<float>(), want.to_vector<float>());
  ok &= close_to(got_single.to_vector<float>(), want.to_vector<float>());
  ok &= load.to_vector<float>() == load_single.to_vector<float>();

  const int64_t trips = rounds.to_vector<int32_t>()[0];
  // The trip count is set by the busiest (source, expert) pair: ceil(busiest / C).
  std::vector<int32_t> picks = choice.to_vector<int32_t>();
  std::vector<int64_t> pair(E * E, 0);
  for (int64_t i = 0; i < N; ++i) {
    pair[static_cast<size_t>(i / (N / E) * E + picks[static_cast<size_t>(i)])]++;  // source, expert
  }
  const int64_t busiest = *std::max_element(pair.begin(), pair.end());
  ok &= trips == (busiest + C - 1) / C;
  std::printf("tokens per expert:");
  for (float l : load.to_vector<float>()) std::printf(" %g", l);
  std::printf("  (average %g)\n", static_cast<double>(N) / E);

  // cost_analysis counts a while_loop's body once (its trip count is not static): that is the
  // traffic of one round; the loop ran `trips` of them.
  auto a2a = [](const Lowered& l) {
    auto b = l.cost_analysis().bytes_per_device;
    return b.count("all_to_all") ? b.at("all_to_all") : 0.0;
  };
  const double per_round = a2a(jit(ragged).lower(tok_s, router, bias, exp_s));
  const double worst = a2a(jit(single).lower(tok_s, router, bias, exp_s));
  const double moved = per_round * static_cast<double>(trips);
  std::printf("busiest (source, expert) pair: %lld tokens\n", static_cast<long long>(busiest));
  std::printf(
      "ragged: %lld rounds of capacity %lld, all_to_all %g bytes/device per round, "
      "%g in all\n",
      static_cast<long long>(trips), static_cast<long long>(C), per_round, moved);
  std::printf(
      "single all_to_all with worst-case capacity %lld: %g bytes/device "
      "(%.2fx the ragged)\n",
      static_cast<long long>(N / E), worst, worst / moved);
  std::printf("ragged mixture of experts %s\n", ok ? "matches the dense reference" : "DIFFERS");
  return ok ? 0 : 1;
}

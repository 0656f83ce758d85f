// A tiny mixture-of-experts layer: one expert per device; tokens are routed top-1, packed into
// per-expert buffers, sent to their expert's device with all_to_all, transformed, and sent back.
#include <partix/partix.h>

#include <cstdio>

#include "example_check.h"

using namespace partix;

int main() {
  init({.num_cpu_devices = 8});
  constexpr int64_t E = 4, N = 32, D = 8;
  Mesh mesh = make_mesh({E}, {"expert"});
  Array tokens = random::normal(random::key(3), {N, D});
  Array router = random::normal(random::key(4), {D, E});
  Array experts = random::normal(random::key(5), {E, D, D}) * 0.3;

  auto layer = shard_map(
      [](const Array& tok, const Array& r, const Array& w) {
        const int64_t n = tok.shape()[0], cap = n;  // capacity: nothing is dropped
        Array choice = argmax(matmul(tok, r), -1);                      // [n]
        Array mask = one_hot(choice, E);                                // [n, E]
        Array pos = astype(cumsum(mask, 0) - 1.0, DType::I32);          // slot per expert
        Array dispatch = expand_dims(mask, -1) * one_hot(pos, cap);     // [n, E, cap]
        Array buf = einsum("iec,id->ecd", {dispatch, tok});             // [E, cap, D]
        Array in = all_to_all(buf, "expert", 0, 0, true);               // [E (source), cap, D]
        Array out = einsum("scd,df->scf", {in, reshape(w, {D, D})});   // this device's expert
        Array back = all_to_all(out, "expert", 0, 0, true);             // [E (expert), cap, D]
        return einsum("iec,ecd->id", {dispatch, back});
      },
      mesh, {P("expert"), P(), P("expert")}, {P("expert")});
  Array got = layer(device_put(tokens, NamedSharding(mesh, P("expert"))), router,
                    device_put(experts, NamedSharding(mesh, P("expert"))));

  // Dense reference: each token times its chosen expert's matrix.
  Array choice = argmax(matmul(tokens, router), -1);
  Array w_tok = take(experts, choice, 0);  // [N, D, D]
  Array want = einsum("nd,ndf->nf", {tokens, w_tok});
  bool ok = close_to(got.to_vector<float>(), want.to_vector<float>());
  std::printf("mixture of experts %s\n", ok ? "matches the dense reference" : "DIFFERS");
  return ok ? 0 : 1;
}

// A[B_X, D_Y] @ W[D, F_Y] four ways (the collective matmuls of "How to Scale Your Model"):
//   1. all-gather A over Y, then one local matmul;
//   2. ppermute ring: multiply the A chunk in hand while the next one travels (overlap);
//   3. bidirectional ring: chunks travel both ways, half the steps;
// and A[B, D_Y] @ W[D_Y, F] -> out[B, F_Y] as a reduce-scatter ring.
#include <partix/partix.h>

#include <cstdio>

#include "example_check.h"

using namespace partix;

namespace {

constexpr int64_t kB = 8, kD = 16, kF = 8;

// Rows [chunk * D/Y, (chunk + 1) * D/Y) of the local W, chunk an int32 scalar array.
Array w_rows(const Array& w, const Array& chunk, int64_t rows) {
  return dynamic_slice(w, {chunk * static_cast<double>(rows), astype(zeros({}), DType::I32)},
                       {rows, w.shape()[1]});
}

Array mod(const Array& i, int64_t n) {
  return astype(astype(i, DType::F32) - static_cast<double>(n) * floor(astype(i, DType::F32) / static_cast<double>(n)), DType::I32);
}

}  // namespace

int main() {
  init({.num_cpu_devices = 8});
  Mesh mesh = make_mesh({2, 4}, {"X", "Y"});
  const int64_t Y = mesh.axis_size("Y");
  Array a = random::normal(random::key(1), {kB, kD});
  Array w = random::normal(random::key(2), {kD, kF});
  std::vector<float> want = matmul(a, w).to_vector<float>();
  Array as = device_put(a, NamedSharding(mesh, P("X", "Y")));
  Array ws = device_put(w, NamedSharding(mesh, P(None, "Y")));
  bool ok = true;

  // 1. All-gather matmul.
  auto ag = shard_map([](const Array& ab, const Array& wb) { return matmul(all_gather(ab, "Y", 1, true), wb); },
                      mesh, {P("X", "Y"), P(None, "Y")}, {P("X", "Y")});
  ok &= close_to(ag(as, ws).to_vector<float>(), want);

  // 2. Unidirectional ring: at step s device y holds A chunk (y + s) mod Y.
  auto ring = shard_map(
      [Y](const Array& ab, const Array& wb) {
        const int64_t rows = ab.shape()[1];
        Array y = axis_index("Y");
        std::vector<std::pair<int, int>> to_prev;
        for (int i = 0; i < Y; ++i) to_prev.emplace_back(i, static_cast<int>((i + Y - 1) % Y));
        Array chunk = ab;
        Array acc = matmul(chunk, w_rows(wb, y, rows));
        for (int64_t s = 1; s < Y; ++s) {
          chunk = ppermute(chunk, "Y", to_prev);  // now holds chunk (y + s) mod Y
          acc = acc + matmul(chunk, w_rows(wb, mod(y + static_cast<double>(s), Y), rows));
        }
        return acc;
      },
      mesh, {P("X", "Y"), P(None, "Y")}, {P("X", "Y")});
  ok &= close_to(ring(as, ws).to_vector<float>(), want);

  // 3. Bidirectional ring: forward chunks (y + s), backward chunks (y - s).
  auto bidir = shard_map(
      [Y](const Array& ab, const Array& wb) {
        const int64_t rows = ab.shape()[1];
        Array y = axis_index("Y");
        std::vector<std::pair<int, int>> to_prev, to_next;
        for (int i = 0; i < Y; ++i) {
          to_prev.emplace_back(i, static_cast<int>((i + Y - 1) % Y));
          to_next.emplace_back(i, static_cast<int>((i + 1) % Y));
        }
        Array fwd = ab, bwd = ab;
        Array acc = matmul(ab, w_rows(wb, y, rows));
        for (int64_t s = 1; 2 * s <= Y; ++s) {
          fwd = ppermute(fwd, "Y", to_prev);
          acc = acc + matmul(fwd, w_rows(wb, mod(y + static_cast<double>(s), Y), rows));
          if (2 * s == Y) break;  // chunk y + Y/2 arrived from the front already
          bwd = ppermute(bwd, "Y", to_next);
          acc = acc + matmul(bwd, w_rows(wb, mod(y + static_cast<double>(Y - s), Y), rows));
        }
        return acc;
      },
      mesh, {P("X", "Y"), P(None, "Y")}, {P("X", "Y")});
  ok &= close_to(bidir(as, ws).to_vector<float>(), want);

  // 4. Reduce-scatter ring: A[B, D_Y] @ W[D_Y, F] -> out[B, F_Y]. The accumulator of output
  //    chunk t visits devices t+1, ..., t+Y-1 and ends on device t.
  Array a2 = device_put(a, NamedSharding(mesh, P(None, "Y")));
  Array w2 = device_put(w, NamedSharding(mesh, P("Y", None)));
  auto rs = shard_map(
      [Y](const Array& ab, const Array& wb) {
        const int64_t cols = wb.shape()[1] / Y;
        Array y = axis_index("Y");
        std::vector<std::pair<int, int>> to_next;
        for (int i = 0; i < Y; ++i) to_next.emplace_back(i, static_cast<int>((i + 1) % Y));
        auto part = [&](int64_t s) {
          Array t = mod(y - static_cast<double>(s + 1), Y);  // the chunk handled at step s
          Array wc = dynamic_slice(wb, {astype(zeros({}), DType::I32), t * static_cast<double>(cols)},
                                   {wb.shape()[0], cols});
          return matmul(ab, wc);
        };
        Array acc = part(0);
        for (int64_t s = 1; s < Y; ++s) acc = ppermute(acc, "Y", to_next) + part(s);
        return acc;
      },
      mesh, {P(None, "Y"), P("Y", None)}, {P(None, "Y")});
  ok &= close_to(rs(a2, w2).to_vector<float>(), want);
  auto rs_ref = shard_map([](const Array& ab, const Array& wb) { return psum_scatter(matmul(ab, wb), "Y", 1, true); },
                          mesh, {P(None, "Y"), P("Y", None)}, {P(None, "Y")});
  ok &= close_to(rs_ref(a2, w2).to_vector<float>(), want);

  std::printf("collective matmuls %s\n", ok ? "match the plain matmul" : "DIFFER");
  return ok ? 0 : 1;
}

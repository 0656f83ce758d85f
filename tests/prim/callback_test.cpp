// Host callbacks (src/prim/callback.cpp): a pure callback on every device, an effect once per
// program (its results sent to every device) or once per device inside shard_map, kept by
// dead-code elimination, looped per example under vmap, refused by reverse mode, and a failure
// that reaches the caller without leaving other devices waiting.
#include <atomic>
#include <mutex>

#include "prim/callback.h"
#include "test_util.h"
#include "trace/trace.h"

namespace partix {
namespace {

using prim::HostCallbackCall;

// A registered function that counts its calls and, for each, writes operand 0 plus `add`
// (f32) into result 0 when there is one.
struct Counter {
  std::atomic<int> calls{0};
  std::mutex mu;
  std::vector<int64_t> positions;
  std::vector<ir::Aval> seen;
  int64_t id = 0;
  explicit Counter(float add = 0) {
    id = prim::register_host_callback(
        std::make_shared<const prim::HostCallbackFn>([this, add](const HostCallbackCall& c) {
          ++calls;
          {
            std::lock_guard<std::mutex> lock(mu);
            positions.push_back(c.mesh_position);
            if (!c.in_avals.empty()) seen.push_back(*c.in_avals[0]);
          }
          if (c.out.empty()) return;
          const auto* in = static_cast<const float*>(c.in[0]);
          auto* out = static_cast<float*>(c.out[0]);
          for (int64_t i = 0; i < c.out_avals[0]->size(); ++i) out[i] = in[i] + add;
        }));
  }
};

std::vector<Array> call(const Counter& c, const std::vector<Array>& in,
                        const std::vector<ir::Aval>& out, bool effect,
                        const std::string& vmap_method = "") {
  return prim::host_callback("test_callback", c.id, in, out, effect, vmap_method);
}

TEST(HostCallback, PureRunsOnReplicatedOperandsAndUnusedOnesAreDropped) {
  Mesh mesh = make_mesh({8}, {"x"});
  Counter c(100);
  Array x = device_put(arange(16, DType::F32), NamedSharding(mesh, P("x")));
  auto f = jit([&](const Array& a) {
    return call(c, {a}, {ir::Aval{{16}, DType::F32}}, /*effect=*/false)[0] * 2.0;
  });
  EXPECT_EQ(f(x).to_vector<float>()[3], 206.0f);
  EXPECT_EQ(c.calls.load(), 8);  // every device, on the whole (gathered) operand
  for (const ir::Aval& a : c.seen) EXPECT_EQ(a.shape, Shape{16});
  Counter unused(0);
  auto g = jit([&](const Array& a) {
    call(unused, {a}, {ir::Aval{{16}, DType::F32}}, /*effect=*/false);
    return a + 1.0;
  });
  g(x);
  EXPECT_EQ(unused.calls.load(), 0);
  EXPECT_EQ(g.lower(x).as_text().find("pure_callback"), std::string::npos);
}

TEST(HostCallback, AnEffectRunsOnceAndEveryDeviceGetsItsResults) {
  Mesh mesh = make_mesh({8}, {"x"});
  Counter c(1);
  Array x = device_put(arange(8, DType::F32), NamedSharding(mesh, P("x")));
  auto f = jit([&](const Array& a) {
    return call(c, {a}, {ir::Aval{{8}, DType::F32}}, /*effect=*/true)[0];
  });
  Array y = f(x);
  EXPECT_EQ(c.calls.load(), 1);
  EXPECT_EQ(c.positions, std::vector<int64_t>{0});
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  // An effect without results is kept though nothing uses it.
  Counter print;
  auto g = jit([&](const Array& a) {
    call(print, {a}, {}, /*effect=*/true);
    return a * 3.0;
  });
  g(x);
  g(x);
  EXPECT_EQ(print.calls.load(), 2);
  EXPECT_NE(g.lower(x).as_text().find("effect_callback"), std::string::npos);
}

TEST(HostCallback, InsideShardMapEachDeviceCallsWithItsBlock) {
  Mesh mesh = make_mesh({4, 2}, {"x", "y"});
  Counter c(10);
  auto body = [&](const Array& b) {
    call(c, {b}, {}, /*effect=*/true);
    return call(c, {b}, {ir::Aval{b.shape(), DType::F32}}, /*effect=*/false)[0];
  };
  auto f = jit(shard_map(body, mesh, {P("x", "y")}, {P("x", "y")}));
  Array y = f(reshape(arange(16, DType::F32), {8, 2}));
  EXPECT_EQ(c.calls.load(), 16);
  for (const ir::Aval& a : c.seen) EXPECT_EQ(a.shape, (Shape{2, 1}));
  std::vector<float> want;
  for (int i = 0; i < 16; ++i) want.push_back(static_cast<float>(i) + 10);
  EXPECT_EQ(y.to_vector<float>(), want);
}

TEST(HostCallback, LoopsCallOncePerIterationAndVmapLoopsPerExample) {
  Counter c;
  auto f = jit([&](const Array& a) {
    return fori_loop(
        0, 5,
        [&](const Array&, const Array& s) {
          call(c, {s}, {}, /*effect=*/true);
          return s + 1.0;
        },
        a);
  });
  EXPECT_EQ(f(zeros({2})).to_vector<float>(), (std::vector<float>{5, 5}));
  EXPECT_EQ(c.calls.load(), 5);

  Counter v(1);
  ArraysFn one = [&](const std::vector<Array>& a) {
    return call(v, {a[0]}, {ir::Aval{{3}, DType::F32}}, false, "sequential");
  };
  std::vector<Array> out = vmap(one, {0})({reshape(arange(12, DType::F32), {4, 3})});
  EXPECT_EQ(v.calls.load(), 4);
  for (const ir::Aval& a : v.seen) EXPECT_EQ(a.shape, Shape{3});
  EXPECT_EQ(out[0].to_vector<float>()[11], 12.0f);
  ArraysFn refused = [&](const std::vector<Array>& a) {
    return call(v, {a[0]}, {ir::Aval{{3}, DType::F32}}, false);
  };
  EXPECT_PARTIX_ERROR(vmap(refused, {0})({zeros({4, 3})}), "vmap_method");
}

TEST(HostCallback, ReverseModeRefusesACotangentThroughIt) {
  Counter c;
  auto loss = [&](const Array& a) {
    return sum(call(c, {a}, {ir::Aval{{3}, DType::F32}}, false)[0]);
  };
  EXPECT_PARTIX_ERROR(jit(grad(loss))(zeros({3})), "cannot be differentiated");
}

TEST(HostCallback, AFailureReachesTheCallerAndNoDeviceWaits) {
  Mesh mesh = make_mesh({8}, {"x"});
  const int64_t fails = prim::register_host_callback(std::make_shared<const prim::HostCallbackFn>(
      [](const HostCallbackCall&) { throw Error("[test_callback] disk full"); }));
  Array x = device_put(arange(8, DType::F32), NamedSharding(mesh, P("x")));
  auto f = jit([&](const Array& a) {
    return prim::host_callback("test_callback", fails, {a}, {ir::Aval{{8}, DType::F32}}, true,
                               "")[0] +
           a;
  });
  EXPECT_PARTIX_ERROR(f(x), "disk full");
  EXPECT_EQ((x * 2.0).to_vector<float>()[7], 14.0f);  // the runtime still runs programs
}

}  // namespace
}  // namespace partix

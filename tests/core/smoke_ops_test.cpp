#include <cmath>
#include "partix/ops.h"
#include "test_util.h"

using namespace partix;

TEST(Smoke, EagerArithmetic) {
  Array a = from_vector<float>({1, 2, 3, 4}, {2, 2});
  Array b = a * 2.0 + 1.0;
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{3, 5, 7, 9}));
  Array c = matmul(a, a);
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{7, 10, 15, 22}));
  EXPECT_EQ(sum(a).item<float>(), 10.0f);
}

TEST(Smoke, JitTracesOncePerKey) {
  int calls = 0;
  auto f = jit([&](const Array& x, const Array& y) {
    calls++;
    return exp(x) * y + 1.0;
  });
  Array x = from_vector<float>({0, 1}, {2});
  Array y = from_vector<float>({2, 3}, {2});
  Array r = f(x, y);
  auto v = r.to_vector<float>();
  EXPECT_FLOAT_EQ(v[0], 3.0f);
  EXPECT_NEAR(v[1], std::exp(1.0f) * 3 + 1, 1e-5);
  f(y, x);
  EXPECT_EQ(calls, 1);
  f(from_vector<float>({1, 2, 3}, {3}), from_vector<float>({1, 2, 3}, {3}));
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(f.trace_count(), 2);
  std::string text = f.lower(x, y).as_text();
  EXPECT_NE(text.find("exp("), std::string::npos) << text;
}

TEST(Smoke, JitParams) {
  auto f = jit([](const Params& p, const Array& x) {
    Params out;
    out["y"] = matmul(x, p.at("w")) + p.at("b");
    return out;
  });
  Params p{{"w", ones({3, 2})}, {"b", from_vector<float>({1, 2}, {2})}};
  Params r = f(p, from_vector<float>({1, 2, 3}, {1, 3}));
  EXPECT_EQ(r.at("y").to_vector<float>(), (std::vector<float>{7, 8}));
}

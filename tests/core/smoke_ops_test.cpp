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

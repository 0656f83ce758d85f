// The golden harness itself: comparisons, and that a wrong fast kernel is caught.
#include <cstring>

#include "prim/golden.h"
#include "test_util.h"

namespace partix {
namespace {

using golden::Json;

golden::HostTensor f32(std::vector<float> v) {
  return golden::to_host(from_vector<float>(v, {static_cast<int64_t>(v.size())}));
}

Json want(std::string dtype, Json data) {
  Json shape = Json::array({data.size()});
  return Json{{"dtype", dtype}, {"shape", shape}, {"data", data}};
}

TEST(GoldenHarness, ComparesWithinTolerance) {
  Json w = want("f32", {1.0, "nan", "-inf", 0.0});
  EXPECT_TRUE(golden::matches(f32({1.0f, NAN, -INFINITY, 0.0f}), w, 0, 0));
  EXPECT_FALSE(golden::matches(f32({1.0f, NAN, -INFINITY, -0.0f}), w, 0, 0));  // sign of zero
  EXPECT_TRUE(golden::matches(f32({1.0f, NAN, -INFINITY, -0.0f}), w, 1e-6, 0));
  EXPECT_FALSE(golden::matches(f32({1.0f, 0.0f, -INFINITY, 0.0f}), w, 1, 1));  // NaN is required
  EXPECT_FALSE(golden::matches(f32({1.0f, NAN, -3e38f, 0.0f}), w, 1, 1));      // so is -inf
  EXPECT_TRUE(golden::matches(f32({1.000001f, NAN, -INFINITY, 9e-8f}), w, 2e-6, 1e-7));
  EXPECT_FALSE(golden::matches(f32({1.00001f, NAN, -INFINITY, 0.0f}), w, 2e-6, 1e-7));
  // dtype and shape must agree exactly; integers compare exactly.
  EXPECT_FALSE(golden::matches(f32({1.0f}), want("f64", {1.0}), 1, 1));
  golden::HostTensor i = golden::to_host(from_vector<int64_t>({int64_t{1} << 62, -1}, {2}));
  EXPECT_TRUE(golden::matches(i, want("i64", {int64_t{1} << 62, -1}), 0, 0));
  EXPECT_FALSE(golden::matches(i, want("i64", {(int64_t{1} << 62) + 1, -1}), 1, 1));
}

// Replaces the fast kernel of `neg` for the scope, restoring the one registered before.
class WrongNegKernel {
 public:
  WrongNegKernel() {
    const prim::KernelFn* old = prim::find_kernel("neg", "cpu");
    saved_ = old ? *old : prim::KernelFn([](const prim::KernelCall&) { return false; });
    prim::register_kernel("neg", "cpu", [](const prim::KernelCall& c) {
      std::memcpy(c.out[0], c.in[0], static_cast<size_t>(c.out_aval(0).nbytes()));  // identity
      return true;
    });
  }
  ~WrongNegKernel() { prim::register_kernel("neg", "cpu", saved_); }

 private:
  prim::KernelFn saved_;
};

// The fast kernel mode really runs registered fast kernels, and the comparison catches one
// that is wrong while the reference stays right. (A shape of its own: eager executables are
// cached with the kernels found when they were built.)
TEST(GoldenHarness, CatchesAWrongFastKernel) {
  const Json* c = nullptr;
  for (const Json& k : golden::golden_file().at("cases")) {
    if (k.at("name") == "neg_f32") c = &k;
  }
  ASSERT_NE(c, nullptr);
  Json in = c->at("inputs")[0], out = c->at("outputs")[0];
  const size_t n = in.at("data").size();
  in["shape"] = out["shape"] = Json::array({1, 1, n});
  Array x = golden::to_array(golden::tensor_from_json(in));
  {
    WrongNegKernel wrong;
    golden::KernelModeScope fast(runtime::KernelMode::kFast);
    EXPECT_FALSE(golden::matches(golden::to_host(-x), out, 0, 0));
    golden::KernelModeScope ref(runtime::KernelMode::kReference);
    EXPECT_TRUE(golden::matches(golden::to_host(-x), out, 0, 0));
  }
  EXPECT_TRUE(golden::matches(golden::to_host(-x), out, 0, 0));  // the real kernel again
}

}  // namespace
}  // namespace partix

#include <numeric>

#include "test_util.h"

using namespace partix;

namespace {

std::vector<float> iota_f(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

// The slice `idx` of a row-major global array, computed independently of partix.
std::vector<float> global_slice(const std::vector<float>& g, const Shape& shape,
                                const std::vector<Slice>& idx) {
  std::vector<float> out;
  if (shape.size() == 1) {
    for (int64_t a = idx[0].start; a < idx[0].stop; ++a) out.push_back(g[static_cast<size_t>(a)]);
  } else {
    for (int64_t a = idx[0].start; a < idx[0].stop; ++a) {
      for (int64_t b = idx[1].start; b < idx[1].stop; ++b) {
        out.push_back(g[static_cast<size_t>(a * shape[1] + b)]);
      }
    }
  }
  return out;
}

std::vector<PartitionSpec> specs42() {
  return {P("x", "y"), P("x"), P("y"), P(None, "y"), P(Axes{"x", "y"}), P()};
}

}  // namespace

TEST(Array, FromVectorArangeZerosOnes) {
  Array a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.dtype(), DType::F32);
  EXPECT_EQ(a.ndim(), 2);
  EXPECT_EQ(a.size(), 6);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(a.sharding().mesh().device_ids(), (std::vector<int>{0}));
  EXPECT_EQ(arange(5).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(3, DType::F64).to_vector<double>(), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(zeros({2, 2}).to_vector<float>(), (std::vector<float>(4, 0.0f)));
  EXPECT_EQ(ones({3}, DType::I64).to_vector<int64_t>(), (std::vector<int64_t>(3, 1)));
  EXPECT_EQ(from_vector<bool>({true, false}, {2}).to_vector<bool>(),
            (std::vector<bool>{true, false}));
  EXPECT_EQ(scalar(2.5f).item<float>(), 2.5f);
  EXPECT_EQ(ones({2}, DType::BF16).to_vector<bfloat16>()[1], bfloat16(1.0f));
  EXPECT_EQ(from_vector<int32_t>({}, {0, 3}).size(), 0);
}

TEST(Array, ShardsEqualTheGlobalSliceEvenAndUneven) {
  Mesh m({4, 2}, {"x", "y"});
  for (const Shape& shape : {Shape{8, 4}, Shape{13, 5}, Shape{1, 1}, Shape{13}, Shape{1}}) {
    std::vector<float> g = iota_f(shape_size(shape));
    Array x = from_vector(g, shape);
    for (const PartitionSpec& spec : specs42()) {
      if (spec.size() > static_cast<int>(shape.size())) continue;
      SCOPED_TRACE(spec.to_string() + " on " + shape_to_string(shape));
      NamedSharding s(m, spec);
      Array y = device_put(x, s);
      EXPECT_EQ(y.sharding(), s);
      EXPECT_EQ(y.to_vector<float>(), g);
      auto shards = y.addressable_shards();
      ASSERT_EQ(shards.size(), 8u);
      for (size_t k = 0; k < 8; ++k) {
        EXPECT_EQ(shards[k].device.id, static_cast<int>(k));
        EXPECT_EQ(shards[k].index, s.device_index(shape, static_cast<int64_t>(k)));
        EXPECT_EQ(shards[k].replica_id, s.replica_id(static_cast<int64_t>(k)));
        Shape block;
        for (const Slice& sl : shards[k].index) block.push_back(sl.size());
        EXPECT_EQ(shards[k].data.shape(), block);
        EXPECT_EQ(shards[k].data.sharding().mesh().device_ids(),
                  (std::vector<int>{static_cast<int>(k)}));
        EXPECT_EQ(shards[k].data.to_vector<float>(), global_slice(g, shape, shards[k].index));
      }
    }
  }
}

TEST(Array, DevicePutRoundTripsBetweenAllPairs) {
  Mesh m({4, 2}, {"x", "y"});
  Mesh other({2, 4}, {"a", "b"}, {Device{7}, Device{6}, Device{5}, Device{4}, Device{3},
                                  Device{2}, Device{1}, Device{0}});
  for (const Shape& shape : {Shape{8, 4}, Shape{13, 5}}) {
    std::vector<float> g = iota_f(shape_size(shape));
    Array x = from_vector(g, shape);
    std::vector<NamedSharding> all;
    for (const PartitionSpec& spec : specs42()) all.emplace_back(m, spec);
    all.emplace_back(other, P("b", "a"));
    for (const NamedSharding& a : all) {
      Array xa = device_put(x, a);
      for (const NamedSharding& b : all) {
        Array xb = device_put(xa, b);
        ASSERT_EQ(xb.sharding(), b);
        ASSERT_EQ(xb.to_vector<float>(), g) << a.to_string() << " -> " << b.to_string();
        // Every shard of the result matches the global slice, not just the assembled value.
        for (const Shard& sh : xb.addressable_shards()) {
          ASSERT_EQ(sh.data.to_vector<float>(), global_slice(g, shape, sh.index));
        }
      }
    }
  }
}

TEST(Array, IntegerAndHalfDtypesSurviveDevicePut) {
  Mesh m({4, 2}, {"x", "y"});
  std::vector<int64_t> v(26);
  std::iota(v.begin(), v.end(), -5);
  Array x = device_put(from_vector(v, {13, 2}), NamedSharding(m, P("x", "y")));
  EXPECT_EQ(x.to_vector<int64_t>(), v);
  std::vector<bfloat16> h;
  for (int i = 0; i < 10; ++i) h.push_back(bfloat16(0.1f * static_cast<float>(i)));
  Array y = device_put(from_vector(h, {10}), NamedSharding(m, P(Axes{"x", "y"})));
  EXPECT_EQ(y.to_vector<bfloat16>(), h);
}

TEST(Array, BadInput) {
  Array a = from_vector<float>({1, 2, 3}, {3});
  EXPECT_PARTIX_ERROR(a.to_vector<int32_t>(), "[Array.to_vector]", "i32", "f32");
  EXPECT_PARTIX_ERROR(a.to_vector<double>(), "[Array.to_vector]", "f64", "f32");
  EXPECT_PARTIX_ERROR(a.item<float>(), "[Array.item]", "[3]");
  EXPECT_PARTIX_ERROR(from_vector<float>({1, 2, 3}, {2, 2}), "[from_vector]", "3 values",
                      "[2,2]");
  EXPECT_PARTIX_ERROR(from_vector<float>({}, {-1}), "[from_vector]", "negative");
  Mesh m({4, 2}, {"x", "y"});
  EXPECT_PARTIX_ERROR(device_put(a, NamedSharding(m, P("x", "y"))), "[NamedSharding]", "rank 1");
  EXPECT_PARTIX_ERROR(device_put(scalar(1.0f), NamedSharding(m, P("x"))), "[NamedSharding]",
                      "scalar");
  EXPECT_PARTIX_ERROR(device_put(a, Device{8}), "[device_put]", "device 8");
  EXPECT_PARTIX_ERROR(Array().shape(), "[Array]", "empty");
  EXPECT_PARTIX_ERROR(arange(-1), "[arange]", "-1");
}

TEST(Array, MemoryIsPerDeviceShard) {
  Mesh m({8}, {"x"});
  std::vector<MemoryStats> before;
  for (int d = 0; d < 8; ++d) before.push_back(memory_stats(d));
  Array x = device_put(zeros({64, 16}), NamedSharding(m, P("x")));
  for (int d = 1; d < 8; ++d) {
    EXPECT_EQ(memory_stats(d).bytes_in_use - before[static_cast<size_t>(d)].bytes_in_use,
              8 * 16 * 4)
        << "device " << d;
  }
}

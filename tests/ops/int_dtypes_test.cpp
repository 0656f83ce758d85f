// The narrow and unsigned integers (i8, i16, u8, u16, u32) across the product: JAX's promotion
// lattice (tests/golden/int_promotion.json, written by tools/golden/int_promotion.py), wrapping
// arithmetic in each width, conversions, reductions, sharded programs on 8 devices with
// collectives, random bits, checkpoints restored onto another mesh, and the IR text.
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/checkpoint_test_util.h"
#include "ir/program.h"
#include "partix/checkpoint.h"
#include "partix/partix.h"
#include "partix/random.h"
#include "test_util.h"

namespace partix {
namespace {

constexpr DType kNarrow[] = {DType::I8, DType::I16, DType::U8, DType::U16, DType::U32};

Mesh mesh_of(Shape sizes, std::vector<std::string> names) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<Device> devs(devices().begin(), devices().begin() + n);
  return Mesh(std::move(sizes), std::move(names), devs);
}

// Values of x as int64 (exact for every integer dtype).
std::vector<int64_t> ints(const Array& x) { return astype(x, DType::I64).to_vector<int64_t>(); }

Array int_array(const std::vector<int64_t>& v, DType dtype) {
  return astype(from_vector<int64_t>(v, {static_cast<int64_t>(v.size())}), dtype);
}

TEST(IntDtypes, NamesSizesAndKinds) {
  for (DType d : kNarrow) {
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
    EXPECT_TRUE(is_integral(d));
    EXPECT_FALSE(is_floating(d));
  }
  EXPECT_EQ(dtype_size(DType::I8), 1);
  EXPECT_EQ(dtype_size(DType::U16), 2);
  EXPECT_EQ(dtype_size(DType::U32), 4);
  EXPECT_TRUE(is_unsigned(DType::U8));
  EXPECT_FALSE(is_unsigned(DType::I8));
  EXPECT_EQ(int_bits(DType::I16), 16);
  EXPECT_EQ(int_bits(DType::F32), 0);
  EXPECT_PARTIX_ERROR(dtype_from_name("u64"), "unknown dtype 'u64'", "u32");
}

TEST(IntDtypes, PromotionIsJaxLattice) {
  std::ifstream f(std::string(PARTIX_TESTS_DIR) + "/golden/int_promotion.json");
  ASSERT_TRUE(f) << "tests/golden/int_promotion.json";
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<DType> ds;
  for (const auto& n : j.at("dtypes")) ds.push_back(dtype_from_name(n.get<std::string>()));
  ASSERT_EQ(ds.size(), 12u);
  for (size_t a = 0; a < ds.size(); ++a) {
    for (size_t b = 0; b < ds.size(); ++b) {
      // partix keeps 64-bit operands 64-bit (JAX's lattice); the rest equals JAX without x64.
      const DType want = dtype_from_name(j.at("lattice")[a][b].get<std::string>());
      EXPECT_EQ(promote_types(ds[a], ds[b]), want)
          << dtype_name(ds[a]) << " with " << dtype_name(ds[b]);
      if (int_bits(ds[a]) < 64 && int_bits(ds[b]) < 64 && ds[a] != DType::F64 &&
          ds[b] != DType::F64) {
        EXPECT_EQ(dtype_name(want), j.at("x32")[a][b].get<std::string>());
      }
    }
  }
  Array u = int_array({200}, DType::U8), i = int_array({-3}, DType::I8);
  Array s = u + i;  // u8 with i8 is i16: 197, no wrap
  EXPECT_EQ(s.dtype(), DType::I16);
  EXPECT_EQ(ints(s), (std::vector<int64_t>{197}));
}

TEST(IntDtypes, ArithmeticWrapsInItsWidth) {
  Array u8 = int_array({250, 0, 200, 7}, DType::U8);
  Array d8 = int_array({10, 1, 255, 0}, DType::U8);
  EXPECT_EQ(ints(u8 + d8), (std::vector<int64_t>{4, 1, 199, 7}));
  EXPECT_EQ(ints(u8 - d8), (std::vector<int64_t>{240, 255, 201, 7}));
  EXPECT_EQ(ints(u8 * d8), (std::vector<int64_t>{196, 0, 56, 0}));
  // Unsigned division has no -1 divisor: 200 / 255 is 0; x / 0 is all ones; numpy's x % 0 is 0
  // and x // 0 all ones, as JAX's jnp (checked with JAX 0.10.2).
  EXPECT_EQ(ints(u8 / d8), (std::vector<int64_t>{25, 0, 0, 255}));
  EXPECT_EQ(ints(int_array({9, 4, 200, 7}, DType::U8) % d8), (std::vector<int64_t>{9, 0, 200, 0}));
  EXPECT_EQ(ints(floor_divide(u8, d8)), (std::vector<int64_t>{25, 0, 0, 255}));
  // Signed: x % 0 is 0; x // 0 is -2 for x != 0 and -1 for 0 (JAX's floor fix of XLA's -1).
  Array s32 = int_array({5, -5, 0}, DType::I32), z32 = int_array({0, 0, 0}, DType::I32);
  EXPECT_EQ(ints(s32 % z32), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_EQ(ints(floor_divide(s32, z32)), (std::vector<int64_t>{-2, -2, -1}));
  EXPECT_EQ(ints(floor_divide(int_array({5, -5}, DType::I8), int_array({0, 0}, DType::I8))),
            (std::vector<int64_t>{-2, -2}));
  EXPECT_EQ(ints(-int_array({1, 0}, DType::U16)), (std::vector<int64_t>{65535, 0}));
  Array i8 = int_array({127, -128, -7}, DType::I8);
  EXPECT_EQ(ints(i8 + int_array({1, -1, 3}, DType::I8)), (std::vector<int64_t>{-128, 127, -4}));
  EXPECT_EQ(ints(abs(i8)), (std::vector<int64_t>{127, -128, 7}));
  EXPECT_EQ(ints(int_array({-7, 7}, DType::I16) / int_array({2, -2}, DType::I16)),
            (std::vector<int64_t>{-3, -3}));
  // u32 beyond int32: compared and ordered as unsigned.
  Array big = int_array({4000000000, 5, 2147483648}, DType::U32);
  Array one = int_array({1, 6, 2147483647}, DType::U32);
  EXPECT_EQ((big > one).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(ints(maximum(big, one)), (std::vector<int64_t>{4000000000, 6, 2147483648}));
  EXPECT_EQ(ints(big + big), (std::vector<int64_t>{3705032704, 10, 0}));
  // Weak Python numbers take the array's type.
  EXPECT_EQ((int_array({3}, DType::U8) + 1.0).dtype(), DType::U8);
}

TEST(IntDtypes, ConversionsSaturateFromFloatAndWrapBetweenIntegers) {
  Array f = from_vector<float>({300.5f, -5.0f, NAN, 65.9f, 4.5e9f}, {5});
  EXPECT_EQ(ints(astype(f, DType::U8)), (std::vector<int64_t>{255, 0, 0, 65, 255}));
  EXPECT_EQ(ints(astype(f, DType::I8)), (std::vector<int64_t>{127, -5, 0, 65, 127}));
  EXPECT_EQ(ints(astype(f, DType::U32)), (std::vector<int64_t>{300, 0, 0, 65, 4294967295}));
  Array i = from_vector<int32_t>({-1, 256, 70000}, {3});
  EXPECT_EQ(ints(astype(i, DType::U32)), (std::vector<int64_t>{4294967295, 256, 70000}));
  EXPECT_EQ(ints(astype(i, DType::U8)), (std::vector<int64_t>{255, 0, 112}));
  EXPECT_EQ(ints(astype(i, DType::I16)), (std::vector<int64_t>{-1, 256, 4464}));
  EXPECT_EQ(astype(int_array({4294967295}, DType::U32), DType::F64).to_vector<double>(),
            (std::vector<double>{4294967295.0}));
  EXPECT_EQ(astype(int_array({0, 3}, DType::U8), DType::Bool).to_vector<bool>(),
            (std::vector<bool>{false, true}));
}

TEST(IntDtypes, ReductionsKeepTheTypeAndItsLimits) {
  Array u = int_array({200, 100, 7}, DType::U8);
  EXPECT_EQ(ints(sum(u)), (std::vector<int64_t>{51}));  // wraps: 307 mod 256
  EXPECT_EQ(ints(max(int_array({4000000000, 3}, DType::U32))), (std::vector<int64_t>{4000000000}));
  EXPECT_EQ(ints(min(int_array({-100, 3}, DType::I8))), (std::vector<int64_t>{-100}));
  EXPECT_EQ(ints(sum(int_array({-100, -100, 1}, DType::I8))), (std::vector<int64_t>{57}));
  EXPECT_PARTIX_ERROR(max(zeros({0}, DType::U16)), "[max]", "u16[0]");
}

TEST(IntDtypes, ShardedProgramsEqualOneDevice) {
  Mesh m = mesh_of({4, 2}, {"x", "y"});
  for (DType d : kNarrow) {
    SCOPED_TRACE(std::string(dtype_name(d)));
    Array x = astype(iota({8, 6}, 0, DType::I32) * 37.0 + iota({8, 6}, 1, DType::I32), d);
    Array xs = device_put(x, NamedSharding(m, P("x", "y")));
    auto f = [](const Array& a) { return transpose(a * a + a, {1, 0}); };
    Array want = f(x);
    Array got = jit(f)(xs);
    EXPECT_EQ(got.dtype(), d);
    EXPECT_EQ(ints(got), ints(want));
    // The explicit collectives: psum over 'x' (a reduction in the type) and all_gather.
    auto g = shard_map([](const Array& b) { return psum(b, Axes{"x"}); }, m, {P("x", "y")},
                       {P(None, "y")});
    Array s = jit(g)(xs);
    std::vector<int64_t> xv = ints(x), sv(12, 0);
    for (int r = 0; r < 8; ++r) {
      for (int c = 0; c < 6; ++c) sv[(r % 2) * 6 + c] += xv[r * 6 + c];
    }
    Array ref = astype(from_vector<int64_t>(sv, {2, 6}), d);  // the sum wrapped in the type
    EXPECT_EQ(s.dtype(), d);
    EXPECT_EQ(ints(s), ints(ref));
    auto h = shard_map([](const Array& b) { return all_gather(b, Axes{"x"}, 0, true); }, m,
                       {P("x", "y")}, {P(None, "y")});
    EXPECT_EQ(ints(jit(h)(xs)), xv);
  }
}

TEST(IntDtypes, RandomBitsCoverTheTypeAndAreTheSameInAnySharding) {
  Array k = random::key(7);
  Array b = random::bits(k, {64, 8}, DType::U8);
  EXPECT_EQ(b.dtype(), DType::U8);
  std::vector<int64_t> v = ints(b);
  int64_t lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
  EXPECT_GE(lo, 0);
  EXPECT_LT(lo, 8);  // 512 draws over 256 values reach both ends
  EXPECT_GT(hi, 247);
  EXPECT_LE(hi, 255);
  Array w = random::bits(k, {1000}, DType::U32);
  std::vector<int64_t> wv = ints(w);
  EXPECT_GT(*std::max_element(wv.begin(), wv.end()), int64_t{1} << 31);  // the top bit is used
  // Sharded draws equal the unsharded draw.
  Mesh m = mesh_of({4, 2}, {"x", "y"});
  auto f = [](const Array& key) {
    return with_sharding_constraint(random::bits(key, {64, 8}, DType::U8),
                                    NamedSharding(mesh_of({4, 2}, {"x", "y"}), P("x", "y")));
  };
  EXPECT_EQ(ints(jit(f)(k)), v);
  EXPECT_PARTIX_ERROR(random::bits(k, {2}, DType::F32), "[random.bits]", "f32");
  EXPECT_PARTIX_ERROR(random::bits(k, {2}, DType::I64), "[random.bits]", "i64");
}

TEST(IntDtypes, CheckpointsRestoreOntoAnotherMesh) {
  test::TempDir dir;
  const std::string path = dir.path().string();
  Mesh saved = mesh_of({4, 2}, {"x", "y"});
  std::vector<Array> leaves;
  for (DType d : kNarrow) {
    leaves.push_back(device_put(astype(iota({8, 6}, 1, DType::I32) * 1000.0 - 2500.0, d),
                                NamedSharding(saved, P("x", "y"))));
  }
  ckpt::save(path, 3, leaves);
  ckpt::wait();
  Mesh other = mesh_of({8}, {"i"});
  std::vector<std::string> names;
  std::vector<ckpt::ArraySpec> specs;
  for (size_t i = 0; i < leaves.size(); ++i) {
    names.push_back("[" + std::to_string(i) + "]");
    specs.push_back({leaves[i].shape(), leaves[i].dtype(), NamedSharding(other, P("i"))});
  }
  std::vector<Array> out = ckpt::restore_leaves(path, 3, names, specs);
  for (size_t i = 0; i < leaves.size(); ++i) {
    SCOPED_TRACE(names[i]);
    EXPECT_EQ(out[i].dtype(), leaves[i].dtype());
    EXPECT_EQ(out[i].sharding(), NamedSharding(other, P("i")));
    EXPECT_EQ(ints(out[i]), ints(leaves[i]));
  }
  // Widening that loses nothing (u8 -> i32) restores; narrowing a value that does not fit is
  // refused by name.
  std::vector<Array> wide = ckpt::restore_leaves(
      path, 3, {"[2]"}, {{{8, 6}, DType::I32, NamedSharding(other, P())}}, {.partial = true});
  EXPECT_EQ(ints(wide[0]), ints(leaves[2]));
  EXPECT_PARTIX_ERROR(
      ckpt::restore_leaves(path, 3, {"[4]"}, {{{8, 6}, DType::U8, NamedSharding(other, P())}},
                           {.partial = true}),
      "[ckpt.restore]", "'[4]'");
}

TEST(IntDtypes, IrTextRoundTripsNarrowLiterals) {
  auto f = [](const Array& a) { return a + int_array({255, 1}, DType::U8); };
  const std::string text = jit(f).lower(int_array({1, 2}, DType::U8)).as_text();
  EXPECT_NE(text.find("u8[2]"), std::string::npos) << text;
  EXPECT_EQ(ints(jit(f)(int_array({1, 2}, DType::U8))), (std::vector<int64_t>{0, 3}));
  const std::string lit =
      "program @f () -> (%0) {\n  %0 = constant() {value=<u32[2]: 4294967295, 0>} : u32[2]\n}\n";
  EXPECT_EQ(ir::to_text(ir::parse_program(lit)), lit);
  EXPECT_PARTIX_ERROR(ir::parse_program("program @f () -> (%0) {\n  %0 = constant() "
                                        "{value=<u8[1]: 256>} : u8[1]\n}\n"),
                      "'256' is not an u8 value");
  EXPECT_PARTIX_ERROR(ir::parse_program("program @f () -> (%0) {\n  %0 = constant() "
                                        "{value=<i8[1]: -129>} : i8[1]\n}\n"),
                      "'-129' is not an i8 value");
}

TEST(IntDtypes, BitwiseOpsAndShiftsInEveryWidth) {
  // Reference (narrow types) and fast kernels (i32, i64) agree with the widths' semantics.
  Array a8 = int_array({-128, 127, -1, 5}, DType::I8), s8 = int_array({1, 1, 7, 9}, DType::I8);
  EXPECT_EQ(ints(shift_left(a8, s8)), (std::vector<int64_t>{0, -2, -128, 0}));
  EXPECT_EQ(ints(shift_right_arithmetic(a8, s8)), (std::vector<int64_t>{-64, 63, -1, 0}));
  EXPECT_EQ(ints(shift_right_logical(a8, s8)), (std::vector<int64_t>{64, 63, 1, 0}));
  Array a32 = from_vector<int32_t>({-8, 1, 1, -1}, {4}),
        s32 = from_vector<int32_t>({1, 31, 32, 40}, {4});
  EXPECT_EQ(ints(shift_left(a32, s32)), (std::vector<int64_t>{-16, -2147483648, 0, 0}));
  EXPECT_EQ(ints(shift_right_arithmetic(a32, s32)), (std::vector<int64_t>{-4, 0, 0, -1}));
  EXPECT_EQ(ints(shift_right_logical(a32, s32)), (std::vector<int64_t>{2147483644, 0, 0, 0}));
  Array a64 = from_vector<int64_t>({-1, -1, 5}, {3}), s64 = from_vector<int64_t>({0, 60, 64}, {3});
  EXPECT_EQ(ints(shift_right_logical(a64, s64)), (std::vector<int64_t>{-1, 15, 0}));
  Array u = int_array({0xF0, 0x0F, 0xFF}, DType::U8), v = int_array({0xFF, 0xF0, 0x0F}, DType::U8);
  EXPECT_EQ(ints(bitwise_and(u, v)), (std::vector<int64_t>{0xF0, 0x00, 0x0F}));
  EXPECT_EQ(ints(bitwise_or(u, v)), (std::vector<int64_t>{0xFF, 0xFF, 0xFF}));
  EXPECT_EQ(ints(bitwise_xor(u, v)), (std::vector<int64_t>{0x0F, 0xFF, 0xF0}));
  EXPECT_EQ(ints(bitwise_not(u)), (std::vector<int64_t>{0x0F, 0xF0, 0x00}));
  EXPECT_EQ(ints(bitwise_not(from_vector<int32_t>({0, -1}, {2}))), (std::vector<int64_t>{-1, 0}));
  EXPECT_EQ(bitwise_not(from_vector<bool>({true, false}, {2})).to_vector<bool>(),
            (std::vector<bool>{false, true}));
  // Sharded under jit, equal to one device.
  Mesh m = mesh_of({8}, {"i"});
  Array x = astype(iota({64}, 0, DType::I32) * 2654435761.0, DType::U32);
  auto mix = [](const Array& a) {
    Array t = bitwise_xor(a, shift_right_logical(a, full({}, 7, DType::U32)));
    return bitwise_or(shift_left(t, full({}, 3, DType::U32)),
                      shift_right_arithmetic(t, full({}, 29, DType::U32)));
  };
  EXPECT_EQ(ints(jit(mix)(device_put(x, NamedSharding(m, P("i"))))), ints(mix(x)));
  EXPECT_PARTIX_ERROR(shift_left(from_vector<float>({1}, {1}), from_vector<float>({1}, {1})),
                      "shift_left", "an integer dtype");
  EXPECT_PARTIX_ERROR(bitwise_and(from_vector<float>({1}, {1}), from_vector<float>({1}, {1})),
                      "and", "an integer or bool dtype");
}

}  // namespace
}  // namespace partix

// GGUF: every supported tensor type against gguf-py (tests/io/golden/quants.*), typed
// metadata, sharded dequantization that touches only each device's blocks, malformed files
// built byte by byte, and the real SmolLM2 GGUF against tools/golden/gguf_smollm2.py.
#include <cmath>
#include <cstring>
#include <random>

#include "formats/gguf.h"
#include "io/io_test_util.h"
#include "core/quants.h"

namespace partix {
namespace {

using test::TempDir;

// Floats from two implementations of the same dequantization: equal up to float rounding.
void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double tol = 1e-6 * std::max(1.0, std::fabs(want[i]));
    if (std::fabs(static_cast<double>(got[i]) - want[i]) > tol) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
      ++bad;
    }
  }
}

using test::GgufBuilder;

// A valid little file: one F32 tensor [2, 4] and a few keys.
GgufBuilder small_file() {
  GgufBuilder b;
  b.kv_str("general.architecture", "llama").kv_u32("llama.block_count", 2);
  b.tensor("w", {4, 2}, 0, 0);
  for (int i = 0; i < 8; ++i) GgufBuilder::put<float>(b.data, static_cast<float>(i) + 0.5f);
  return b;
}

// ---------------------------------------------------------------------------------------

TEST(Gguf, DequantizesEveryTypeLikeGgufPy) {
  nlohmann::json golden = test::read_golden_json("quants.json");
  GgufFile f = GgufFile::open(test::golden_path("quants.gguf"));
  EXPECT_EQ(f.version(), golden["version"].get<uint32_t>());
  EXPECT_EQ(f.alignment(), 64);
  EXPECT_EQ(f.tensor_names(), golden["tensor_order"].get<std::vector<std::string>>());
  for (const auto& [name, e] : golden["tensors"].items()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(f.tensor_shape(name), e["shape"].get<Shape>());
    EXPECT_EQ(f.tensor_type(name), e["type"].get<std::string>());
    if (!e.contains("values")) {
      EXPECT_PARTIX_ERROR(f.load(name), "[gguf]", "tensor '" + name + "'", "type Q5_K",
                          "does not dequantize");
      continue;
    }
    const std::vector<double> want = e["values"].get<std::vector<double>>();
    Array a = f.load(name);
    EXPECT_EQ(a.dtype(), DType::F32);
    EXPECT_EQ(a.shape(), e["shape"].get<Shape>());
    expect_close(a.to_vector<float>(), want, name);
    // Other floating targets are the f32 values converted with correct rounding.
    std::vector<float> f32 = a.to_vector<float>();
    std::vector<bfloat16> bf = f.load(name, DType::BF16).to_vector<bfloat16>();
    std::vector<double> f64 = f.load(name, DType::F64).to_vector<double>();
    for (size_t i = 0; i < f32.size(); ++i) {
      EXPECT_EQ(bf[i], bfloat16(f32[i]));
      EXPECT_EQ(f64[i], static_cast<double>(f32[i]));
    }
    EXPECT_PARTIX_ERROR(f.load(name, DType::I32), "[gguf]", "floating dtype");
  }
}

TEST(Gguf, ReadsTypedMetadata) {
  nlohmann::json md = test::read_golden_json("quants.json")["metadata"];
  GgufFile f = GgufFile::open(test::golden_path("quants.gguf"));
  EXPECT_EQ(f.get_int("general.alignment"), 64);
  for (const char* k : {"test.u8", "test.i8", "test.u16", "test.i16", "test.u32", "test.i32",
                        "test.u64", "test.i64"}) {
    EXPECT_EQ(f.get_int(k), md[k].get<int64_t>()) << k;
  }
  EXPECT_EQ(f.type_name("test.u8"), "uint8");
  EXPECT_EQ(f.type_name("test.i64"), "int64");
  EXPECT_EQ(f.get_float("test.f32"), md["test.f32"].get<double>());
  EXPECT_EQ(f.get_float("test.f64"), md["test.f64"].get<double>());
  EXPECT_EQ(f.get_bool("test.bool"), md["test.bool"].get<bool>());
  EXPECT_EQ(f.get_string("test.string"), md["test.string"].get<std::string>());
  EXPECT_EQ(f.get_strings("test.strings"), md["test.strings"].get<std::vector<std::string>>());
  EXPECT_EQ(f.get_ints("test.ints"), md["test.ints"].get<std::vector<int64_t>>());
  EXPECT_EQ(f.get_floats("test.floats"), md["test.floats"].get<std::vector<double>>());
  EXPECT_EQ(f.type_name("test.strings"), "array[string]");
  EXPECT_EQ(f.type_name("test.nested"), "array[array]");
  // Nested arrays are parsed (and bounded); the internal value holds them.
  {
    std::string bytes = test::read_bytes(test::golden_path("quants.gguf"));
    detail::GgufParsed p = detail::parse_gguf(
        std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "quants.gguf");
    auto it =
        std::find_if(p.kv.begin(), p.kv.end(), [](auto& kv) { return kv.first == "test.nested"; });
    ASSERT_NE(it, p.kv.end());
    std::vector<std::vector<int64_t>> nested;
    for (const detail::GgufValue& v : it->second.arrays) nested.push_back(v.ints);
    EXPECT_EQ(nested, md["test.nested"].get<std::vector<std::vector<int64_t>>>());
  }
  // Fallbacks apply only to missing keys.
  EXPECT_EQ(f.get_int("nope", 7), 7);
  EXPECT_EQ(f.get_string("nope", "x"), "x");
  EXPECT_EQ(f.get_float("nope", 1.5), 1.5);
  EXPECT_TRUE(f.get_bool("nope", true));
  EXPECT_PARTIX_ERROR(f.get_int("test.string", 3), "[gguf]", "'test.string'", "is a string",
                      "not an integer");
  EXPECT_PARTIX_ERROR(f.get_string("nope"), "[gguf]", "quants.gguf", "no metadata key 'nope'");
  EXPECT_PARTIX_ERROR(f.get_float("test.i32"), "is a int32, not a float");
  EXPECT_PARTIX_ERROR(f.get_strings("test.ints"), "array[int32]", "not an array of strings");
  EXPECT_PARTIX_ERROR(f.get_ints("test.nested"), "array[array]");
  EXPECT_PARTIX_ERROR(f.get_bool("test.u8"), "not a bool");
  EXPECT_PARTIX_ERROR(f.tensor_shape("nope"), "no tensor 'nope'");
  EXPECT_PARTIX_ERROR(GgufFile{}.keys(), "empty GgufFile");
}

TEST(Gguf, ShardedLoadDequantizesOnlyEachDevicesBlocks) {
  nlohmann::json golden = test::read_golden_json("quants.json");
  GgufFile f = GgufFile::open(test::golden_path("quants.gguf"));
  const Mesh mesh({2, 4}, {"x", "y"});
  for (const char* name : {"q4_k", "q6_k", "q8_0", "q4_0", "q4_1", "f16", "bf16", "f32_3d"}) {
    const std::vector<float> whole = f.load(name).to_vector<float>();
    const Shape shape = f.tensor_shape(name);
    // Column splits that cut through quantization blocks, uneven splits, replicas.
    for (const PartitionSpec& spec :
         {P("x", "y"), P(None, "y"), P(None, Axes{"x", "y"}), P("y"), P(None, None, "x"), P()}) {
      if (spec.size() > static_cast<int>(shape.size())) continue;
      SCOPED_TRACE(std::string(name) + " " + spec.to_string());
      NamedSharding s(mesh, spec);
      Array a;
      std::vector<int64_t> peak = test::peak_bytes_during(8, [&] { a = f.load(name, s); });
      const int64_t block = shape_size(s.shard_shape(shape)) * 4;
      for (int d = 0; d < 8; ++d) EXPECT_EQ(peak[static_cast<size_t>(d)], block) << "device " << d;
      EXPECT_EQ(a.to_vector<float>(), whole);
    }
  }
}

TEST(Gguf, RejectsMalformedFiles) {
  TempDir dir;
  const std::string path = dir.file("bad.gguf");
  auto expect_bad = [&](const std::string& bytes, const std::string& fragment) {
    SCOPED_TRACE(fragment);
    test::write_bytes(path, bytes);
    EXPECT_PARTIX_ERROR(GgufFile::open(path), "[gguf]", "bad.gguf", fragment);
  };
  {  // the baseline is valid
    test::write_bytes(path, small_file().build());
    GgufFile f = GgufFile::open(path);
    EXPECT_EQ(f.load("w").to_vector<float>(),
              (std::vector<float>{0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5}));
    EXPECT_EQ(f.tensor_shape("w"), (Shape{2, 4}));
    EXPECT_EQ(f.alignment(), 32);
  }
  expect_bad("", "truncated");
  expect_bad("GGU", "truncated");
  GgufBuilder b = small_file();
  b.magic = "GGML";
  expect_bad(b.build(), "not a GGUF file");
  b = small_file();
  b.version = 1;
  expect_bad(b.build(), "version 1 is not supported");
  b.version = 4;
  expect_bad(b.build(), "version 4 is not supported");
  b.version = 3u << 24;
  expect_bad(b.build(), "big-endian");
  b = small_file();
  b.n_kv = uint64_t{1} << 60;
  expect_bad(b.build(), "metadata entries");
  b = small_file();
  b.n_tensors = uint64_t{1} << 60;
  expect_bad(b.build(), "tensors, more than the file can hold");
  {
    std::string v;
    GgufBuilder::put<uint64_t>(v, uint64_t{1} << 40);
    expect_bad(small_file().kv("s", 8, v).build(), "truncated");
  }
  expect_bad(small_file().kv("t", 13, "").build(), "unknown value type 13");
  expect_bad(small_file().kv("t", 7, std::string(1, '\2')).build(), "bool holding 2");
  expect_bad(small_file().kv_u32("llama.block_count", 3).build(),
             "'llama.block_count' appears twice");
  expect_bad(small_file().kv("", 0, std::string(1, '\0')).build(), "key of 0 bytes");
  {
    std::string arr;
    GgufBuilder::put<uint32_t>(arr, 4);  // uint32 elements
    GgufBuilder::put<uint64_t>(arr, uint64_t{1} << 50);
    expect_bad(small_file().kv("a", 9, arr).build(), "claims 1125899906842624 elements");
  }
  {
    std::string arr;  // arrays nested 10 deep
    for (int k = 0; k < 10; ++k) {
      GgufBuilder::put<uint32_t>(arr, 9);
      GgufBuilder::put<uint64_t>(arr, 1);
    }
    GgufBuilder::put<uint32_t>(arr, 0);
    GgufBuilder::put<uint64_t>(arr, 0);
    expect_bad(small_file().kv("deep", 9, arr).build(), "nests arrays deeper");
  }
  expect_bad(small_file().kv_str("general.alignment", "32").build(),
             "general.alignment is a string");
  expect_bad(small_file().kv_u32("general.alignment", 48).build(), "not a power of two");
  expect_bad(small_file().kv_u32("general.alignment", 0).build(), "not a power of two");
  expect_bad(small_file().tensor("w", {1}, 0, 64).build(), "tensor name 'w' appears twice");
  expect_bad(small_file().tensor(std::string(65, 'n'), {1}, 0, 64).build(), "name of 65 bytes");
  expect_bad(small_file().tensor("v", {1, 1, 1, 1, 1}, 0, 0).build(), "5 dimensions");
  expect_bad(small_file().tensor("v", {1}, 4, 0).build(), "unknown ggml type 4");
  expect_bad(small_file().tensor("v", {1}, 1000, 0).build(), "unknown ggml type 1000");
  expect_bad(small_file().tensor("v", {48, 1}, 2, 0).build(),
             "not a multiple of its block size 32");
  expect_bad(small_file().tensor("v", {uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0).build(),
             "too many elements");
  expect_bad(small_file().tensor("v", {1}, 0, 8).build(), "not a multiple of the alignment 32");
  expect_bad(small_file().tensor("v", {1}, 0, 64).build(), "ends past the end of the file");
  expect_bad(small_file().tensor("v", {4}, 0, 0).build(), "overlap");
  {
    GgufBuilder t = small_file();
    t.data.resize(t.data.size() - 1);
    expect_bad(t.build(), "truncated?");
  }
  EXPECT_PARTIX_ERROR(GgufFile::open(dir.file("missing.gguf")), "[gguf]", "cannot open");
  EXPECT_PARTIX_ERROR(GgufFile::open(dir.path().string()), "[gguf]", "not a regular file");
}

TEST(Gguf, UnsignedAboveInt64IsReportedNotWrapped) {
  TempDir dir;
  std::string v;
  GgufBuilder::put<uint64_t>(v, ~uint64_t{0});
  test::write_bytes(dir.file("u.gguf"), small_file().kv("big", 10, v).build());
  GgufFile f = GgufFile::open(dir.file("u.gguf"));
  EXPECT_EQ(f.type_name("big"), "uint64");
  EXPECT_PARTIX_ERROR(f.get_int("big"), "[gguf]", "'big'", "18446744073709551615", "beyond int64");
}

// Found by fuzzing: a tensor with no rows but 2^40 columns holds no data, yet its load once
// sized a dequantization buffer by the row width (4 TiB).
TEST(Gguf, EmptyTensorWithHugeRowsLoadsWithoutAllocating) {
  TempDir dir;
  GgufBuilder b;
  b.tensor("wide", {uint64_t{1} << 40, 0}, 0, 0);     // F32
  b.tensor("wide_q8", {uint64_t{1} << 40, 0}, 8, 0);  // Q8_0
  test::write_bytes(dir.file("wide.gguf"), b.build());
  GgufFile f = GgufFile::open(dir.file("wide.gguf"));
  for (const char* name : {"wide", "wide_q8"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(f.tensor_shape(name), (Shape{0, int64_t{1} << 40}));
    Array a = f.load(name);
    EXPECT_EQ(a.shape(), (Shape{0, int64_t{1} << 40}));
    EXPECT_EQ(a.size(), 0);
  }
}

// No prefix of a valid file, and no corrupted byte, may crash the reader.
TEST(Gguf, SurvivesTruncationAndCorruption) {
  TempDir dir;
  const std::string good = test::read_bytes(test::golden_path("quants.gguf"));
  const std::string path = dir.file("cut.gguf");
  // The file may end in padding after its last tensor: cuts there leave a valid file.
  detail::GgufParsed parsed = detail::parse_gguf(
      std::span(reinterpret_cast<const uint8_t*>(good.data()), good.size()), "quants.gguf");
  uint64_t data_end = 0;
  for (const auto& t : parsed.tensors) data_end = std::max(data_end, t.offset + t.nbytes);
  const size_t needed = parsed.data_start + data_end;
  // Every cut through the header and tensor infos, then a sample through the data.
  for (size_t n = 0; n < needed; n += n < 1200 ? 1 : 97) {
    test::write_bytes(path, good.substr(0, n));
    EXPECT_THROW(GgufFile::open(path), Error) << "prefix of " << n << " bytes";
  }
  std::mt19937 rng(11);
  for (int trial = 0; trial < 400; ++trial) {
    std::string bad = good;
    for (int k = 0; k < 3; ++k) bad[rng() % 1200] = static_cast<char>(rng());
    test::write_bytes(path, bad);
    try {
      GgufFile f = GgufFile::open(path);
      for (const std::string& n : f.tensor_names()) {
        try {
          (void)f.load(n);
        } catch (const Error&) {
        }
      }
      (void)Tokenizer::from_gguf(f);
    } catch (const Error&) {
    }
  }
}

TEST(Gguf, TypeTableMatchesTheFormat) {
  // Block geometry of the types partix dequantizes (the format's, as gguf-py lists them).
  struct Want {
    uint32_t id;
    const char* name;
    int64_t elems, bytes;
  };
  for (const Want& w : {Want{0, "F32", 1, 4}, Want{1, "F16", 1, 2}, Want{30, "BF16", 1, 2},
                        Want{8, "Q8_0", 32, 34}, Want{2, "Q4_0", 32, 18}, Want{3, "Q4_1", 32, 20},
                        Want{12, "Q4_K", 256, 144}, Want{14, "Q6_K", 256, 210}}) {
    auto t = detail::ggml_type_info(w.id);
    ASSERT_TRUE(t.has_value()) << w.name;
    EXPECT_EQ(t->name, w.name);
    EXPECT_EQ(t->block_elems, w.elems);
    EXPECT_EQ(t->block_bytes, w.bytes);
    EXPECT_TRUE(t->supported);
  }
  EXPECT_FALSE(detail::ggml_type_info(4).has_value());  // retired Q4_2
  EXPECT_FALSE(detail::ggml_type_info(13)->supported);  // Q5_K
}

// ---------------------------------------------------------------------------------------
// The real SmolLM2-135M-Instruct Q4_1 GGUF.

class SmolLM2Gguf : public testing::Test {
 protected:
  static void SetUpTestSuite() { golden_ = test::read_golden_json("smollm2_gguf.json"); }
  static nlohmann::json golden_;
};
nlohmann::json SmolLM2Gguf::golden_;

TEST_F(SmolLM2Gguf, MetadataMatchesGgufPy) {
  PARTIX_REQUIRE_SMOLLM2(path);
  GgufFile f = GgufFile::open(path);
  EXPECT_EQ(f.version(), golden_["version"].get<uint32_t>());
  EXPECT_EQ(f.alignment(), 32);  // the file has no general.alignment: the default
  for (const auto& [key, v] : golden_["metadata"].items()) {
    SCOPED_TRACE(key);
    if (v.is_string()) {
      EXPECT_EQ(f.get_string(key), v.get<std::string>());
    } else if (v.is_boolean()) {
      EXPECT_EQ(f.get_bool(key), v.get<bool>());
    } else if (v.is_number_integer()) {
      EXPECT_EQ(f.get_int(key), v.get<int64_t>());
    } else {
      EXPECT_EQ(f.get_float(key), v.get<double>());
    }
  }
  const nlohmann::json& tok = golden_["tokenizer"];
  std::vector<std::string> tokens = f.get_strings("tokenizer.ggml.tokens");
  EXPECT_EQ(static_cast<int64_t>(tokens.size()), tok["num_tokens"].get<int64_t>());
  EXPECT_EQ(std::vector<std::string>(tokens.begin(), tokens.begin() + 24),
            tok["first_tokens"].get<std::vector<std::string>>());
  std::vector<std::string> merges = f.get_strings("tokenizer.ggml.merges");
  EXPECT_EQ(static_cast<int64_t>(merges.size()), tok["num_merges"].get<int64_t>());
  EXPECT_EQ(std::vector<std::string>(merges.end() - 4, merges.end()),
            tok["last_merges"].get<std::vector<std::string>>());
  EXPECT_EQ(f.tensor_names(), golden_["tensor_names"].get<std::vector<std::string>>());
  std::map<std::string, int> counts;
  for (const std::string& n : f.tensor_names()) ++counts[f.tensor_type(n)];
  EXPECT_EQ(counts, (golden_["type_counts"].get<std::map<std::string, int>>()));
}

TEST_F(SmolLM2Gguf, DequantizedSlicesMatchGgufPy) {
  PARTIX_REQUIRE_SMOLLM2(path);
  GgufFile f = GgufFile::open(path);
  for (const auto& [name, e] : golden_["tensors"].items()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(f.tensor_type(name), e["type"].get<std::string>());
    EXPECT_EQ(f.tensor_shape(name), e["shape"].get<Shape>());
    std::vector<float> v = f.load(name).to_vector<float>();
    expect_close(std::vector<float>(v.begin(), v.begin() + 16),
                 e["first"].get<std::vector<double>>(), name + " first");
    expect_close(std::vector<float>(v.end() - 16, v.end()), e["last"].get<std::vector<double>>(),
                 name + " last");
  }
}

TEST_F(SmolLM2Gguf, EveryTensorsChecksumMatchesGgufPy) {
  PARTIX_REQUIRE_SMOLLM2(path);
  GgufFile f = GgufFile::open(path);
  for (const auto& [name, e] : golden_["checksums"].items()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(f.tensor_shape(name), e["shape"].get<Shape>());
    std::vector<float> v = f.load(name).to_vector<float>();
    double sum = 0, sum_sq = 0;
    for (float x : v) {
      sum += x;
      sum_sq += static_cast<double>(x) * x;
    }
    const double want_sq = e["sum_sq"].get<double>();
    EXPECT_NEAR(sum_sq, want_sq, 1e-9 * want_sq);
    // The sum may be near zero: its tolerance scales with the values' magnitude.
    EXPECT_NEAR(sum, e["sum"].get<double>(),
                1e-9 * std::sqrt(want_sq * static_cast<double>(v.size())) + 1e-12);
  }
}

TEST_F(SmolLM2Gguf, ShardedLoadOfRealWeights) {
  PARTIX_REQUIRE_SMOLLM2(path);
  GgufFile f = GgufFile::open(path);
  // Vocab-parallel embedding: 8 devices each dequantize 6144 of the 49152 Q8_0 rows.
  const Mesh mesh8({8}, {"v"});
  NamedSharding rows(mesh8, P("v"));
  Array emb;
  std::vector<int64_t> peak =
      test::peak_bytes_during(8, [&] { emb = f.load("token_embd.weight", rows); });
  for (int d = 0; d < 8; ++d) EXPECT_EQ(peak[static_cast<size_t>(d)], int64_t{6144} * 576 * 4);
  const auto& first = golden_["tensors"]["token_embd.weight"]["first"];
  std::vector<float> shard0 = emb.addressable_shards()[0].data.to_vector<float>();
  expect_close(std::vector<float>(shard0.begin(), shard0.begin() + 16),
               first.get<std::vector<double>>(), "token_embd shard 0");
  // Tensor-parallel projections: columns cut through Q4_1 blocks (576 / 8 = 72).
  const Mesh mesh42({4, 2}, {"x", "y"});
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.ffn_down.weight"}) {
    const std::vector<float> whole = f.load(name).to_vector<float>();
    for (const PartitionSpec& spec : {P("x", "y"), P(None, Axes{"x", "y"}), P(Axes{"y", "x"})}) {
      SCOPED_TRACE(std::string(name) + " " + spec.to_string());
      EXPECT_EQ(f.load(name, NamedSharding(mesh42, spec)).to_vector<float>(), whole);
    }
  }
}

}  // namespace
}  // namespace partix

// safetensors: round trips of every dtype, a file written by Hugging Face's safetensors,
// sharded loading that copies only each device's slice (memory_stats), conversions, sharded
// checkpoints (index.json), and malformed files.
#include <cmath>
#include <cstring>
#include <random>

#include "core/array_impl.h"
#include "io/io_test_util.h"
#include "formats/safetensors.h"

namespace partix {
namespace {

using test::TempDir;

std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

Mesh mesh_4x2() { return Mesh({4, 2}, {"x", "y"}); }

template <class T>
std::vector<T> iota_values(int64_t n, double scale, double offset) {
  std::vector<T> v;
  for (int64_t i = 0; i < n; ++i)
    v.push_back(static_cast<T>(static_cast<double>(i) * scale + offset));
  return v;
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  TempDir dir;
  Params p;
  p["f32"] = from_vector<float>(iota_values<float>(12, 0.5, -3), {3, 4});
  p["f64"] = from_vector<double>(iota_values<double>(5, 1e-3, 1), {5});
  p["i32"] = from_vector<int32_t>(iota_values<int32_t>(6, 7, -20), {2, 3});
  p["i64"] = from_vector<int64_t>({int64_t{1} << 40, -5, 0}, {3});
  p["bool"] = from_vector<bool>({true, false, true, true}, {2, 2});
  p["bf16"] = astype(p["f32"], DType::BF16);
  p["f16"] = astype(p["f32"], DType::F16);
  p["scalar"] = scalar<float>(2.5f);
  p["empty"] = zeros({0, 3});
  const std::string path = dir.file("m.safetensors");
  save_safetensors(path, p, {{"format", "pt"}, {"note", "ünï"}});

  Safetensors st = Safetensors::open(path);
  EXPECT_EQ(st.names().size(), p.size());
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.metadata().at("note"), "ünï");
  for (const auto& [name, a] : p) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(st.contains(name));
    EXPECT_EQ(st.shape(name), a.shape());
    EXPECT_EQ(st.dtype(name), a.dtype());
    Array b = st.load(name);
    EXPECT_EQ(b.shape(), a.shape());
    EXPECT_EQ(b.dtype(), a.dtype());
    EXPECT_EQ(detail::gather_to_host(b), detail::gather_to_host(a));
  }
  EXPECT_EQ(st.stored_dtype("bf16"), "BF16");
  EXPECT_EQ(st.stored_dtype("bool"), "BOOL");
  // The header is padded so the data starts on an 8-byte boundary, as Hugging Face writes.
  std::string bytes = test::read_bytes(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  Params all = st.load_all();
  EXPECT_EQ(all.size(), p.size());
}

// A file written by Hugging Face's safetensors (tools/golden/safetensors_hf.py), values
// listed in its JSON.
TEST(Safetensors, ReadsAFileWrittenByHuggingFace) {
  nlohmann::json golden = test::read_golden_json("hf_written.json");
  Safetensors st = Safetensors::open(test::golden_path("hf_written.safetensors"));
  EXPECT_EQ(st.metadata().at("producer"), golden["metadata"]["producer"].get<std::string>());
  for (const auto& [name, e] : golden["tensors"].items()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(st.stored_dtype(name), e["dtype"].get<std::string>());
    EXPECT_EQ(st.shape(name), e["shape"].get<Shape>());
    if (!e.contains("values")) {
      EXPECT_PARTIX_ERROR(st.load(name), "[safetensors]", name, e["dtype"].get<std::string>());
      continue;
    }
    // Every loadable dtype, read as f64 (exact for all of them) and compared.
    std::vector<double> want = e["values"].get<std::vector<double>>();
    const std::string dt = e["dtype"].get<std::string>();
    Array a = st.load(name, dt == "BOOL" ? DType::I32 : DType::F64);
    std::vector<double> got;
    if (dt == "BOOL") {
      for (int32_t v : a.to_vector<int32_t>()) got.push_back(v);
    } else {
      got = a.to_vector<double>();
    }
    EXPECT_EQ(got, want);
  }
}

TEST(Safetensors, ShardedLoadCopiesOnlyEachDevicesSlice) {
  TempDir dir;
  const Shape shape{64, 1024};
  std::vector<float> values = iota_values<float>(shape_size(shape), 0.25, -7);
  save_safetensors(dir.file("w.safetensors"), {{"w", from_vector<float>(values, shape)}});
  Safetensors st = Safetensors::open(dir.file("w.safetensors"));
  NamedSharding sharding(mesh_4x2(), P("x", "y"));
  Array a;
  std::vector<int64_t> peak = test::peak_bytes_during(8, [&] { a = st.load("w", sharding); });
  const int64_t block = 16 * 512 * 4;  // [64/4, 1024/2] f32
  for (int d = 0; d < 8; ++d) {
    SCOPED_TRACE(d);
    // Exactly its own block: no device ever held (or staged) the 256 KiB tensor.
    EXPECT_EQ(peak[static_cast<size_t>(d)], block);
  }
  EXPECT_EQ(a.sharding(), sharding);
  EXPECT_EQ(a.to_vector<float>(), values);
  for (const Shard& s : a.addressable_shards()) {
    std::vector<float> local = s.data.to_vector<float>();
    ASSERT_EQ(local.size(), 16u * 512u);
    EXPECT_EQ(local[0], values[static_cast<size_t>(s.index[0].start * 1024 + s.index[1].start)]);
  }
}

TEST(Safetensors, ShardedLoadHandlesUnevenSplitsReplicasAndConversion) {
  TempDir dir;
  const Shape shape{10, 7};
  std::vector<float> values = iota_values<float>(70, 1.0 / 3.0, 0.1);
  save_safetensors(dir.file("w.safetensors"), {{"w", from_vector<float>(values, shape)}});
  Safetensors st = Safetensors::open(dir.file("w.safetensors"));
  const Mesh mesh = mesh_4x2();
  for (const PartitionSpec& spec : {P("x"), P(None, "y"), P("y", "x"), P(Axes{"x", "y"}), P()}) {
    SCOPED_TRACE(spec.to_string());
    NamedSharding s(mesh, spec);
    Array a = st.load("w", s);
    EXPECT_EQ(a.to_vector<float>(), values);
    Array b = st.load("w", s, DType::BF16);
    EXPECT_EQ(b.dtype(), DType::BF16);
    std::vector<bfloat16> got = b.to_vector<bfloat16>();
    for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(got[i], bfloat16(values[i]));
    // Same values as loading whole and moving with device_put.
    EXPECT_EQ(detail::gather_to_host(device_put(st.load("w"), s)), detail::gather_to_host(a));
  }
}

TEST(Safetensors, ConversionsRoundCorrectlyAndRefuseLossyOnes) {
  TempDir dir;
  // 1 + 2^-8 + 2^-30: rounding to f32 first would make a tie and round to 1.0 in bf16;
  // correct rounding of the double gives 1 + 2^-7.
  const double tricky = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  save_safetensors(dir.file("c.safetensors"),
                   {{"d", from_vector<double>({tricky, -0.1, 1e300}, {3})},
                    {"big", from_vector<int64_t>({1, int64_t{1} << 40}, {2})},
                    {"small", from_vector<int64_t>({-3, 4}, {2})},
                    {"b", from_vector<bool>({true, false}, {2})},
                    {"f", from_vector<float>({1.5f}, {1})}});
  Safetensors st = Safetensors::open(dir.file("c.safetensors"));
  std::vector<bfloat16> bf = st.load("d", DType::BF16).to_vector<bfloat16>();
  EXPECT_EQ(static_cast<float>(bf[0]), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(bf[1], bfloat16(-0.1f));
  EXPECT_TRUE(std::isinf(static_cast<float>(bf[2])));
  EXPECT_EQ(st.load("d", DType::F32).to_vector<float>()[1], static_cast<float>(-0.1));
  EXPECT_EQ(st.load("small", DType::I32).to_vector<int32_t>(), (std::vector<int32_t>{-3, 4}));
  EXPECT_EQ(st.load("small", DType::F32).to_vector<float>(), (std::vector<float>{-3, 4}));
  EXPECT_EQ(st.load("b", DType::F32).to_vector<float>(), (std::vector<float>{1, 0}));
  EXPECT_PARTIX_ERROR(st.load("big", DType::I32), "[safetensors]", "big", "i32 cannot hold");
  EXPECT_PARTIX_ERROR(st.load("f", DType::I32), "[safetensors]", "'f'", "cannot load as i32");
  EXPECT_PARTIX_ERROR(st.load("f", DType::Bool), "cannot load as bool");
}

TEST(Safetensors, ShardedCheckpointThroughIndex) {
  TempDir dir;
  save_safetensors(dir.file("model-00001-of-00002.safetensors"),
                   {{"a", from_vector<float>({1, 2, 3, 4}, {2, 2})}, {"unlisted", zeros({1})}});
  save_safetensors(dir.file("model-00002-of-00002.safetensors"),
                   {{"b", from_vector<int32_t>({5, 6, 7}, {3})}});
  test::write_bytes(dir.file("model.safetensors.index.json"), R"({
    "metadata": {"total_size": 28},
    "weight_map": {"a": "model-00001-of-00002.safetensors",
                   "b": "model-00002-of-00002.safetensors"}})");
  for (const std::string& path : {dir.file("model.safetensors.index.json"), dir.path().string()}) {
    SCOPED_TRACE(path);
    Safetensors st = Safetensors::open(path);
    EXPECT_EQ(st.names(), (std::vector<std::string>{"a", "b"}));
    EXPECT_EQ(st.metadata().at("total_size"), "28");
    EXPECT_EQ(st.load("a", NamedSharding(mesh_4x2(), P("y"))).to_vector<float>(),
              (std::vector<float>{1, 2, 3, 4}));
    EXPECT_EQ(st.load("b").to_vector<int32_t>(), (std::vector<int32_t>{5, 6, 7}));
    EXPECT_FALSE(st.contains("unlisted"));
    Params all = st.load_all(
        [](const std::string&, const Shape&) { return NamedSharding(Mesh({8}, {"d"}), P()); });
    EXPECT_EQ(all.at("b").sharding().mesh().size(), 8);
  }
  auto index_with = [&](const std::string& weight_map) {
    test::write_bytes(dir.file("bad.index.json"), R"({"weight_map": )" + weight_map + "}");
    return dir.file("bad.index.json");
  };
  EXPECT_PARTIX_ERROR(Safetensors::open(index_with(R"({"c": "model-00002-of-00002.safetensors"})")),
                      "[safetensors]", "'c'", "does not hold it");
  EXPECT_PARTIX_ERROR(Safetensors::open(index_with(R"({"a": "../etc/passwd"})")),
                      "not a plain file name");
  EXPECT_PARTIX_ERROR(Safetensors::open(index_with(R"({"a": "/abs.safetensors"})")),
                      "not a plain file name");
  EXPECT_PARTIX_ERROR(Safetensors::open(index_with(R"({"a": "missing.safetensors"})")),
                      "cannot open", "missing.safetensors");
  EXPECT_PARTIX_ERROR(Safetensors::open(index_with(R"({"a": 3})")), "not a file name");
  EXPECT_PARTIX_ERROR(Safetensors::open(index_with("[]")), "weight_map");
  TempDir empty;
  EXPECT_PARTIX_ERROR(Safetensors::open(empty.path().string()), "holds neither");
}

// Each malformed file raises partix::Error naming the file and the problem.
TEST(Safetensors, RejectsMalformedFiles) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  auto expect_bad = [&](const std::string& bytes, const std::string& fragment) {
    SCOPED_TRACE(fragment);
    test::write_bytes(path, bytes);
    EXPECT_PARTIX_ERROR(Safetensors::open(path), "[safetensors]", "bad.safetensors", fragment);
  };
  const std::string ok_entry = R"("t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  const std::string data8(8, '\0');
  expect_bad("", "truncated");
  expect_bad("abc", "truncated");
  expect_bad(raw_file("{}", "").substr(0, 9), "truncated");
  {
    std::string b(8, '\0');
    uint64_t huge = uint64_t{1} << 62;
    std::memcpy(b.data(), &huge, 8);
    expect_bad(b + "{}", "exceeds the limit");
    huge = 1000;
    std::memcpy(b.data(), &huge, 8);
    expect_bad(b + "{}", "truncated");
  }
  expect_bad(raw_file("[1]", ""), "does not start with");
  expect_bad(raw_file("{\"t\": ", ""), "invalid JSON");
  expect_bad(raw_file("{" + ok_entry + ", " + ok_entry + "}", data8), "key 't' twice");
  expect_bad(
      raw_file(std::string("{\"a\":") + std::string(100, '[') + std::string(100, ']') + "}", ""),
      "nested");
  expect_bad(raw_file(R"({"t": {"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}})", data8),
             "unknown dtype 'F33'");
  expect_bad(raw_file(R"({"t": {"dtype": 3, "shape": [2], "data_offsets": [0, 8]}})", data8),
             "dtype");
  expect_bad(raw_file(R"({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", data8),
             "not a non-negative integer");
  expect_bad(raw_file(R"({"t": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}})", data8),
             "not a non-negative integer");
  expect_bad(raw_file(R"({"t": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}})", data8),
             "shape");
  expect_bad(
      raw_file(
          R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296, 4], "data_offsets": [0, 8]}})",
          data8),
      "too many elements");
  expect_bad(raw_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", data8),
             "data_offsets");
  expect_bad(raw_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", data8),
             "end before they begin");
  expect_bad(raw_file(R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", data8),
             "need 12");
  expect_bad(
      raw_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}})", data8),
      "unknown field 'x'");
  expect_bad(raw_file(R"({"t": [1]})", data8), "expected an object");
  expect_bad(raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                          "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                      data8),
             "overlaps");
  expect_bad(raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", data8),
             "a hole");
  expect_bad(raw_file("{" + ok_entry + "}", std::string(4, '\0')), "truncated file?");
  expect_bad(raw_file("{" + ok_entry + "}", std::string(12, '\0')), "holds 12 bytes");
  expect_bad(raw_file(R"({"__metadata__": {"k": 1}})", ""), "__metadata__ value of 'k'");
  expect_bad(raw_file(R"({"__metadata__": [1]})", ""), "__metadata__ is not an object");
  expect_bad(raw_file(R"({"t": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}})", "\0\0"),
             "whole bytes");
  std::string bad_utf8 = "{\"\xff\": 1}";
  expect_bad(raw_file(bad_utf8, ""), "invalid JSON");

  EXPECT_PARTIX_ERROR(Safetensors::open(dir.file("nope.safetensors")), "[safetensors]",
                      "cannot open", "nope.safetensors");
  EXPECT_PARTIX_ERROR(Safetensors{}.names(), "empty Safetensors");
}

TEST(Safetensors, ReportsUnloadableTensorsByName) {
  TempDir dir;
  const std::string path = dir.file("f8.safetensors");
  test::write_bytes(path,
                    raw_file(R"({"q": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [0, 4]},
      "bits": {"dtype": "BOOL", "shape": [2], "data_offsets": [4, 6]}})",
                             std::string("\1\2\3\4\1\2", 6)));
  Safetensors st = Safetensors::open(path);
  EXPECT_EQ(st.stored_dtype("q"), "F8_E4M3");
  EXPECT_EQ(st.shape("q"), (Shape{2, 2}));
  EXPECT_PARTIX_ERROR(st.load("q"), "[safetensors]", "tensor 'q'", "dtype F8_E4M3", "supported");
  EXPECT_PARTIX_ERROR(st.dtype("q"), "F8_E4M3");
  // A stored bool other than 0/1 is not silently turned into a partix bool.
  EXPECT_PARTIX_ERROR(st.load("bits"), "'bits'", "cannot hold");
  EXPECT_PARTIX_ERROR(st.load("nope"), "no tensor 'nope'");
  EXPECT_PARTIX_ERROR(st.load("bits", NamedSharding(mesh_4x2(), P("x", "y"))), "'bits'",
                      "cannot take sharding");
}

// No prefix of a valid file, and no single corrupted header byte, may crash the reader.
TEST(Safetensors, SurvivesTruncationAndCorruption) {
  TempDir dir;
  save_safetensors(
      dir.file("ok.safetensors"),
      {{"a", from_vector<float>({1, 2, 3}, {3})}, {"b", from_vector<int32_t>({4}, {1})}},
      {{"k", "v"}});
  const std::string good = test::read_bytes(dir.file("ok.safetensors"));
  const std::string path = dir.file("cut.safetensors");
  for (size_t n = 0; n < good.size(); ++n) {
    test::write_bytes(path, good.substr(0, n));
    EXPECT_THROW(Safetensors::open(path), Error) << "prefix of " << n << " bytes";
  }
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = good;
    size_t at = rng() % std::min<size_t>(bad.size(), 120);
    bad[at] = static_cast<char>(rng());
    test::write_bytes(path, bad);
    try {
      Safetensors st = Safetensors::open(path);
      for (const std::string& n : st.names()) (void)st.load(n, DType::F64);
    } catch (const Error&) {
    }
  }
}

TEST(Safetensors, SaveRejectsWhatItCannotWrite) {
  TempDir dir;
  EXPECT_PARTIX_ERROR(save_safetensors(dir.file("x.safetensors"), {{"__metadata__", zeros({1})}}),
                      "[save_safetensors]", "__metadata__");
  EXPECT_PARTIX_ERROR(save_safetensors(dir.file("x.safetensors"), {{"e", Array()}}),
                      "[save_safetensors]", "'e'");
  EXPECT_PARTIX_ERROR(save_safetensors(dir.file("no/such/dir/x.safetensors"), {{"a", zeros({1})}}),
                      "[save_safetensors]", "cannot write", "does not exist");
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.safetensors")));
}

}  // namespace
}  // namespace partix

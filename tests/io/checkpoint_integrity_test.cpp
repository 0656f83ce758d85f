// What a checkpoint restores is what was saved, or an error: every byte a restore uses is
// checked against its block's checksum, whatever part of a chunk a device reads; conversions
// refuse values the target cannot hold; quantized leaves round-trip as their blocks; a
// CheckpointManager never deletes the step it just wrote and keeps other runs out of its folder.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "backend/quant_blocks.h"
#include "checkpoint/checkpoint.h"
#include "io/checkpoint_test_util.h"
#include "files/checksum.h"
#include "test_util.h"

using namespace partix;
namespace fs = std::filesystem;

namespace {

constexpr const char* kData = "data-00000-of-00001.safetensors";

Mesh mesh_of(Shape sizes, std::vector<std::string> names) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<Device> devs(devices().begin(), devices().begin() + n);
  return Mesh(std::move(sizes), std::move(names), devs);
}

// The absolute file offset of element `elem` of the leaf's first chunk.
uint64_t element_offset(const std::string& dir, int64_t step, int64_t elem, int elem_size) {
  const auto j =
      nlohmann::json::parse(test::read_bytes(ckpt::step_path(dir, step) + "/index.json"));
  return j["leaves"][0]["chunks"][0]["byte_range"][0].get<uint64_t>() +
         static_cast<uint64_t>(elem * elem_size);
}

void flip_bit(const std::string& path, uint64_t offset, int bit) {
  std::string bytes = test::read_bytes(path);
  bytes[offset] = static_cast<char>(bytes[offset] ^ (1 << bit));
  test::write_bytes(path, bytes);
}

Array quantized(DType dt, int64_t rows, int64_t cols, const NamedSharding& sharding) {
  auto w = testing_quant::random_blocks(dt, rows, cols, 7);
  return device_put(from_blocks(w.data(), static_cast<int64_t>(w.size()), dt, {rows, cols}),
                    sharding);
}

}  // namespace

TEST(CheckpointIntegrity, PartialReadsOfACorruptChunkFailTheChecksum) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  Array a = device_put(arange(1024, DType::F32), NamedSharding(mesh_of({1}, {"one"}), P()));
  ckpt::save(d, 0, a);
  ckpt::wait();
  flip_bit(ckpt::step_path(d, 0) + "/" + kData, element_offset(d, 0, 700, 4), 1);
  // Onto one device (the whole chunk) and onto 8 (each device a part of it): never a value.
  for (int64_t n : {1, 8}) {
    SCOPED_TRACE(n);
    Array target =
        device_put(zeros({1024}, DType::F32), NamedSharding(mesh_of({n}, {"x"}), P("x")));
    EXPECT_PARTIX_ERROR(ckpt::restore(d, 0, target), "[ckpt.restore]", kData, "leaf '",
                        "fails its checksum", "the file is corrupted");
  }
}

TEST(CheckpointIntegrity, ChecksumsAreKeptPerBlockSoPartialReadsStayPartial) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  // 4 MiB in one chunk (rows of 4 KiB): 64 checksum blocks.
  const int64_t n = 1024;
  Array a = test::iota({n, n}, DType::F32, NamedSharding(mesh_of({1}, {"one"}), P()));
  ckpt::save(d, 0, a);
  ckpt::wait();
  const auto j = nlohmann::json::parse(test::read_bytes(ckpt::step_path(d, 0) + "/index.json"));
  EXPECT_EQ(j["version"], 2);
  const auto& chunk = j["leaves"][0]["chunks"][0];
  EXPECT_EQ(chunk["xxh64_block"], detail::kChecksumBlock);
  EXPECT_EQ(chunk["xxh64"].get<std::string>().size(), 16u * (4u << 20) / detail::kChecksumBlock);
  // A device reads its quarter, not the chunk.
  const Mesh four = mesh_of({4}, {"x"});
  const uint64_t before = detail::checkpoint_bytes_read();
  Array back = ckpt::restore(d, 0, device_put(a, NamedSharding(four, P("x"))));
  EXPECT_EQ(detail::checkpoint_bytes_read() - before, uint64_t{4} << 20);
  EXPECT_EQ(test::bytes_of(back), test::bytes_of(a));
  // A flipped bit in the last quarter fails the device that reads it, whichever it is.
  flip_bit(ckpt::step_path(d, 0) + "/" + kData, element_offset(d, 0, n * n - 5, 4), 3);
  for (PartitionSpec spec : {P("x"), P(None, "x")}) {
    EXPECT_PARTIX_ERROR(ckpt::restore(d, 0, device_put(a, NamedSharding(four, spec))),
                        "[ckpt.restore]", "leaf '", "fails its checksum at bytes [");
  }
}

TEST(CheckpointIntegrity, VersionOneCheckpointsStillRestoreAndVerify) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  Array a = test::iota({64, 40}, DType::F32, NamedSharding(mesh_of({2}, {"x"}), P("x")));
  ckpt::save(d, 3, a);
  ckpt::wait();
  // Rewrite the index as version 1 wrote it: one checksum of each whole chunk.
  const std::string index = ckpt::step_path(d, 3) + "/index.json";
  const std::string data = test::read_bytes(ckpt::step_path(d, 3) + "/" + kData);
  auto j = nlohmann::json::parse(test::read_bytes(index));
  j["version"] = 1;
  for (auto& c : j["leaves"][0]["chunks"]) {
    const uint64_t b = c["byte_range"][0], e = c["byte_range"][1];
    c.erase("xxh64_block");
    c["xxh64"] = detail::hex64(detail::xxh64(data.data() + b, e - b));
  }
  test::write_bytes(index, j.dump());
  const Mesh eight = mesh_of({8}, {"x"});
  Array back = ckpt::restore(d, 3, device_put(a, NamedSharding(eight, P(None, "x"))));
  EXPECT_EQ(test::bytes_of(back), test::bytes_of(a));
  flip_bit(ckpt::step_path(d, 3) + "/" + kData, element_offset(d, 3, 5, 4), 0);
  EXPECT_PARTIX_ERROR(ckpt::restore(d, 3, device_put(a, NamedSharding(eight, P("x")))),
                      "[ckpt.restore]", "fails its checksum");
}

TEST(CheckpointIntegrity, NarrowingThatOverflowsIsRefusedNamingTheLeaf) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  const NamedSharding one(mesh_of({1}, {"one"}), P());
  std::map<std::string, Array> tree;
  tree["big"] = device_put(from_vector<float>({1.0f, 1e30f}, {2}), one);
  tree["wide"] = device_put(from_vector<double>({1.0, 1e300}, {2}), one);
  tree["nan"] = device_put(from_vector<float>({std::numeric_limits<float>::quiet_NaN(), 2.0f,
                                               std::numeric_limits<float>::infinity()},
                                              {3}),
                           one);
  ckpt::save(d, 1, tree);
  ckpt::wait();
  auto restore_as = [&](const std::string& name, DType dt) {
    std::map<std::string, Array> structure{{name, Array()}};
    return ckpt::restore(d, 1, structure, {{"['" + name + "']", {tree.at(name).shape(), dt, one}}},
                         {.partial = true})
        .at(name);
  };
  EXPECT_PARTIX_ERROR(restore_as("big", DType::F16), "[ckpt.restore]", "leaf '['big']'",
                      "f16 cannot hold", "overflow");
  EXPECT_NEAR(astype(restore_as("big", DType::BF16), DType::F32).to_vector<float>()[1], 1e30f,
              1e28f);  // bf16 holds it
  EXPECT_PARTIX_ERROR(restore_as("wide", DType::F32), "[ckpt.restore]", "leaf '['wide']'",
                      "f32 cannot hold");
  // Values that were already NaN or infinite convert as they are.
  auto v = astype(restore_as("nan", DType::F16), DType::F32).to_vector<float>();
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], 2.0f);
  EXPECT_TRUE(std::isinf(v[2]));
}

TEST(CheckpointIntegrity, QuantizedLeavesRoundTripOntoAnotherSharding) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  const Mesh four = mesh_of({4}, {"x"});
  const Mesh eight = mesh_of({2, 4}, {"a", "b"});
  // A large Q8_0 leaf on one device (the copy once read 32 times past its buffer), and each
  // quantized dtype split by rows and by columns (on block boundaries).
  std::map<std::string, Array> tree;
  tree["big"] = quantized(DType::Q8_0, 4096, 4096, NamedSharding(mesh_of({1}, {"one"}), P()));
  for (DType dt : testing_quant::kQuantTypes) {
    const int64_t k = dtype_block_elems(dt) * 8;
    tree[std::string(dtype_name(dt)) + "_rows"] = quantized(dt, 8, k, NamedSharding(four, P("x")));
    tree[std::string(dtype_name(dt)) + "_cols"] =
        quantized(dt, 6, k, NamedSharding(four, P(None, "x")));
  }
  ckpt::save(d, 2, tree);
  ckpt::wait();
  ckpt::Info info = ckpt::info(d, 2);
  for (const auto& l : info.leaves) {
    EXPECT_TRUE(is_quantized(l.dtype)) << l.name;
  }
  // Restored with other splits on another mesh: the same blocks.
  std::map<std::string, Array> target;
  for (const auto& [name, a] : tree) {
    PartitionSpec spec = name.ends_with("_rows") ? P(None, "b") : P("a", "b");
    if (name == "big") spec = P("b", "a");
    target[name] = ShapeDtypeStruct{a.shape(), a.dtype(), NamedSharding(eight, spec)};
  }
  auto back = ckpt::restore(d, 2, target);
  for (const auto& [name, a] : tree) {
    ASSERT_EQ(back.at(name).dtype(), a.dtype()) << name;
    EXPECT_EQ(back.at(name).sharding().spec(), target.at(name).sharding().spec()) << name;
    EXPECT_EQ(test::bytes_of(back.at(name)), test::bytes_of(a)) << name;
  }
  // A quantized leaf cannot become another dtype at restore (astype does that after).
  EXPECT_PARTIX_ERROR(
      ckpt::restore(d, 2, std::map<std::string, Array>{{"big", Array()}},
                    {{"['big']", {{4096, 4096}, DType::F32, NamedSharding(eight, P())}}},
                    {.partial = true}),
      "[ckpt.restore]", "leaf '['big']' is q8_0 and cannot be restored as f32");
  // An index that puts a chunk across a block boundary lies.
  const std::string index = ckpt::step_path(d, 2) + "/index.json";
  auto j = nlohmann::json::parse(test::read_bytes(index));
  for (auto& l : j["leaves"]) {
    if (l["name"] == "['q8_0_cols']") l["chunks"][1]["offsets"][1] = 80;
  }
  test::write_bytes(index, j.dump());
  EXPECT_PARTIX_ERROR(ckpt::info(d, 2), "[ckpt.info]", "leaf '['q8_0_cols']' chunk 1",
                      "splits a block of 32 elements of q8_0");
}

TEST(CheckpointIntegrity, SafetensorsRefusesQuantizedTensors) {
  test::TempDir dir;
  Array q = quantized(DType::Q4_K, 2, 256, NamedSharding(mesh_of({1}, {"one"}), P()));
  EXPECT_PARTIX_ERROR(save_safetensors(dir.file("q.safetensors"), {{"w", q}}), "[save_safetensors]",
                      "tensor 'w' is q4_k", "no quantized dtypes");
  EXPECT_FALSE(fs::exists(dir.file("q.safetensors")));
}

TEST(CheckpointIntegrity, ManagerNeverDeletesTheStepItWroteAndStepsOnlyMoveForward) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  Params p{{"w", test::iota({4}, DType::F32, NamedSharding(mesh_of({1}, {"one"}), P()))}};
  {
    CheckpointManager m(d, {.keep = 1});
    m.save(10, p);
    m.wait();
    EXPECT_PARTIX_ERROR(m.save(3, p), "[CheckpointManager]", "cannot save step 3",
                        "the later or equal step 10");
    EXPECT_PARTIX_ERROR(m.save(10, p), "[CheckpointManager]", "cannot save step 10");
    m.save(11, p);
    m.wait();
    EXPECT_EQ(m.all_steps(), std::vector<int64_t>{11});
  }
  // A new run in a folder of later steps is refused before it writes (or deletes) anything.
  test::TempDir other;
  const std::string o = other.path().string();
  ckpt::save(o, 100, p);
  ckpt::save(o, 200, p);
  ckpt::wait();
  CheckpointManager m(o, {.keep = 2});
  EXPECT_PARTIX_ERROR(m.save(1, p), "[CheckpointManager]", "cannot save step 1", "step 200");
  EXPECT_EQ(m.all_steps(), (std::vector<int64_t>{100, 200}));
}

TEST(CheckpointIntegrity, OneRunPerFolderAndTheLockDiesWithItsProcess) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  Params p{{"w", test::iota({4}, DType::F32, NamedSharding(mesh_of({1}, {"one"}), P()))}};
  {
    CheckpointManager first(d);
    first.save(1, p);
    first.wait();
    EXPECT_PARTIX_ERROR(CheckpointManager{d}, "[CheckpointManager]", "is in use by another run",
                        ".partix-lock");
  }
  // Released with the manager; a process that dies holding it releases it too.
  CheckpointManager again(d);
  again.save(2, p);
  again.wait();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  test::TempDir held;
  const pid_t child = ::fork();
  if (child == 0) {
    // Only the constructor runs here (no threads): it takes the lock of the existing folder.
    ::close(fds[0]);
    CheckpointManager m(held.path().string());
    (void)!::write(fds[1], "x", 1);
    ::pause();  // killed below, lock held
    ::_exit(0);
  }
  ::close(fds[1]);
  char c = 0;
  ASSERT_EQ(::read(fds[0], &c, 1), 1);
  EXPECT_PARTIX_ERROR(CheckpointManager{held.path().string()}, "is in use by another run",
                      "(process " + std::to_string(child) + ")");
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(fds[0]);
  EXPECT_NO_THROW(CheckpointManager{held.path().string()});
}

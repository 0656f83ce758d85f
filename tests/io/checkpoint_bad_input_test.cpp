// Checkpoints are untrusted input: truncated or corrupted data files, an index that lies, a
// checkpoint of another model, a FIFO where a file belongs. Each is a partix::Error naming the
// file and the leaf; never a crash, a hang or silently wrong values.
#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/checkpoint_test_util.h"
#include "test_util.h"

using namespace partix;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kData = "data-00000-of-00001.safetensors";

// A fresh valid checkpoint (step 4) of two leaves per test, and ways to spoil it.
class CheckpointBadInput : public testing::Test {
 protected:
  void SetUp() override {
    mesh_ = std::make_unique<Mesh>(make_mesh({4}, {"x"}));
    tree_["w"] = test::iota({8, 6}, DType::F32, NamedSharding(*mesh_, P("x")), 0.5);
    tree_["b"] = test::iota({6}, DType::F32, NamedSharding(*mesh_, P()), 2.0);
    ckpt::save(d(), 4, tree_);
    ckpt::wait();
  }
  std::string d() const { return dir_.path().string(); }
  std::string step() const { return ckpt::step_path(d(), 4); }
  std::string index_path() const { return step() + "/index.json"; }
  std::string data_path() const { return step() + "/" + kData; }

  json index() const { return json::parse(test::read_bytes(index_path())); }
  void write_index(const json& j) const { test::write_bytes(index_path(), j.dump()); }
  // Changes one field of leaf `w` (or of its first chunk) and rewrites the index.
  void edit_w(const std::function<void(json& leaf)>& f) const {
    json j = index();
    for (json& l : j["leaves"]) {
      if (l["name"] == "['w']") f(l);
    }
    write_index(j);
  }
  Params restore() const { return ckpt::restore(d(), 4, tree_); }

  test::TempDir dir_;
  std::unique_ptr<Mesh> mesh_;
  Params tree_;
};

}  // namespace

TEST_F(CheckpointBadInput, TheValidCheckpointRestores) {
  Params back = restore();
  EXPECT_EQ(test::bytes_of(back.at("w")), test::bytes_of(tree_.at("w")));
}

TEST_F(CheckpointBadInput, TruncatedDataFile) {
  const std::string bytes = test::read_bytes(data_path());
  test::write_bytes(data_path(), bytes.substr(0, bytes.size() - 10));
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "leaf '['", kData, "truncated");
}

TEST_F(CheckpointBadInput, FlippedDataByteFailsTheChecksum) {
  std::string bytes = test::read_bytes(data_path());
  bytes[bytes.size() - 3] ^= 0x10;  // inside the last chunk's data
  test::write_bytes(data_path(), bytes);
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", kData, "leaf '['", "fails its checksum",
                      "the file is corrupted");
}

TEST_F(CheckpointBadInput, MissingOrSpecialDataFile) {
  fs::remove(data_path());
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "leaf '['", kData, "No such file");
  ASSERT_EQ(::mkfifo(data_path().c_str(), 0600), 0);
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", kData, "is not a regular file (a FIFO)");
}

TEST_F(CheckpointBadInput, ChunkOffsetsPastTheEnd) {
  edit_w([](json& l) { l["chunks"][0]["byte_range"] = {1 << 20, (1 << 20) + 12 * 4}; });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", kData, "leaf '['w']'",
                      "the index puts chunk [0:2, 0:6] at bytes [1048576, 1048624)",
                      "but the file holds it at");
}

TEST_F(CheckpointBadInput, ShapeThatDoesNotMultiplyOut) {
  edit_w([](json& l) { l["shape"] = {8, 7}; });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "index.json", "leaf '['w']'",
                      "its chunks hold 192 bytes but f32[8,7] is 224 bytes");
  edit_w([](json& l) { l["shape"] = {int64_t{1} << 40, int64_t{1} << 40}; });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "index.json", "leaf '['w']'",
                      "too many elements");
  edit_w([](json& l) { l["shape"] = {8, -6}; });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "leaf '['w']'", "not a non-negative integer");
  edit_w([](json& l) {
    l["shape"] = {8, 6};
    l["chunks"][0]["extent"] = {2, 5};
  });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "leaf '['w']' chunk 0", "byte_range [",
                      "holds 48 bytes but f32[2,5] needs 40");
}

TEST_F(CheckpointBadInput, UnknownDtype) {
  edit_w([](json& l) { l["dtype"] = "F8_E4M3"; });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "index.json", "leaf '['w']'",
                      "unknown dtype 'F8_E4M3'");
}

TEST_F(CheckpointBadInput, ChunksThatOverlapOrLeaveHoles) {
  edit_w([](json& l) { l["chunks"][1]["offsets"] = {1, 0}; });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "leaf '['w']'",
                      "chunks [0:2, 0:6] and [1:3, 0:6] overlap");
  edit_w([](json& l) {
    l["chunks"][1]["offsets"] = {2, 0};
    l["chunks"].erase(3);
  });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "leaf '['w']'", "its chunks hold 144 bytes");
  edit_w([](json& l) { l["chunks"][0]["offsets"] = {7, 0}; });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "leaf '['w']' chunk 0",
                      "the box [7:9, 0:6] is empty or outside the shape [8,6]");
}

TEST_F(CheckpointBadInput, FileNamesOutsideTheStep) {
  const std::string good = test::read_bytes(index_path());
  json j = index();
  j["files"] = {"../data-00000-of-00001.safetensors"};
  write_index(j);
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "index.json",
                      "'../data-00000-of-00001.safetensors', which is not a plain data file name");
  test::write_bytes(index_path(), good);
  edit_w([](json& l) { l["chunks"][0]["file"] = "other.safetensors"; });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "leaf '['w']' chunk 0",
                      "file 'other.safetensors' is not among the index's files");
}

TEST_F(CheckpointBadInput, IndexThatIsNotAnIndex) {
  const std::string good = test::read_bytes(index_path());
  test::write_bytes(index_path(), good.substr(0, good.size() / 2));
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "index.json");
  test::write_bytes(index_path(), "[1, 2]");
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "index.json", "not an object");
  json j = json::parse(good);
  j["format"] = "orbax";
  write_index(j);
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "format 'orbax' is not 'partix.checkpoint'");
  j = json::parse(good);
  j["version"] = 3;
  write_index(j);
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "format version 3 is not one this partix reads");
  j = json::parse(good);
  j["step"] = 5;
  write_index(j);
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "the index is of step 5", "step 4");
  j = json::parse(good);
  j["leaves"][0].erase("dtype");
  write_index(j);
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "index.json", "missing 'dtype'");
  j = json::parse(good);
  j["leaves"][0]["chunks"][0]["xxh64"] = "not a hash at al";
  write_index(j);
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]",
                      "xxh64 'not a hash at al' of block 0 is not 16 hex digits");
  j = json::parse(good);
  j["leaves"].push_back(j["leaves"][0]);
  write_index(j);
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "appears twice");
  fs::remove(index_path());
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "index.json");
  EXPECT_TRUE(ckpt::all_steps(d()).empty());  // without its index a folder is not a step
}

TEST_F(CheckpointBadInput, DataFileThatDisagreesWithTheIndex) {
  // The index names a tensor the file does not hold.
  const std::string good = test::read_bytes(index_path());
  edit_w([](json& l) { l["chunks"][0]["tensor"] = "['w']@9,9"; });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", kData, "leaf '['w']'",
                      "the file has no tensor '['w']@9,9' for chunk [0:2, 0:6]");
  // Same size, other dtype: the file's header and the index disagree.
  test::write_bytes(index_path(), good);
  edit_w([](json& l) { l["dtype"] = "I32"; });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", kData, "leaf '['w']'",
                      "tensor '['w']@0,0' is F32[2,6] in the file but I32[2,6] in the index");
  // Another checkpoint's data file in place of this one.
  test::write_bytes(index_path(), good);
  const std::string other = d() + "/other";
  Params p{{"w", test::iota({8, 6}, DType::F32, NamedSharding(*mesh_, P(None, "x")))},
           {"b", test::iota({6}, DType::F32, NamedSharding(*mesh_, P()))}};
  ckpt::save(other, 4, p);
  ckpt::wait();
  fs::copy_file(ckpt::step_path(other, 4) + "/" + kData, data_path(),
                fs::copy_options::overwrite_existing);
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", kData, "leaf '['");
}

TEST_F(CheckpointBadInput, CheckpointOfAnotherModel) {
  Params more = tree_;
  more["extra"] = test::iota({2}, DType::F32, NamedSharding(*mesh_, P()));
  EXPECT_PARTIX_ERROR(ckpt::restore(d(), 4, more), "[ckpt.restore]", "index.json",
                      "no leaf '['extra']'", "a checkpoint of another model?");
  Params fewer{{"w", tree_.at("w")}};
  EXPECT_PARTIX_ERROR(ckpt::restore(d(), 4, fewer), "[ckpt.restore]", "index.json",
                      "holds leaf '['b']', which the target lacks");
  Params partial = ckpt::restore(d(), 4, fewer, {.partial = true});
  EXPECT_EQ(test::bytes_of(partial.at("w")), test::bytes_of(tree_.at("w")));
  Params wider = tree_;
  wider["w"] = test::iota({8, 7}, DType::F32, NamedSharding(*mesh_, P("x")));
  EXPECT_PARTIX_ERROR(ckpt::restore(d(), 4, wider), "[ckpt.restore]", "index.json",
                      "leaf '['w']' has shape [8,6] but the target needs [8,7]");
  EXPECT_PARTIX_ERROR(ckpt::restore(d(), 5, tree_), "[ckpt.restore]", "has no committed step 5",
                      "steps: 4");
  EXPECT_PARTIX_ERROR(ckpt::restore(d() + "/nothing", 4, tree_), "[ckpt.restore]",
                      "no committed step 4 (steps: none)");
}

TEST_F(CheckpointBadInput, BlockChecksumsThatDoNotFitTheChunk) {
  edit_w([](json& l) { l["chunks"][0]["xxh64"] = "0123"; });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "leaf '['w']' chunk 0",
                      "xxh64 holds 4 characters, not 16 hex digits for each of the 1 blocks");
  edit_w([](json& l) { l["chunks"][0]["xxh64_block"] = 12; });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]",
                      "xxh64_block 12 is not a positive multiple of 8");
  edit_w([](json& l) {
    l["chunks"][0]["xxh64_block"] = 8;  // 6 blocks of the 48 bytes need 6 checksums
  });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "for each of the 6 blocks of 8 bytes");
  edit_w([](json& l) { l["chunks"][0].erase("xxh64_block"); });
  EXPECT_PARTIX_ERROR(restore(), "[ckpt.restore]", "leaf '['w']' chunk 0", "missing 'xxh64_block'");
}

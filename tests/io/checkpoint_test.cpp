// Checkpoints: trees of Arrays saved sharded and asynchronously, committed
// atomically, and restored onto any mesh and sharding, each device reading only its ranges.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "checkpoint/checkpoint.h"
#include "io/checkpoint_test_util.h"
#include "files/checksum.h"
#include "test_util.h"

using namespace partix;
namespace fs = std::filesystem;

namespace {

Mesh mesh_of(Shape sizes, std::vector<std::string> names) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<Device> devs(devices().begin(), devices().begin() + n);
  return Mesh(std::move(sizes), std::move(names), devs);
}

nlohmann::json read_index_json(const std::string& dir, int64_t step) {
  return nlohmann::json::parse(test::read_bytes(ckpt::step_path(dir, step) + "/index.json"));
}

std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A process id that no process has any more.
pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

}  // namespace

TEST(Checksum, Xxh64MatchesTheReferenceAndStreams) {
  // Reference values from the xxhash package (tools/golden/checkpoint_interop.py checks every
  // chunk of a real checkpoint with it too).
  EXPECT_EQ(detail::xxh64("", 0), 0xEF46DB3751D8E999ull);
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  const uint64_t whole = detail::xxh64(data.data(), data.size());
  std::mt19937 rng(1);
  for (int trial = 0; trial < 20; ++trial) {
    detail::Xxh64 h;
    size_t at = 0;
    while (at < data.size()) {
      const size_t n = std::min(data.size() - at, static_cast<size_t>(rng() % 70));
      h.update(data.data() + at, n);
      at += n;
    }
    EXPECT_EQ(h.digest(), whole);
  }
  uint64_t back = 0;
  EXPECT_TRUE(detail::parse_hex64(detail::hex64(whole), &back));
  EXPECT_EQ(back, whole);
  EXPECT_FALSE(detail::parse_hex64("0123456789ABCDEF", &back));  // written lowercase
  EXPECT_FALSE(detail::parse_hex64("123", &back));
}

TEST(Checkpoint, TreesRoundTripBitExactly) {
  test::TempDir dir;
  Mesh mesh = mesh_of({4, 2}, {"x", "y"});
  Params tree;
  tree["w"] = test::iota({16, 8}, DType::F32, NamedSharding(mesh, P("x", "y")), 0.37);
  tree["b"] = test::iota({8}, DType::BF16, NamedSharding(mesh, P("y")), 1.5);
  tree["h"] = test::iota({3, 5}, DType::F16, NamedSharding(mesh, P()), -0.25);
  tree["i"] = test::iota({9}, DType::I32, NamedSharding(mesh, P("x")), 3);
  tree["l"] = test::iota({2, 3}, DType::I64, NamedSharding(mesh, P(None, "y")), 1e12);
  tree["d"] = test::iota({5}, DType::F64, NamedSharding(mesh, P("x")), 1.0 / 3);
  tree["m"] =
      device_put(from_vector<bool>({true, false, true, true}, {4}), NamedSharding(mesh, P("x")));
  tree["s"] = device_put(scalar<float>(2.5f), NamedSharding(mesh, P()));
  tree["e"] = zeros({0, 4}, DType::F32);  // empty
  ckpt::save(dir.path().string(), 3, tree, {.metadata = {{"note", "hello"}}});
  ckpt::wait();
  EXPECT_EQ(ckpt::all_steps(dir.path().string()), std::vector<int64_t>{3});
  Params back = ckpt::restore(dir.path().string(), 3, tree);
  for (const auto& [k, v] : tree) {
    SCOPED_TRACE(k);
    EXPECT_EQ(back.at(k).shape(), v.shape());
    EXPECT_EQ(back.at(k).dtype(), v.dtype());
    EXPECT_EQ(back.at(k).sharding(), v.sharding());
    EXPECT_EQ(test::bytes_of(back.at(k)), test::bytes_of(v));
  }
  ckpt::Info info = ckpt::info(dir.path().string(), 3);
  EXPECT_EQ(info.metadata.at("note"), "hello");
  std::vector<std::string> names;
  for (const auto& l : info.leaves) names.push_back(l.name);
  EXPECT_EQ(names, tree_leaf_paths(tree));  // leaf names are the tree's paths
}

TEST(Checkpoint, OptimizerStateLeavesAreNamedByTheirPaths) {
  test::TempDir dir;
  Params p{{"a", test::iota({4, 4}, DType::BF16, NamedSharding(mesh_of({2}, {"x"}), P("x")))}};
  optim::AdamWState s = optim::adamw_init(p);
  ckpt::save(dir.path().string(), 0, s);
  ckpt::wait();
  std::vector<std::string> names;
  for (const auto& l : ckpt::info(dir.path().string(), 0).leaves) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{".mu['a']", ".nu['a']", ".master['a']", ".count"}));
  optim::AdamWState back = ckpt::restore(dir.path().string(), 0, s);
  EXPECT_EQ(test::bytes_of(back.master.at("a")), test::bytes_of(s.master.at("a")));
  EXPECT_EQ(back.count.item<int32_t>(), 0);
}

TEST(Checkpoint, RestoresOntoAnyMeshAndSharding) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  // Uneven on purpose: 13 x 7 over 4 x 2 leaves ceil-sized blocks and a short last one.
  Mesh saved = mesh_of({4, 2}, {"x", "y"});
  Array a = test::iota({13, 7}, DType::F32, NamedSharding(saved, P("x", "y")));
  Array c = test::iota({6, 10, 3}, DType::BF16, NamedSharding(saved, P("y", Axes{"x"})));
  ckpt::save(d, 1, std::vector<Array>{a, c});
  ckpt::wait();
  const std::string want_a = test::bytes_of(a), want_c = test::bytes_of(c);
  struct Target {
    Mesh mesh;
    PartitionSpec spec_a, spec_c;
  };
  std::vector<Target> targets = {
      {mesh_of({2, 4}, {"p", "q"}), P("q", "p"), P(None, "q", "p")},
      {mesh_of({8}, {"i"}), P(None, "i"), P("i")},
      {mesh_of({8}, {"i"}), P(), P()},
      {mesh_of({1}, {"one"}), P("one"), P()},
      {mesh_of({3}, {"t"}), P("t"), P(None, "t")},
      {mesh_of({2, 2, 2}, {"a", "b", "c"}), P(Axes{"a", "c"}, "b"), P("c", Axes{"b", "a"})},
  };
  for (const Target& t : targets) {
    SCOPED_TRACE(NamedSharding(t.mesh, t.spec_a).to_string());
    std::vector<Array> out =
        ckpt::restore_leaves(d, 1, {"[0]", "[1]"},
                             {{a.shape(), DType::F32, NamedSharding(t.mesh, t.spec_a)},
                              {c.shape(), DType::BF16, NamedSharding(t.mesh, t.spec_c)}});
    EXPECT_EQ(out[0].sharding(), NamedSharding(t.mesh, t.spec_a));
    EXPECT_EQ(test::bytes_of(out[0]), want_a);
    EXPECT_EQ(test::bytes_of(out[1]), want_c);
  }
  // A conversion that loses nothing: bf16 restores as f32.
  std::vector<Array> wide = ckpt::restore_leaves(
      d, 1, {"[1]"}, {{c.shape(), DType::F32, NamedSharding(mesh_of({8}, {"i"}), P("i"))}},
      {.partial = true});
  EXPECT_EQ(test::bytes_of(wide[0]), want_c);
  EXPECT_PARTIX_ERROR(
      ckpt::restore_leaves(d, 1, {"[0]"}, {{a.shape(), DType::I32, NamedSharding(saved, P())}},
                           {.partial = true}),
      "[ckpt.restore]", "leaf '[0]' is f32 and cannot be restored as i32");
}

TEST(Checkpoint, EachUniqueChunkIsWrittenOnce) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  Mesh mesh = mesh_of({4, 2}, {"x", "y"});
  Params tree;
  tree["rows"] = test::iota({8, 16}, DType::F32, NamedSharding(mesh, P("x")));  // 2 replicas each
  tree["all"] = test::iota({5, 3}, DType::F32, NamedSharding(mesh, P()));       // 8 replicas
  tree["uneven"] = test::iota({3}, DType::F32, NamedSharding(mesh, P(Axes{"x", "y"})));
  ckpt::save(d, 0, tree);
  ckpt::wait();
  nlohmann::json index = read_index_json(d, 0);
  std::map<std::string, size_t> chunks;
  for (const auto& l : index["leaves"]) chunks[l["name"]] = l["chunks"].size();
  EXPECT_EQ(chunks["['rows']"], 4u);
  EXPECT_EQ(chunks["['all']"], 1u);
  EXPECT_EQ(chunks["['uneven']"], 3u);  // 3 elements over 8 devices: 5 blocks are empty
  // The data file holds each element once: its data section is exactly the trees' bytes.
  const std::string file = ckpt::step_path(d, 0) + "/data-00000-of-00001.safetensors";
  const std::string bytes = test::read_bytes(file);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ(bytes.size() - 8 - header, (8 * 16 + 5 * 3 + 3) * sizeof(float));
  EXPECT_EQ(listing(ckpt::step_path(d, 0)),
            (std::vector<std::string>{"data-00000-of-00001.safetensors", "index.json"}));
}

TEST(Checkpoint, EachDeviceReadsOnlyItsByteRanges) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  Mesh one = mesh_of({1}, {"one"});
  Mesh eight = mesh_of({8}, {"i"});
  // Rows of 512 KiB: a column split needs 64 KiB runs 448 KiB apart, which are read one by
  // one; each is one checksum block, so verifying them reads nothing more.
  Array a = test::iota({16, 131072}, DType::F32, NamedSharding(one, P()));
  const uint64_t total = static_cast<uint64_t>(a.nbytes());
  ckpt::save(d, 0, a);
  ckpt::wait();
  for (PartitionSpec spec : {P("i"), P(None, "i"), P()}) {
    SCOPED_TRACE(spec.to_string());
    const uint64_t before = detail::checkpoint_bytes_read();
    Array back = ckpt::restore(d, 0, device_put(a, NamedSharding(eight, spec)));
    // Disjoint blocks read disjoint ranges; replicas copy the first one's block.
    EXPECT_EQ(detail::checkpoint_bytes_read() - before, total);
    EXPECT_EQ(test::bytes_of(back), test::bytes_of(a));
  }
}

TEST(Checkpoint, PeakDeviceMemoryIsOneShard) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  Mesh eight = mesh_of({8}, {"i"});
  Mesh grid = mesh_of({2, 4}, {"a", "b"});
  Array a = test::iota({1024, 512}, DType::F32, NamedSharding(eight, P("i")));
  const int64_t shard = a.nbytes() / 8;
  auto in_use = [] {
    std::vector<int64_t> v;
    for (const Device& dev : devices()) v.push_back(memory_stats(dev.id).bytes_in_use);
    return v;
  };
  // Saving copies blocks to host memory: no device allocates anything.
  std::vector<int64_t> before = in_use();
  reset_peak_memory_stats();
  ckpt::save(d, 0, a);
  ckpt::wait();
  for (const Device& dev : devices()) {
    EXPECT_EQ(memory_stats(dev.id).peak_bytes_in_use, before[static_cast<size_t>(dev.id)])
        << "device " << dev.id;
  }
  // Restoring onto another layout allocates each device's block and nothing else.
  Array target = device_put(a, NamedSharding(grid, P("b", "a")));
  before = in_use();
  reset_peak_memory_stats();
  Array back = ckpt::restore(d, 0, target);
  for (const Device& dev : devices()) {
    EXPECT_LE(memory_stats(dev.id).peak_bytes_in_use - before[static_cast<size_t>(dev.id)], shard)
        << "device " << dev.id;
  }
  EXPECT_EQ(test::bytes_of(back), test::bytes_of(a));
}

TEST(Checkpoint, SaveCopiesToHostSoArraysMayBeDonatedAtOnce) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  Mesh mesh = mesh_of({4, 2}, {"x", "y"});
  Array a = test::iota({64, 64}, DType::F32, NamedSharding(mesh, P("x", "y")));
  const std::string want = test::bytes_of(a);
  auto bump = jit([](const Array& v) { return v + 1.0f; }, {.donate_argnums = {0}});
  ckpt::Checkpointer writer;
  writer.save(d, 1, a);
  Array b = bump(a);     // a's buffers are the program's now, while step 1 may still be written
  writer.save(d, 2, b);  // waits for step 1, then copies b
  Array c = bump(b);
  writer.wait();
  EXPECT_EQ(ckpt::all_steps(d), (std::vector<int64_t>{1, 2}));
  Array back1 = ckpt::restore(d, 1, c);
  Array back2 = ckpt::restore(d, 2, c);
  EXPECT_EQ(test::bytes_of(back1), want);
  EXPECT_EQ(test::bytes_of(back2), test::bytes_of(c - 1.0f));
}

TEST(Checkpoint, ManagerSavesEveryNKeepsTheNewestAndCleansDeadTemporaries) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  // A save that died (its process is gone) and a deletion that died, both uncommitted.
  const pid_t gone = dead_pid();
  fs::create_directories(dir.path() / fmt::format("step_7.tmp-{}", gone));
  test::write_bytes((dir.path() / fmt::format("step_7.tmp-{}", gone) / "index.json").string(),
                    "{}");
  fs::create_directories(dir.path() / fmt::format("step_2.tmp-{}", gone));
  fs::create_directories(dir.path() / "step_9");  // no index: not committed
  fs::create_directories(dir.path() / "step_007");
  test::write_bytes((dir.path() / "notes.txt").string(), "mine");
  EXPECT_TRUE(ckpt::all_steps(d).empty());
  CheckpointManager m(d, {.keep = 2, .save_every = 3});
  EXPECT_FALSE(fs::exists(dir.path() / fmt::format("step_7.tmp-{}", gone)));
  EXPECT_FALSE(fs::exists(dir.path() / fmt::format("step_2.tmp-{}", gone)));
  Mesh mesh = mesh_of({2}, {"x"});
  Params p{{"w", test::iota({4, 2}, DType::F32, NamedSharding(mesh, P("x")))}};
  std::vector<int64_t> saved;
  for (int64_t step = 0; step <= 10; ++step) {
    if (m.save(step, p)) saved.push_back(step);
    p["w"] = p["w"] + 1.0f;
  }
  m.wait();
  EXPECT_EQ(saved, (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(m.all_steps(), (std::vector<int64_t>{6, 9}));
  EXPECT_EQ(m.latest_step(), std::optional<int64_t>(9));
  EXPECT_TRUE(m.save(10, p, {}, /*force=*/true));
  Params back = m.restore(10, p);
  EXPECT_EQ(test::bytes_of(back.at("w")), test::bytes_of(p.at("w")));
  EXPECT_EQ(m.all_steps(), (std::vector<int64_t>{9, 10}));
  EXPECT_EQ(test::read_bytes((dir.path() / "notes.txt").string()), "mine");
  EXPECT_TRUE(fs::exists(dir.path() / "step_007"));  // not a name partix writes: left alone
  for (const std::string& name : listing(dir.path())) {
    EXPECT_EQ(name.find(".tmp-"), std::string::npos) << name;
  }
  EXPECT_PARTIX_ERROR(CheckpointManager(d, {.keep = -1}), "[CheckpointManager]", "keep is -1");
  EXPECT_PARTIX_ERROR(CheckpointManager(d, {.save_every = 0}), "[CheckpointManager]",
                      "save_every is 0");
  EXPECT_PARTIX_ERROR(CheckpointManager((dir.path() / "notes.txt").string()), "[CheckpointManager]",
                      "notes.txt' exists and is not a folder");
}

TEST(Checkpoint, AFullDiskKeepsThePreviousStepAndLeavesNothingCommittedLooking) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  Mesh mesh = mesh_of({4}, {"x"});
  Array small = test::iota({64}, DType::F32, NamedSharding(mesh, P("x")));
  Array big = test::iota({256, 1024}, DType::F32, NamedSharding(mesh, P("x")));
  ckpt::Checkpointer writer;
  writer.save(d, 1, std::vector<Array>{small, small});
  writer.wait();
  const std::string step1 =
      test::read_bytes(ckpt::step_path(d, 1) + "/data-00000-of-00001.safetensors");
  {
    test::FileSizeLimit limit(256 << 10);  // 1 MiB of data does not fit
    writer.save(d, 2, std::vector<Array>{big, small});
    EXPECT_PARTIX_ERROR(writer.wait(), "[ckpt.save]", "cannot write step 2 to", "step_2",
                        "earlier steps are unchanged", "File too large");
  }
  EXPECT_EQ(ckpt::all_steps(d), std::vector<int64_t>{1});
  EXPECT_EQ(listing(dir.path()), (std::vector<std::string>{".partix-lock", "step_1"}));
  EXPECT_EQ(test::read_bytes(ckpt::step_path(d, 1) + "/data-00000-of-00001.safetensors"), step1);
  std::vector<Array> back = ckpt::restore(d, 1, std::vector<Array>{small, small});
  EXPECT_EQ(test::bytes_of(back[1]), test::bytes_of(small));
  // The error was raised once; the writer works again.
  writer.save(d, 3, std::vector<Array>{big, small});
  EXPECT_NO_THROW(writer.wait());
  EXPECT_EQ(ckpt::all_steps(d), (std::vector<int64_t>{1, 3}));
}

TEST(Checkpoint, UnwritableDestinationsAreErrorsNamingThem) {
  test::TempDir dir;
  Array a = test::iota({4}, DType::F32, NamedSharding(mesh_of({1}, {"x"}), P()));
  ckpt::Checkpointer writer;
  // Refused by save() itself, before the copy and the background write.
  EXPECT_PARTIX_ERROR(writer.save("/proc/partix_ckpt", 1, a), "[ckpt.save]",
                      "cannot write '/proc/partix_ckpt/step_1'", "cannot create files in '/proc'");
  test::write_bytes(dir.file("file"), "x");
  EXPECT_PARTIX_ERROR(writer.save(dir.file("file"), 1, a), "[ckpt.save]", "file/step_1",
                      "is not a folder");
  EXPECT_NO_THROW(writer.wait());
  EXPECT_EQ(test::read_bytes(dir.file("file")), "x");
}

TEST(Checkpoint, BadSaveArgumentsAreRefusedAtOnce) {
  test::TempDir dir;
  const std::string d = dir.path().string();
  Array a = test::iota({4}, DType::F32, NamedSharding(mesh_of({1}, {"x"}), P()));
  ckpt::Checkpointer writer;
  EXPECT_PARTIX_ERROR(writer.save(d, -1, a), "[ckpt.save]", "step -1 is negative");
  EXPECT_PARTIX_ERROR(writer.save_leaves(d, 0, {"a", "a"}, {a, a}), "[ckpt.save]",
                      "leaf 'a' appears twice");
  EXPECT_PARTIX_ERROR(writer.save_leaves(d, 0, {"a"}, {Array()}), "[ckpt.save]",
                      "leaf 'a' is an empty Array handle");
  EXPECT_PARTIX_ERROR(writer.save("", 0, a), "[ckpt.save]", "empty path");
  Array gone = a + 1.0f;
  auto eat = jit([](const Array& v) { return v * 2.0f; }, {.donate_argnums = {0}});
  (void)eat(gone);
  EXPECT_PARTIX_ERROR(writer.save_leaves(d, 0, {"x"}, {gone}), "[ckpt.save]",
                      "leaf 'x' was donated");
  bool traced = false;
  (void)jit([&](const Array& v) {
    EXPECT_PARTIX_ERROR(writer.save_leaves(d, 0, {"t"}, {v}), "[ckpt.save]",
                        "leaf 't' is a traced value");
    traced = true;
    return v;
  })(a);
  EXPECT_TRUE(traced);
  EXPECT_TRUE(ckpt::all_steps(d).empty());
}

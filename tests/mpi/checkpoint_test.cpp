// Checkpoints from many processes (run under mpirun by ctest: 2 processes x 4 devices and
// 4 x 2): every process writes its own chunks into one step folder, process 0 commits, and
// the step restores onto other meshes and shardings (and is checked against the saved values
// gathered on every process). A write that fails on one process fails the save everywhere
// and commits nothing.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numeric>
#include <set>

#include "comm/communicator.h"
#include "comm/mpi/mpi_runtime.h"
#include "checkpoint/checkpoint.h"
#include "partix/partix.h"

namespace partix {
namespace {

namespace fs = std::filesystem;

std::vector<int> all_processes() {
  std::vector<int> all(static_cast<size_t>(process_count()));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

// Every process waits here until all arrived (the control channel carries no data).
void barrier() { (void)comm::mpi::exchange_control(all_processes(), "", "test barrier"); }

// A fresh folder under /tmp that every process uses: process 0 names and creates it; removed
// by process 0 once every process is done with it.
class SharedDir {
 public:
  SharedDir() {
    std::string mine;
    if (process_index() == 0) {
      const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
      mine = (fs::temp_directory_path() / fmt::format("partix_mpi_ckpt_{}_{}", ::getpid(), now))
                 .string();
      fs::create_directories(mine);
    }
    path_ = comm::mpi::exchange_control(all_processes(), mine, "test folder")[0];
  }
  ~SharedDir() {
    barrier();
    std::error_code ec;
    if (process_index() == 0) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Mesh mesh_of(int64_t x, int64_t y, std::vector<int> order = {}) {
  if (order.empty()) {
    order.resize(static_cast<size_t>(x * y));
    std::iota(order.begin(), order.end(), 0);
  }
  std::vector<Device> ds;
  for (int id : order) ds.push_back(devices()[static_cast<size_t>(id)]);
  return Mesh({x, y}, {"x", "y"}, ds);
}

// G[i] = 0.5 i + seed, element i in row-major order (exact in f32).
Array filled(const Shape& shape, const NamedSharding& s, float seed) {
  return make_array_from_callback(shape, s, [&](const std::vector<Slice>& idx) {
    std::vector<int64_t> strides(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
    Shape ext;
    for (const Slice& sl : idx) ext.push_back(sl.size());
    std::vector<float> v;
    std::vector<int64_t> pos(shape.size(), 0);
    const int64_t n = shape_size(ext);
    for (int64_t k = 0; k < n; ++k) {
      int64_t flat = 0;
      for (size_t d = 0; d < shape.size(); ++d) flat += (idx[d].start + pos[d]) * strides[d];
      v.push_back(0.5f * static_cast<float>(flat) + seed);
      for (size_t d = shape.size(); d-- > 0;) {
        if (++pos[d] < ext[d]) break;
        pos[d] = 0;
      }
    }
    return from_vector(v, ext);
  });
}

// Leaves on a mesh across processes: split both ways, uneven in both dimensions, split on one
// axis and replicated on the other, replicated everywhere, and an integer scalar.
std::map<std::string, Array> saved_tree(const Mesh& mesh) {
  std::map<std::string, Array> t;
  t["even"] = filled({8, 6}, NamedSharding(mesh, P("x", "y")), 1.0f);
  t["uneven"] = filled({7, 5}, NamedSharding(mesh, P("x", "y")), 2.0f);
  t["half"] = filled({3, 8}, NamedSharding(mesh, P(None, "x")), 3.0f);
  t["replicated"] = filled({5, 3}, NamedSharding(mesh, P()), 4.0f);
  t["count"] = device_put(scalar<int32_t>(42), NamedSharding(mesh, P()));
  return t;
}

// The same leaves, to restore into: another mesh (other devices per block), other shardings.
std::map<std::string, Array> target_tree(const Mesh& mesh) {
  std::map<std::string, Array> t;
  t["even"] = zeros({8, 6}, DType::F32, NamedSharding(mesh, P("y", "x")));
  t["uneven"] = zeros({7, 5}, DType::F32, NamedSharding(mesh, P(None, "x")));
  t["half"] = zeros({3, 8}, DType::F32, NamedSharding(mesh, P()));
  t["replicated"] = zeros({5, 3}, DType::F32, NamedSharding(mesh, P("x")));
  t["count"] = device_put(scalar<int32_t>(0), NamedSharding(mesh, P()));
  return t;
}

void expect_same_values(const std::map<std::string, Array>& want,
                        const std::map<std::string, Array>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, w] : want) {
    const Array& g = got.at(name);
    EXPECT_EQ(g.shape(), w.shape()) << name;
    if (w.dtype() == DType::I32) {
      EXPECT_EQ(process_allgather(g).item<int32_t>(), process_allgather(w).item<int32_t>());
      continue;
    }
    const std::vector<float> a = process_allgather(w).to_vector<float>();
    const std::vector<float> b = process_allgather(g).to_vector<float>();
    ASSERT_EQ(a.size(), b.size()) << name;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << name << " element " << i;
  }
}

std::set<std::string> names_in(const std::string& folder) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(folder)) out.insert(e.path().filename().string());
  return out;
}

TEST(Checkpoints, EveryProcessWritesItsFileAndTheStepRestoresElsewhere) {
  ASSERT_EQ(device_count(), 8) << "run with 8 devices in all";
  SharedDir dir;
  // x groups mixing processes unevenly: the first replica of a block may be on any process.
  const Mesh saving = mesh_of(4, 2, {0, 1, 2, 4, 3, 5, 6, 7});
  const auto tree = saved_tree(saving);
  ckpt::save(dir.path(), 3, tree);
  ckpt::wait();
  // Committed for every process once its save completed.
  EXPECT_EQ(ckpt::all_steps(dir.path()), std::vector<int64_t>{3});
  std::set<std::string> want{"index.json"};
  const int n = process_count();
  for (int p = 0; p < n; ++p) {
    want.insert(fmt::format("data-{:05d}-of-{:05d}.safetensors", p, n));
  }
  EXPECT_EQ(names_in(ckpt::step_path(dir.path(), 3)), want);
  EXPECT_EQ(names_in(dir.path()), (std::set<std::string>{".partix-lock", "step_3"}));
  const ckpt::Info info = ckpt::info(dir.path(), 3);
  EXPECT_EQ(info.leaves.size(), tree.size());

  // Restored on a mesh whose devices are in another order, and with other shardings.
  const Mesh other = mesh_of(2, 4, {7, 6, 5, 4, 3, 2, 1, 0});
  expect_same_values(tree, ckpt::restore(dir.path(), 3, target_tree(other)));
  // And with the shardings it was saved with.
  expect_same_values(tree, ckpt::restore(dir.path(), 3, tree));
}

// A flipped bit in a chunk that each process reads only part of: every process's restore
// fails the checksum of the block it reads, none gets a wrong value.
TEST(Checkpoints, APartlyReadCorruptChunkFailsOnEveryProcess) {
  SharedDir dir;
  const Mesh mesh = mesh_of(4, 2);
  const Array a = filled({1024}, NamedSharding(mesh, P()), 0.0f);  // one chunk, on process 0
  ckpt::save(dir.path(), 1, std::vector<Array>{a});
  ckpt::wait();
  if (process_index() == 0) {
    const std::string step = ckpt::step_path(dir.path(), 1);
    const detail::CheckpointIndex index = detail::read_index(step, 1, "test");
    const detail::CheckpointChunk& c = index.leaves.at(0).chunks.at(0);
    std::string bytes;
    {
      std::ifstream in(step + "/" + c.file, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    bytes[c.begin + 700 * 4] ^= 0x02;  // element 700, on the second process's devices
    std::ofstream(step + "/" + c.file, std::ios::binary) << bytes;
  }
  barrier();
  const Array target = zeros({1024}, DType::F32, NamedSharding(mesh_of(8, 1), P("x")));
  try {
    (void)ckpt::restore(dir.path(), 1, std::vector<Array>{target});
    ADD_FAILURE() << "process " << process_index() << " restored a corrupt chunk";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fails its checksum"), std::string::npos) << e.what();
  }
}

TEST(Checkpoints, ManagerKeepsTheNewestStepsOnEveryProcess) {
  SharedDir dir;
  const Mesh mesh = mesh_of(4, 2);
  CheckpointManager manager(dir.path(), {.keep = 2, .save_every = 1});
  std::map<std::string, Array> tree;
  for (int64_t step = 1; step <= 4; ++step) {
    tree = saved_tree(mesh);
    tree["even"] = filled({8, 6}, NamedSharding(mesh, P("x", "y")), static_cast<float>(10 * step));
    ASSERT_TRUE(manager.save(step, tree));
  }
  manager.wait();
  EXPECT_EQ(manager.all_steps(), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(manager.latest_step(), std::optional<int64_t>(4));
  expect_same_values(tree, manager.restore(4, target_tree(mesh_of(2, 4))));
}

// A full disk on the last process only (its files may not grow past 4 KiB: the data start
// there): every process's save fails, naming it, and no step or temporary is left.
TEST(Checkpoints, AWriteThatFailsOnOneProcessFailsTheSaveEverywhere) {
  SharedDir dir;
  const Mesh mesh = mesh_of(4, 2);
  const auto tree = saved_tree(mesh);
  ckpt::save(dir.path(), 1, tree);
  ckpt::wait();
  const int last = process_count() - 1;
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  if (process_index() == last) {
    signal(SIGXFSZ, SIG_IGN);  // EFBIG from write instead of the signal
    rlimit small = before;
    small.rlim_cur = 4096;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  }
  std::string error;
  try {
    ckpt::save(dir.path(), 2, tree);
    ckpt::wait();
  } catch (const Error& e) {
    error = e.what();
  }
  if (process_index() == last) {
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &before), 0);
  }
  EXPECT_TRUE(error.starts_with("[ckpt.save] cannot write step 2")) << error;
  if (process_index() != last) {
    EXPECT_NE(error.find(fmt::format("process {} failed", last)), std::string::npos) << error;
  }
  barrier();  // every process has seen the failure: process 0 has removed the temporary
  EXPECT_EQ(ckpt::all_steps(dir.path()), std::vector<int64_t>{1});
  EXPECT_EQ(names_in(dir.path()), (std::set<std::string>{".partix-lock", "step_1"}));
  barrier();  // every process has looked before process 0 makes the next step's temporary
  // The next save works.
  ckpt::save(dir.path(), 2, tree);
  ckpt::wait();
  EXPECT_EQ(ckpt::all_steps(dir.path()), (std::vector<int64_t>{1, 2}));
  expect_same_values(tree, ckpt::restore(dir.path(), 2, target_tree(mesh_of(2, 4))));
}

// Processes that save different trees (here a leaf on each process's own default device)
// fail alike, before anything is written.
TEST(Checkpoints, ProcessesThatSaveDifferentTreesFailAlike) {
  SharedDir dir;
  std::map<std::string, Array> tree;
  tree["own"] = scalar<float>(1.0f);  // on this process's first device
  std::string error;
  try {
    ckpt::save(dir.path(), 1, tree);
    ckpt::wait();
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("saves another tree"), std::string::npos) << error;
  EXPECT_NE(error.find("leaf '['own']'"), std::string::npos) << error;
  barrier();
  EXPECT_TRUE(ckpt::all_steps(dir.path()).empty());
}

// A step already committed is refused by process 0 (which holds the folder's lock); every
// process fails the save alike and the step keeps its values, until overwrite asks to replace it.
TEST(Checkpoints, ACommittedStepSavedAgainFailsOnEveryProcess) {
  SharedDir dir;
  const Mesh mesh = mesh_of(4, 2);
  const auto tree = saved_tree(mesh);
  ckpt::save(dir.path(), 1, tree);
  ckpt::wait();
  std::map<std::string, Array> other = tree;
  other["even"] = filled({8, 6}, NamedSharding(mesh, P("x", "y")), 50.0f);
  std::string error;
  try {
    ckpt::save(dir.path(), 1, other);
    ckpt::wait();
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_TRUE(error.starts_with("[ckpt.save]")) << error;
  EXPECT_NE(error.find("step 1 of '" + dir.path() + "' is already committed"), std::string::npos)
      << error;
  expect_same_values(tree, ckpt::restore(dir.path(), 1, target_tree(mesh_of(2, 4))));
  barrier();  // every process has read step 1 before it is replaced
  ckpt::save(dir.path(), 1, other, {.overwrite = true});
  ckpt::wait();
  expect_same_values(other, ckpt::restore(dir.path(), 1, target_tree(mesh_of(2, 4))));
}

// Last in this file: a process that never saves leaves the others' messages unread on the
// checkpoint channel. The others raise a timeout instead of hanging.
TEST(Checkpoints, ZZAProcessThatDoesNotSaveTimesOut) {
  SharedDir dir;
  const Mesh mesh = mesh_of(4, 2);
  const auto tree = saved_tree(mesh);
  std::string error;
  if (process_index() != 0) {
    // Process 0 keeps the longer timeout for the barrier that waits for the others.
    const double timeout = comm::collective_timeout_seconds();
    comm::set_collective_timeout_seconds(3);
    try {
      ckpt::save(dir.path(), 1, tree);
      ckpt::wait();
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("timed out"), std::string::npos) << error;
    EXPECT_NE(error.find("process(es) 0"), std::string::npos) << error;
    comm::set_collective_timeout_seconds(timeout);
  }
  EXPECT_TRUE(ckpt::all_steps(dir.path()).empty());
}

}  // namespace
}  // namespace partix

// partix::ckpt: checkpoints of any tree of Arrays (Params, optimizer states, scalars, keys), as
// Orbax and PyTorch DCP write them: sharded, asynchronous, atomically committed, restorable onto
// any mesh. (partix::checkpoint(f) is rematerialisation, as jax.checkpoint.)
//
// <dir>/step_<N>/ holds index.json (every leaf's name, global shape, dtype and the sharding it
// was saved with; for every chunk its global box and the file and byte range holding it) and
// one safetensors file per process, data-<p>-of-<P>.safetensors, with the unique chunks that
// process owns: a block held by several devices is written once, by the process of its first
// replica. No device and no host buffer ever holds a whole sharded array to save or restore it.
//
// A step appears by rename of a finished, fsynced folder: a reader never sees a partial step,
// and a crash or a full disk at any moment leaves every earlier step intact. Leaf names are the
// tree's paths (tree_leaf_paths): "['transformer.wte.weight']", "['opt_state'].mu['...']".
//
// Files are untrusted input: a truncated or corrupted data file (every chunk carries an XXH64
// checksum), an index that lies, or a checkpoint of another model raise partix::Error naming
// the file and the leaf.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "partix/array.h"
#include "partix/sharding.h"
#include "partix/tree.h"

namespace partix::ckpt {

struct SaveOptions {
  std::map<std::string, std::string> metadata{};  // stored in index.json, returned by info()
  // A step already committed in the folder is refused unless this is set; then it is replaced
  // (atomically: a crash leaves the old step or the new one whole).
  bool overwrite = false;
};

struct RestoreOptions {
  // Restore only the leaves asked for. Without it a checkpoint holding leaves the target lacks
  // is refused: it is most likely of another model.
  bool partial = false;
};

// What restore makes of one leaf: an array of this shape and dtype in this sharding. The dtype
// may differ from the saved one where the conversion loses nothing unexpected (float to float,
// integer to float, integer to wider integer); values the target cannot hold (integers out of
// range, finite floats that would overflow to infinity) are refused, naming the leaf. Quantized
// leaves restore as their own dtype, blocks whole, onto any sharding that keeps blocks whole.
struct ArraySpec {
  Shape shape{};
  DType dtype = DType::F32;
  NamedSharding sharding;  // required: no default
};

struct LeafInfo {
  std::string name;
  Shape shape;
  DType dtype = DType::F32;
  std::string saved_sharding;  // as NamedSharding::to_string printed it
};

struct Info {
  std::string path;  // the step's folder
  int64_t step = 0;
  std::map<std::string, std::string> metadata;
  std::vector<LeafInfo> leaves;  // in the order they were saved
};

// <dir>/step_<step>.
std::string step_path(const std::string& dir, int64_t step);
// The committed steps under `dir`, ascending (temporaries of unfinished saves are not listed).
// An absent folder has none.
std::vector<int64_t> all_steps(const std::string& dir);
std::optional<int64_t> latest_step(const std::string& dir);
// Reads and validates step `step`'s index.
Info info(const std::string& dir, int64_t step);

// One background writer: save() validates the tree, waits for the previous save, copies this
// process's unique chunks to host memory and returns; a thread then writes and commits the
// step. An error of a background write is raised by the next save() or wait().
// One writer per folder: from the start of save() until the step is committed (or the save
// failed), process 0 holds an flock on <dir>/.partix-lock, which the kernel releases if the
// process dies. A save into a folder another process (or another Checkpointer or
// CheckpointManager of this process) is saving into is refused at once, naming the folder.
class Checkpointer {
 public:
  Checkpointer();
  ~Checkpointer();  // waits for the write in flight
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  template <class T>
  void save(const std::string& dir, int64_t step, const T& tree, const SaveOptions& options = {}) {
    save_leaves(dir, step, tree_leaf_paths(tree), tree_leaves(tree), options);
  }
  // The same for leaves named explicitly; `after_commit` runs on the writer thread once the
  // step is committed (CheckpointManager deletes old steps there).
  void save_leaves(const std::string& dir, int64_t step, const std::vector<std::string>& names,
                   const std::vector<Array>& leaves, const SaveOptions& options = {},
                   std::function<void()> after_commit = {});
  // Blocks until the write in flight is committed; raises its error if it failed.
  void wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Saves with a process-wide Checkpointer (asynchronous); wait() joins it.
template <class T>
void save(const std::string& dir, int64_t step, const T& tree, const SaveOptions& options = {});
void wait();

// Restores the named leaves of step `step`, each as its spec says; every device reads only the
// byte ranges of its block.
std::vector<Array> restore_leaves(const std::string& dir, int64_t step,
                                  const std::vector<std::string>& names,
                                  const std::vector<ArraySpec>& specs,
                                  const RestoreOptions& options = {});

// Restores into the structure of `target`: each leaf takes the shape, dtype and sharding of
// target's Array there (its values are not read; donated and abstract arrays serve, e.g. a
// tree of ShapeDtypeStructs or an eval_shape result).
template <class T>
T restore(const std::string& dir, int64_t step, const T& target,
          const RestoreOptions& options = {}) {
  std::vector<ArraySpec> specs;
  for (const Array& a : tree_leaves(target)) specs.push_back({a.shape(), a.dtype(), a.sharding()});
  return tree_unflatten(target, restore_leaves(dir, step, tree_leaf_paths(target), specs, options));
}

// Restores into the structure of `structure` (its leaves may be empty Array handles) with one
// ArraySpec per leaf name: nothing needs to be allocated beforehand.
template <class T>
T restore(const std::string& dir, int64_t step, const T& structure,
          const std::map<std::string, ArraySpec>& specs, const RestoreOptions& options = {}) {
  std::vector<std::string> names = tree_leaf_paths(structure);
  std::vector<ArraySpec> ordered;
  for (const std::string& n : names) {
    auto it = specs.find(n);
    if (it == specs.end()) throw Error("[ckpt.restore] no ArraySpec for leaf '" + n + "'");
    ordered.push_back(it->second);
  }
  return tree_unflatten(structure, restore_leaves(dir, step, names, ordered, options));
}

// Every leaf of the step by name, in the sharding sharding_for(name, shape) gives.
using ShardingFn = std::function<NamedSharding(const std::string& name, const Shape& shape)>;
std::map<std::string, Array> restore_all(const std::string& dir, int64_t step,
                                         const ShardingFn& sharding_for);

// The process-wide writer save() and wait() use.
Checkpointer& default_checkpointer();

template <class T>
void save(const std::string& dir, int64_t step, const T& tree, const SaveOptions& options) {
  default_checkpointer().save(dir, step, tree, options);
}

}  // namespace partix::ckpt

namespace partix {

struct CheckpointManagerOptions {
  int64_t keep = 0;        // the newest steps kept after each commit; 0 keeps all
  int64_t save_every = 1;  // save() saves the steps that are multiples of this
};

// Steps of one training run under one folder: periodic asynchronous saves, the newest `keep`
// kept (older ones are deleted after a newer step commits), restore of any committed step.
// Temporaries left by processes that died are removed when the manager is created.
// One run per folder: the manager locks it (a second manager, in any process, is refused) and
// saves only steps after the folder's latest, so nothing a save commits is deleted by `keep`.
class CheckpointManager {
 public:
  explicit CheckpointManager(std::string dir, CheckpointManagerOptions options = {});
  ~CheckpointManager();  // waits for the save in flight

  const std::string& directory() const { return dir_; }
  const CheckpointManagerOptions& options() const { return options_; }
  std::vector<int64_t> all_steps() const { return ckpt::all_steps(dir_); }
  std::optional<int64_t> latest_step() const { return ckpt::latest_step(dir_); }
  bool should_save(int64_t step) const;

  // Saves when should_save(step) or force; returns whether it did. Asynchronous.
  template <class T>
  bool save(int64_t step, const T& tree, const ckpt::SaveOptions& options = {},
            bool force = false) {
    if (!force && !should_save(step)) return false;
    save_leaves(step, tree_leaf_paths(tree), tree_leaves(tree), options);
    return true;
  }
  void save_leaves(int64_t step, const std::vector<std::string>& names,
                   const std::vector<Array>& leaves, const ckpt::SaveOptions& options = {});

  // Restores after waiting for the save in flight.
  template <class T>
  T restore(int64_t step, const T& target, const ckpt::RestoreOptions& options = {}) {
    wait();
    return ckpt::restore(dir_, step, target, options);
  }
  template <class T>
  T restore(int64_t step, const T& structure, const std::map<std::string, ckpt::ArraySpec>& specs,
            const ckpt::RestoreOptions& options = {}) {
    wait();
    return ckpt::restore(dir_, step, structure, specs, options);
  }
  ckpt::Info info(int64_t step) const { return ckpt::info(dir_, step); }
  void wait();

 private:
  void delete_old_steps(int64_t written);
  void lock(bool required);
  std::string dir_;
  CheckpointManagerOptions options_;
  std::shared_ptr<void> lock_;  // the folder's lock, held by process 0 while the manager lives
  ckpt::Checkpointer writer_;
};

}  // namespace partix

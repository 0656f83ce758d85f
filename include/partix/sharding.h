// PartitionSpec and NamedSharding.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "partix/dtype.h"
#include "partix/mesh.h"

namespace partix {

struct NoneT {};
inline constexpr NoneT None{};

// One mesh axis name, or several (major to minor).
class Axes {
 public:
  Axes(const char* name);                                // NOLINT: implicit by design
  Axes(std::string name);                                // NOLINT
  Axes(std::initializer_list<std::string> names);
  explicit Axes(std::vector<std::string> names);
  const std::vector<std::string>& names() const { return names_; }
  std::string to_string() const;  // 'x' or ('x', 'y')

 private:
  std::vector<std::string> names_;
};

// One entry per leading array dimension: None, one axis, or several axes. Shorter
// specs are padded with None; equality compares the padded form.
class PartitionSpec {
 public:
  using Entry = std::vector<std::string>;  // empty: None (not split)
  PartitionSpec() = default;
  explicit PartitionSpec(std::vector<Entry> entries);

  const std::vector<Entry>& entries() const { return entries_; }
  int size() const { return static_cast<int>(entries_.size()); }
  // The entry of dimension d; None beyond the written length.
  Entry operator[](int d) const;
  // Every axis named, in order of appearance.
  std::vector<std::string> axes() const;
  std::string to_string() const;  // P('data', None), P(('data', 'model'))
  friend bool operator==(const PartitionSpec& a, const PartitionSpec& b);

 private:
  std::vector<Entry> entries_;
};

namespace detail {
inline PartitionSpec::Entry spec_entry(NoneT) { return {}; }
inline PartitionSpec::Entry spec_entry(const Axes& a) { return a.names(); }
inline PartitionSpec::Entry spec_entry(const std::vector<std::string>& e) { return e; }
}  // namespace detail

// P(), P("x", None), P(Axes{"x", "y"}).
template <class... E>
PartitionSpec P(E&&... entries) {
  return PartitionSpec(std::vector<PartitionSpec::Entry>{detail::spec_entry(entries)...});
}

struct Slice {  // half-open [start, stop)
  int64_t start = 0, stop = 0;
  int64_t size() const { return stop - start; }
  friend bool operator==(const Slice& a, const Slice& b) {
    return a.start == b.start && a.stop == b.stop;
  }
};

// Mesh + PartitionSpec, and the axes over which the value is unreduced (each device holds a
// partial sum) or reduced (replicated, and typed so that its cotangent comes back unreduced, as
// JAX's P(..., reduced=...)). Reduced axes are a type, not a layout: such a value is stored as a
// replicated one.
// A dimension of size n split k ways uses chunk c = ceil(n/k); block i covers
// [i*c, min(n, (i+1)*c)), possibly empty; local shards are padded to c.
class NamedSharding {
 public:
  // Throws partix::Error if an axis is not in the mesh or is used twice.
  NamedSharding(Mesh mesh, PartitionSpec spec);
  // The spec on the current mesh (MeshContext / set_mesh); throws partix::Error if none is set.
  NamedSharding(PartitionSpec spec);  // NOLINT: implicit, so P("x") serves as a sharding
  NamedSharding(Mesh mesh, PartitionSpec spec, std::set<std::string> unreduced);
  NamedSharding(Mesh mesh, PartitionSpec spec, std::set<std::string> unreduced,
                std::set<std::string> reduced);

  const Mesh& mesh() const { return mesh_; }
  const PartitionSpec& spec() const { return spec_; }
  const std::set<std::string>& unreduced() const { return unreduced_; }
  const std::set<std::string>& reduced() const { return reduced_; }
  // This sharding without its reduced axes: the layout the values are stored in.
  NamedSharding layout() const { return NamedSharding(mesh_, spec_, unreduced_); }

  // Throws partix::Error if the spec is longer than the shape's rank.
  void check_shape(const Shape& global) const;
  // The padded block shape.
  Shape shard_shape(const Shape& global) const;
  // For mesh.devices()[k]: the slice of each dimension it holds (clipped).
  std::vector<std::vector<Slice>> devices_indices_map(const Shape& global) const;
  // The slices of the k-th mesh device.
  std::vector<Slice> device_index(const Shape& global, int64_t k) const;
  // Replica id of the k-th mesh device: its row-major index over the axes not in the spec.
  int replica_id(int64_t k) const;
  // Number of blocks dimension d is split into.
  int64_t num_blocks(int d) const;
  // Number of devices holding each block (product of the axes not in the spec).
  int64_t num_replicas() const;
  bool is_fully_replicated() const;

  std::string to_string() const;  // NamedSharding(Mesh('x': 4), P('x'))
  friend bool operator==(const NamedSharding& a, const NamedSharding& b);

 private:
  Mesh mesh_;
  PartitionSpec spec_;
  std::set<std::string> unreduced_;
  std::set<std::string> reduced_;
};

// The sharding that puts a whole array on one device.
NamedSharding single_device_sharding(const Device& device);

// JAX's out_sharding= (explicit sharding): the type an op's result is to have, on
// the mesh of its typed operands (else the current mesh). Where an op's sharding rule has no
// unique answer (a contraction split in both operands, a reshape that cannot keep a split) it
// states the answer; `unreduced` axes keep partial sums (only inside jit).
struct OutSharding {
  PartitionSpec spec;
  std::set<std::string> unreduced = {};
};

}  // namespace partix

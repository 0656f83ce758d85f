// Mesh: an N-D grid of devices with named axes, row-major over its device list.
// On mesh (4,2) ('x','y') the device at coords (i,j) is devices()[2*i + j].
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "partix/device.h"
#include "partix/dtype.h"

namespace partix {

// How a mesh axis is treated (JAX's AxisType). Auto: sharding propagation decides the layout
// of intermediates along the axis. Explicit: the sharding along the axis is part of each
// array's type (type_of shows it). Manual: the program sees per-device values (shard_map).
enum class AxisType { Auto, Explicit, Manual };
std::string_view axis_type_name(AxisType t);  // "Auto", "Explicit", "Manual"

class Mesh {  // value type, cheap to copy
 public:
  // Preconditions (else partix::Error): as many names as sizes, names distinct and
  // non-empty, sizes >= 1, devices distinct and existing. devices = {}: the first
  // prod(axis_sizes) devices of the job.
  Mesh(Shape axis_sizes, std::vector<std::string> axis_names, std::vector<Device> devices = {});
  // The same with a type per axis (one per name, else partix::Error); the forms above make
  // every axis Auto.
  Mesh(Shape axis_sizes, std::vector<std::string> axis_names, std::vector<Device> devices,
       std::vector<AxisType> axis_types);

  const Shape& axis_sizes() const;
  const std::vector<std::string>& axis_names() const;
  int num_axes() const;
  const std::vector<AxisType>& axis_types() const;
  // Throws partix::Error if `name` is not a whole axis of this mesh.
  AxisType axis_type(std::string_view name) const;
  // This mesh with other axis types (same devices, names and sizes).
  Mesh with_axis_types(std::vector<AxisType> axis_types) const;
  // Axis names may also name a sub-axis (as Shardy does): 'name:(pre)size' is the part of axis
  // `name` made of `size` devices whose more-major parts hold `pre` devices in all. On an axis
  // 'data' of size 8, 'data:(1)4' is its major part (coordinate / 2) and 'data:(4)2' its minor
  // part (coordinate % 2). Propagation uses them when a reshape splits a sharded dimension;
  // axis_size, has_axis and axis_coord accept them, axis_index only whole axes.
  // Throws partix::Error if the name is not an axis (or sub-axis) of this mesh.
  int64_t axis_size(std::string_view name) const;
  int axis_index(std::string_view name) const;  // -1 if not a whole axis
  bool has_axis(std::string_view name) const;
  // The coordinate along axis (or sub-axis) `name` of the device at `coords`.
  int64_t axis_coord(const std::vector<int64_t>& coords, std::string_view name) const;
  int64_t size() const;
  const std::vector<Device>& devices() const;  // row-major
  std::vector<int> device_ids() const;

  // Coordinates of the k-th device of devices(), one per axis.
  std::vector<int64_t> coords(int64_t k) const;
  // Position in devices() of the given device id, or -1.
  int64_t position_of(int device_id) const;

  // Mesh('data': 4, 'model': 2); when some axis is not Auto the types follow as in JAX:
  // Mesh('data': 4, 'model': 2, axis_types=(Explicit, Auto)). Equality includes the types, so
  // caches keyed by either never confuse meshes that differ only in types.
  std::string to_string() const;
  friend bool operator==(const Mesh& a, const Mesh& b);
  // Made of abstract devices (make_abstract_mesh): for lowering and planning only.
  bool is_abstract() const;

 private:
  struct Data;
  std::shared_ptr<const Data> data_;
};

Mesh make_mesh(Shape axis_sizes, std::vector<std::string> axis_names);
// jax.make_mesh(axis_shapes, axis_names, axis_types): any of the three types per axis.
Mesh make_mesh(Shape axis_sizes, std::vector<std::string> axis_names,
               std::vector<AxisType> axis_types);

// A mesh of abstract devices (platform "abstract", ids 0..n-1), of any size, whatever the
// machine has: shardings on it describe ShapeDtypeStructs for jit(f).lower and eval_shape, so
// a program's per-device programs, collectives and memory can be planned for a cluster this
// machine cannot hold. Nothing runs on it: device_put and calls onto it raise partix::Error.
inline constexpr std::string_view kAbstractPlatform = "abstract";
Mesh make_abstract_mesh(Shape axis_sizes, std::vector<std::string> axis_names);

// The current mesh: under it a bare PartitionSpec is accepted wherever a NamedSharding is
// (device_put(x, P("data")), constraints, in/out_shardings), as in JAX's `with mesh:`.
// MeshContext sets it for a scope on this thread; set_mesh sets the default for every thread
// (when no MeshContext is active).
class MeshContext {
 public:
  explicit MeshContext(Mesh mesh);
  ~MeshContext();
  MeshContext(const MeshContext&) = delete;
  MeshContext& operator=(const MeshContext&) = delete;
};
void set_mesh(Mesh mesh);
void clear_mesh();
// This thread's own default, under its MeshContexts and over set_mesh's (Python's use_mesh and
// set_mesh set it: JAX's current mesh is per thread, so one thread's mesh never leaks into a
// program another thread traces).
void set_thread_mesh(Mesh mesh);
void clear_thread_mesh();
// The innermost MeshContext of this thread, else this thread's default, else the set_mesh
// default; throws partix::Error naming `api` when none is set.
Mesh current_mesh(std::string_view api = "current_mesh");
bool has_current_mesh();

}  // namespace partix

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

class Mesh {  // value type, cheap to copy
 public:
  // Preconditions (else partix::Error): as many names as sizes, names distinct and
  // non-empty, sizes >= 1, devices distinct and existing. devices = {}: the first
  // prod(axis_sizes) devices of the job.
  Mesh(Shape axis_sizes, std::vector<std::string> axis_names, std::vector<Device> devices = {});

  const Shape& axis_sizes() const;
  const std::vector<std::string>& axis_names() const;
  int num_axes() const;
  // Throws partix::Error if the name is not an axis of this mesh.
  int64_t axis_size(std::string_view name) const;
  int axis_index(std::string_view name) const;
  bool has_axis(std::string_view name) const;
  int64_t size() const;
  const std::vector<Device>& devices() const;  // row-major
  std::vector<int> device_ids() const;

  // Coordinates of the k-th device of devices(), one per axis.
  std::vector<int64_t> coords(int64_t k) const;
  // Position in devices() of the given device id, or -1.
  int64_t position_of(int device_id) const;

  std::string to_string() const;  // Mesh('data': 4, 'model': 2)
  friend bool operator==(const Mesh& a, const Mesh& b);

 private:
  struct Data;
  std::shared_ptr<const Data> data_;
};

Mesh make_mesh(Shape axis_sizes, std::vector<std::string> axis_names);

}  // namespace partix

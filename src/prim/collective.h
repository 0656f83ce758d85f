// Collectives inside a per-device program: groups of devices from mesh axes.
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "ir/primitive.h"

namespace partix::prim {

// The devices that share this device's coordinates on every axis not in `axes`, ordered by
// their mixed-radix index over `axes` (listed order, major to minor); and this device's rank.
struct GroupInfo {
  comm::Group devices;
  int rank = 0;
};
GroupInfo group_of(const ExecContext& ctx, const std::vector<std::string>& axes);
// The device id at `rank` of the group (rank over `axes`), for ppermute.
int64_t mixed_radix_index(const Mesh& mesh, const std::vector<int64_t>& coords,
                          const std::vector<std::string>& axes);

}  // namespace partix::prim

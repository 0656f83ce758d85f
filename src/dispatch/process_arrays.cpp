// Arrays across processes: building one from each process's part and reading one everywhere
// (placed with device_put, so above spmd).
#include <algorithm>
#include <map>
#include <set>

#include "comm/mpi/agreement.h"
#include "core/array_impl.h"
#include "core/errors.h"
#include "core/layout.h"
#include "partix/distributed.h"
#include "partix/transforms.h"

namespace partix {

namespace {

constexpr const char* kLocalApi = "make_array_from_process_local_data";

// For each dimension: how many blocks the sharding splits it into, and which of them this
// process's devices hold.
struct Coverage {
  std::vector<int64_t> parts;
  std::vector<std::set<int64_t>> held;
};

Coverage coverage(const NamedSharding& sharding, size_t rank) {
  const Mesh& mesh = sharding.mesh();
  Shape probe(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    int64_t n = 1;
    for (const auto& a : sharding.spec()[static_cast<int>(d)]) n *= mesh.axis_size(a);
    probe[d] = n;  // one element per block: a block's start is its index
  }
  Coverage c{probe, std::vector<std::set<int64_t>>(rank)};
  const int me = process_index();
  for (int64_t k = 0; k < mesh.size(); ++k) {
    if (mesh.devices()[static_cast<size_t>(k)].process_index != me) continue;
    std::vector<Slice> idx = sharding.device_index(probe, k);
    for (size_t d = 0; d < rank; ++d) c.held[d].insert(idx[d].start);
  }
  return c;
}

}  // namespace

Array make_array_from_process_local_data(const NamedSharding& sharding, const Array& local,
                                         std::optional<Shape> global_shape) {
  detail::check(local.is_concrete(), kLocalApi, "the local data must be a concrete array");
  detail::check_alive(local, kLocalApi);
  if (!(sharding.unreduced().empty())) {
    detail::fail(kLocalApi, "an Array cannot be unreduced; got {}", sharding.to_string());
  }
  const size_t rank = local.shape().size();
  if (!(static_cast<size_t>(sharding.spec().size()) <= rank)) {
    detail::fail(kLocalApi, "the sharding {} has more dimensions than the local data {}{}",
                 sharding.to_string(), dtype_name(local.dtype()), shape_to_string(local.shape()));
  }
  const Coverage c = coverage(sharding, rank);
  bool holds_any = false;
  for (const Device& d : sharding.mesh().devices()) holds_any = holds_any || d.process_index == process_index();
  if (!(holds_any)) {
    detail::fail(kLocalApi, "no device of {} belongs to process {}", sharding.mesh().to_string(),
                 process_index());
  }
  // The process's blocks along each dimension must be consecutive: its part is one box.
  for (size_t d = 0; d < rank; ++d) {
    const auto& h = c.held[d];
    if (!(*h.rbegin() - *h.begin() + 1 == static_cast<int64_t>(h.size()))) {
      detail::fail(kLocalApi,
                   "the devices of process {} hold blocks {} of dimension {} under {}: not one "
                   "contiguous part, so no local array can stand for them",
                   process_index(), fmt::join(h, ","), d, sharding.to_string());
    }
  }
  Shape global;
  if (global_shape) {
    global = *global_shape;
    if (global.size() != rank) {
      detail::fail(kLocalApi, "global_shape {} and the local data {} differ in rank",
                   shape_to_string(global), shape_to_string(local.shape()));
    }
  } else {
    for (size_t d = 0; d < rank; ++d) {
      const int64_t held = static_cast<int64_t>(c.held[d].size());
      detail::check(local.shape()[d] % held == 0, kLocalApi,
                    "dimension {} of the local data ({}) does not split into the {} blocks this "
                    "process holds; pass global_shape",
                    d, local.shape()[d], held);
      global.push_back(local.shape()[d] / held * c.parts[d]);
    }
  }
  sharding.check_shape(global);
  detail::check_block_sharding(kLocalApi, local.dtype(), global, sharding);
  // This process's box of the global array.
  Shape lo, ext;
  for (const Slice& sl : process_local_box(sharding, global)) {
    lo.push_back(sl.start);
    ext.push_back(sl.size());
  }
  if (local.shape() != ext) {
    detail::fail(kLocalApi,
                 "the local data is {}{}, but the devices of process {} hold a block of shape {} "
                 "(at offset {}) of the global {} under {}",
                 dtype_name(local.dtype()), shape_to_string(local.shape()), process_index(),
                 shape_to_string(ext), shape_to_string(lo), shape_to_string(global),
                 sharding.to_string());
  }
  std::vector<char> host = detail::gather_to_host(local);
  // Processes whose devices hold the same box each pass it: their data must agree.
  detail::check_host_data_agrees(kLocalApi, sharding, local.dtype(), global,
                                 fmt::format("{} at offset {}", shape_to_string(ext),
                                             shape_to_string(lo)),
                                 host.data(), host.size());
  const Shape zero(rank, 0);
  return detail::build_sharded(
      global, local.dtype(), sharding, /*committed=*/true,
      [&](void* dst, const std::vector<Slice>& idx, const Shape& block) {
        Shape off, size;
        for (size_t d = 0; d < rank; ++d) {
          off.push_back(idx[d].start - lo[d]);
          size.push_back(idx[d].size());
        }
        detail::copy_elems(local.dtype(), host.data(), ext, off, dst, block, zero, size);
      });
}

Array process_allgather(const Array& x) {
  constexpr const char* kApi = "process_allgather";
  detail::check(x.is_concrete(), kApi, "needs a concrete array");
  detail::check_alive(x, kApi);
  Array whole = x;
  if (!x.is_fully_addressable()) {
    whole = device_put(x, NamedSharding(x.sharding().mesh(), PartitionSpec{}));
  }
  std::vector<char> host = detail::gather_to_host(whole);
  return detail::scatter_from_host(host.data(), x.shape(), x.dtype(),
                                   single_device_sharding(default_device()));
}

}  // namespace partix

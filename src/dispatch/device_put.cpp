// device_put: between shardings of one mesh on device (a program of no instructions whose
// result the partitioner reshards, with the collectives resharding inserts); between meshes
// through the host.
#include <map>

#include "comm/mpi/agreement.h"
#include "core/array_impl.h"
#include "core/errors.h"
#include "dispatch/compile_cache.h"
#include "partix/transforms.h"
#include "spmd/compile.h"
#include "trace/trace.h"

namespace partix {

namespace {

std::shared_ptr<spmd::Compiled> reshard_program(const Array& x, const NamedSharding& to) {
  const NamedSharding& from = *x.impl()->sharding;
  std::string key = "device_put|" + std::string(dtype_name(x.dtype())) +
                    shape_to_string(x.shape()) + from.to_string() + "->" + to.to_string();
  return detail::compile_cache().get_or_compile(key, [&] {
    ir::Program p;
    p.name = "device_put";
    int v = p.add_value(ir::Aval{x.shape(), x.dtype()});
    p.params = {v};
    p.results = {v};
    spmd::CompileOptions o;
    o.name = "device_put";
    o.in_shardings = {from};
    o.out_shardings = {to};
    return spmd::compile(p, o);
  });
}

// Values of `dtype` and `shape` can be placed on `sharding`: it fits the shape, names real
// devices, and splits no quantized block (nor makes quantized blocks partial sums).
void check_placeable(const char* api, DType dtype, const Shape& shape,
                     const NamedSharding& sharding) {
  sharding.check_shape(shape);
  if (sharding.mesh().is_abstract()) {
    detail::fail(api,
                 "cannot place values on {}: its devices are abstract (for lowering and planning "
                 "only); describe the array with ShapeDtypeStruct{{shape, dtype, sharding}}",
                 sharding.mesh().to_string());
  }
  detail::check_block_sharding(api, dtype, shape, sharding);
}

}  // namespace

Array device_put(const Array& x, const NamedSharding& sharding) {
  // Inside a traced program device_put is a sharding constraint (as in JAX).
  if (x.is_tracer()) {
    if (detail::is_tracing()) return with_sharding_constraint(x, sharding);
    detail::trace_of(x, "device_put");  // throws: a traced value that escaped its function
  }
  const auto& impl = x.impl();
  detail::check_alive(x, "device_put");
  check_placeable("device_put", x.dtype(), x.shape(), sharding);
  if (*impl->sharding == sharding && impl->committed) return x;
  // Partial sums cross meshes reduced: summed on their own mesh, made partial on the target's
  // (one device of each unreduced group keeps the value, the others hold zeros).
  if (!(impl->sharding->mesh() == sharding.mesh())) {
    if (!impl->sharding->unreduced().empty()) {
      return device_put(
          device_put(x, NamedSharding(impl->sharding->mesh(), impl->sharding->spec())), sharding);
    }
    if (!sharding.unreduced().empty()) {
      return device_put(device_put(x, NamedSharding(sharding.mesh(), sharding.spec())), sharding);
    }
  }
  Array out;
  // On one mesh, on device (quantized arrays too: the reshard moves whole blocks), so an
  // array spanning processes moves without any process holding it whole.
  if (impl->sharding->mesh() == sharding.mesh()) {
    out = reshard_program(x, sharding)->executable->run({x})[0];
    if (out.impl() == x.impl()) {  // same sharding: a fresh handle, committed
      out = detail::make_array(x.shape(), x.dtype(), sharding, impl->shards);
    }
  } else {
    // Through the host: only an array this process holds every block of (a sharded array
    // spanning processes would have to be materialised whole in each).
    if (!x.is_fully_addressable()) {
      try {
        (void)detail::gather_to_host(x);  // raises unless every block has a replica here
      } catch (const Error&) {
        detail::fail("device_put",
                     "cannot move {}{} from {} to a sharding on another mesh ({}): it spans "
                     "processes, and moving between meshes goes through the host; reshard it on "
                     "its own mesh, or process_allgather it first",
                     dtype_name(x.dtype()), shape_to_string(x.shape()), impl->sharding->to_string(),
                     sharding.to_string());
      }
    }
    std::vector<char> host = detail::gather_to_host(x);
    // A value of this process alone, placed where other processes hold it too: each of them
    // passes its own, and they must be one value.
    bool mine_alone = true;
    for (const Device& d : impl->sharding->mesh().devices()) {
      mine_alone = mine_alone && d.process_index == process_index();
    }
    if (mine_alone) {
      detail::check_host_data_agrees("device_put", sharding, x.dtype(), x.shape(), "", host.data(),
                                     host.size());
    }
    out = detail::scatter_from_host(host.data(), x.shape(), x.dtype(), sharding);
  }
  out.impl()->committed = true;
  return out;
}

namespace detail {

Array array_from_host_to(const void* data, int64_t count, DType dtype, Shape shape,
                         const NamedSharding& sharding, const char* api) {
  const int64_t n = checked_size(api, shape, dtype);
  if (count != n) {
    fail(api, "{} values do not fill shape {} ({} elements)", count, shape_to_string(shape), n);
  }
  if (is_quantized(dtype)) {
    fail(api, "host values cannot be placed as quantized {}: place their blocks with from_blocks",
         dtype_name(dtype));
  }
  check_placeable(api, dtype, shape, sharding);
  if (!sharding.unreduced().empty()) {  // placed whole, then made partial sums on device
    const NamedSharding whole(sharding.mesh(), sharding.spec());
    return device_put(array_from_host_to(data, count, dtype, std::move(shape), whole, api),
                      sharding);
  }
  check_host_data_agrees(api, sharding, dtype, shape, "", data,
                         static_cast<size_t>(dtype_nbytes(dtype, shape)));
  Array out = scatter_from_host(data, std::move(shape), dtype, sharding);
  out.impl()->committed = true;
  return out;
}

}  // namespace detail

Array device_put(const Array& x, const Device& device) {
  detail::check(device.id >= 0 && device.id < device_count(), "device_put",
                "device {} does not exist (the job has {} devices)", device.id, device_count());
  return device_put(x, single_device_sharding(partix::devices()[static_cast<size_t>(device.id)]));
}

}  // namespace partix

namespace partix {

Params device_put(const Params& params, const std::map<std::string, NamedSharding>& shardings) {
  Params out;
  for (const auto& [name, a] : params) {
    auto it = shardings.find(name);
    if (it == shardings.end()) {
      detail::fail("device_put", "no sharding for parameter '{}' ({}{}); give one per name", name,
                   dtype_name(a.dtype()), shape_to_string(a.shape()));
    }
    out.emplace(name, device_put(a, it->second));
  }
  for (const auto& [name, s] : shardings) {
    detail::check(params.count(name) > 0, "device_put",
                  "a sharding is given for '{}', which is not a parameter", name);
  }
  return out;
}

}  // namespace partix

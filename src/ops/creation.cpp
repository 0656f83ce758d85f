// Creation: full, zeros, ones, arange. Always program ops (a broadcast scalar constant, an
// iota), eagerly and under a trace alike: a traced program never captures a whole created
// array as an extra argument, and propagation shards created values like any other (each
// device fills only its block).
#include "core/errors.h"
#include "core/memory.h"
#include "ops/common.h"
#include "partix/ops.h"
#include "trace/trace.h"

namespace partix {

namespace {

// Negative or overflowing sizes, and (outside a trace) more than the host has, named by api.
// Quantized dtypes are storage for weights that come as blocks: nothing is
// created in them.
void check_shape(const char* api, const Shape& shape, DType dtype) {
  ops::refuse_created_quantized(api, dtype, shape);
  const int64_t n = detail::checked_size(api, shape, dtype);
  if (!detail::is_tracing()) {
    detail::check_host_memory(api, fmt::format("{}{}", dtype_name(dtype), shape_to_string(shape)),
                              n * dtype_size(dtype));
  }
}

Array filled(const char* api, const Shape& shape, double value, DType dtype) {
  check_shape(api, shape, dtype);
  return broadcast_in_dim(detail::literal(value, dtype), shape, {});
}

Array counted(int64_t n, DType dtype) {
  detail::check(n >= 0, "arange", "n must be non-negative, got {}", n);
  check_shape("arange", {n}, dtype);
  // iota counts in a numeric dtype; bool counts in i32 and converts (0 is false).
  if (dtype == DType::Bool) return astype(iota({n}, 0, DType::I32), DType::Bool);
  return iota({n}, 0, dtype);
}

}  // namespace

Array full(Shape shape, double value, DType dtype) { return filled("full", shape, value, dtype); }
Array zeros(Shape shape, DType dtype) { return filled("zeros", shape, 0.0, dtype); }
Array ones(Shape shape, DType dtype) { return filled("ones", shape, 1.0, dtype); }
Array arange(int64_t n, DType dtype) { return counted(n, dtype); }

Array full(Shape shape, double value, DType dtype, const NamedSharding& sharding) {
  check_shape("full", shape, dtype);
  return detail::execute_created("full", sharding,
                                 [&] { return filled("full", shape, value, dtype); });
}
Array zeros(Shape shape, DType dtype, const NamedSharding& sharding) {
  check_shape("zeros", shape, dtype);
  return detail::execute_created("zeros", sharding,
                                 [&] { return filled("zeros", shape, 0.0, dtype); });
}
Array ones(Shape shape, DType dtype, const NamedSharding& sharding) {
  check_shape("ones", shape, dtype);
  return detail::execute_created("ones", sharding,
                                 [&] { return filled("ones", shape, 1.0, dtype); });
}
Array arange(int64_t n, DType dtype, const NamedSharding& sharding) {
  ops::refuse_created_quantized("arange", dtype, {n});
  return detail::execute_created("arange", sharding, [&] { return counted(n, dtype); });
}

}  // namespace partix

namespace partix {

namespace {
// out_sharding= of a creation op: on the current mesh (there are no operands to take one from).
NamedSharding created_sharding(const char* api, const OutSharding& out) {
  if (!(out.unreduced.empty())) {
    detail::fail(api, "a created array cannot be unreduced; got {}", fmt::join(out.unreduced, ","));
  }
  const Mesh mesh = current_mesh(api);
  try {
    return NamedSharding(mesh, out.spec);
  } catch (const Error& e) {
    detail::fail(api, "out_sharding: {}", detail::message_without_api(e));
  }
}
}  // namespace

Array arange(int64_t n, DType dtype, OutSharding out) {
  return arange(n, dtype, created_sharding("arange", out));
}
Array zeros(Shape shape, DType dtype, OutSharding out) {
  return zeros(std::move(shape), dtype, created_sharding("zeros", out));
}
Array ones(Shape shape, DType dtype, OutSharding out) {
  return ones(std::move(shape), dtype, created_sharding("ones", out));
}
Array full(Shape shape, double value, DType dtype, OutSharding out) {
  return full(std::move(shape), value, dtype, created_sharding("full", out));
}

}  // namespace partix

// Array: a global logical value (shape, dtype) plus the NamedSharding that says which
// slice each device holds. Inside jit/grad/shard_map an Array is a tracer: it has a
// shape and dtype but no data.
#pragma once

#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "partix/device.h"
#include "partix/dtype.h"
#include "partix/error.h"
#include "partix/sharding.h"

namespace partix {

namespace detail {
struct ArrayImpl;
}

struct Shard;

// Shape, dtype and (optionally) sharding without values, as JAX's jax.ShapeDtypeStruct: what
// jit(f).lower(...) and eval_shape(f, ...) need to trace and partition f, at any size and on
// meshes of abstract devices (make_abstract_mesh) larger than the machine. It converts to an
// abstract Array, so trees of them (Params, optimizer states) are trees of Arrays; an abstract
// Array has no values: reading it, running a program on it or computing with it eagerly
// raises partix::Error.
struct ShapeDtypeStruct {
  Shape shape{};
  DType dtype = DType::F32;
  std::optional<NamedSharding> sharding{};  // none: uncommitted (placed by the program)
};

class Array {
 public:
  Array() = default;  // an empty handle; any use throws partix::Error
  explicit Array(std::shared_ptr<detail::ArrayImpl> impl);
  Array(const ShapeDtypeStruct& abstract);  // NOLINT: implicit, as a tree leaf

  bool valid() const { return impl_ != nullptr; }
  const Shape& shape() const;
  DType dtype() const;
  int ndim() const;
  int64_t size() const;
  int64_t nbytes() const;
  // The sharding of a concrete array; inside a trace, the sharding known so far
  // (throws partix::Error if none is known yet).
  const NamedSharding& sharding() const;
  bool is_tracer() const;
  bool is_abstract() const;  // from a ShapeDtypeStruct: no values
  bool is_concrete() const { return valid() && !is_tracer() && !is_abstract(); }
  // Shape, dtype and sharding (if known) of this array: abstract, concrete or traced.
  ShapeDtypeStruct aval() const;

  // The shards of this process's devices; data is the unpadded local block.
  std::vector<Shard> addressable_shards() const;
  // True when this process holds a shard for every device of the sharding (always, in a
  // single process). Values of an array that is not can be read only when every block has a
  // replica here (e.g. a replicated array); else process_allgather first.
  bool is_fully_addressable() const;
  // The global value, row-major. Precondition: T matches dtype() exactly.
  template <class T>
  std::vector<T> to_vector() const;
  // The only element. Precondition: size() == 1 and T matches dtype().
  template <class T>
  T item() const;

  std::string to_string() const;  // values (small arrays) with shape and dtype
  // Copies the global value, row-major, into dst (nbytes() bytes; whole blocks for quantized
  // dtypes). For bindings that own their host buffers (Python's numpy arrays).
  void copy_to(void* dst, const char* api = "Array.copy_to") const;

  const std::shared_ptr<detail::ArrayImpl>& impl() const;

 private:
  void copy_to_host(void* dst, DType expected, const char* api) const;
  std::shared_ptr<detail::ArrayImpl> impl_;
};

struct Shard {
  Device device;
  std::vector<Slice> index;  // the global slice this device holds
  int replica_id = 0;
  Array data;  // the unpadded local block, on `device`
};

namespace detail {
Array array_from_host(const void* data, int64_t count, DType dtype, Shape shape, const char* api);
// Host values placed straight onto `sharding`: each device of this process gets its block
// copied from `data`, and no device holds more (device_put of host data, as JAX's). Committed.
// Where the sharding spans processes, every process must pass the same values (checked).
Array array_from_host_to(const void* data, int64_t count, DType dtype, Shape shape,
                         const NamedSharding& sharding, const char* api);
}

template <class T>
std::vector<T> Array::to_vector() const {
  std::vector<T> out(static_cast<size_t>(size()));
  copy_to_host(out.data(), dtype_of_v<T>, "Array.to_vector");
  return out;
}

template <>
inline std::vector<bool> Array::to_vector<bool>() const {
  std::vector<uint8_t> raw(static_cast<size_t>(size()));
  copy_to_host(raw.data(), DType::Bool, "Array.to_vector");
  return std::vector<bool>(raw.begin(), raw.end());
}

template <class T>
T Array::item() const {
  if (size() != 1) {
    throw Error("[Array.item] needs an array of exactly one element, got shape " +
                shape_to_string(shape()));
  }
  return to_vector<T>()[0];
}

// An array on the default device (this process's first) holding `values` in row-major order.
// Throws partix::Error if values.size() != prod(shape).
template <class T>
Array from_vector(const std::vector<T>& values, Shape shape) {
  return detail::array_from_host(values.data(), static_cast<int64_t>(values.size()),
                                 dtype_of_v<T>, std::move(shape), "from_vector");
}
// The same values placed straight onto `sharding`, committed: each device gets only its block
// (where device_put(from_vector(values, shape), sharding) first holds the whole array on the
// default device).
template <class T>
Array from_vector(const std::vector<T>& values, Shape shape, const NamedSharding& sharding) {
  return detail::array_from_host_to(values.data(), static_cast<int64_t>(values.size()),
                                    dtype_of_v<T>, std::move(shape), sharding, "from_vector");
}
// A block-quantized array (Q8_0 ... Q6_K) on the default device from its GGUF blocks, rows
// in row-major order. Throws partix::Error unless nbytes == dtype_nbytes(dtype, shape).
Array from_blocks(const void* data, int64_t nbytes, DType dtype, Shape shape);
template <>
inline Array from_vector<bool>(const std::vector<bool>& values, Shape shape) {
  std::vector<uint8_t> raw(values.begin(), values.end());
  return detail::array_from_host(raw.data(), static_cast<int64_t>(raw.size()), DType::Bool,
                                 std::move(shape), "from_vector");
}
// A scalar.
template <class T>
Array scalar(T value) {
  return from_vector<T>(std::vector<T>{value}, {});
}

// Created arrays are program ops (inside jit they are part of the program, sharded by
// propagation, never a captured whole array). Outside jit they live on device 0, or, given a
// sharding, directly in it: each device fills only its block.
Array arange(int64_t n, DType dtype = DType::I32);
Array zeros(Shape shape, DType dtype = DType::F32);
Array ones(Shape shape, DType dtype = DType::F32);
Array full(Shape shape, double value, DType dtype = DType::F32);
Array arange(int64_t n, DType dtype, const NamedSharding& sharding);
Array zeros(Shape shape, DType dtype, const NamedSharding& sharding);
Array ones(Shape shape, DType dtype, const NamedSharding& sharding);
Array full(Shape shape, double value, DType dtype, const NamedSharding& sharding);
// out_sharding= on the current mesh (explicit sharding: the result's type).
Array arange(int64_t n, DType dtype, OutSharding out);
Array zeros(Shape shape, DType dtype, OutSharding out);
Array ones(Shape shape, DType dtype, OutSharding out);
Array full(Shape shape, double value, DType dtype, OutSharding out);

// An array of `shape` in `sharding` built block by block: cb(index) returns the block of the
// global array at `index` (one Slice per dimension; any Array of that extent, e.g. from
// from_vector). It is called once per distinct block this process holds; no whole array is
// ever built. (As jax.make_array_from_callback.)
Array make_array_from_callback(Shape shape, const NamedSharding& sharding,
                               const std::function<Array(const std::vector<Slice>&)>& cb);
// The same with blocks given as host values (row-major, of the block's extent): no block ever
// occupies a device other than those it is placed on (the form that loads weights larger than
// one device).
struct HostBlock {
  DType dtype = DType::F32;
  Shape shape;              // the block's extent
  std::vector<char> bytes;  // its values, row-major
};
Array make_array_from_host_callback(Shape shape, const NamedSharding& sharding,
                                    const std::function<HostBlock(const std::vector<Slice>&)>& cb,
                                    const char* api = "make_array_from_host_callback");

// The type of an array as JAX's explicit-sharding mode writes it (jax.typeof): shape, dtype
// and the sharding along the mesh's Explicit axes. to_string() is JAX's notation:
// float32[8@X,4] (dimension 0 split over Explicit axis X), float32[8@(X,Y),4] (over X then
// Y), float32[8,4]{U:X} (unreduced over X). Auto and Manual axes do not appear: along them
// the layout is the partitioner's (Auto) or the program is per device (Manual).
class ArrayType {
 public:
  ArrayType(Shape shape, DType dtype, std::optional<NamedSharding> sharding = std::nullopt);
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  // The full sharding when one is known (all axis types); none for a traced value whose
  // sharding the partitioner has not fixed.
  const std::optional<NamedSharding>& sharding() const { return sharding_; }
  // The Explicit part of the sharding: one entry per dimension (None where no Explicit axis
  // splits it). All None without a sharding.
  PartitionSpec spec() const;
  // Unreduced Explicit axes, in mesh order.
  std::vector<std::string> unreduced() const;
  std::string to_string() const;
  friend bool operator==(const ArrayType& a, const ArrayType& b) {
    return a.to_string() == b.to_string();
  }

 private:
  Shape shape_;
  DType dtype_;
  std::optional<NamedSharding> sharding_;
};

// JAX's dtype names (float32, bfloat16, int32, bool, ...); quantized types keep partix's
// names (q8_0, ...), which JAX has none for.
std::string_view jax_dtype_name(DType dtype);

// jax.typeof: the type of a concrete, abstract or traced array. A concrete array's sharding
// is its own; a traced value's type along Explicit mesh axes is computed per op while tracing,
// and otherwise shows what is known (a jit argument's fixed sharding, a constrained value).
ArrayType type_of(const Array& x);

// Moves x to any sharding (any mesh, any spec). Exact.
Array device_put(const Array& x, const NamedSharding& sharding);
Array device_put(const Array& x, const Device& device);

// The device table, as JAX draws it: the array's 2-D layout split into blocks, each
// labelled with the devices holding it; 1-D arrays as one row. Rank <= 2.
std::string visualize_sharding(const Array& x);

}  // namespace partix

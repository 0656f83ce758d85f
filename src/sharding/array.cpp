// partix::Array: construction, its sharding and shards, host reads. It sits in the sharding
// layer, above Mesh and NamedSharding, whose shard shapes and device indices it asks; the
// array state itself (core/array_impl.h) is core's.
#include <cstring>
#include <map>
#include <set>
#include <optional>
#include <new>
#include <vector>

#include "core/array_impl.h"
#include "core/errors.h"
#include "core/memory.h"
#include "core/layout.h"
#include "core/scalar.h"

namespace partix {

namespace detail {

Array make_array(Shape shape, DType dtype, NamedSharding sharding, std::vector<Buffer> shards) {
  auto impl = std::make_shared<ArrayImpl>();
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->sharding = std::move(sharding);
  impl->shards = std::move(shards);
  return Array(std::move(impl));
}

// copy_box in storage units: a quantized dtype moves whole blocks along the last dimension
// (offsets and extents there are multiples of the block, checked when the sharding is made).
void copy_elems(DType dt, const void* src, Shape src_shape, Shape src_off, void* dst,
                Shape dst_shape, Shape dst_off, Shape ext) {
  const int64_t b = dtype_block_elems(dt);
  if (b > 1 && !ext.empty()) {
    for (Shape* s : {&src_shape, &src_off, &dst_shape, &dst_off, &ext}) s->back() /= b;
  }
  copy_box(src, src_shape, src_off, dst, dst_shape, dst_off, ext, dtype_size(dt));
}

void check_block_sharding(std::string_view api, DType dtype, const Shape& shape,
                          const NamedSharding& sharding) {
  if (!is_quantized(dtype)) return;
  if (!sharding.unreduced().empty()) {
    fail(api, "a quantized {} array cannot be unreduced (its blocks cannot be summed); got {}",
         dtype_name(dtype), sharding.to_string());
  }
  check_quantized_shape(api, dtype, shape);
  const int64_t b = dtype_block_elems(dtype);
  const int64_t chunk = sharding.shard_shape(shape).back();
  if (chunk % b != 0) {
    fail(api,
         "sharding {} splits the last dimension of {}{} into chunks of {} elements, which would "
         "split its {}-element quantization blocks across devices; shard it on block boundaries "
         "or astype to a float dtype first",
         sharding.to_string(), dtype_name(dtype), shape_to_string(shape), chunk, b);
  }
}

void mark_donated(ArrayImpl& a) {
  a.shards.clear();
  a.donated = true;
}

void check_alive(const Array& a, std::string_view api) {
  const auto& impl = a.impl();
  if (impl->donated) {
    fail(api, "the array ({}{}) was donated to an earlier call and is gone", dtype_name(impl->dtype),
         shape_to_string(impl->shape));
  }
  if (impl->abstract) {
    fail(api,
         "the array ({}{}) is abstract (a ShapeDtypeStruct: shape, dtype and sharding without "
         "values); use it with jit(f).lower(...) or eval_shape, or pass real values",
         dtype_name(impl->dtype), shape_to_string(impl->shape));
  }
}

std::vector<char> gather_to_host(const Array& x) {
  check_alive(x, "Array");
  const ArrayImpl& a = *x.impl();
  const NamedSharding& s = *a.sharding;
  if (!s.unreduced().empty()) {
    fail("Array",
         "the array ({}{}, {}) is unreduced: each device holds a partial sum, and its value is "
         "their sum; reshard it to a sharding without unreduced axes first (reshard(x, P(...)))",
         dtype_name(a.dtype), shape_to_string(a.shape), s.to_string());
  }
  std::vector<char> out = host_staging(
      "Array", fmt::format("copying {}{} to the host", dtype_name(a.dtype), shape_to_string(a.shape)),
      dtype_nbytes(a.dtype, a.shape));
  Shape local = s.shard_shape(a.shape);
  Shape zero(a.shape.size(), 0);
  // Each distinct block once, from any replica this process holds.
  std::set<std::vector<int64_t>> copied;
  for (int64_t k = 0; k < s.mesh().size(); ++k) {
    const Buffer& b = a.shards[static_cast<size_t>(k)];
    if (!b.valid()) continue;
    std::vector<Slice> idx = s.device_index(a.shape, k);
    Shape off, ext;
    for (const Slice& sl : idx) {
      off.push_back(sl.start);
      ext.push_back(sl.size());
    }
    if (!copied.insert(off).second) continue;
    copy_elems(a.dtype, b.data(), local, zero, out.data(), a.shape, off, ext);
  }
  for (int64_t k = 0; k < s.mesh().size(); ++k) {
    if (s.replica_id(k) != 0) continue;
    Shape off;
    for (const Slice& sl : s.device_index(a.shape, k)) off.push_back(sl.start);
    if (!copied.count(off)) {
      fail("Array",
           "the array ({}{}, {}) is not fully addressable: the block of device {} lives only in "
           "another process; use process_allgather(x) to give every process its value",
           dtype_name(a.dtype), shape_to_string(a.shape), s.to_string(),
           s.mesh().devices()[static_cast<size_t>(k)].id);
    }
  }
  return out;
}

Array build_sharded(
    const Shape& shape, DType dtype, const NamedSharding& sharding, bool committed,
    const std::function<void(void*, const std::vector<Slice>&, const Shape&)>& fill) {
  sharding.check_shape(shape);
  check_block_sharding("Array", dtype, shape, sharding);
  if (sharding.mesh().is_abstract()) {
    fail("Array",
         "cannot place values on {}: its devices are abstract (for lowering and planning only)",
         sharding.mesh().to_string());
  }
  const Shape local = sharding.shard_shape(shape);
  const int64_t nbytes = dtype_nbytes(dtype, local);
  const int me = process_index();
  std::vector<Buffer> shards;
  for (int64_t k = 0; k < sharding.mesh().size(); ++k) {
    const Device& dev = sharding.mesh().devices()[static_cast<size_t>(k)];
    if (dev.process_index != me) {
      shards.emplace_back();
      continue;
    }
    std::vector<Slice> idx = sharding.device_index(shape, k);
    bool padded = false;
    for (size_t d = 0; d < idx.size(); ++d) padded = padded || idx[d].size() != local[d];
    Buffer b = padded ? Buffer::zeros(dev.id, nbytes) : Buffer::allocate(dev.id, nbytes);
    fill(b.data(), idx, local);
    shards.push_back(std::move(b));
  }
  Array out = make_array(shape, dtype, sharding, std::move(shards));
  out.impl()->committed = committed;
  return out;
}

Array scatter_from_host(const void* data, Shape shape, DType dtype,
                        const NamedSharding& sharding) {
  Shape zero(shape.size(), 0);
  return build_sharded(shape, dtype, sharding, /*committed=*/false,
                       [&](void* block, const std::vector<Slice>& idx, const Shape& local) {
                         Shape off, ext;
                         for (const Slice& sl : idx) {
                           off.push_back(sl.start);
                           ext.push_back(sl.size());
                         }
                         copy_elems(dtype, data, shape, off, block, local, zero, ext);
                       });
}

Array array_from_host(const void* data, int64_t count, DType dtype, Shape shape,
                      const char* api) {
  const int64_t n = checked_size(api, shape, dtype);
  if (count != n) {
    fail(api, "{} values do not fill shape {} ({} elements)", count, shape_to_string(shape), n);
  }
  return scatter_from_host(data, std::move(shape), dtype,
                           single_device_sharding(partix::default_device()));
}

}  // namespace detail

Array::Array(std::shared_ptr<detail::ArrayImpl> impl) : impl_(std::move(impl)) {}

Array::Array(const ShapeDtypeStruct& s) {
  for (int64_t d : s.shape) {
    if (d < 0) {
      detail::fail("ShapeDtypeStruct", "shape {} has a negative dimension",
                   shape_to_string(s.shape));
    }
  }
  auto impl = std::make_shared<detail::ArrayImpl>();
  impl->shape = s.shape;
  impl->dtype = s.dtype;
  if (s.sharding) {
    s.sharding->check_shape(s.shape);
    impl->sharding = s.sharding;
    impl->committed = true;
  } else {
    impl->sharding = single_device_sharding(partix::default_device());  // as from_vector's arrays
  }
  impl->abstract = true;
  impl_ = std::move(impl);
}

bool Array::is_abstract() const { return impl()->abstract; }

ShapeDtypeStruct Array::aval() const {
  const auto& i = impl();
  return ShapeDtypeStruct{i->shape, i->dtype, i->sharding};
}

const std::shared_ptr<detail::ArrayImpl>& Array::impl() const {
  if (!impl_) throw Error("[Array] use of an empty Array (default-constructed or moved from)");
  return impl_;
}

const Shape& Array::shape() const { return impl()->shape; }
DType Array::dtype() const { return impl()->dtype; }
int Array::ndim() const { return static_cast<int>(impl()->shape.size()); }
int64_t Array::size() const { return shape_size(impl()->shape); }
int64_t Array::nbytes() const { return dtype_nbytes(dtype(), shape()); }
bool Array::is_tracer() const { return impl()->tracer != nullptr; }

const NamedSharding& Array::sharding() const {
  const auto& i = impl();
  if (!i->sharding) {
    detail::fail("Array.sharding",
                 "the sharding of this traced value ({}{}) is not known until the program is "
                 "partitioned",
                 dtype_name(i->dtype), shape_to_string(i->shape));
  }
  return *i->sharding;
}

namespace {
void require_concrete(const Array& a, const char* api) {
  if (a.is_tracer()) {
    detail::fail(api,
                 "needs a concrete value, but got a traced {}{} inside jit/grad/shard_map "
                 "(return it from the function instead)",
                 dtype_name(a.dtype()), shape_to_string(a.shape()));
  }
}
}  // namespace

void Array::copy_to_host(void* dst, DType expected, const char* api) const {
  require_concrete(*this, api);
  detail::check_alive(*this, api);
  if (expected != dtype() || is_quantized(dtype())) {
    detail::fail(api, "element type {} does not match the array's dtype {}{}",
                 dtype_name(expected), dtype_name(dtype()),
                 is_quantized(dtype()) ? " (astype a quantized array to f32 first)" : "");
  }
  std::vector<char> host = detail::gather_to_host(*this);
  if (!host.empty()) std::memcpy(dst, host.data(), host.size());
}

void Array::copy_to(void* dst, const char* api) const {
  require_concrete(*this, api);
  detail::check_alive(*this, api);
  std::vector<char> host = detail::gather_to_host(*this);
  if (!host.empty()) std::memcpy(dst, host.data(), host.size());
}

bool Array::is_fully_addressable() const {
  require_concrete(*this, "Array.is_fully_addressable");
  for (const detail::Buffer& b : impl()->shards) {
    if (!b.valid()) return false;
  }
  return true;
}

std::vector<Shard> Array::addressable_shards() const {
  require_concrete(*this, "Array.addressable_shards");
  detail::check_alive(*this, "Array.addressable_shards");
  const detail::ArrayImpl& a = *impl_;
  const NamedSharding& s = *a.sharding;
  Shape local = s.shard_shape(a.shape);
  Shape zero(a.shape.size(), 0);
  std::vector<Shard> out;
  for (int64_t k = 0; k < s.mesh().size(); ++k) {
    const detail::Buffer& b = a.shards[static_cast<size_t>(k)];
    if (!b.valid()) continue;
    const Device& dev = s.mesh().devices()[static_cast<size_t>(k)];
    std::vector<Slice> idx = s.device_index(a.shape, k);
    Shape ext;
    for (const Slice& sl : idx) ext.push_back(sl.size());
    // A full block is the device's own memory (no copy); a padded one holds only its valid part.
    detail::Buffer data = b;
    if (ext != local) {
      data = detail::Buffer::allocate(dev.id, dtype_nbytes(a.dtype, ext));
      detail::copy_elems(a.dtype, b.data(), local, zero, data.data(), ext, zero, ext);
    }
    Array block = detail::make_array(ext, a.dtype, single_device_sharding(dev), {std::move(data)});
    block.impl()->committed = a.committed;  // as JAX: a shard is committed as its array is
    out.push_back(Shard{dev, std::move(idx), s.replica_id(k), std::move(block)});
  }
  return out;
}

std::string Array::to_string() const {
  if (is_tracer()) {
    return fmt::format("Traced<{}{}>", dtype_name(dtype()), shape_to_string(shape()));
  }
  if (is_quantized(dtype())) {
    return fmt::format("Array(<{} bytes of blocks>, {}{})", nbytes(), dtype_name(dtype()),
                       shape_to_string(shape()));
  }
  std::vector<char> host = detail::gather_to_host(*this);
  return fmt::format("Array({}, {}{})", detail::format_values(host.data(), dtype(), shape()),
                     dtype_name(dtype()), shape_to_string(shape()));
}

Array from_blocks(const void* data, int64_t nbytes, DType dtype, Shape shape) {
  detail::check(is_quantized(dtype), "from_blocks", "dtype {} is not a quantized dtype",
                dtype_name(dtype));
  check_quantized_shape("from_blocks", dtype, shape);
  detail::checked_size("from_blocks", shape, dtype);
  if (nbytes != dtype_nbytes(dtype, shape)) {
    detail::fail("from_blocks", "{} bytes do not fill a {}{} array ({} bytes)", nbytes,
                 dtype_name(dtype), shape_to_string(shape), dtype_nbytes(dtype, shape));
  }
  return detail::scatter_from_host(data, std::move(shape), dtype,
                                   single_device_sharding(partix::default_device()));
}

namespace {

// make_array_from_callback's body: `block(idx, ext)` returns the block at idx (of extent ext) as
// host values, with its dtype; each distinct block this process holds is asked for once.
Array array_from_host_blocks(
    Shape shape, const NamedSharding& sharding, const char* api,
    const std::function<HostBlock(const std::vector<Slice>&, const Shape&)>& block) {
  sharding.check_shape(shape);
  if (!(sharding.unreduced().empty())) {
    detail::fail(api, "an Array cannot be unreduced; got {}", sharding.to_string());
  }
  // The callback's result's dtype decides the array's: ask for the first block, then reuse
  // blocks that several devices hold.
  std::map<std::vector<std::pair<int64_t, int64_t>>, std::vector<char>> blocks;
  std::optional<DType> dtype;
  auto block_of = [&](const std::vector<Slice>& idx) -> const std::vector<char>& {
    std::vector<std::pair<int64_t, int64_t>> key;
    for (const Slice& s : idx) key.emplace_back(s.start, s.stop);
    auto it = blocks.find(key);
    if (it != blocks.end()) return it->second;
    Shape ext;
    for (const Slice& s : idx) ext.push_back(s.size());
    HostBlock b = block(idx, ext);
    if (b.shape != ext) {
      // JAX's words, with its tuple notation for the shapes.
      auto tuple = [](const Shape& sh) {
        return fmt::format("({}{})", fmt::join(sh, ", "), sh.size() == 1 ? "," : "");
      };
      detail::fail(api,
                   "Expected shard shape {} doesn't match the single device array shape {}: the "
                   "callback returned {}{} for the block at [{}] of {}",
                   tuple(ext), tuple(b.shape), dtype_name(b.dtype), shape_to_string(b.shape),
                   fmt::join(key, ", "), shape_to_string(shape));
    }
    if (!dtype) dtype = b.dtype;
    detail::check(b.dtype == *dtype, api, "the callback returned blocks of {} and {}",
                  dtype_name(*dtype), dtype_name(b.dtype));
    if (static_cast<int64_t>(b.bytes.size()) != dtype_nbytes(b.dtype, ext)) {
      detail::fail(api, "the callback returned {} bytes for the {}{} block at [{}] of {} ({} bytes)",
                   b.bytes.size(), dtype_name(b.dtype), shape_to_string(ext), fmt::join(key, ", "),
                   shape_to_string(shape), dtype_nbytes(b.dtype, ext));
    }
    return blocks.emplace(key, std::move(b.bytes)).first->second;
  };
  // The dtype comes from the first block this process holds (or f32 when it holds none).
  const int me = process_index();
  for (int64_t k = 0; k < sharding.mesh().size() && !dtype; ++k) {
    if (sharding.mesh().devices()[static_cast<size_t>(k)].process_index != me) continue;
    block_of(sharding.device_index(shape, k));
  }
  const DType dt = dtype.value_or(DType::F32);
  const Shape zero(shape.size(), 0);
  return detail::build_sharded(
      shape, dt, sharding, /*committed=*/true,
      [&](void* dst, const std::vector<Slice>& idx, const Shape& local) {
        const std::vector<char>& src = block_of(idx);
        Shape ext;
        for (const Slice& s : idx) ext.push_back(s.size());
        detail::copy_elems(dt, src.data(), ext, zero, dst, local, zero, ext);
      });
}

}  // namespace

Array make_array_from_callback(Shape shape, const NamedSharding& sharding,
                               const std::function<Array(const std::vector<Slice>&)>& cb) {
  return array_from_host_blocks(
      shape, sharding, "make_array_from_callback", [&](const std::vector<Slice>& idx, const Shape& ext) {
        Array b = cb(idx);
        if (b.shape() != ext) return HostBlock{b.dtype(), b.shape(), {}};  // refused by the caller
        return HostBlock{b.dtype(), b.shape(), detail::gather_to_host(b)};
      });
}

Array make_array_from_host_callback(Shape shape, const NamedSharding& sharding,
                                    const std::function<HostBlock(const std::vector<Slice>&)>& cb,
                                    const char* api) {
  return array_from_host_blocks(
      std::move(shape), sharding, api,
      [&](const std::vector<Slice>& idx, const Shape&) { return cb(idx); });
}

}  // namespace partix

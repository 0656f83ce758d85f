// Array: metadata, host data in and out (numpy buffers), creation and device_put.
#include <nanobind/ndarray.h>

#include <cstring>

#include "bind.h"
#include "core/array_impl.h"

namespace partix::python {

namespace {

// A uint8 view of a C-contiguous host buffer: written into (HostBytes), or only read
// (HostValues: read-only numpy arrays are accepted, as np.asarray of an Array gives).
using HostBytes = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using HostValues = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

std::vector<std::pair<int64_t, int64_t>> slices(const std::vector<Slice>& index) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const Slice& s : index) out.emplace_back(s.start, s.stop);
  return out;
}

// The Array class: its type, its shards and its bytes.
void bind_array_class(nb::module_& m) {
  nb::class_<Array>(m, "Array")
      .def_prop_ro("shape", &Array::shape)
      .def_prop_ro("dtype", [](const Array& a) { return std::string(dtype_name(a.dtype())); })
      .def_prop_ro("ndim", &Array::ndim)
      .def_prop_ro("size", &Array::size)
      .def_prop_ro("nbytes", &Array::nbytes)
      .def("valid", &Array::valid)
      .def("sharding", &Array::sharding)
      .def("has_sharding",
           [](const Array& a) { return a.valid() && a.impl()->sharding.has_value(); })
      .def("committed", [](const Array& a) { return a.valid() && a.impl()->committed; })
      .def("is_tracer", &Array::is_tracer)
      .def("is_abstract", &Array::is_abstract)
      .def("is_concrete", &Array::is_concrete)
      .def("is_fully_addressable", &Array::is_fully_addressable)
      .def("is_deleted", [](const Array& a) { return a.valid() && a.impl()->donated; })
      .def("addressable_shards",
           [](const Array& a) {
             std::vector<std::tuple<Device, std::vector<std::pair<int64_t, int64_t>>, int, Array>>
                 out;
             for (const Shard& s : a.addressable_shards()) {
               out.emplace_back(s.device, slices(s.index), s.replica_id, s.data);
             }
             return out;
           })
      // The address of the one local buffer of an array on one device (JAX's
      // unsafe_buffer_pointer); refused for an array split or copied over several devices.
      .def("buffer_pointer",
           [](const Array& a) -> uintptr_t {
             if (!a.valid() || !a.is_concrete() || a.impl()->donated) {
               throw Error(
                   "[Array.unsafe_buffer_pointer] the array has no buffer (deleted, "
                   "donated or traced)");
             }
             const detail::Buffer* only = nullptr;
             for (const detail::Buffer& b : a.impl()->shards) {
               if (!b.valid()) continue;
               if (only != nullptr) {
                 throw Error(
                     "[Array.unsafe_buffer_pointer] is supported only for arrays on one "
                     "device; read each shard's (addressable_shards[i].data)");
               }
               only = &b;
             }
             if (only == nullptr) throw Error("[Array.unsafe_buffer_pointer] no local buffer");
             return reinterpret_cast<uintptr_t>(only->data());
           })
      // Copies the global value into dst (a uint8 view of a C-contiguous host buffer of
      // exactly nbytes); gathers across devices, with the GIL released.
      .def("copy_to",
           [](const Array& a, HostBytes dst) {
             if (static_cast<int64_t>(dst.size()) != a.nbytes()) {
               throw Error("[Array.__array__] host buffer of " + std::to_string(dst.size()) +
                           " bytes for an array of " + std::to_string(a.nbytes()));
             }
             uint8_t* p = dst.data();
             nb::gil_scoped_release release;
             a.copy_to(p, "Array.__array__");
           })
      // A read-only uint8 view of the array's bytes without a copy, when one local shard
      // holds the whole, unpadded value (one device, or fully replicated); else None. The view
      // owns a handle on the shard's buffer: the memory outlives the Array, and a shared
      // buffer is never reused in place by a later program (donation included).
      .def("host_view",
           [](const Array& a) -> nb::object {
             if (!a.valid() || !a.is_concrete() || is_quantized(a.dtype())) return nb::none();
             const auto& impl = a.impl();
             if (impl->donated || impl->abstract || !impl->sharding ||
                 !impl->sharding->unreduced().empty() ||  // a block is a partial sum
                 impl->sharding->shard_shape(impl->shape) != impl->shape) {
               return nb::none();
             }
             for (const detail::Buffer& b : impl->shards) {
               if (!b.valid() || b.nbytes() < a.nbytes()) continue;
               auto* owner = new detail::Buffer(b);
               nb::capsule keep(owner,
                                [](void* p) noexcept { delete static_cast<detail::Buffer*>(p); });
               size_t n = static_cast<size_t>(a.nbytes());
               return nb::cast(
                   nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>>(b.data(), {n}, keep));
             }
             return nb::none();
           })
      .def("to_string", &Array::to_string)
      .def("same", [](const Array& a, const Array& b) { return a.impl() == b.impl(); });
}

// Arrays from host data, constants and ShapeDtypeStructs.
void bind_creation(nb::module_& m) {
  nb::class_<ShapeDtypeStruct>(m, "ShapeDtypeStruct");
  m.def("abstract_array",
        [](const Shape& shape, const std::string& dtype, std::optional<NamedSharding> sharding) {
          return Array(ShapeDtypeStruct{shape, to_dtype(dtype), std::move(sharding)});
        });

  // Host data (a uint8 view of a C-contiguous buffer) as an array on the default device, or
  // placed straight onto `sharding` (each device copies only its block from the host).
  m.def(
      "from_host",
      [](HostValues src, const Shape& shape, const std::string& dtype_name,
         std::optional<NamedSharding> sharding, const std::string& api, bool temporary) {
        DType dt = to_dtype(dtype_name);
        const uint8_t* p = src.data();
        const int64_t nbytes = static_cast<int64_t>(src.size());
        nb::gil_scoped_release release;
        if (is_quantized(dt)) {
          Array a = from_blocks(p, nbytes, dt, shape);
          return sharding ? device_put(a, *sharding) : a;
        }
        const int64_t count = nbytes / dtype_size(dt);
        if (!sharding) return detail::array_from_host(p, count, dt, shape, api.c_str());
        Array a = detail::array_from_host_to(p, count, dt, shape, *sharding, api.c_str());
        // A jit argument's copy: the program may reuse its buffers (ArrayImpl::temporary).
        a.impl()->temporary = temporary;
        return a;
      },
      nb::arg("src"), nb::arg("shape"), nb::arg("dtype"), nb::arg("sharding") = nb::none(),
      nb::arg("api") = "asarray", nb::arg("temporary") = false);
  m.def("scalar_f32", [](double v) { return scalar<float>(static_cast<float>(v)); });
  m.def("scalar_i32", [](int64_t v) {
    if (v < INT32_MIN || v > INT32_MAX) {
      throw Error("[asarray] Python int " + std::to_string(v) + " does not fit int32");
    }
    return scalar<int32_t>(static_cast<int32_t>(v));
  });
  m.def("scalar_bool", [](bool v) { return from_vector<bool>({v}, {}); });

  m.def("zeros", [](const Shape& s, const std::string& dt, std::optional<NamedSharding> sh) {
    return sh ? zeros(s, to_dtype(dt), *sh) : zeros(s, to_dtype(dt));
  });
  m.def("ones", [](const Shape& s, const std::string& dt, std::optional<NamedSharding> sh) {
    return sh ? ones(s, to_dtype(dt), *sh) : ones(s, to_dtype(dt));
  });
  m.def("full",
        [](const Shape& s, double v, const std::string& dt, std::optional<NamedSharding> sh) {
          return sh ? full(s, v, to_dtype(dt), *sh) : full(s, v, to_dtype(dt));
        });
  m.def("arange", [](int64_t n, const std::string& dt, std::optional<NamedSharding> sh) {
    return sh ? arange(n, to_dtype(dt), *sh) : arange(n, to_dtype(dt));
  });
}

// Placement: device_put, arrays made block by block, gathers across processes.
void bind_placement(nb::module_& m) {
  m.def("device_put", [](const Array& x, const NamedSharding& s) {
    nb::gil_scoped_release release;
    return device_put(x, s);
  });
  m.def("device_put_device", [](const Array& x, const Device& d) {
    nb::gil_scoped_release release;
    return device_put(x, d);
  });
  m.def("visualize_sharding", &visualize_sharding);
  // cb(index) -> (uint8 view of the block's C-contiguous values, shape, dtype name): blocks stay on
  // the host until each is copied onto the devices that hold it.
  m.def("make_array_from_host_callback",
        [](const Shape& shape, const NamedSharding& s, nb::callable cb) {
          nb::gil_scoped_release release;
          return make_array_from_host_callback(
              shape, s,
              [&](const std::vector<Slice>& index) {
                nb::gil_scoped_acquire gil;
                auto [bytes, shape, dtype] =
                    nb::cast<std::tuple<HostValues, Shape, std::string>>(cb(slices(index)));
                HostBlock b;
                b.dtype = to_dtype(dtype);
                b.shape = shape;
                const auto* p = reinterpret_cast<const char*>(bytes.data());
                b.bytes.assign(p, p + bytes.size());
                return b;
              },
              "make_array_from_callback");
        });
  m.def("make_array_from_callback",
        [](const Shape& shape, const NamedSharding& s, nb::callable cb) {
          nb::gil_scoped_release release;
          return make_array_from_callback(shape, s, [&](const std::vector<Slice>& index) {
            return call_python<Array>(cb, slices(index));
          });
        });
  m.def("make_array_from_process_local_data",
        [](const NamedSharding& s, const Array& local, std::optional<Shape> global_shape) {
          nb::gil_scoped_release release;
          return make_array_from_process_local_data(s, local, global_shape);
        });
  m.def("process_allgather", [](const Array& x) {
    nb::gil_scoped_release release;
    return process_allgather(x);
  });
}

}  // namespace

void bind_array(nb::module_& m) {
  bind_array_class(m);
  bind_creation(m);
  bind_placement(m);
}

}  // namespace partix::python

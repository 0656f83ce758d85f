// Fast CPU kernels of the data-movement primitives: transpose (cache-blocked),
// broadcast_in_dim, slice, concatenate and pad. Each is a strided copy into a dense result; the
// copies first drop size-1 dimensions and merge dimensions that stay adjacent, so the inner
// loop is a memcpy, a fill or one 2-D tile transpose wherever the layout allows.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "backend/cpu/kernel_util.h"
#include "backend/cpu/permute.h"
#include "core/layout.h"
#include "core/scratch.h"
#include "core/scalar.h"
#include "ir/primitive.h"
#include "prim/util.h"

namespace partix::backend::cpu {

namespace {

using prim::KernelCall;

// Dimensions of a dense destination, outer to inner, with the source stride (elements) of
// each; a stride of 0 repeats the source (broadcast).
struct StridedDims {
  std::vector<int64_t> size, stride;
};

StridedDims simplify(const std::vector<int64_t>& size, const std::vector<int64_t>& stride) {
  StridedDims d;
  for (size_t i = 0; i < size.size(); ++i) {
    if (size[i] == 1) continue;
    if (!d.size.empty() && d.stride.back() == stride[i] * size[i]) {
      d.size.back() *= size[i];  // the outer dim continues the inner one in the source too
      d.stride.back() = stride[i];
    } else {
      d.size.push_back(size[i]);
      d.stride.push_back(stride[i]);
    }
  }
  return d;
}

// Source offset of row `row` (a flat index over all dims but the last `inner` ones).
int64_t row_offset(const StridedDims& d, size_t outer_dims, int64_t row) {
  int64_t off = 0;
  for (size_t i = outer_dims; i-- > 0;) {
    off += (row % d.size[i]) * d.stride[i];
    row /= d.size[i];
  }
  return off;
}

template <class T>
void copy_rows(const T* src, T* dst, const StridedDims& d) {
  const size_t r = d.size.size();
  const int64_t len = d.size[r - 1], s = d.stride[r - 1];
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < r; ++i) rows *= d.size[i];
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / len);
  parallel_for(rows, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const T* in = src + row_offset(d, r - 1, row);
      T* out = dst + row * len;
      if (s == 1) {
        std::memcpy(out, in, static_cast<size_t>(len) * sizeof(T));
      } else if (s == 0) {
        std::fill(out, out + len, in[0]);
      } else {
        for (int64_t i = 0; i < len; ++i) out[i] = in[i * s];
      }
    }
  });
}

// The last destination dim reads the source with stride > 1 while source dim `q` is
// contiguous: 2-D tiles over (q, last) so both sides touch whole cache lines.
template <class T>
void copy_tiled(const T* src, T* dst, const StridedDims& d, size_t q) {
  constexpr int64_t kTile = 64 / sizeof(T) < 8 ? 8 : 64 / sizeof(T);
  const size_t r = d.size.size();
  const int64_t ny = d.size[r - 1], sy = d.stride[r - 1];  // dst contiguous, src strided
  const int64_t nx = d.size[q];                            // src contiguous
  std::vector<int64_t> dst_stride(r, 1);
  for (size_t i = r - 1; i-- > 0;) dst_stride[i] = dst_stride[i + 1] * d.size[i + 1];
  const int64_t dx = dst_stride[q];
  // The other dims, iterated by a flat index.
  StridedDims other;
  std::vector<int64_t> other_dst;
  for (size_t i = 0; i + 1 < r; ++i) {
    if (i == q) continue;
    other.size.push_back(d.size[i]);
    other.stride.push_back(d.stride[i]);
    other_dst.push_back(dst_stride[i]);
  }
  int64_t outer = 1;
  for (int64_t s : other.size) outer *= s;
  const int64_t ytiles = (ny + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / (kTile * nx));
  parallel_for(outer * ytiles, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t u = lo; u < hi; ++u) {
      int64_t o = u / ytiles, y0 = (u % ytiles) * kTile;
      int64_t so = 0, dof = 0;
      for (size_t i = other.size.size(); i-- > 0;) {
        int64_t idx = o % other.size[i];
        o /= other.size[i];
        so += idx * other.stride[i];
        dof += idx * other_dst[i];
      }
      const int64_t y1 = std::min(ny, y0 + kTile);
      for (int64_t x0 = 0; x0 < nx; x0 += kTile) {
        const int64_t x1 = std::min(nx, x0 + kTile);
        for (int64_t x = x0; x < x1; ++x) {
          const T* in = src + so + x;
          T* out = dst + dof + x * dx;
          for (int64_t y = y0; y < y1; ++y) out[y] = in[y * sy];
        }
      }
    }
  });
}

template <class T>
void strided_copy_typed(const T* src, T* dst, const StridedDims& d) {
  const size_t r = d.size.size();
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  if (d.stride[r - 1] <= 1 || r == 1) {
    copy_rows(src, dst, d);
    return;
  }
  // A contiguous source dim elsewhere makes a transpose: tile it.
  for (size_t q = 0; q + 1 < r; ++q) {
    if (d.stride[q] == 1) {
      copy_tiled(src, dst, d, q);
      return;
    }
  }
  copy_rows(src, dst, d);  // strided gather (slices with steps)
}

// A strided copy, simplified once: dst (dense) = src read from element `base` along `d`.
struct CopyPlan {
  int64_t base = 0;
  StridedDims d;
  int es = 1;
  bool empty = false;  // nothing to copy
};

// dst (dense, dims `size` outer to inner) = src read at offset `base` with `stride`.
CopyPlan copy_plan(const std::vector<int64_t>& size, const std::vector<int64_t>& stride,
                   int64_t base, int es) {
  CopyPlan p;
  int64_t n = 1;
  for (int64_t s : size) n *= s;
  p.empty = n == 0;
  p.d = simplify(size, stride);
  p.base = base;
  p.es = es;
  return p;
}

void run_copy(const void* src, void* dst, const CopyPlan& p) {
  if (p.empty) return;
  switch (p.es) {
    case 1:
      strided_copy_typed(static_cast<const uint8_t*>(src) + p.base, static_cast<uint8_t*>(dst), p.d);
      break;
    case 2:
      strided_copy_typed(static_cast<const uint16_t*>(src) + p.base, static_cast<uint16_t*>(dst), p.d);
      break;
    case 4:
      strided_copy_typed(static_cast<const uint32_t*>(src) + p.base, static_cast<uint32_t*>(dst), p.d);
      break;
    case 8:
      strided_copy_typed(static_cast<const uint64_t*>(src) + p.base, static_cast<uint64_t*>(dst), p.d);
      break;
    default:  // a caller copies other element sizes (quantized blocks) as bytes
      detail::internal_error("strided_copy", fmt::format("no copy of {}-byte elements", p.es));
  }
}

CopyPlan transpose_plan(const ir::Attrs& attrs, const ir::Aval& in_aval, const ir::Aval&) {
  const Shape& shape = in_aval.shape;
  std::vector<int64_t> src_stride = detail::strides_of(shape);
  std::vector<int64_t> size, stride;
  for (int64_t p : attrs.ints("perm")) {
    size.push_back(shape[static_cast<size_t>(p)]);
    stride.push_back(src_stride[static_cast<size_t>(p)]);
  }
  return copy_plan(size, stride, 0, dtype_size(in_aval.dtype));
}

CopyPlan broadcast_plan(const ir::Attrs& attrs, const ir::Aval& in_aval, const ir::Aval& out_aval) {
  const Shape& in = in_aval.shape;
  const Shape& out = out_aval.shape;
  const ir::Ints& dims = attrs.ints("dims");
  std::vector<int64_t> in_stride = detail::strides_of(in);
  std::vector<int64_t> stride(out.size(), 0);  // dims the operand lacks or expands repeat it
  for (size_t i = 0; i < dims.size(); ++i) {
    if (in[i] != 1) stride[static_cast<size_t>(dims[i])] = in_stride[i];
  }
  return copy_plan(out, stride, 0, dtype_size(in_aval.dtype));
}

CopyPlan slice_plan(const ir::Attrs& attrs, const ir::Aval& in_aval, const ir::Aval& out_aval) {
  // A quantized value's last dimension (taken whole) counts blocks.
  const Shape in = prim::storage_shape(in_aval);
  const Shape out = prim::storage_shape(out_aval);
  const Shape& start = attrs.ints("start");
  Shape steps = attrs.has("strides") ? attrs.ints("strides") : Shape(in.size(), 1);
  std::vector<int64_t> in_stride = detail::strides_of(in);
  std::vector<int64_t> stride(in.size());
  int64_t base = 0;
  for (size_t d = 0; d < in.size(); ++d) {
    base += start[d] * in_stride[d];
    stride[d] = steps[d] * in_stride[d];
  }
  int es = dtype_size(in_aval.dtype);
  Shape size = out;
  if (es != 1 && es != 2 && es != 4 && es != 8) {  // quantized blocks: copied as their bytes
    for (int64_t& st : stride) st *= es;
    base *= es;
    size.push_back(es);
    stride.push_back(1);
    es = 1;
  }
  return copy_plan(size, stride, base, es);
}

// The plan the instruction's prepare made (the copy's layout is fixed by its avals), or one made
// now.
template <CopyPlan (*Make)(const ir::Attrs&, const ir::Aval&, const ir::Aval&)>
bool copy_kernel(const KernelCall& c) {
  if (const auto* p = static_cast<const CopyPlan*>(c.prepared)) {
    run_copy(c.in[0], c.out[0], *p);
  } else {
    run_copy(c.in[0], c.out[0], Make(c.attrs, c.in_aval(0), c.out_aval(0)));
  }
  return true;
}

template <CopyPlan (*Make)(const ir::Attrs&, const ir::Aval&, const ir::Aval&)>
std::shared_ptr<const void> prepare_copy(const ir::Attrs& attrs, const std::vector<const ir::Aval*>& in,
                                         const std::vector<const ir::Aval*>& out) {
  if (in.size() != 1 || out.size() != 1) return nullptr;
  return std::make_shared<const CopyPlan>(Make(attrs, *in[0], *out[0]));
}

bool concatenate_kernel(const KernelCall& c) {
  const Shape out = prim::storage_shape(c.out_aval(0));  // quantized: never along the blocks
  const int axis = prim::norm_axis("concatenate", c.attrs.i("axis"), static_cast<int>(out.size()));
  const int es = dtype_size(c.out_aval(0).dtype);
  // Each operand contributes one contiguous chunk to every outer row.
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= out[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < out.size(); ++d) inner *= out[d];
  const int64_t row = out[static_cast<size_t>(axis)] * inner * es;
  if (outer == 0 || row == 0) return true;
  // Per operand: its chunk's bytes and offset in a row.
  detail::Scratch<int64_t, 16> chunk(c.in.size()), offset(c.in.size());
  for (size_t k = 0, off = 0; k < c.in.size(); ++k) {
    chunk[k] = c.in_aval(k).shape[static_cast<size_t>(axis)] * inner * es;
    offset[k] = static_cast<int64_t>(off);
    off += static_cast<size_t>(chunk[k]);
  }
  char* dst = static_cast<char*>(c.out[0]);
  const int64_t grain = std::max<int64_t>(1, kParallelGrain * 4 / row);
  parallel_for(outer, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      for (size_t k = 0; k < c.in.size(); ++k) {
        if (chunk[k] == 0) continue;
        std::memcpy(dst + o * row + offset[k], static_cast<const char*>(c.in[k]) + o * chunk[k],
                    static_cast<size_t>(chunk[k]));
      }
    }
  });
  return true;
}

// Fills n elements of es bytes with the element at `value`.
void fill_elements(void* dst, int64_t n, const unsigned char* value, int es) {
  bool zero = true;
  for (int i = 0; i < es; ++i) zero = zero && value[i] == 0;
  if (zero) {
    std::memset(dst, 0, static_cast<size_t>(n * es));
    return;
  }
  auto fill = [&](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
    T v;
    std::memcpy(&v, value, sizeof(T));
    std::fill(p, p + n, v);
  };
  switch (es) {
    case 1: fill(static_cast<uint8_t*>(dst)); break;
    case 2: fill(static_cast<uint16_t*>(dst)); break;
    case 4: fill(static_cast<uint32_t*>(dst)); break;
    case 8: fill(static_cast<uint64_t*>(dst)); break;
  }
}

// Edge padding (no interior padding): fill the result with the value, then copy the operand
// in as rows of whole chunks. The chunk spans the innermost padded dimension and every
// unpadded dimension inside it, which are contiguous in both.
bool pad_kernel(const KernelCall& c) {
  const Shape& in = c.in_aval(0).shape;
  const Shape& out = c.out_aval(0).shape;
  if (c.attrs.has("interior")) {
    for (int64_t i : c.attrs.ints("interior")) {
      if (i != 0) return false;
    }
  }
  const Shape& low = c.attrs.ints("low");
  const int es = dtype_size(c.out_aval(0).dtype);
  unsigned char value[8] = {};
  detail::store_scalar(value, c.out_aval(0).dtype, c.attrs.f("value"));
  char* dst = static_cast<char*>(c.out[0]);
  const char* src = static_cast<const char*>(c.in[0]);
  const int64_t n_out = shape_size(out), n_in = shape_size(in);
  if (n_out > n_in) fill_elements(dst, n_out, value, es);
  if (n_in == 0) return true;
  const size_t r = in.size();
  size_t p = 0;  // dims [p, r) form the chunk
  for (size_t d = r; d-- > 0;) {
    if (in[d] != out[d]) {
      p = d;
      break;
    }
  }
  const std::vector<int64_t> os = detail::strides_of(out);
  int64_t chunk = 1, rows = 1, base = 0;
  for (size_t d = p; d < r; ++d) chunk *= in[d];
  for (size_t d = 0; d < p; ++d) rows *= in[d];
  for (size_t d = 0; d < r; ++d) base += low[d] * os[d];
  const int64_t bytes = chunk * es;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain * 4 / std::max<int64_t>(1, bytes));
  parallel_for(rows, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      int64_t off = base, rest = row;
      for (size_t d = p; d-- > 0;) {
        off += (rest % in[d]) * os[d];
        rest /= in[d];
      }
      std::memcpy(dst + off * es, src + row * bytes, static_cast<size_t>(bytes));
    }
  });
  return true;
}

struct Registrar {
  Registrar() {
    prim::register_kernel("transpose", "cpu", &copy_kernel<&transpose_plan>);
    prim::register_kernel_prepare("transpose", "cpu", &prepare_copy<&transpose_plan>);
    prim::register_kernel("broadcast_in_dim", "cpu", &copy_kernel<&broadcast_plan>);
    prim::register_kernel_prepare("broadcast_in_dim", "cpu", &prepare_copy<&broadcast_plan>);
    prim::register_kernel("slice", "cpu", &copy_kernel<&slice_plan>);
    prim::register_kernel_prepare("slice", "cpu", &prepare_copy<&slice_plan>);
    prim::register_kernel("concatenate", "cpu", &concatenate_kernel);
    prim::register_kernel("pad", "cpu", &pad_kernel);
  }
} registrar;

}  // namespace

void permute_copy(const void* src, void* dst, const Shape& shape, const std::vector<int>& perm,
                  int elem_size) {
  std::vector<int64_t> src_stride = detail::strides_of(shape);
  std::vector<int64_t> size, stride;
  for (int p : perm) {
    size.push_back(shape[static_cast<size_t>(p)]);
    stride.push_back(src_stride[static_cast<size_t>(p)]);
  }
  run_copy(src, dst, copy_plan(size, stride, 0, elem_size));
}

}  // namespace partix::backend::cpu

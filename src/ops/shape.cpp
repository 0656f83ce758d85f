// Shape ops: reshape, transpose, broadcasting, slicing, concatenation, padding.
#include <algorithm>
#include <numeric>

#include "core/errors.h"
#include "ops/common.h"

namespace partix {

using ops::bind;
using ops::to_ints;

Array reshape(const Array& x, Shape shape) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (!(infer < 0)) {
        detail::fail("reshape", "cannot reshape {}{} to {}: only one dimension may be -1",
                     dtype_name(x.dtype()), shape_to_string(x.shape()), shape_to_string(shape));
      }
      infer = static_cast<int>(i);
    } else {
      if (shape[i] < 0) {
        detail::fail("reshape", "cannot reshape {}{} to {}: invalid size {}", dtype_name(x.dtype()),
                     shape_to_string(x.shape()), shape_to_string(shape), shape[i]);
      }
      if (__builtin_mul_overflow(known, shape[i], &known)) known = -1;  // too many: no fit
    }
  }
  if (infer >= 0) {
    if (!(known > 0 && x.size() % known == 0)) {
      detail::fail("reshape", "cannot reshape {}{} ({} elements) to {}", dtype_name(x.dtype()),
                   shape_to_string(x.shape()), x.size(), shape_to_string(shape));
    }
    shape[static_cast<size_t>(infer)] = x.size() / known;
  }
  if (shape == x.shape()) return x;
  return bind("reshape", {x}, {{"shape", ir::Ints(shape)}});
}

Array transpose(const Array& x, std::vector<int> perm) {
  for (int p : perm) {
    if (!(p >= -x.ndim() && p < x.ndim())) {
      detail::fail("transpose",
                   "{} is not a permutation of the axes of {}{}: axis {} is out of range",
                   fmt::format("[{}]", fmt::join(perm, ",")), dtype_name(x.dtype()),
                   shape_to_string(x.shape()), p);
    }
  }
  for (int& p : perm) p = p < 0 ? p + x.ndim() : p;
  std::vector<int> id = ops::all_axes(x.ndim());
  if (perm == id) return x;
  return bind("transpose", {x}, {{"perm", to_ints(perm)}});
}

Array transpose(const Array& x) {
  std::vector<int> perm = ops::all_axes(x.ndim());
  std::reverse(perm.begin(), perm.end());
  return transpose(x, perm);
}

Array swapaxes(const Array& x, int a, int b) {
  a = ops::norm_axis("swapaxes", a, x.shape());
  b = ops::norm_axis("swapaxes", b, x.shape());
  std::vector<int> perm = ops::all_axes(x.ndim());
  std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
  return transpose(x, perm);
}

Array moveaxis(const Array& x, int source, int destination) {
  source = ops::norm_axis("moveaxis", source, x.shape());
  destination = ops::norm_axis("moveaxis", destination, x.shape());
  std::vector<int> perm;
  for (int i = 0; i < x.ndim(); ++i) {
    if (i != source) perm.push_back(i);
  }
  perm.insert(perm.begin() + destination, source);
  return transpose(x, perm);
}

Array broadcast_in_dim(const Array& x, Shape shape, std::vector<int> dims) {
  if (shape == x.shape() && dims == ops::all_axes(x.ndim())) return x;
  return bind("broadcast_in_dim", {x}, {{"shape", ir::Ints(shape)}, {"dims", to_ints(dims)}});
}

Array broadcast_to(const Array& x, Shape shape) {
  if (shape.size() < x.shape().size()) {
    detail::fail("broadcast_to", "cannot broadcast {} to {}", shape_to_string(x.shape()),
                 shape_to_string(shape));
  }
  Shape b = ops::broadcast_shapes("broadcast_to", x.shape(), shape);
  if (b != shape) {
    detail::fail("broadcast_to", "cannot broadcast {} to {}", shape_to_string(x.shape()),
                 shape_to_string(shape));
  }
  detail::checked_size("broadcast_to", shape, x.dtype());
  std::vector<int> dims;
  int lead = static_cast<int>(shape.size() - x.shape().size());
  for (int i = 0; i < x.ndim(); ++i) dims.push_back(lead + i);
  return broadcast_in_dim(x, shape, dims);
}

Array expand_dims(const Array& x, int axis) {
  int rank = x.ndim() + 1;
  if (!(axis >= -rank && axis < rank)) {
    detail::fail("expand_dims", "axis {} is out of range for a new axis of shape {} (rank {})",
                 axis, shape_to_string(x.shape()), rank);
  }
  if (axis < 0) axis += rank;
  Shape s = x.shape();
  s.insert(s.begin() + axis, 1);
  return reshape(x, s);
}

Array squeeze(const Array& x, std::vector<int> axes) {
  axes = ops::norm_axes("squeeze", axes, x.shape());
  Shape s;
  for (int d = 0; d < x.ndim(); ++d) {
    bool drop = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (drop) {
      if (!(x.shape()[static_cast<size_t>(d)] == 1)) {
        detail::fail("squeeze", "dimension {} of {} has size {}, not 1", d,
                     shape_to_string(x.shape()), x.shape()[static_cast<size_t>(d)]);
      }
    } else {
      s.push_back(x.shape()[static_cast<size_t>(d)]);
    }
  }
  return reshape(x, s);
}

Array slice(const Array& x, Shape start, Shape stop) {
  return slice(x, std::move(start), std::move(stop), Shape(x.shape().size(), 1));
}

Array slice(const Array& x, Shape start, Shape stop, Shape strides) {
  // Lengths that do not match the rank go to the primitive, which names them.
  const size_t rank = x.shape().size();
  bool whole = start.size() == rank && strides.size() == rank && stop == x.shape();
  for (size_t d = 0; whole && d < start.size(); ++d) whole = start[d] == 0 && strides[d] == 1;
  if (whole) return x;
  ir::Attrs attrs{{"start", ir::Ints(start)}, {"stop", ir::Ints(stop)}};
  bool unit = strides.size() == rank &&
              std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 1; });
  if (!unit) attrs.set("strides", ir::Ints(strides));
  return bind("slice", {x}, attrs);
}

Array slice_axis(const Array& x, int axis, int64_t start, int64_t stop) {
  axis = ops::norm_axis("slice", axis, x.shape());
  Shape lo(x.shape().size(), 0), hi = x.shape();
  lo[static_cast<size_t>(axis)] = start;
  hi[static_cast<size_t>(axis)] = stop;
  return slice(x, lo, hi);
}

Array concatenate(std::vector<Array> xs, int axis) {
  detail::check(!xs.empty(), "concatenate", "needs at least one array");
  if (xs.size() == 1) return xs[0];
  // Arrays of one dtype join as they are (quantized weights too, along any axis but their
  // blocks'); mixed dtypes promote.
  const bool same =
      std::all_of(xs.begin(), xs.end(), [&](const Array& a) { return a.dtype() == xs[0].dtype(); });
  if (!same) {
    DType dt = xs[0].dtype();
    for (const Array& a : xs) dt = promote_types(dt, a.dtype());
    for (Array& a : xs) a = astype(a, dt);
  }
  axis = ops::norm_axis("concatenate", axis, xs[0].shape());
  return detail::bind1("concatenate", xs, {{"axis", static_cast<int64_t>(axis)}});
}

Array stack(std::vector<Array> xs, int axis) {
  detail::check(!xs.empty(), "stack", "needs at least one array");
  const int rank = xs[0].ndim() + 1;
  if (!(axis >= -rank && axis < rank)) {
    detail::fail("stack",
                 "axis {} is out of range for stacking arrays of shape {} (result rank {})", axis,
                 shape_to_string(xs[0].shape()), rank);
  }
  for (const Array& a : xs) {
    if (a.shape() != xs[0].shape()) {
      detail::fail("stack", "arrays must have one shape, got {}{} and {}{}",
                   dtype_name(xs[0].dtype()), shape_to_string(xs[0].shape()), dtype_name(a.dtype()),
                   shape_to_string(a.shape()));
    }
  }
  for (Array& a : xs) a = expand_dims(a, axis);
  return concatenate(std::move(xs), axis);
}

std::vector<Array> split(const Array& x, int sections, int axis) {
  axis = ops::norm_axis("split", axis, x.shape());
  int64_t n = x.shape()[static_cast<size_t>(axis)];
  if (!(sections > 0 && n % sections == 0)) {
    detail::fail("split", "dimension {} of {} (size {}) does not split into {} equal sections",
                 axis, shape_to_string(x.shape()), n, sections);
  }
  std::vector<Array> out;
  int64_t k = n / sections;
  for (int i = 0; i < sections; ++i) out.push_back(slice_axis(x, axis, i * k, (i + 1) * k));
  return out;
}

Array pad(const Array& x, Shape low, Shape high, double value) {
  return bind("pad", {x}, {{"low", ir::Ints(low)}, {"high", ir::Ints(high)}, {"value", value}});
}

Array pad(const Array& x, Shape low, Shape high, Shape interior, double value) {
  return bind("pad", {x},
              {{"low", ir::Ints(low)},
               {"high", ir::Ints(high)},
               {"interior", ir::Ints(interior)},
               {"value", value}});
}

Array flip(const Array& x, std::vector<int> axes) {
  return bind("rev", {x}, {{"axes", to_ints(ops::norm_axes("flip", axes, x.shape()))}});
}

Array flatten(const Array& x) { return reshape(x, {x.size()}); }

Array roll(const Array& x, int64_t shift, int axis) {
  detail::check(x.ndim() >= 1, "roll", "needs rank >= 1, got a scalar");
  axis = ops::norm_axis("roll", axis, x.shape());
  const int64_t n = x.shape()[static_cast<size_t>(axis)];
  if (n == 0) return x;
  const int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  // The last s elements come first.
  return concatenate({slice_axis(x, axis, n - s, n), slice_axis(x, axis, 0, n - s)}, axis);
}

}  // namespace partix

namespace partix {

Array reshape(const Array& x, Shape shape, OutSharding out) {
  return detail::with_out_sharding("reshape", {x}, out, [&] { return reshape(x, shape); });
}

}  // namespace partix

// Indexing ops: take, take_along_axis, scatter_add, dynamic slices, iota, top_k, sort.
#include "core/errors.h"
#include "ops/common.h"

namespace partix {

using ops::bind;

namespace {
Array as_index(const Array& i, const char* op) {
  if (!(i.dtype() != DType::Bool && !is_floating(i.dtype()))) {
    detail::fail(op, "indices must be integers, got {}{}", dtype_name(i.dtype()),
                 shape_to_string(i.shape()));
  }
  return i;
}
}  // namespace

Array take(const Array& x, const Array& indices, int axis) {
  axis = ops::norm_axis("take", axis, x.shape());
  return bind("take", {x, as_index(indices, "take")}, {{"axis", static_cast<int64_t>(axis)}});
}

Array take_along_axis(const Array& x, const Array& indices, int axis) {
  axis = ops::norm_axis("take_along_axis", axis, x.shape());
  return bind("take_along", {x, as_index(indices, "take_along_axis")},
              {{"axis", static_cast<int64_t>(axis)}});
}

Array scatter_add(const Array& x, const Array& indices, const Array& updates, int axis) {
  axis = ops::norm_axis("scatter_add", axis, x.shape());
  return bind("scatter_add", {x, as_index(indices, "scatter_add"), astype(updates, x.dtype())},
              {{"axis", static_cast<int64_t>(axis)}});
}

Array dynamic_slice(const Array& x, const std::vector<Array>& starts, Shape sizes) {
  std::vector<Array> in{x};
  for (const Array& s : starts) in.push_back(as_index(s, "dynamic_slice"));
  return detail::bind1("dynamic_slice", in, {{"sizes", ir::Ints(sizes)}});
}

Array dynamic_update_slice(const Array& x, const Array& update, const std::vector<Array>& starts) {
  std::vector<Array> in{x, astype(update, x.dtype())};
  for (const Array& s : starts) in.push_back(as_index(s, "dynamic_update_slice"));
  return detail::bind1("dynamic_update_slice", in, {});
}

Array dynamic_slice_in_dim(const Array& x, const Array& start, int64_t size, int axis) {
  axis = ops::norm_axis("dynamic_slice_in_dim", axis, x.shape());
  std::vector<Array> starts;
  Shape sizes = x.shape();
  for (int d = 0; d < x.ndim(); ++d) {
    starts.push_back(d == axis ? as_index(start, "dynamic_slice_in_dim") : zeros({}, DType::I32));
  }
  sizes[static_cast<size_t>(axis)] = size;
  return dynamic_slice(x, starts, sizes);
}

Array dynamic_update_slice_in_dim(const Array& x, const Array& update, const Array& start,
                                  int axis) {
  axis = ops::norm_axis("dynamic_update_slice_in_dim", axis, x.shape());
  std::vector<Array> starts;
  for (int d = 0; d < x.ndim(); ++d) {
    starts.push_back(d == axis ? as_index(start, "dynamic_update_slice_in_dim")
                               : zeros({}, DType::I32));
  }
  return dynamic_update_slice(x, update, starts);
}

Array iota(Shape shape, int dimension, DType dtype) {
  ops::refuse_created_quantized("iota", dtype, shape);
  return detail::bind1("iota", {}, {{"shape", ir::Ints(shape)},
                                    {"dimension", static_cast<int64_t>(dimension)},
                                    {"dtype", dtype}});
}

std::pair<Array, Array> top_k(const Array& x, int64_t k) {
  auto outs = detail::bind(prim::get_primitive("top_k"), {x}, {{"k", k}});
  return {outs[0], outs[1]};
}

std::pair<Array, Array> sort(const Array& x, bool descending) {
  detail::check(x.ndim() >= 1, "sort", "needs rank >= 1, got a scalar");
  int64_t n = x.shape().back();
  if (descending) return top_k(x, n);
  // Ascending is descending reversed. top_k of the reversed row ranks ties by their higher
  // original index, so reversing its result keeps equal keys in index order (a stable sort)
  // and puts NaN last. (Negating the keys instead would put NaN first and wrap INT_MIN.)
  const int last = x.ndim() - 1;
  auto [v, i] = top_k(flip(x, {last}), n);
  Array idx = flip(static_cast<double>(n - 1) - i, {last});
  return {flip(v, {last}), idx};
}

Array one_hot(const Array& indices, int64_t n, DType dtype) {
  detail::check(n >= 0, "one_hot", "the number of classes must be non-negative, got {}", n);
  // As in JAX, float indices compare with the class numbers too; bool has no class numbers.
  if (indices.dtype() == DType::Bool) {
    detail::fail("one_hot", "indices must be numbers, got {}{}", dtype_name(indices.dtype()),
                 shape_to_string(indices.shape()));
  }
  Shape s = indices.shape();
  s.push_back(n);
  ops::refuse_created_quantized("one_hot", dtype, s);
  Array classes = iota(s, static_cast<int>(s.size()) - 1, indices.dtype());
  return astype(equal(expand_dims(indices, -1), classes), dtype);
}

}  // namespace partix

namespace partix {

Array take(const Array& x, const Array& indices, int axis, OutSharding out) {
  return detail::with_out_sharding("take", {x, indices}, out,
                                   [&] { return take(x, indices, axis); });
}

}  // namespace partix

// numpy-like operations on Arrays. Each works on concrete arrays (eagerly, on the devices
// the operands live on) and on traced arrays inside jit/grad/shard_map. Binary operations
// broadcast as numpy does and promote dtypes as JAX does; a plain number takes the dtype of
// the array it meets (a "weak" type), except that a fractional number makes an integer
// array's result f32.
#pragma once

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "partix/array.h"

namespace partix {

// ---- elementwise ----
Array operator-(const Array& x);
Array operator+(const Array& a, const Array& b);
Array operator-(const Array& a, const Array& b);
Array operator*(const Array& a, const Array& b);
Array operator/(const Array& a, const Array& b);
Array operator+(const Array& a, double b);
Array operator-(const Array& a, double b);
Array operator*(const Array& a, double b);
Array operator/(const Array& a, double b);
Array operator+(double a, const Array& b);
Array operator-(double a, const Array& b);
Array operator*(double a, const Array& b);
Array operator/(double a, const Array& b);
// Python's % and //, as JAX: the remainder takes the divisor's sign; floor division rounds
// down (integers too). Integer division by zero gives 0 remainder and quotient -1 or 0 as
// XLA does for its truncating ops.
Array remainder(const Array& a, const Array& b);
Array floor_divide(const Array& a, const Array& b);
Array operator%(const Array& a, const Array& b);
Array operator%(const Array& a, double b);
Array operator%(double a, const Array& b);
Array floor_divide(const Array& a, double b);
// Comparisons give Bool arrays.
Array operator<(const Array& a, const Array& b);
Array operator<=(const Array& a, const Array& b);
Array operator>(const Array& a, const Array& b);
Array operator>=(const Array& a, const Array& b);
Array operator<(const Array& a, double b);
Array operator<=(const Array& a, double b);
Array operator>(const Array& a, double b);
Array operator>=(const Array& a, double b);
Array equal(const Array& a, const Array& b);
Array not_equal(const Array& a, const Array& b);
Array equal(const Array& a, double b);
Array logical_and(const Array& a, const Array& b);
Array logical_or(const Array& a, const Array& b);
Array logical_not(const Array& x);
// Bitwise ops of integers (and of bools: logical); shifts of integers, as XLA defines them
// (shifting by the width or more gives 0, or the sign for an arithmetic right shift).
Array bitwise_not(const Array& x);
Array bitwise_and(const Array& a, const Array& b);
Array bitwise_or(const Array& a, const Array& b);
Array bitwise_xor(const Array& a, const Array& b);
Array shift_left(const Array& a, const Array& b);
Array shift_right_arithmetic(const Array& a, const Array& b);
Array shift_right_logical(const Array& a, const Array& b);
Array& operator+=(Array& a, const Array& b);
Array& operator-=(Array& a, const Array& b);
Array& operator*=(Array& a, const Array& b);

Array exp(const Array& x);
Array log(const Array& x);
Array sin(const Array& x);
Array cos(const Array& x);
Array tanh(const Array& x);
Array sqrt(const Array& x);
Array rsqrt(const Array& x);
Array abs(const Array& x);
Array sign(const Array& x);
Array floor(const Array& x);
Array ceil(const Array& x);
Array round(const Array& x);     // half to even
Array logistic(const Array& x);  // 1 / (1 + exp(-x))
Array erf(const Array& x);
Array erfc(const Array& x);  // 1 - erf(x), accurate where erf(x) is near 1
Array erf_inv(const Array& x);
Array log1p(const Array& x);
Array expm1(const Array& x);
Array square(const Array& x);
Array pow(const Array& a, const Array& b);
Array pow(const Array& a, double b);
Array maximum(const Array& a, const Array& b);
Array minimum(const Array& a, const Array& b);
Array maximum(const Array& a, double b);
Array minimum(const Array& a, double b);
Array where(const Array& cond, const Array& a, const Array& b);
Array where(const Array& cond, const Array& a, double b);
Array where(const Array& cond, double a, const Array& b);
Array clip(const Array& x, double lo, double hi);
Array astype(const Array& x, DType dtype);
// Stops gradients: the identity whose VJP is zero.
Array stop_gradient(const Array& x);

// The dtype of a binary operation's result (JAX's promotion lattice).
DType promote_types(DType a, DType b);

// ---- shapes ----
// One dimension may be -1 (inferred).
Array reshape(const Array& x, Shape shape);
Array reshape(const Array& x, Shape shape, OutSharding out);
Array transpose(const Array& x, std::vector<int> perm);
Array transpose(const Array& x);  // reverses the axes
Array swapaxes(const Array& x, int a, int b);
Array moveaxis(const Array& x, int source, int destination);
Array broadcast_to(const Array& x, Shape shape);
// XLA's broadcast_in_dim: operand dimension i becomes result dimension dims[i].
Array broadcast_in_dim(const Array& x, Shape shape, std::vector<int> dims);
Array expand_dims(const Array& x, int axis);
Array squeeze(const Array& x, std::vector<int> axes);
Array slice(const Array& x, Shape start, Shape stop);  // static, half-open
Array slice(const Array& x, Shape start, Shape stop, Shape strides);
// x[start:stop] along one axis.
Array slice_axis(const Array& x, int axis, int64_t start, int64_t stop);
Array concatenate(std::vector<Array> xs, int axis);
Array stack(std::vector<Array> xs, int axis = 0);
std::vector<Array> split(const Array& x, int sections, int axis);
// Pads with a constant: low/high per dimension.
Array pad(const Array& x, Shape low, Shape high, double value = 0.0);
// lax.pad's form: `interior` elements of `value` between neighbours along each dimension.
Array pad(const Array& x, Shape low, Shape high, Shape interior, double value);
// numpy roll: elements shifted by `shift` along `axis`, wrapping around.
Array roll(const Array& x, int64_t shift, int axis);
Array flip(const Array& x, std::vector<int> axes);
Array flatten(const Array& x);

// ---- reductions ----
// Over all axes: sum(x); with the reduced axes kept as size 1: sum(x, KeepDims{}).
struct KeepDims {};
Array sum(const Array& x);
Array sum(const Array& x, KeepDims);
Array sum(const Array& x, std::vector<int> axes, bool keepdims = false);
Array mean(const Array& x);
Array mean(const Array& x, KeepDims);
Array mean(const Array& x, std::vector<int> axes, bool keepdims = false);
Array max(const Array& x);
Array max(const Array& x, KeepDims);
Array max(const Array& x, std::vector<int> axes, bool keepdims = false);
Array min(const Array& x);
Array min(const Array& x, KeepDims);
Array min(const Array& x, std::vector<int> axes, bool keepdims = false);
Array var(const Array& x, std::vector<int> axes, bool keepdims = false);
Array argmax(const Array& x, int axis, bool keepdims = false);  // int32 indices
Array argmin(const Array& x, int axis, bool keepdims = false);
Array cumsum(const Array& x, int axis, bool reverse = false);
Array logsumexp(const Array& x, std::vector<int> axes, bool keepdims = false);

// ---- contractions ----
// numpy matmul: 1-D operands are promoted, leading dimensions broadcast.
Array matmul(const Array& a, const Array& b);
Array matmul(const Array& a, const Array& b, OutSharding out);
// Any valid einsum spec ("bij,bjk->bik", "ii->i" not supported: repeated labels within one
// operand raise an error); operands are contracted pairwise in a sensible order.
Array einsum(std::string_view spec, std::vector<Array> operands);
Array einsum(std::string_view spec, std::vector<Array> operands, OutSharding out);
// XLA's dot_general: result dims are batch, lhs free, rhs free. out_dtype lets bf16 operands
// accumulate and return f32.
Array dot_general(const Array& a, const Array& b, std::vector<int> a_contract,
                  std::vector<int> b_contract, std::vector<int> a_batch = {},
                  std::vector<int> b_batch = {}, std::optional<DType> out_dtype = std::nullopt);
Array dot_general(const Array& a, const Array& b, std::vector<int> a_contract,
                  std::vector<int> b_contract, std::vector<int> a_batch, std::vector<int> b_batch,
                  std::optional<DType> out_dtype, OutSharding out);

// ---- indexing ----
// x taken along `axis` at integer `indices` (any shape); result shape is
// x.shape[:axis] + indices.shape + x.shape[axis+1:]. Indices are clamped to range.
Array take(const Array& x, const Array& indices, int axis = 0);
Array take(const Array& x, const Array& indices, int axis, OutSharding out);
// out[..., j, ...] = x[..., indices[..., j, ...], ...] along `axis` (numpy take_along_axis).
Array take_along_axis(const Array& x, const Array& indices, int axis);
// x with `updates` added at `indices` along `axis` (the transpose of take).
Array scatter_add(const Array& x, const Array& indices, const Array& updates, int axis = 0);
// Static-size slice at dynamic (int scalar array) start indices, clamped so the slice fits.
Array dynamic_slice(const Array& x, const std::vector<Array>& starts, Shape sizes);
Array dynamic_update_slice(const Array& x, const Array& update, const std::vector<Array>& starts);
// The same along one axis (lax.dynamic_slice_in_dim / dynamic_update_slice_in_dim).
Array dynamic_slice_in_dim(const Array& x, const Array& start, int64_t size, int axis = 0);
Array dynamic_update_slice_in_dim(const Array& x, const Array& update, const Array& start,
                                  int axis);
// Values along `dimension` of a new array.
Array iota(Shape shape, int dimension, DType dtype = DType::I32);
// The k largest values along the last axis, descending, and their int32 indices.
std::pair<Array, Array> top_k(const Array& x, int64_t k);
// Sorted along the last axis (ascending unless descending), and the int32 permutation.
std::pair<Array, Array> sort(const Array& x, bool descending = false);
Array one_hot(const Array& indices, int64_t n, DType dtype = DType::F32);

// ---- neural-network functions ----
Array relu(const Array& x);
Array silu(const Array& x);
Array gelu(const Array& x, bool approximate = true);  // tanh form, or exact with erf
Array softmax(const Array& x, int axis = -1);
Array log_softmax(const Array& x, int axis = -1);
// Normalises over the last axis; gamma/beta broadcast along it.
Array layer_norm(const Array& x, const Array& gamma, const Array& beta, double eps = 1e-5);
Array rms_norm(const Array& x, const Array& weight, double eps = 1e-6);
// Per-example cross entropy of logits[..., V] with integer labels[...].
Array cross_entropy(const Array& logits, const Array& labels);
// Bool [T, S]: true where query t may attend to key s (s <= t + offset).
Array causal_mask(int64_t t, int64_t s, int64_t offset = 0);

// Labels instructions recorded in this scope ("block0/attn"), as jax.named_scope.
class NamedScope {
 public:
  explicit NamedScope(std::string name);
  ~NamedScope();
  NamedScope(const NamedScope&) = delete;
  NamedScope& operator=(const NamedScope&) = delete;
};

}  // namespace partix

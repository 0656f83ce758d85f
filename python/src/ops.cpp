// The numpy-like and lax ops of include/partix/ops.h. Python's partix.numpy and partix.lax
// give them numpy's and JAX's signatures; these take Arrays, shapes, axes and dtypes by name.
#include "bind.h"
#include "trace/trace.h"

namespace partix::python {

namespace {
using A = const Array&;

// Types and arithmetic: binary operators (array-array, array-scalar and scalar-array), comparisons,
// where, promotion.
void bind_arithmetic(nb::module_& m) {
  // The manual mesh axes a value inside a shard_map body varies over (JAX's
  // typeof(x).mat.varying); empty outside shard_map and for concrete values.
  // Of those, the axes it holds partial sums over, and the invariant ones it is reduced over
  // (typeof(x).mat.unreduced / .reduced); and `a` retyped so (lax.pcast to them).
  m.def("sum_types", [](const Array& a) { return detail::sum_types_of(a); });
  m.def("with_sum_types",
        [](const Array& a, std::set<std::string> unreduced, std::set<std::string> reduced) {
          return detail::with_sum_types(a, unreduced, reduced);
        });
  m.def("varying_axes", [](const Array& a) {
    detail::Vary v = detail::vary_of(a);
    return std::vector<std::string>(v.begin(), v.end());
  });
  // Binary arithmetic: array-array, array-scalar and scalar-array.
  m.def("add", [](A a, A b) { return a + b; });
  m.def("sub", [](A a, A b) { return a - b; });
  m.def("mul", [](A a, A b) { return a * b; });
  m.def("div", [](A a, A b) { return a / b; });
  m.def("add_s", [](A a, double b) { return a + b; });
  m.def("sub_s", [](A a, double b) { return a - b; });
  m.def("rsub_s", [](double a, A b) { return a - b; });
  m.def("mul_s", [](A a, double b) { return a * b; });
  m.def("div_s", [](A a, double b) { return a / b; });
  m.def("rdiv_s", [](double a, A b) { return a / b; });
  m.def("neg", [](A a) { return -a; });
  m.def("remainder", [](A a, A b) { return remainder(a, b); });
  // JAX's weak typing of a Python number beside an array (partix/promotion.h): kind 'b', 'i'
  // or 'f'; the number as a double, an int's exact int64 value and whether it fits int64.
  m.def("promote_weak", [](A a, const std::string& kind, double value, int64_t int_value, bool fits,
                           const std::string& text, const std::string& api) {
    WeakScalar s;
    s.kind = kind == "b"   ? WeakScalar::Kind::kBool
             : kind == "i" ? WeakScalar::Kind::kInt
                           : WeakScalar::Kind::kFloat;
    s.value = value;
    s.int_value = int_value;
    s.int_fits_int64 = fits;
    s.text = text;
    auto [x, y] = promote_weak(a, s, api);
    return nb::make_tuple(x, y);
  });
  m.def("floor_divide", [](A a, A b) { return floor_divide(a, b); });
  m.def("pow_s", [](A a, double b) { return pow(a, b); });
  m.def("lt", [](A a, A b) { return a < b; });
  m.def("le", [](A a, A b) { return a <= b; });
  m.def("gt", [](A a, A b) { return a > b; });
  m.def("ge", [](A a, A b) { return a >= b; });
  m.def("eq", [](A a, A b) { return equal(a, b); });
  m.def("ne", [](A a, A b) { return not_equal(a, b); });
  m.def("logical_and", [](A a, A b) { return logical_and(a, b); });
  m.def("logical_or", [](A a, A b) { return logical_or(a, b); });
  m.def("logical_not", [](A a) { return logical_not(a); });
  m.def("where", [](A c, A a, A b) { return where(c, a, b); });
  m.def("clip", [](A x, double lo, double hi) { return clip(x, lo, hi); });
  m.def("promote_types", [](const std::string& a, const std::string& b) {
    return std::string(dtype_name(promote_types(to_dtype(a), to_dtype(b))));
  });
}

void bind_table_functions(nb::module_& m) {
  // The public functions of the elementwise table (src/ir/elementwise_table.inc), each under
  // its C++ name; `unary_functions` names the unary ones (partix.lax binds those it lacks).
  std::vector<std::string> unary_functions;
#define PARTIX_PY_CALL(macro, ...) macro(__VA_ARGS__)
#define PARTIX_PY_API_NONE NONE, _
#define PARTIX_PY_API_FN(f) FN, f
#define PARTIX_PY_API_FN_INT_IDENTITY(f) FN, f
#define PARTIX_PY_API_FN_BOOL_IDENTITY(f) FN, f
#define PARTIX_PY_UNARY(kind, f) PARTIX_PY_UNARY_##kind(f)
#define PARTIX_PY_UNARY_NONE(f)
#define PARTIX_PY_UNARY_FN(f)          \
  m.def(#f, [](A x) { return f(x); }); \
  unary_functions.emplace_back(#f);
#define PARTIX_PY_BINARY(kind, f) PARTIX_PY_BINARY_##kind(f)
#define PARTIX_PY_BINARY_NONE(f)
#define PARTIX_PY_BINARY_FN(f) m.def(#f, [](A a, A b) { return f(a, b); });
#define PARTIX_UNARY(Type, str, api, ...) PARTIX_PY_CALL(PARTIX_PY_UNARY, PARTIX_PY_API_##api)
#define PARTIX_BINARY(Type, str, api, ...) PARTIX_PY_CALL(PARTIX_PY_BINARY, PARTIX_PY_API_##api)
#include "ir/elementwise_table.inc"
#undef PARTIX_UNARY
#undef PARTIX_BINARY
  m.attr("unary_functions") = nb::cast(unary_functions);
}

// Other unary functions, the neural-network composites and dtype conversion.
void bind_nn_functions(nb::module_& m) {
  // Other unary functions.
#define PARTIX_PY_FN(name) m.def(#name, [](A x) { return name(x); })
  PARTIX_PY_FN(square);
  PARTIX_PY_FN(stop_gradient);
  PARTIX_PY_FN(relu);
  PARTIX_PY_FN(silu);
  PARTIX_PY_FN(flatten);
#undef PARTIX_PY_FN
  // A copy into new buffers (the `copy` primitive): what jnp.copy and Array.copy() return,
  // so donating the original leaves the copy intact.
  m.def("copy", [](A x) { return detail::bind1("copy", {x}); });
  m.def("gelu", [](A x, bool approximate) { return gelu(x, approximate); });
  m.def("softmax", [](A x, int axis) { return softmax(x, axis); });
  m.def("log_softmax", [](A x, int axis) { return log_softmax(x, axis); });
  m.def("layer_norm", [](A x, A g, A b, double eps) { return layer_norm(x, g, b, eps); });
  m.def("rms_norm", [](A x, A w, double eps) { return rms_norm(x, w, eps); });
  m.def("cross_entropy", [](A logits, A labels) { return cross_entropy(logits, labels); });
  m.def("one_hot",
        [](A i, int64_t n, const std::string& dt) { return one_hot(i, n, to_dtype(dt)); });
  m.def("astype", [](A x, const std::string& dt) { return astype(x, to_dtype(dt)); });
}

void bind_shapes(nb::module_& m) {
  // Shapes.
  m.def("reshape", [](A x, const Shape& s) { return reshape(x, s); });
  m.def("transpose", [](A x, const std::vector<int>& perm) { return transpose(x, perm); });
  m.def("broadcast_to", [](A x, const Shape& s) { return broadcast_to(x, s); });
  m.def("broadcast_in_dim",
        [](A x, const Shape& s, const std::vector<int>& d) { return broadcast_in_dim(x, s, d); });
  m.def("expand_dims", [](A x, int axis) { return expand_dims(x, axis); });
  m.def("squeeze", [](A x, const std::vector<int>& axes) { return squeeze(x, axes); });
  m.def("slice", [](A x, const Shape& start, const Shape& stop, const Shape& strides) {
    return slice(x, start, stop, strides);
  });
  m.def("concatenate",
        [](const std::vector<Array>& xs, int axis) { return concatenate(xs, axis); });
  m.def("stack", [](const std::vector<Array>& xs, int axis) { return stack(xs, axis); });
  m.def("split", [](A x, int sections, int axis) { return split(x, sections, axis); });
  m.def("pad", [](A x, const Shape& lo, const Shape& hi, double v) { return pad(x, lo, hi, v); });
  m.def("pad_interior", [](A x, const Shape& lo, const Shape& hi, const Shape& in, double v) {
    return pad(x, lo, hi, in, v);
  });
  m.def("roll", [](A x, int64_t shift, int axis) { return roll(x, shift, axis); });
  m.def("flip", [](A x, const std::vector<int>& axes) { return flip(x, axes); });
  m.def("iota",
        [](const Shape& s, int dim, const std::string& dt) { return iota(s, dim, to_dtype(dt)); });
}

void bind_reductions(nb::module_& m) {
  // Reductions (axes given explicitly; Python resolves None to every axis).
  m.def("sum", [](A x, const std::vector<int>& axes, bool k) { return sum(x, axes, k); });
  m.def("mean", [](A x, const std::vector<int>& axes, bool k) { return mean(x, axes, k); });
  m.def("max", [](A x, const std::vector<int>& axes, bool k) { return max(x, axes, k); });
  m.def("min", [](A x, const std::vector<int>& axes, bool k) { return min(x, axes, k); });
  m.def("var", [](A x, const std::vector<int>& axes, bool k) { return var(x, axes, k); });
  m.def("logsumexp",
        [](A x, const std::vector<int>& axes, bool k) { return logsumexp(x, axes, k); });
  m.def("argmax", [](A x, int axis, bool k) { return argmax(x, axis, k); });
  m.def("argmin", [](A x, int axis, bool k) { return argmin(x, axis, k); });
  m.def("cumsum", [](A x, int axis, bool reverse) { return cumsum(x, axis, reverse); });
}

void bind_contractions(nb::module_& m) {
  // Contractions.
  m.def("matmul", [](A a, A b) { return matmul(a, b); });
  m.def("einsum",
        [](const std::string& spec, const std::vector<Array>& xs) { return einsum(spec, xs); });
  m.def("dot_general",
        [](A a, A b, const std::vector<int>& ac, const std::vector<int>& bc,
           const std::vector<int>& ab, const std::vector<int>& bb, std::optional<std::string> out) {
          std::optional<DType> o;
          if (out) o = to_dtype(*out);
          return dot_general(a, b, ac, bc, ab, bb, o);
        });
}

void bind_indexing(nb::module_& m) {
  // Indexing.
  m.def("take", [](A x, A i, int axis) { return take(x, i, axis); });
  m.def("take_along_axis", [](A x, A i, int axis) { return take_along_axis(x, i, axis); });
  m.def("scatter_add", [](A x, A i, A u, int axis) { return scatter_add(x, i, u, axis); });
  m.def("dynamic_slice", [](A x, const std::vector<Array>& starts, const Shape& sizes) {
    return dynamic_slice(x, starts, sizes);
  });
  m.def("dynamic_update_slice", [](A x, A u, const std::vector<Array>& starts) {
    return dynamic_update_slice(x, u, starts);
  });
  m.def("top_k", [](A x, int64_t k) { return top_k(x, k); });
  m.def("sort", [](A x, bool descending) { return sort(x, descending); });
  m.def("causal_mask", [](int64_t t, int64_t s, int64_t off) { return causal_mask(t, s, off); });
}

void bind_random(nb::module_& m) {
  // Random (counter-based threefry; a key is an int32[2] array).
  m.def("random_key", [](uint64_t seed) { return random::key(seed); });
  m.def("random_split", [](A key, int64_t n) { return random::split(key, n); });
  m.def("random_fold_in", [](A key, A data) { return random::fold_in(key, data); });
  m.def("random_uniform", [](A key, const Shape& s, const std::string& dt, double lo, double hi,
                             std::optional<NamedSharding> sh) {
    return sh ? random::uniform(key, s, to_dtype(dt), lo, hi, *sh)
              : random::uniform(key, s, to_dtype(dt), lo, hi);
  });
  m.def("random_normal", [](A key, const Shape& s, const std::string& dt,
                            std::optional<NamedSharding> sh) {
    return sh ? random::normal(key, s, to_dtype(dt), *sh) : random::normal(key, s, to_dtype(dt));
  });
  m.def("random_truncated_normal",
        [](A key, double lo, double hi, const Shape& s, const std::string& dt) {
          return random::truncated_normal(key, lo, hi, s, to_dtype(dt));
        });
  m.def("random_bernoulli",
        [](A key, double p, const Shape& s) { return random::bernoulli(key, p, s); });
  m.def("random_randint", [](A key, const Shape& s, int64_t lo, int64_t hi, const std::string& dt,
                             std::optional<NamedSharding> sh) {
    return sh ? random::randint(key, s, lo, hi, to_dtype(dt), *sh)
              : random::randint(key, s, lo, hi, to_dtype(dt));
  });
  m.def("shift_right_logical", [](A a, A b) { return shift_right_logical(a, b); });
  m.def("random_bits", [](A key, const Shape& s, const std::string& dt) {
    return random::bits(key, s, to_dtype(dt));
  });
  m.def("random_categorical",
        [](A key, A logits, int axis) { return random::categorical(key, logits, axis); });
}

void bind_named_scope(nb::module_& m) {
  // jax.named_scope: a context manager naming the ops traced inside it.
  struct ScopeGuard {
    std::string name;
    std::unique_ptr<NamedScope> scope;
  };
  nb::class_<ScopeGuard>(m, "NamedScope")
      .def(nb::init<std::string>())
      .def("__enter__", [](ScopeGuard& g) { g.scope = std::make_unique<NamedScope>(g.name); })
      .def("__exit__", [](ScopeGuard& g, nb::args) { g.scope.reset(); });
}

}  // namespace

void bind_ops(nb::module_& m) {
  bind_arithmetic(m);
  bind_table_functions(m);
  bind_nn_functions(m);
  bind_shapes(m);
  bind_reductions(m);
  bind_contractions(m);
  bind_indexing(m);
  bind_random(m);
  bind_named_scope(m);
}

}  // namespace partix::python

// jacrev, jacfwd and hessian over ArraysFn: the pullback (or the linearized map) vmapped over a
// basis, so each result's (argument's) Jacobian is one batched evaluation, not one per element.
#include "core/errors.h"
#include "partix/ops.h"
#include "partix/transforms.h"

namespace partix {

namespace {

// The n x n identity of `dtype`, its rows shaped [n] + shape (n = the product of shape).
Array basis(const Shape& shape, int64_t n, DType dtype) {
  Array eye = astype(equal(iota({n, n}, 0), iota({n, n}, 1)), dtype);
  Shape s{n};
  s.insert(s.end(), shape.begin(), shape.end());
  return reshape(eye, s);
}

Shape joined(const Shape& a, const Shape& b) {
  Shape s = a;
  s.insert(s.end(), b.begin(), b.end());
  return s;
}

// f traced and evaluated at args, its pullback kept (vjp_engine), and the argument
// differentiated, checked to be one of args and floating.
struct Linearized {
  const Array& x;
  detail::VjpOutput out;
};

Linearized linearized(const char* api, const ArraysFn& f, int argnum,
                      const std::vector<Array>& args) {
  detail::check(argnum >= 0 && argnum < static_cast<int>(args.size()), api,
                "argnum {} is out of range for {} arguments", argnum, args.size());
  const Array& x = args[static_cast<size_t>(argnum)];
  detail::check(is_floating(x.dtype()), api, "differentiates floating arguments; argument {} "
                "is {}", argnum, dtype_name(x.dtype()));
  return {x, detail::vjp_engine(args, f)};
}

}  // namespace

ArraysFn jacrev(ArraysFn f, int argnum) {
  return [f, argnum](const std::vector<Array>& args) {
    // Named members, not a structured binding: clang before 16 cannot capture those.
    const Linearized at = linearized("jacrev", f, argnum, args);
    const Array& x = at.x;
    const detail::VjpOutput& out = at.out;
    std::vector<Array> jac;
    for (size_t o = 0; o < out.outputs.size(); ++o) {
      const Array& y = out.outputs[o];
      const Shape js = joined(y.shape(), x.shape());
      if (y.size() == 0 || !is_floating(y.dtype())) {  // no rows, or no derivative
        jac.push_back(zeros(js, x.dtype()));
        continue;
      }
      ArraysFn row = [&](const std::vector<Array>& e) {
        std::vector<Array> cts(out.outputs.size());  // empty: zero
        cts[o] = e[0];
        return std::vector<Array>{out.pullback(cts)[static_cast<size_t>(argnum)]};
      };
      const Array rows = vmap(row, {0})({basis(y.shape(), y.size(), y.dtype())})[0];
      jac.push_back(reshape(rows, js));
    }
    return jac;
  };
}

ArraysFn jacfwd(ArraysFn f, int argnum) {
  return [f, argnum](const std::vector<Array>& args) {
    const Linearized at = linearized("jacfwd", f, argnum, args);
    const Array& x = at.x;
    const detail::VjpOutput& out = at.out;
    std::vector<Array> jac;
    if (x.size() == 0) {
      for (const Array& y : out.outputs) jac.push_back(zeros(joined(y.shape(), x.shape()), y.dtype()));
      return jac;
    }
    ArraysFn column = [&](const std::vector<Array>& e) {
      std::vector<Array> tangents;
      for (size_t i = 0; i < args.size(); ++i) {
        tangents.push_back(static_cast<int>(i) == argnum ? e[0] : zeros(args[i].shape(), args[i].dtype()));
      }
      return detail::jvp_of_pullback(out.pullback, tangents, "jacfwd");
    };
    const std::vector<Array> cols = vmap(column, {0})({basis(x.shape(), x.size(), x.dtype())});
    for (size_t o = 0; o < cols.size(); ++o) {
      const Array& y = out.outputs[o];
      jac.push_back(reshape(moveaxis(cols[o], 0, cols[o].ndim() - 1), joined(y.shape(), x.shape())));
    }
    return jac;
  };
}

ArraysFn hessian(ArraysFn f, int argnum) { return jacfwd(jacrev(std::move(f), argnum), argnum); }

}  // namespace partix

// Control flow as lax.scan, fori_loop, while_loop and cond. Each traces its
// functions once into regions of one instruction: eagerly, under jit, inside shard_map and
// nested. Carries, scanned inputs and operands may be any tree of Arrays (Array, Params,
// std::vector, std::pair, std::tuple); a carry keeps its structure, shapes and dtypes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "partix/array.h"
#include "partix/tree.h"

namespace partix {

namespace detail {

using RegionFn = std::function<std::vector<Array>(const std::vector<Array>& tracers,
                                                  std::shared_ptr<void>& out_proto)>;

// Raises "[api] <what> has structure A where <where> has structure B" unless a == b.
void check_same_structure(const char* api, const char* what, const std::string& got,
                          const char* where, const std::string& want);

// The engines behind the templates: each traces its functions on tracers for the leaves and
// binds one instruction. Results: the carries' leaves, then the ys' leaves (scan).
std::vector<Array> scan_call(const std::vector<Array>& init, const std::vector<Array>& xs,
                             int64_t length, bool reverse, const RegionFn& body,
                             std::shared_ptr<void>& out_proto);
std::vector<Array> fori_call(int64_t lower, int64_t upper, const std::vector<Array>& init,
                             const RegionFn& body, std::shared_ptr<void>& out_proto);
std::vector<Array> while_call(const std::vector<Array>& init, const RegionFn& cond,
                              const RegionFn& body, std::shared_ptr<void>& out_proto);
std::vector<Array> cond_call(const Array& pred, const std::vector<Array>& operands,
                             const RegionFn& true_fn, const RegionFn& false_fn,
                             std::shared_ptr<void>& true_proto, std::shared_ptr<void>& false_proto);

}  // namespace detail

// scan(body, init, xs, reverse): body(carry, x) -> std::pair{carry, y} runs once per slice x of
// xs along axis 0 (in reverse order if `reverse`); returns {final carry, ys stacked on axis 0}.
// Preconditions: every leaf of xs has the same leading length; body keeps the carry's structure,
// shapes and dtypes. Differentiable (a reverse scan over the saved carries).
template <class F, class C, class X>
auto scan(F body, const C& init, const X& xs, bool reverse = false) {
  using R = std::decay_t<std::invoke_result_t<const F&, const C&, const X&>>;
  using Y = std::decay_t<typename R::second_type>;
  const std::vector<Array> init_leaves = tree_leaves(init), xs_leaves = tree_leaves(xs);
  const std::string structure = tree_structure(init);
  std::shared_ptr<void> proto;
  std::vector<Array> outs = detail::scan_call(
      init_leaves, xs_leaves, -1, reverse,
      [&](const std::vector<Array>& t, std::shared_ptr<void>& p) {
        const Array* it = t.data();
        C carry = TreeDef<C>::unflatten(init, it);
        X x = TreeDef<X>::unflatten(xs, it);
        R r = body(carry, x);
        detail::check_same_structure("scan", "the body's carry", tree_structure(r.first), "init",
                                     structure);
        p = std::make_shared<R>(r);
        std::vector<Array> leaves = tree_leaves(r.first);
        for (const Array& y : tree_leaves(r.second)) leaves.push_back(y);
        return leaves;
      },
      proto);
  const R& shape = *std::static_pointer_cast<R>(proto);
  const size_t nc = init_leaves.size();
  std::vector<Array> carry(outs.begin(), outs.begin() + static_cast<long>(nc));
  std::vector<Array> ys(outs.begin() + static_cast<long>(nc), outs.end());
  return std::pair<C, Y>{tree_unflatten(init, carry), tree_unflatten(shape.second, ys)};
}

// fori_loop(lower, upper, body, init): carry = body(i, carry) for i in [lower, upper), i an int32
// scalar Array (none when upper <= lower: init comes back). Static bounds: differentiable like
// scan.
template <class F, class C>
C fori_loop(int64_t lower, int64_t upper, F body, const C& init) {
  const std::string structure = tree_structure(init);
  std::shared_ptr<void> proto;
  std::vector<Array> outs = detail::fori_call(
      lower, upper, tree_leaves(init),
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        const Array* it = t.data() + 1;
        C carry = TreeDef<C>::unflatten(init, it);
        auto r = body(t[0], carry);
        detail::check_same_structure("fori_loop", "the body's carry", tree_structure(r), "init",
                                     structure);
        return tree_leaves(r);
      },
      proto);
  return tree_unflatten(init, outs);
}

// while_loop(cond, body, init): while cond(carry) (a bool scalar Array), carry = body(carry).
// Not differentiable (the trip count is not static).
template <class Cf, class F, class C>
C while_loop(Cf cond, F body, const C& init) {
  const std::string structure = tree_structure(init);
  std::shared_ptr<void> proto;
  std::vector<Array> outs = detail::while_call(
      tree_leaves(init),
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        const Array* it = t.data();
        C carry = TreeDef<C>::unflatten(init, it);
        return std::vector<Array>{cond(carry)};
      },
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        const Array* it = t.data();
        C carry = TreeDef<C>::unflatten(init, it);
        auto r = body(carry);
        detail::check_same_structure("while_loop", "the body's carry", tree_structure(r), "init",
                                     structure);
        return tree_leaves(r);
      },
      proto);
  return tree_unflatten(init, outs);
}

// cond(pred, true_fn, false_fn, operand): true_fn(operand) if the bool scalar pred holds, else
// false_fn(operand). Both branches are traced and must return the same structure, shapes and
// dtypes; only the taken one runs. Differentiable through the taken branch.
template <class Ft, class Ff, class T>
auto cond(const Array& pred, Ft true_fn, Ff false_fn, const T& operand) {
  using R = std::decay_t<std::invoke_result_t<const Ft&, const T&>>;
  std::string true_structure;
  std::shared_ptr<void> proto, unused;
  std::vector<Array> outs = detail::cond_call(
      pred, tree_leaves(operand),
      [&](const std::vector<Array>& t, std::shared_ptr<void>& p) {
        const Array* it = t.data();
        R r = true_fn(TreeDef<T>::unflatten(operand, it));
        true_structure = tree_structure(r);
        p = std::make_shared<R>(r);
        return tree_leaves(r);
      },
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        const Array* it = t.data();
        auto r = false_fn(TreeDef<T>::unflatten(operand, it));
        detail::check_same_structure("cond", "false_fn's result", tree_structure(r), "true_fn's",
                                     true_structure);
        return tree_leaves(r);
      },
      proto, unused);
  return tree_unflatten(*std::static_pointer_cast<R>(proto), outs);
}

}  // namespace partix

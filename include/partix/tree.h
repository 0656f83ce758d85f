// Pytrees: the argument and result types transforms accept, flattened to Arrays and rebuilt.
// Supported: Array, Params (std::map<std::string, Array>), std::vector of a tree,
// std::pair and std::tuple of trees.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "partix/array.h"

namespace partix {

// Parameters keyed by dotted names, e.g. model.layers.0.self_attn.q_proj.weight.
using Params = std::map<std::string, Array>;

template <class T>
struct TreeDef;  // specialised below; T is not a supported tree type otherwise

template <>
struct TreeDef<Array> {
  static void flatten(const Array& a, std::vector<Array>& out) { out.push_back(a); }
  static Array unflatten(const Array&, const Array*& it) { return *it++; }
  static std::string key(const Array&) { return "A"; }
  static void paths(const Array&, const std::string& at, std::vector<std::string>& out) {
    out.push_back(at);
  }
};

template <class V>
struct TreeDef<std::map<std::string, V>> {
  using T = std::map<std::string, V>;
  static void flatten(const T& m, std::vector<Array>& out) {
    for (const auto& [k, v] : m) TreeDef<V>::flatten(v, out);
  }
  static T unflatten(const T& proto, const Array*& it) {
    T out;
    for (const auto& [k, v] : proto) out.emplace(k, TreeDef<V>::unflatten(v, it));
    return out;
  }
  static std::string key(const T& m) {
    std::string s = "{";
    for (const auto& [k, v] : m) s += k + ":" + TreeDef<V>::key(v) + ",";
    return s + "}";
  }
  static void paths(const T& m, const std::string& at, std::vector<std::string>& out) {
    for (const auto& [k, v] : m) TreeDef<V>::paths(v, at + "['" + k + "']", out);
  }
};

template <class V>
struct TreeDef<std::vector<V>> {
  using T = std::vector<V>;
  static void flatten(const T& xs, std::vector<Array>& out) {
    for (const auto& x : xs) TreeDef<V>::flatten(x, out);
  }
  static T unflatten(const T& proto, const Array*& it) {
    T out;
    for (const auto& x : proto) out.push_back(TreeDef<V>::unflatten(x, it));
    return out;
  }
  static std::string key(const T& xs) {
    std::string s = "[";
    for (const auto& x : xs) s += TreeDef<V>::key(x) + ",";
    return s + "]";
  }
  static void paths(const T& xs, const std::string& at, std::vector<std::string>& out) {
    for (size_t i = 0; i < xs.size(); ++i) {
      TreeDef<V>::paths(xs[i], at + "[" + std::to_string(i) + "]", out);
    }
  }
};

template <class A, class B>
struct TreeDef<std::pair<A, B>> {
  using T = std::pair<A, B>;
  static void flatten(const T& p, std::vector<Array>& out) {
    TreeDef<A>::flatten(p.first, out);
    TreeDef<B>::flatten(p.second, out);
  }
  static T unflatten(const T& proto, const Array*& it) {
    A a = TreeDef<A>::unflatten(proto.first, it);
    B b = TreeDef<B>::unflatten(proto.second, it);
    return T{std::move(a), std::move(b)};
  }
  static std::string key(const T& p) {
    return "(" + TreeDef<A>::key(p.first) + "," + TreeDef<B>::key(p.second) + ")";
  }
  static void paths(const T& p, const std::string& at, std::vector<std::string>& out) {
    TreeDef<A>::paths(p.first, at + "[0]", out);
    TreeDef<B>::paths(p.second, at + "[1]", out);
  }
};

template <class... Ts>
struct TreeDef<std::tuple<Ts...>> {
  using T = std::tuple<Ts...>;
  static void flatten(const T& t, std::vector<Array>& out) {
    std::apply([&](const auto&... xs) { (TreeDef<std::decay_t<decltype(xs)>>::flatten(xs, out), ...); }, t);
  }
  static T unflatten(const T& proto, const Array*& it) {
    return std::apply(
        [&](const auto&... xs) { return T{TreeDef<std::decay_t<decltype(xs)>>::unflatten(xs, it)...}; },
        proto);
  }
  static std::string key(const T& t) {
    std::string s = "(";
    std::apply([&](const auto&... xs) { ((s += TreeDef<std::decay_t<decltype(xs)>>::key(xs) + ","), ...); }, t);
    return s + ")";
  }
  static void paths(const T& t, const std::string& at, std::vector<std::string>& out) {
    size_t i = 0;
    std::apply(
        [&](const auto&... xs) {
          ((TreeDef<std::decay_t<decltype(xs)>>::paths(xs, at + "[" + std::to_string(i++) + "]",
                                                       out)),
           ...);
        },
        t);
  }
};

// A gradient: an Array, or Params when the argument was Params. Converts implicitly to the
// kind it holds (Array g = grad(f)(x); Params gp = grad(loss)(params, x)).
class Tree {
 public:
  Tree() = default;
  Tree(Array a) : array_(std::move(a)), is_array_(true) {}      // NOLINT: implicit by design
  Tree(Params p) : params_(std::move(p)), is_array_(false) {}   // NOLINT
  bool is_array() const { return is_array_; }
  const Array& array() const;    // throws partix::Error if it holds Params
  const Params& params() const;  // throws partix::Error if it holds an Array
  operator Array() const { return array(); }    // NOLINT
  operator Params() const { return params(); }  // NOLINT

 private:
  Array array_;
  Params params_;
  bool is_array_ = true;
};

template <>
struct TreeDef<Tree> {
  static void flatten(const Tree& t, std::vector<Array>& out) {
    if (t.is_array()) out.push_back(t.array());
    else TreeDef<Params>::flatten(t.params(), out);
  }
  static Tree unflatten(const Tree& proto, const Array*& it) {
    if (proto.is_array()) return Tree(*it++);
    return Tree(TreeDef<Params>::unflatten(proto.params(), it));
  }
  static std::string key(const Tree& t) {
    return t.is_array() ? "A" : TreeDef<Params>::key(t.params());
  }
  static void paths(const Tree& t, const std::string& at, std::vector<std::string>& out) {
    if (t.is_array()) out.push_back(at);
    else TreeDef<Params>::paths(t.params(), at, out);
  }
};

template <class T>
std::vector<Array> tree_leaves(const T& t) {
  std::vector<Array> out;
  TreeDef<T>::flatten(t, out);
  return out;
}

// The path of every leaf, in flatten order, as JAX's keystr writes it: "['w']", "[0][1]".
template <class T>
std::vector<std::string> tree_leaf_paths(const T& t, const std::string& prefix = "") {
  std::vector<std::string> out;
  TreeDef<T>::paths(t, prefix, out);
  return out;
}

// Rebuilds a tree shaped like `proto` from leaves (in flatten order). Throws partix::Error
// unless there is exactly one leaf per array of `proto`.
template <class T>
T tree_unflatten(const T& proto, const std::vector<Array>& leaves) {
  const size_t expected = tree_leaves(proto).size();
  if (leaves.size() != expected) {
    throw Error("[tree_unflatten] got " + std::to_string(leaves.size()) +
                " leaves for a tree of " + std::to_string(expected) + " arrays");
  }
  const Array* it = leaves.data();
  return TreeDef<T>::unflatten(proto, it);
}

// A printable signature of a tree's structure (its kinds, keys and lengths, leaves as A):
// equal exactly when two trees have the same structure.
template <class T>
std::string tree_structure(const T& t) {
  return TreeDef<T>::key(t);
}

// A tree of the same structure with f applied to every leaf, leaf by leaf across `tree` and
// `rest` (which must have the same structure): tree_map([](Array a, Array b) { ... }, x, y).
template <class F, class T, class... Rest>
T tree_map(F f, const T& tree, const Rest&... rest) {
  const std::string structure = tree_structure(tree);
  for (const std::string& other : std::vector<std::string>{tree_structure(rest)...}) {
    if (other != structure) {
      throw Error("[tree_map] trees of different structure: " + structure + " and " + other);
    }
  }
  const std::vector<Array> leaves = tree_leaves(tree);
  const std::vector<std::vector<Array>> others{tree_leaves(rest)...};
  std::vector<Array> out;
  out.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    [&]<size_t... k>(std::index_sequence<k...>) {
      out.push_back(f(leaves[i], others[k][i]...));
    }(std::index_sequence_for<Rest...>{});
  }
  return tree_unflatten(tree, out);
}

// tree_map with each leaf's path as JAX's keystr writes it: f(path, leaf).
template <class F, class T>
T tree_map_with_path(F f, const T& tree) {
  const std::vector<Array> leaves = tree_leaves(tree);
  const std::vector<std::string> paths = tree_leaf_paths(tree);
  std::vector<Array> out;
  out.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) out.push_back(f(paths[i], leaves[i]));
  return tree_unflatten(tree, out);
}

// device_put of every leaf of a tree into one sharding.
template <class T>
T device_put(const T& tree, const NamedSharding& sharding) {
  return tree_map([&](const Array& a) { return device_put(a, sharding); }, tree);
}

// device_put of Params, each into the sharding of its name (every name must have one).
Params device_put(const Params& params, const std::map<std::string, NamedSharding>& shardings);

}  // namespace partix

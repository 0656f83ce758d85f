// Instruction attributes: a sorted map from name to a small set of value kinds, printable
// and parsable so that Program text round-trips exactly.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "partix/dtype.h"
#include "partix/sharding.h"

namespace partix::ir {

// Constant data carried by a `constant` instruction: row-major host bytes.
struct Literal {
  Shape shape;
  DType dtype = DType::F32;
  std::vector<char> bytes;
};

using Ints = std::vector<int64_t>;
using Strings = std::vector<std::string>;
using Specs = std::vector<PartitionSpec>;

using Attr = std::variant<bool, int64_t, double, std::string, Ints, Strings, DType, PartitionSpec,
                          Specs, Mesh, std::shared_ptr<const Literal>>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<const std::string, Attr>> init) : map_(init) {}

  bool has(const std::string& name) const { return map_.count(name) != 0; }
  void set(const std::string& name, Attr value) { map_[name] = std::move(value); }
  void erase(const std::string& name) { map_.erase(name); }
  const std::map<std::string, Attr>& items() const { return map_; }

  // Typed access; throws an internal error naming the attribute if missing or mistyped.
  template <class T>
  const T& get(const std::string& name) const;
  int64_t i(const std::string& name) const { return get<int64_t>(name); }
  const Ints& ints(const std::string& name) const { return get<Ints>(name); }
  const std::string& str(const std::string& name) const { return get<std::string>(name); }
  bool b(const std::string& name) const { return get<bool>(name); }
  double f(const std::string& name) const { return get<double>(name); }
  DType dtype(const std::string& name) const { return get<DType>(name); }
  // Value or default when absent.
  int64_t i_or(const std::string& name, int64_t dflt) const { return has(name) ? i(name) : dflt; }
  bool b_or(const std::string& name, bool dflt) const { return has(name) ? b(name) : dflt; }

  friend bool operator==(const Attrs& a, const Attrs& b);
  // "{axis=1, perm=[1,0]}" or "" when empty. Literal data printed in full when `full`.
  std::string to_string(bool full_literals = true) const;
  // A stable text key for caches.
  std::string key() const { return to_string(true); }

 private:
  std::map<std::string, Attr> map_;
};

std::string attr_to_string(const Attr& a, bool full_literals = true);

// Sets of mesh axes, one per operand or result (a shard_map's unreduced axes), as a Strings
// attribute: each set's names joined by ','. `axis_sets` reads `name` back as `n` sets (all
// empty when the attribute is absent).
Strings axis_sets_attr(const std::vector<std::set<std::string>>& sets);
std::vector<std::set<std::string>> axis_sets(const Attrs& attrs, const std::string& name, size_t n);
bool attr_equal(const Attr& a, const Attr& b);

[[noreturn]] void attr_missing(const std::string& name, const char* wanted);

template <class T>
const T& Attrs::get(const std::string& name) const {
  auto it = map_.find(name);
  if (it == map_.end()) attr_missing(name, "present");
  const T* v = std::get_if<T>(&it->second);
  if (!v) attr_missing(name, "of the expected kind");
  return *v;
}

}  // namespace partix::ir

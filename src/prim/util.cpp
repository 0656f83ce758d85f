#include "prim/util.h"

#include <set>

namespace partix::prim {

std::string avals_to_string(const std::vector<ir::Aval>& avals) {
  std::vector<std::string> parts;
  for (const auto& a : avals) parts.push_back(a.to_string());
  return fmt::format("{}", fmt::join(parts, ", "));
}

void check_arity(std::string_view op, const std::vector<ir::Aval>& in, size_t n) {
  if (in.size() != n) {
    detail::fail(op, "takes {} operand(s), got {} ({})", n, in.size(), avals_to_string(in));
  }
}

int norm_axis(std::string_view op, int64_t axis, int rank) {
  detail::check(rank > 0, op, "axis {} given for a scalar", axis);
  detail::check(axis >= -rank && axis < rank, op, "axis {} is out of range for rank {}", axis,
                rank);
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

std::vector<int> norm_axes(std::string_view op, const std::vector<int64_t>& axes, int rank) {
  std::vector<int> out;
  std::set<int> seen;
  for (int64_t a : axes) {
    int n = norm_axis(op, a, rank);
    if (!(seen.insert(n).second)) {
      detail::fail(op, "axis {} appears twice in [{}]", a, fmt::join(axes, ", "));
    }
    out.push_back(n);
  }
  return out;
}

}  // namespace partix::prim

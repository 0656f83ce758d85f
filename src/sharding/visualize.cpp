// visualize_sharding: the array's 2-D layout split into blocks, each labelled with
// the devices holding it.
#include <algorithm>
#include <map>

#include "core/errors.h"
#include "partix/array.h"

namespace partix {

namespace {

bool slice_less(const Slice& a, const Slice& b) {
  return a.start != b.start ? a.start < b.start : a.stop < b.stop;
}

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

std::string center(const std::string& s, size_t width) {
  size_t left = (width - s.size()) / 2;
  return std::string(left, ' ') + s + std::string(width - s.size() - left, ' ');
}

std::string border(const char* l, const char* m, const char* r, size_t cols, size_t width) {
  std::string out = l;
  for (size_t c = 0; c < cols; ++c) {
    out += repeat("─", width);
    out += c + 1 < cols ? m : r;
  }
  return out + "\n";
}

}  // namespace

std::string visualize_sharding(const Array& x) {
  if (x.ndim() > 2) {
    detail::fail("visualize_sharding", "can only draw arrays of rank 0, 1 or 2, got shape {}",
                 shape_to_string(x.shape()));
  }
  const NamedSharding& s = x.sharding();
  const Shape& shape = x.shape();
  // Rank 0 and 1 are drawn as one row.
  auto row_of = [&](const std::vector<Slice>& idx) {
    return x.ndim() == 2 ? idx[0] : Slice{0, 1};
  };
  auto col_of = [&](const std::vector<Slice>& idx) {
    if (x.ndim() == 0) return Slice{0, 1};
    return idx[static_cast<size_t>(x.ndim() - 1)];
  };
  std::vector<Slice> rows, cols;
  std::map<std::pair<int64_t, int64_t>, std::vector<int>> holders;  // (row start, col start)
  auto idx_map = s.devices_indices_map(shape);
  for (size_t k = 0; k < idx_map.size(); ++k) {
    Slice r = row_of(idx_map[k]), c = col_of(idx_map[k]);
    if (r.size() == 0 || c.size() == 0) continue;  // empty blocks hold no data
    if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
    if (std::find(cols.begin(), cols.end(), c) == cols.end()) cols.push_back(c);
    holders[{r.start, c.start}].push_back(s.mesh().devices()[k].id);
  }
  if (rows.empty() || cols.empty()) return "(empty array: no blocks to draw)\n";
  std::sort(rows.begin(), rows.end(), slice_less);
  std::sort(cols.begin(), cols.end(), slice_less);

  const std::string platform = "CPU";
  std::map<std::pair<int64_t, int64_t>, std::string> labels;
  size_t width = 0;
  for (auto& [key, ids] : holders) {
    std::sort(ids.begin(), ids.end());
    std::string label = platform + " " + fmt::format("{}", fmt::join(ids, ","));
    width = std::max(width, label.size());
    labels[key] = std::move(label);
  }
  width += 2;

  std::string out = border("┌", "┬", "┐", cols.size(), width);
  for (size_t r = 0; r < rows.size(); ++r) {
    out += "│";
    for (const Slice& c : cols) {
      auto it = labels.find({rows[r].start, c.start});
      out += center(it == labels.end() ? "" : it->second, width) + "│";
    }
    out += "\n";
    out += r + 1 < rows.size() ? border("├", "┼", "┤", cols.size(), width)
                               : border("└", "┴", "┘", cols.size(), width);
  }
  return out;
}

}  // namespace partix

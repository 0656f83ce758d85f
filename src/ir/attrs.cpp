#include "ir/attrs.h"
#include "ir/number_text.h"

#include <cmath>
#include <cstring>

#include "core/errors.h"
#include "core/scalar.h"

namespace partix::ir {

namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string literal_to_string(const Literal& lit, bool full) {
  int64_t n = shape_size(lit.shape);
  std::string s = fmt::format("<{}{}", dtype_name(lit.dtype), shape_to_string(lit.shape));
  if (!full && n > 16) return s + " ...>";
  s += ":";
  const int es = dtype_size(lit.dtype);
  for (int64_t i = 0; i < n; ++i) {
    // Integers are printed from their exact value, not through double.
    std::string item;
    if (is_integral(lit.dtype)) {
      item = fmt::format("{}", detail::load_int(lit.bytes.data() + i * es, lit.dtype));
    } else {
      item = number_text(detail::load_scalar(lit.bytes.data() + i * es, lit.dtype), lit.dtype);
    }
    s += (i ? ", " : " ") + item;
  }
  return s + ">";
}

}  // namespace

std::string number_text(double v, DType dtype) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (dtype == DType::Bool) return v != 0 ? "true" : "false";
  if (is_integral(dtype)) return fmt::format("{}", static_cast<int64_t>(v));
  if (dtype == DType::F64) return fmt::format("{}", v);
  return fmt::format("{}", static_cast<float>(v));
}

std::string attr_to_string(const Attr& a, bool full) {
  return std::visit(
      [full](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return fmt::format("{}", v);
        } else if constexpr (std::is_same_v<T, double>) {
          std::string s = number_text(v, DType::F64);
          // Keep a decimal point so the parser reads it back as a float.
          if (s.find_first_of(".eninf") == std::string::npos) s += ".0";
          return s;
        } else if constexpr (std::is_same_v<T, std::string>) {
          return quote(v);
        } else if constexpr (std::is_same_v<T, Ints>) {
          return fmt::format("[{}]", fmt::join(v, ","));
        } else if constexpr (std::is_same_v<T, Strings>) {
          if (v.empty()) return "strings[]";  // typed: a bare [] reads back as Ints
          std::vector<std::string> q;
          for (const auto& s : v) q.push_back("'" + s + "'");
          return fmt::format("[{}]", fmt::join(q, ","));
        } else if constexpr (std::is_same_v<T, DType>) {
          return std::string(dtype_name(v));
        } else if constexpr (std::is_same_v<T, PartitionSpec>) {
          return v.to_string();
        } else if constexpr (std::is_same_v<T, Specs>) {
          if (v.empty()) return "specs[]";
          std::vector<std::string> q;
          for (const auto& s : v) q.push_back(s.to_string());
          return fmt::format("[{}]", fmt::join(q, ", "));
        } else if constexpr (std::is_same_v<T, Mesh>) {
          std::string s = "mesh<";
          for (int i = 0; i < v.num_axes(); ++i) {
            s += fmt::format("{}'{}': {}", i ? ", " : "", v.axis_names()[static_cast<size_t>(i)],
                             v.axis_sizes()[static_cast<size_t>(i)]);
          }
          std::vector<int> ids = v.device_ids();
          bool default_ids = true;
          for (size_t k = 0; k < ids.size(); ++k) default_ids = default_ids && ids[k] == int(k);
          if (!default_ids) s += fmt::format("; devices=[{}]", fmt::join(ids, ","));
          return s + ">";
        } else {
          return literal_to_string(*v, full);
        }
      },
      a);
}

bool attr_equal(const Attr& a, const Attr& b) {
  if (a.index() != b.index()) return false;
  if (auto pa = std::get_if<std::shared_ptr<const Literal>>(&a)) {
    auto pb = std::get<std::shared_ptr<const Literal>>(b);
    return (*pa)->shape == pb->shape && (*pa)->dtype == pb->dtype && (*pa)->bytes == pb->bytes;
  }
  if (auto da = std::get_if<double>(&a)) {
    double db = std::get<double>(b);
    return *da == db || (std::isnan(*da) && std::isnan(db));
  }
  return a == b;
}

bool operator==(const Attrs& a, const Attrs& b) {
  if (a.map_.size() != b.map_.size()) return false;
  for (auto ia = a.map_.begin(), ib = b.map_.begin(); ia != a.map_.end(); ++ia, ++ib) {
    if (ia->first != ib->first || !attr_equal(ia->second, ib->second)) return false;
  }
  return true;
}

std::string Attrs::to_string(bool full) const {
  if (map_.empty()) return "";
  std::vector<std::string> parts;
  for (const auto& [k, v] : map_) parts.push_back(k + "=" + attr_to_string(v, full));
  return fmt::format("{{{}}}", fmt::join(parts, ", "));
}

void attr_missing(const std::string& name, const char* wanted) {
  detail::internal_error("Attrs", fmt::format("attribute '{}' is not {}", name, wanted));
}

Strings axis_sets_attr(const std::vector<std::set<std::string>>& sets) {
  Strings out;
  for (const auto& s : sets) out.push_back(fmt::format("{}", fmt::join(s, ",")));
  return out;
}

std::vector<std::set<std::string>> axis_sets(const Attrs& attrs, const std::string& name,
                                             size_t n) {
  std::vector<std::set<std::string>> out(n);
  if (!attrs.has(name)) return out;
  const auto& texts = attrs.get<Strings>(name);
  for (size_t i = 0; i < texts.size() && i < n; ++i) {
    size_t start = 0;
    while (start < texts[i].size()) {
      size_t end = texts[i].find(',', start);
      if (end == std::string::npos) end = texts[i].size();
      out[i].insert(texts[i].substr(start, end - start));
      start = end + 1;
    }
  }
  return out;
}

}  // namespace partix::ir

// Text -> Program: a hand-written recursive-descent parser for to_text's format.
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "core/errors.h"
#include "core/scalar.h"
#include "ir/primitive.h"
#include "ir/program.h"

namespace partix::ir {

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Program program(const std::optional<Mesh>& outer_mesh) {
    // Regions nest programs; a hostile text must not exhaust the stack.
    if (++depth_ > kMaxRegionDepth)
      error(fmt::format("regions nest deeper than {}", kMaxRegionDepth));
    expect_word("program");
    expect('@');
    Program p;
    p.name = ident();
    if (peek_word("mesh")) p.mesh = mesh();
    if (!p.mesh) p.mesh = outer_mesh;
    expect('(');
    std::map<int, bool> seen;
    if (!try_consume(')')) {
      do {
        int v = value_id();
        expect(':');
        define(p, v, value_type(p));
        p.params.push_back(v);
      } while (try_consume(','));
      expect(')');
    }
    expect_str("->");
    expect('(');
    std::vector<int> results;
    if (!try_consume(')')) {
      do results.push_back(value_id());
      while (try_consume(','));
      expect(')');
    }
    expect('{');
    while (!peek_word("return") && !peek('}')) instruction(p);
    if (peek_word("return")) {  // optional: results are in the signature
      expect_word("return");
      while (!peek('}')) {
        value_id();
        try_consume(',');
      }
    }
    expect('}');
    p.results = results;
    --depth_;
    return p;
  }

  void end() {
    skip();
    if (pos_ != s_.size()) error("unexpected text after the program");
  }

 private:
  [[noreturn]] void error(const std::string& what) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        line++;
        col = 1;
      } else {
        col++;
      }
    }
    detail::fail("parse_program", "line {}, column {}: {}", line, col, what);
  }

  void skip() {
    while (pos_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[pos_]))) {
        pos_++;
      } else if (s_[pos_] == '#') {  // comment to end of line
        while (pos_ < s_.size() && s_[pos_] != '\n') pos_++;
      } else {
        break;
      }
    }
  }
  void skip_inline() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) pos_++;
  }
  bool peek(char c) {
    skip();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  bool try_consume(char c) {
    if (!peek(c)) return false;
    pos_++;
    return true;
  }
  void expect(char c) {
    if (!try_consume(c)) error(fmt::format("expected '{}'", c));
  }
  void expect_str(std::string_view t) {
    skip();
    if (s_.substr(pos_, t.size()) != t) error(fmt::format("expected '{}'", t));
    pos_ += t.size();
  }
  bool peek_word(std::string_view w) {
    skip();
    if (s_.substr(pos_, w.size()) != w) return false;
    size_t e = pos_ + w.size();
    return e >= s_.size() || !(std::isalnum(static_cast<unsigned char>(s_[e])) || s_[e] == '_');
  }
  void expect_word(std::string_view w) {
    if (!peek_word(w)) error(fmt::format("expected '{}'", w));
    pos_ += w.size();
  }
  std::string ident() {
    skip();
    size_t b = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) ||
                                s_[pos_] == '_' || s_[pos_] == '.')) {
      pos_++;
    }
    if (b == pos_) error("expected a name");
    return std::string(s_.substr(b, pos_ - b));
  }
  int64_t integer() {
    skip();
    size_t b = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') pos_++;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) pos_++;
    if (b == pos_ || (pos_ == b + 1 && s_[b] == '-')) error("expected an integer");
    try {
      return std::stoll(std::string(s_.substr(b, pos_ - b)));
    } catch (const std::exception&) {
      error("integer out of range");
    }
  }
  // The whole of t as an integer of dtype (an integer dtype).
  int64_t integer_text(const std::string& t, DType dtype) {
    int64_t v = 0;
    const char* end = t.data() + t.size();
    auto [ptr, ec] = std::from_chars(t.data(), end, v);
    const int bits = int_bits(dtype);
    const int64_t lo = is_unsigned(dtype) ? 0
                       : bits == 64       ? std::numeric_limits<int64_t>::min()
                                          : -(int64_t{1} << (bits - 1));
    const int64_t hi = bits == 64 ? std::numeric_limits<int64_t>::max()
                                  : (int64_t{1} << (is_unsigned(dtype) ? bits : bits - 1)) - 1;
    const bool fits = v >= lo && v <= hi;
    if (ec != std::errc() || ptr != end || !fits) {
      error(fmt::format("'{}' is not an {} value", t, dtype_name(dtype)));
    }
    return v;
  }
  // A number token: returns its text (integers and floats, nan, inf, -inf).
  std::string number_text() {
    skip();
    size_t b = pos_;
    if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) pos_++;
    if (s_.substr(pos_, 3) == "nan" || s_.substr(pos_, 3) == "inf") {
      pos_ += 3;
    } else {
      while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) ||
                                  s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E' ||
                                  ((s_[pos_] == '-' || s_[pos_] == '+') &&
                                   (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E')))) {
        pos_++;
      }
    }
    if (b == pos_) error("expected a number");
    return std::string(s_.substr(b, pos_ - b));
  }
  double to_double(const std::string& t) {
    if (t == "nan" || t == "-nan") return std::numeric_limits<double>::quiet_NaN();
    if (t == "inf" || t == "+inf") return std::numeric_limits<double>::infinity();
    if (t == "-inf") return -std::numeric_limits<double>::infinity();
    try {
      size_t used = 0;
      double d = std::stod(t, &used);
      if (used != t.size()) error("bad number '" + t + "'");
      return d;
    } catch (const std::invalid_argument&) {
      error("bad number '" + t + "'");
    } catch (const std::out_of_range&) {
      error("number out of range '" + t + "'");
    }
  }
  std::string quoted(char q) {
    expect(q);
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != q) {
      if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) pos_++;
      out += s_[pos_++];
    }
    if (pos_ >= s_.size()) error("unterminated string");
    pos_++;
    return out;
  }
  // A single-quoted name (an axis): printable, without quotes or backslashes, which the
  // printer writes as they are (so that every parsed program prints to text that parses back
  // the same).
  std::string name() {
    const size_t at = pos_;
    std::string out = quoted('\'');
    for (unsigned char c : out) {
      if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
        pos_ = at;
        error(
            fmt::format("a name may not hold control characters, quotes or backslashes (byte "
                        "0x{:02x})",
                        c));
      }
    }
    return out;
  }
  int value_id() {
    expect('%');
    int64_t v = integer();
    // Values are stored densely by id, so an id sizes a table. Printed ids stay below the
    // number of values ever traced, which is far below the text's length times kIdsPerByte.
    if (v < 0 || static_cast<uint64_t>(v) / kIdsPerByte > s_.size()) {
      error(fmt::format("bad value id %{} (at most {} times the text's length)", v, kIdsPerByte));
    }
    return static_cast<int>(v);
  }
  Shape shape() {
    expect('[');
    Shape out;
    if (!try_consume(']')) {
      do out.push_back(integer());
      while (try_consume(','));
      expect(']');
    }
    for (int64_t d : out) {
      if (d < 0) error("negative dimension");
    }
    return out;
  }
  DType dtype() {
    std::string n = ident();
    for (DType d : {DType::Bool, DType::I8, DType::I16, DType::I32, DType::I64, DType::U8,
                    DType::U16, DType::U32, DType::F16, DType::BF16, DType::F32, DType::F64}) {
      if (dtype_name(d) == n) return d;
    }
    error("unknown dtype '" + n + "'");
  }
  Aval aval() {
    DType d = dtype();
    return Aval{shape(), d};
  }
  std::vector<std::string> axis_list() {  // 'a', 'b' up to ')'
    std::vector<std::string> out;
    expect('(');
    if (!try_consume(')')) {
      do out.push_back(name());
      while (try_consume(','));
      expect(')');
    }
    return out;
  }
  PartitionSpec spec() {
    expect('P');
    expect('(');
    std::vector<PartitionSpec::Entry> entries;
    if (!try_consume(')')) {
      do {
        if (peek_word("None")) {
          expect_word("None");
          entries.push_back({});
        } else if (peek('(')) {
          entries.push_back(axis_list());
        } else {
          entries.push_back({name()});
        }
      } while (try_consume(','));
      expect(')');
    }
    return PartitionSpec(std::move(entries));
  }
  Mesh mesh() {
    expect_word("mesh");
    expect('<');
    Shape sizes;
    std::vector<std::string> names;
    std::vector<Device> devs;
    if (!peek('>') && !peek(';')) {
      do {
        names.push_back(name());
        expect(':');
        sizes.push_back(integer());
      } while (try_consume(','));
    }
    if (try_consume(';')) {
      expect_word("devices");
      expect('=');
      for (int64_t id : shape()) {
        if (id > std::numeric_limits<int>::max()) error(fmt::format("bad device id {}", id));
        devs.push_back(Device{static_cast<int>(id)});
      }
    }
    expect('>');
    return Mesh(sizes, names, devs);
  }
  std::shared_ptr<const Literal> literal() {
    expect('<');
    auto lit = std::make_shared<Literal>();
    lit->dtype = dtype();
    lit->shape = shape();
    expect(':');
    const int64_t n = detail::checked_size("parse_program", lit->shape, lit->dtype);
    // Every element is written out, so a count beyond the text left is a hostile shape, not a
    // size to allocate.
    if (static_cast<uint64_t>(n) > s_.size() - pos_) {
      error(fmt::format("literal {}{} has more elements than the text holds",
                        dtype_name(lit->dtype), shape_to_string(lit->shape)));
    }
    const int es = dtype_size(lit->dtype);
    lit->bytes.resize(static_cast<size_t>(n * es));
    for (int64_t i = 0; i < n; ++i) {
      if (i) expect(',');
      if (peek_word("true") || peek_word("false")) {
        bool b = peek_word("true");
        ident();
        detail::store_scalar(lit->bytes.data() + i * es, lit->dtype, b ? 1.0 : 0.0);
        continue;
      }
      std::string t = number_text();
      if (is_integral(lit->dtype)) {
        // Integers exactly, never through double (and never out of the dtype's range).
        const int64_t v = integer_text(t, lit->dtype);
        detail::store_int(lit->bytes.data() + i * es, lit->dtype, v);
      } else {
        detail::store_scalar(lit->bytes.data() + i * es, lit->dtype, to_double(t));
      }
    }
    expect('>');
    return lit;
  }
  Attr attr_value() {
    skip();
    if (peek_word("true") || peek_word("false")) {
      bool b = peek_word("true");
      ident();
      return b;
    }
    if (peek('"')) return quoted('"');
    if (peek('<')) return literal();
    if (peek_word("mesh")) return mesh();
    if (peek_word("strings")) {
      expect_word("strings");
      expect('[');
      expect(']');
      return Strings{};
    }
    if (peek_word("specs")) {
      expect_word("specs");
      expect('[');
      expect(']');
      return Specs{};
    }
    if (peek('P') && pos_ + 1 < s_.size() && s_[pos_ + 1] == '(') return spec();
    if (peek('[')) {
      expect('[');
      if (try_consume(']')) return Ints{};
      if (peek('\'')) {
        Strings out;
        do out.push_back(name());
        while (try_consume(','));
        expect(']');
        return out;
      }
      if (peek('P')) {
        Specs out;
        do out.push_back(spec());
        while (try_consume(','));
        expect(']');
        return out;
      }
      Ints out;
      do out.push_back(integer());
      while (try_consume(','));
      expect(']');
      return out;
    }
    if (pos_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[pos_])) &&
        s_.substr(pos_, 3) != "nan" && s_.substr(pos_, 3) != "inf") {
      return dtype();
    }
    std::string t = number_text();
    bool is_float = t.find_first_of(".eEn") != std::string::npos;
    if (is_float) return to_double(t);
    try {
      return static_cast<int64_t>(std::stoll(t));
    } catch (const std::exception&) {
      error("integer out of range '" + t + "'");
    }
  }
  ValueInfo value_type(const Program& p) {
    ValueInfo info;
    info.aval = aval();
    std::optional<PartitionSpec> sp;
    std::set<std::string> unreduced;
    while (true) {
      skip_inline();  // annotations stay on the line; a "# scope" comment is not skipped here
      if (pos_ + 1 < s_.size() && s_[pos_] == 'P' && s_[pos_ + 1] == '(') {
        sp = spec();
      } else if (s_.substr(pos_, 9) == "unreduced") {
        expect_word("unreduced");
        for (auto& a : axis_list()) unreduced.insert(a);
      } else if (s_.substr(pos_, 4) == "vary") {
        expect_word("vary");
        for (auto& a : axis_list()) info.varying.insert(a);
      } else if (s_.substr(pos_, 5) == "typed") {
        expect_word("typed");
        info.typed = true;
      } else {
        break;
      }
    }
    if (sp) {
      if (!p.mesh) error("a sharding needs the program's mesh<...>");
      info.sharding = NamedSharding(*p.mesh, *sp, unreduced);
    }
    return info;
  }
  void define(Program& p, int v, ValueInfo info) {
    if (static_cast<size_t>(v) >= p.values.size()) p.values.resize(static_cast<size_t>(v) + 1);
    p.values[static_cast<size_t>(v)] = std::move(info);
  }
  void instruction(Program& p) {
    Instr in;
    do in.outputs.push_back(value_id());
    while (try_consume(','));
    expect('=');
    std::string name = ident();
    in.prim = prim::find_primitive(name);
    if (!in.prim) error("unknown primitive '" + name + "'");
    expect('(');
    if (!try_consume(')')) {
      do in.inputs.push_back(value_id());
      while (try_consume(','));
      expect(')');
    }
    if (try_consume('{')) {
      if (!try_consume('}')) {
        do {
          std::string key = ident();
          expect('=');
          in.attrs.set(key, attr_value());
        } while (try_consume(','));
        expect('}');
      }
    }
    expect(':');
    for (size_t k = 0; k < in.outputs.size(); ++k) {
      if (k) expect(',');
      define(p, in.outputs[k], value_type(p));
    }
    // Regions and a trailing "# scope" comment stay on the instruction's line.
    while (true) {
      skip_inline();
      if (s_.substr(pos_, 6) == "region") {
        expect_word("region");
        expect('{');
        in.regions.push_back(std::make_shared<const Program>(program(p.mesh)));
        expect('}');
        continue;
      }
      break;
    }
    if (pos_ + 1 < s_.size() && s_[pos_] == '#' && s_[pos_ + 1] == ' ') {
      size_t b = pos_ + 2;
      size_t e = s_.find('\n', b);
      if (e == std::string_view::npos) e = s_.size();
      in.scope = std::string(s_.substr(b, e - b));
      pos_ = e;
    }
    p.instrs.push_back(std::move(in));
  }

  static constexpr int kMaxRegionDepth = 64;
  static constexpr uint64_t kIdsPerByte = 8;
  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

Program parse_program(std::string_view text) {
  Parser parser(text);
  Program p = parser.program(std::nullopt);
  parser.end();
  verify(p);
  return p;
}

}  // namespace partix::ir

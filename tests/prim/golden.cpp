#include "prim/golden.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/array_impl.h"
#include "trace/trace.h"

#ifndef PARTIX_GOLDEN_FILE
#error "PARTIX_GOLDEN_FILE must name tests/golden/primitives.json"
#endif

namespace partix::golden {

namespace {

constexpr const char* kUnreadable = "golden_file_unreadable";

struct Loaded {
  Json file;
  std::string error;
  std::map<std::string, const Json*> by_name;
};

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r;
    const char* env = std::getenv("PARTIX_GOLDEN_FILE");
    std::string path = env ? env : PARTIX_GOLDEN_FILE;
    std::ifstream in(path);
    if (!in) {
      r.error = "cannot open " + path;
      return r;
    }
    try {
      r.file = Json::parse(in);
      for (const Json& c : r.file.at("cases")) r.by_name[c.at("name").get<std::string>()] = &c;
    } catch (const std::exception& e) {
      r.error = path + ": " + e.what();
    }
    return r;
  }();
  return l;
}

std::map<std::string, OpTable (*)()>& families() {
  static std::map<std::string, OpTable (*)()> f;
  return f;
}

const OpTable& table_of(const std::string& family) {
  static std::map<std::string, OpTable> tables;
  auto it = tables.find(family);
  if (it != tables.end()) return it->second;
  auto f = families().find(family);
  return tables[family] = f == families().end() ? OpTable{} : f->second();
}

double json_float(const Json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s == "nan") return NAN;
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    throw std::runtime_error("bad float '" + s + "' in golden file");
  }
  return v.get<double>();
}

// Stores double v (already a value of dtype) into p.
void put_float(char* p, DType dt, double v) {
  switch (dt) {
    case DType::F16: {
      float16 h(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::BF16: {
      bfloat16 h(static_cast<float>(v));
      std::memcpy(p, &h, 2);
      break;
    }
    case DType::F32: {
      float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
      break;
    }
    default:
      std::memcpy(p, &v, 8);
  }
}

double get_float(const char* p, DType dt) {
  switch (dt) {
    case DType::F16: {
      float16 h;
      std::memcpy(&h, p, 2);
      return static_cast<float>(h);
    }
    case DType::BF16: {
      bfloat16 h;
      std::memcpy(&h, p, 2);
      return static_cast<float>(h);
    }
    case DType::F32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
  }
}

int64_t get_int(const char* p, DType dt) {
  if (dt == DType::Bool) return *p != 0;
  if (dt == DType::I32) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// A JSON number as a value of dtype: the same narrowing path as the generator assumes.
double narrow(double v, DType dt) {
  char buf[8];
  put_float(buf, dt, v);
  return get_float(buf, dt);
}

const char* mode_name(runtime::KernelMode m) {
  return m == runtime::KernelMode::kReference ? "reference kernels" : "fast kernels";
}

std::vector<ir::Aval> avals_of(const std::vector<HostTensor>& ts) {
  std::vector<ir::Aval> out;
  for (const HostTensor& t : ts) out.push_back(ir::Aval{t.shape, t.dtype});
  return out;
}

std::vector<ir::Aval> expected_avals(const Json& c) {
  std::vector<ir::Aval> out;
  for (const Json& t : c.at("outputs")) {
    out.push_back(
        ir::Aval{t.at("shape").get<Shape>(), dtype_from_name(t.at("dtype").get<std::string>())});
  }
  return out;
}

std::vector<HostTensor> inputs_of(const Json& c) {
  std::vector<HostTensor> in;
  for (const Json& t : c.at("inputs")) in.push_back(tensor_from_json(t));
  return in;
}

// The primitive an op case may check directly: its entry's, if inference accepts the
// operands as they are and gives the expected avals.
const prim::Primitive* direct_primitive(const Json& c) {
  const std::string op = c.at("op").get<std::string>();
  if (op.rfind("prim:", 0) == 0) return prim::find_primitive(op.substr(5));
  const OpTable& t = table_of(c.at("family").get<std::string>());
  auto it = t.find(op);
  if (it == t.end() || it->second.prim.empty()) return nullptr;
  const prim::Primitive* p = prim::find_primitive(it->second.prim);
  if (!p) return nullptr;
  try {
    if (p->typing().infer(avals_of(inputs_of(c)), {}, {}) != expected_avals(c)) return nullptr;
  } catch (const std::exception&) {
    return nullptr;  // the op library converts or broadcasts first
  }
  return p;
}

}  // namespace

HostTensor tensor_from_json(const Json& t) {
  HostTensor h;
  h.dtype = dtype_from_name(t.at("dtype").get<std::string>());
  h.shape = t.at("shape").get<Shape>();
  const Json& data = t.at("data");
  if (static_cast<int64_t>(data.size()) != h.size()) {
    throw std::runtime_error("golden tensor data does not fill its shape");
  }
  const int es = dtype_size(h.dtype);
  h.bytes.assign(static_cast<size_t>(h.size() * es), 0);
  for (size_t i = 0; i < data.size(); ++i) {
    char* p = h.bytes.data() + i * static_cast<size_t>(es);
    switch (h.dtype) {
      case DType::Bool:
        *p = data[i].get<bool>() ? 1 : 0;
        break;
      case DType::I32: {
        int32_t v = static_cast<int32_t>(data[i].get<int64_t>());
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::I64: {
        int64_t v = data[i].get<int64_t>();
        std::memcpy(p, &v, 8);
        break;
      }
      case DType::F64:
        put_float(p, h.dtype, json_float(data[i]));
        break;
      default:  // narrowing goes through float, as the generator assumes
        put_float(p, h.dtype, static_cast<float>(json_float(data[i])));
    }
  }
  return h;
}

HostTensor to_host(const Array& a) {
  HostTensor h{a.dtype(), a.shape(), detail::gather_to_host(a)};
  return h;
}

Array to_array(const HostTensor& t) {
  return detail::array_from_host(t.bytes.data(), t.size(), t.dtype, t.shape, "golden");
}

testing::AssertionResult matches(const HostTensor& got, const Json& want, double rtol,
                                 double atol) {
  const DType dt = dtype_from_name(want.at("dtype").get<std::string>());
  const Shape shape = want.at("shape").get<Shape>();
  if (got.dtype != dt || got.shape != shape) {
    return testing::AssertionFailure()
           << "got " << dtype_name(got.dtype) << shape_to_string(got.shape) << ", want "
           << dtype_name(dt) << shape_to_string(shape);
  }
  const Json& data = want.at("data");
  const int es = dtype_size(dt);
  const bool exact = rtol == 0 && atol == 0;
  std::ostringstream bad;
  int nbad = 0;
  double worst = 0;
  for (size_t i = 0; i < data.size(); ++i) {
    const char* p = got.bytes.data() + i * static_cast<size_t>(es);
    bool ok;
    std::string g, w;
    if (!is_floating(dt)) {
      int64_t gv = get_int(p, dt);
      int64_t wv = dt == DType::Bool ? data[i].get<bool>() : data[i].get<int64_t>();
      ok = gv == wv;
      g = std::to_string(gv);
      w = std::to_string(wv);
    } else {
      double gv = get_float(p, dt);
      double wv = narrow(json_float(data[i]), dt);
      if (std::isnan(wv)) {
        ok = std::isnan(gv);
      } else if (std::isinf(wv)) {
        ok = gv == wv;
      } else if (exact) {
        ok = gv == wv && std::signbit(gv) == std::signbit(wv);
      } else {
        double err = std::fabs(gv - wv);
        ok = std::isfinite(gv) && err <= atol + rtol * std::fabs(wv);
        if (std::isfinite(gv)) worst = std::max(worst, err / (atol + rtol * std::fabs(wv)));
      }
      std::ostringstream gs, ws;
      gs.precision(17);
      ws.precision(17);
      gs << gv;
      ws << wv;
      g = gs.str();
      w = ws.str();
    }
    if (!ok && nbad++ < 8) bad << "\n  [" << i << "] got " << g << ", want " << w;
  }
  if (nbad == 0) return testing::AssertionSuccess();
  return testing::AssertionFailure()
         << nbad << " of " << data.size() << " elements differ (rtol " << rtol << ", atol " << atol
         << ", worst error/tolerance " << worst << "):" << bad.str();
}

int register_family(const std::string& family, OpTable (*table)()) {
  families()[family] = table;
  return 0;
}

const Json& golden_file() { return loaded().file; }

std::vector<std::string> case_names(const std::string& family) {
  if (!loaded().error.empty()) return {kUnreadable};
  std::vector<std::string> out;
  for (const Json& c : loaded().file.at("cases")) {
    if (c.at("family") == family) out.push_back(c.at("name").get<std::string>());
  }
  return out;
}

ir::Attrs prim_attrs(const Json& attrs) {
  ir::Attrs out;
  for (const auto& [k, v] : attrs.items()) {
    if (v.contains("ints"))
      out.set(k, v.at("ints").get<ir::Ints>());
    else if (v.contains("int"))
      out.set(k, v.at("int").get<int64_t>());
    else if (v.contains("f"))
      out.set(k, v.at("f").get<double>());
    else if (v.contains("b"))
      out.set(k, v.at("b").get<bool>());
    else if (v.contains("dtype"))
      out.set(k, dtype_from_name(v.at("dtype").get<std::string>()));
    else
      throw std::runtime_error("untyped primitive attribute '" + k + "'");
  }
  return out;
}

std::vector<HostTensor> call_reference(const prim::Primitive& p, const std::vector<HostTensor>& in,
                                       const ir::Attrs& attrs) {
  std::vector<ir::Aval> in_avals = avals_of(in);
  std::vector<ir::Aval> out_avals = p.typing().infer(in_avals, attrs, {});
  std::vector<HostTensor> out;
  for (const ir::Aval& a : out_avals) {
    // Slack so that empty results still have a valid data pointer.
    out.push_back(
        HostTensor{a.dtype, a.shape, std::vector<char>(static_cast<size_t>(a.nbytes()) + 8)});
  }
  std::vector<const ir::Aval*> ia, oa;
  std::vector<const void*> ip;
  std::vector<void*> op;
  for (size_t k = 0; k < in.size(); ++k) {
    ia.push_back(&in_avals[k]);
    ip.push_back(in[k].bytes.data());
  }
  for (size_t k = 0; k < out.size(); ++k) {
    oa.push_back(&out_avals[k]);
    op.push_back(out[k].bytes.data());
  }
  prim::ExecContext ctx;
  prim::Regions regions;
  prim::KernelCall call{attrs, ia, oa, ip, op, ctx, regions};
  p.execution().reference(call);
  for (HostTensor& t : out) t.bytes.resize(static_cast<size_t>(t.size() * dtype_size(t.dtype)));
  return out;
}

std::vector<std::string> primitives_checked(const Json& c) {
  const prim::Primitive* p = direct_primitive(c);
  if (!p) return {};
  return {std::string(p->name())};
}

void run_case(const std::string& name) {
  const Loaded& l = loaded();
  ASSERT_TRUE(l.error.empty()) << "golden file: " << l.error
                               << " (regenerate with tools/golden/primitives.py)";
  auto it = l.by_name.find(name);
  ASSERT_NE(it, l.by_name.end()) << "no golden case " << name;
  const Json& c = *it->second;
  const std::string op = c.at("op").get<std::string>();
  const double rtol = c.at("rtol").get<double>(), atol = c.at("atol").get<double>();
  const Json& outs = c.at("outputs");
  const Json& attrs = c.at("attrs");
  SCOPED_TRACE("golden case " + name + ": " + op + " " + attrs.dump());
  std::vector<HostTensor> host_in = inputs_of(c);
  std::vector<Array> in;
  for (const HostTensor& h : host_in) in.push_back(to_array(h));

  OpFn fn;
  const prim::Primitive* p = nullptr;
  if (op.rfind("prim:", 0) == 0) {
    p = prim::find_primitive(op.substr(5));
    ASSERT_NE(p, nullptr) << "no primitive " << op.substr(5);
    ir::Attrs pa = prim_attrs(attrs);
    fn = [p, pa](const std::vector<Array>& xs, const Json&) { return detail::bind(*p, xs, pa); };
  } else {
    const OpTable& t = table_of(c.at("family").get<std::string>());
    auto e = t.find(op);
    ASSERT_NE(e, t.end()) << "no runner for op '" << op << "' in family " << c.at("family");
    fn = e->second.fn;
  }
  for (runtime::KernelMode mode : {runtime::KernelMode::kReference, runtime::KernelMode::kFast}) {
    KernelModeScope scope(mode);
    std::vector<Array> got;
    try {
      got = fn(in, attrs);
    } catch (const std::exception& e) {
      ADD_FAILURE() << mode_name(mode) << ": threw " << e.what();
      continue;
    }
    ASSERT_EQ(got.size(), outs.size()) << mode_name(mode);
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_TRUE(matches(to_host(got[k]), outs[k], rtol, atol))
          << mode_name(mode) << ", output " << k;
    }
  }
  // The reference kernel on its own, outside the runtime.
  const prim::Primitive* direct = direct_primitive(c);
  if (!direct) return;
  ir::Attrs pa = p ? prim_attrs(attrs) : ir::Attrs{};
  std::vector<HostTensor> got;
  try {
    got = call_reference(*direct, host_in, pa);
  } catch (const std::exception& e) {
    FAIL() << direct->name() << " reference kernel called directly: threw " << e.what();
  }
  ASSERT_EQ(got.size(), outs.size());
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_TRUE(matches(got[k], outs[k], rtol, atol))
        << direct->name() << " reference kernel called directly, output " << k;
  }
}

}  // namespace partix::golden

#include "ir/hlo.h"
#include "ir/number_text.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "core/scalar.h"
#include "ir/primitive.h"

namespace partix::ir {

namespace {

constexpr std::string_view kApi = "Lowered.compiler_ir(dialect='hlo')";

// The literal's elements from `first`, nested one brace level per dimension from `dim`.
std::string literal_items(const Literal& lit, size_t dim, int64_t& next) {
  const int es = dtype_size(lit.dtype);
  if (dim == lit.shape.size()) {
    const char* at = lit.bytes.data() + next++ * es;
    if (is_integral(lit.dtype)) return fmt::format("{}", detail::load_int(at, lit.dtype));
    return number_text(detail::load_scalar(at, lit.dtype), lit.dtype);
  }
  std::vector<std::string> items;
  for (int64_t i = 0; i < lit.shape[dim]; ++i) items.push_back(literal_items(lit, dim + 1, next));
  return fmt::format("{{{}}}", fmt::join(items, ", "));
}

std::string result_type(const Program& p) {
  std::vector<std::string> ts;
  for (int r : p.results) ts.push_back(HloEmitter::type(p.aval(r)));
  if (ts.size() == 1) return ts[0];
  return fmt::format("({})", fmt::join(ts, ", "));
}

// The sharding annotation of value v, or "" when the program has no mesh.
std::string value_sharding(const Program& p, int v) {
  const ValueInfo& info = p.info(v);
  if (!p.mesh || p.mesh->size() <= 1 || !info.sharding) return "";
  return hlo_sharding(*info.sharding, kApi);
}

}  // namespace

std::string hlo_sharding(const NamedSharding& s, std::string_view api) {
  if (!s.unreduced().empty()) {
    throw Error(fmt::format("[{}] a value unreduced over {} has no HLO sharding", api,
                            fmt::join(s.unreduced(), ", ")));
  }
  const Mesh& mesh = s.mesh();
  const auto& entries = s.spec().entries();
  // Per device (in mesh order): its tile's index along each split dimension.
  std::vector<int64_t> tile_dims;
  for (const auto& e : entries) {
    int64_t n = 1;
    for (const auto& a : e) n *= mesh.axis_size(a);
    tile_dims.push_back(n);
  }
  int64_t tiles = 1;
  for (int64_t n : tile_dims) tiles *= n;
  if (tiles == 1) return "{replicated}";
  const auto ids = mesh.device_ids();
  std::vector<std::vector<int>> per_tile(static_cast<size_t>(tiles));
  for (int64_t k = 0; k < mesh.size(); ++k) {
    const auto c = mesh.coords(k);
    int64_t flat = 0;
    for (size_t d = 0; d < entries.size(); ++d) {
      int64_t idx = 0;
      for (const auto& a : entries[d]) idx = idx * mesh.axis_size(a) + mesh.axis_coord(c, a);
      flat = flat * tile_dims[d] + idx;
    }
    per_tile[static_cast<size_t>(flat)].push_back(ids[static_cast<size_t>(k)]);
  }
  const size_t replicas = per_tile[0].size();
  std::vector<int> order;
  for (const auto& t : per_tile) order.insert(order.end(), t.begin(), t.end());
  if (replicas > 1) tile_dims.push_back(static_cast<int64_t>(replicas));
  return fmt::format("{{devices=[{}]{}{}}}", fmt::join(tile_dims, ","), fmt::join(order, ","),
                     replicas > 1 ? " last_tile_dim_replicate" : "");
}

HloEmitter::HloEmitter(const Program& program, std::vector<std::string>& names,
                       bool large_constants)
    : program_(program), names_(names), large_constants_(large_constants) {}

void HloEmitter::begin(const Instr& instr) { instr_ = &instr; }
const Aval& HloEmitter::in(size_t k) const { return program_.aval(instr_->inputs.at(k)); }
const Aval& HloEmitter::out(size_t k) const { return program_.aval(instr_->outputs.at(k)); }
const std::string& HloEmitter::operand(size_t k) const {
  return names_[static_cast<size_t>(instr_->inputs.at(k))];
}

std::string HloEmitter::element(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "f32";
    case DType::F64:
      return "f64";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::I8:
      return "s8";
    case DType::I16:
      return "s16";
    case DType::I32:
      return "s32";
    case DType::I64:
      return "s64";
    case DType::U8:
      return "u8";
    case DType::U16:
      return "u16";
    case DType::U32:
      return "u32";
    case DType::Bool:
      return "pred";
    default:
      throw Error(fmt::format("[{}] the dtype {} has no HLO element type (quantized storage)", kApi,
                              dtype_name(dtype)));
  }
}

std::string HloEmitter::dims(const std::vector<int64_t>& d) {
  return fmt::format("{{{}}}", fmt::join(d, ","));
}

std::string HloEmitter::type(const Aval& a) {
  std::string t = fmt::format("{}[{}]", element(a.dtype), fmt::join(a.shape, ","));
  if (a.shape.empty()) return t;
  std::vector<int64_t> layout;
  for (int64_t d = a.ndim() - 1; d >= 0; --d) layout.push_back(d);
  return t + dims(layout);
}

std::string HloEmitter::fresh(std::string_view stem) {
  std::string s(stem);
  std::replace(s.begin(), s.end(), '-', '_');
  return fmt::format("{}.{}", s, ++counter_);
}

std::string HloEmitter::emit(const Aval& t, std::string_view opcode,
                             const std::vector<std::string>& args, std::string_view extra) {
  std::string name = fresh(opcode);
  std::string line = fmt::format("{} = {} {}({})", name, type(t), opcode, fmt::join(args, ", "));
  if (!extra.empty()) line += fmt::format(", {}", extra);
  lines_.push_back(std::move(line));
  return name;
}

std::string HloEmitter::scalar(DType dtype, double value) {
  std::string name = fresh("constant");
  lines_.push_back(
      fmt::format("{} = {} constant({})", name, type(Aval{{}, dtype}), number_text(value, dtype)));
  return name;
}

std::string HloEmitter::literal(const Literal& lit) {
  std::string name = fresh("constant");
  int64_t next = 0;
  const bool elide = !large_constants_ && shape_size(lit.shape) > kLargeConstant;
  lines_.push_back(fmt::format("{} = {} constant({})", name, type(Aval{lit.shape, lit.dtype}),
                               elide ? std::string("{...}") : literal_items(lit, 0, next)));
  return name;
}

std::string HloEmitter::broadcast(const std::string& v, const Aval& from, const Aval& to) {
  if (from.shape == to.shape) return v;
  const size_t lead = to.shape.size() - from.shape.size();
  Shape kept;
  std::vector<int64_t> dims_kept;
  for (size_t i = 0; i < from.shape.size(); ++i) {
    if (from.shape[i] == to.shape[lead + i]) {
      kept.push_back(from.shape[i]);
      dims_kept.push_back(static_cast<int64_t>(lead + i));
    } else if (from.shape[i] != 1) {
      throw Error(
          fmt::format("[{}] cannot broadcast {} to {}", kApi, from.to_string(), to.to_string()));
    }
  }
  std::string src = v;
  if (kept.size() != from.shape.size()) src = emit(Aval{kept, from.dtype}, "reshape", {v});
  return emit(Aval{to.shape, from.dtype}, "broadcast", {src},
              fmt::format("dimensions={}", dims(dims_kept)));
}

std::string HloEmitter::reducer(DType dtype, std::string_view opcode) {
  const std::string key = element(dtype) + " " + std::string(opcode);
  auto it = reducers_.find(key);
  if (it != reducers_.end()) return it->second;
  const std::string t = type(Aval{{}, dtype});
  const std::string name = fresh("region");
  const std::string a = fresh("Arg_0"), b = fresh("Arg_1"), r = fresh(opcode);
  computations_.push_back(fmt::format(
      "{} {{\n  {} = {} parameter(0)\n  {} = {} parameter(1)\n  ROOT {} = {} {}({}, {})\n}}\n",
      name, a, t, b, t, r, t, opcode, a, b));
  reducers_[key] = name;
  return name;
}

void HloEmitter::result(size_t k, const std::string& name) {
  names_[static_cast<size_t>(instr_->outputs.at(k))] = name;
}

std::string to_hlo_text(const Program& p, std::string_view module_name,
                        const std::vector<std::shared_ptr<const Literal>>& constants,
                        bool print_large_constants) {
  std::vector<std::string> names(p.values.size());
  HloEmitter e(p, names, print_large_constants);
  std::vector<std::string> params, param_types;
  const size_t num_args = p.params.size() - std::min(p.params.size(), constants.size());
  for (size_t k = num_args; k < p.params.size(); ++k) {
    names[static_cast<size_t>(p.params[k])] = e.literal(*constants[k - num_args]);
  }
  for (size_t k = 0; k < num_args; ++k) {
    const int v = p.params[k];
    names[static_cast<size_t>(v)] = e.fresh(fmt::format("Arg_{}", k));
    std::string line = fmt::format("{} = {} parameter({})", names[static_cast<size_t>(v)],
                                   HloEmitter::type(p.aval(v)), k);
    const std::string s = value_sharding(p, v);
    if (!s.empty()) line += ", sharding=" + s;
    params.push_back(std::move(line));
    param_types.push_back(HloEmitter::type(p.aval(v)));
  }
  for (const Instr& instr : p.instrs) {
    e.begin(instr);
    if (!instr.prim->hlo().to_hlo(e)) {
      throw Error(fmt::format("[{}] partix writes no HLO for the op '{}' ({})", kApi,
                              instr.prim->user_name(instr.attrs), instr.prim->name()));
    }
  }
  // The root: the one result, or a tuple of them; with the results' shardings.
  std::vector<std::string> outs, shardings;
  for (int r : p.results) {
    outs.push_back(names[static_cast<size_t>(r)]);
    shardings.push_back(value_sharding(p, r));
  }
  std::vector<std::string> lines = e.lines();
  std::string root;
  if (p.results.size() == 1 && !lines.empty() && lines.back().rfind(outs[0] + " = ", 0) == 0) {
    // The op that computes the one result is the root.
    root = "ROOT " + lines.back();
    lines.pop_back();
    if (!shardings[0].empty()) root += ", sharding=" + shardings[0];
  } else if (p.results.size() == 1) {
    root = fmt::format("ROOT {} = {} copy({})", e.fresh("copy"), result_type(p), outs[0]);
    if (!shardings[0].empty()) root += ", sharding=" + shardings[0];
  } else {
    root = fmt::format("ROOT {} = {} tuple({})", e.fresh("tuple"), result_type(p),
                       fmt::join(outs, ", "));
    if (!shardings.empty() && !shardings[0].empty()) {
      root += fmt::format(", sharding={{{}}}", fmt::join(shardings, ", "));
    }
  }
  std::string text = fmt::format("HloModule {}, entry_computation_layout={{({})->{}}}\n\n",
                                 module_name, fmt::join(param_types, ", "), result_type(p));
  for (const auto& c : e.computations()) text += c + "\n";
  text += fmt::format("ENTRY {} {{\n", e.fresh("main"));
  for (const auto& l : params) text += "  " + l + "\n";
  for (const auto& l : lines) text += "  " + l + "\n";
  return text + "  " + root + "\n}\n";
}

}  // namespace partix::ir

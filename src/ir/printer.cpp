// Program -> text (the format is described in program.h).
#include "core/errors.h"
#include "ir/primitive.h"
#include "ir/program.h"

namespace partix::ir {

std::string Aval::to_string() const {
  return std::string(dtype_name(dtype)) + shape_to_string(shape);
}

namespace {

std::string value_type(const ValueInfo& v, const PrintOptions& o) {
  std::string s = v.aval.to_string();
  if (o.shardings && v.sharding) {
    s += " " + v.sharding->spec().to_string();
    if (!v.sharding->unreduced().empty()) {
      std::vector<std::string> q;
      for (const auto& a : v.sharding->unreduced()) q.push_back("'" + a + "'");
      s += fmt::format(" unreduced({})", fmt::join(q, ", "));
    }
    // Explicit sharding: the sharding is the value's type, fixed when it was traced.
    if (v.typed) s += " typed";
  }
  if (!v.varying.empty()) {
    std::vector<std::string> q;
    for (const auto& a : v.varying) q.push_back("'" + a + "'");
    s += fmt::format(" vary({})", fmt::join(q, ", "));
  }
  return s;
}

void print_program(const Program& p, const PrintOptions& o, int indent, std::string& out) {
  std::string pad(static_cast<size_t>(indent), ' ');
  out += pad + "program @" + p.name;
  if (p.mesh) out += " " + attr_to_string(Attr(*p.mesh));
  std::vector<std::string> params;
  for (int v : p.params) params.push_back(fmt::format("%{}: {}", v, value_type(p.info(v), o)));
  std::vector<std::string> results;
  for (int v : p.results) results.push_back(fmt::format("%{}", v));
  out += fmt::format(" ({}) -> ({}) {{\n", fmt::join(params, ", "), fmt::join(results, ", "));
  for (const Instr& in : p.instrs) {
    std::vector<std::string> outs, ins, types;
    for (int v : in.outputs) {
      outs.push_back(fmt::format("%{}", v));
      types.push_back(value_type(p.info(v), o));
    }
    for (int v : in.inputs) ins.push_back(fmt::format("%{}", v));
    std::string attrs = in.attrs.to_string(o.full_literals);
    out += pad + "  " +
           fmt::format("{} = {}({})", fmt::join(outs, ", "), in.prim->name(), fmt::join(ins, ", "));
    if (!attrs.empty()) out += " " + attrs;
    out += " : " + fmt::format("{}", fmt::join(types, ", "));
    for (const auto& r : in.regions) {
      out += " region {\n";
      print_program(*r, o, indent + 4, out);
      out += pad + "  }";
    }
    if (!in.scope.empty()) out += "  # " + in.scope;
    out += "\n";
  }
  out += pad + "}\n";
}

}  // namespace

std::string to_text(const Program& p, const PrintOptions& o) {
  std::string out;
  print_program(p, o, 0, out);
  return out;
}

void verify(const Program& p) {
  std::vector<bool> defined(p.values.size(), false);
  auto where = [&](size_t i) {
    return fmt::format("instruction {} ({}) of @{}", i, p.instrs[i].prim->name(), p.name);
  };
  for (int v : p.params) {
    if (v < 0 || static_cast<size_t>(v) >= p.values.size() || defined[static_cast<size_t>(v)]) {
      detail::internal_error("verify", fmt::format("bad parameter %{} of @{}", v, p.name));
    }
    defined[static_cast<size_t>(v)] = true;
  }
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const Instr& in = p.instrs[i];
    // A primitive's inference reads its regions' parameters and results: they must be sound
    // first (a parsed region may name values it never defines).
    for (const auto& region : in.regions) verify(*region);
    std::vector<Aval> avals;
    for (int v : in.inputs) {
      if (v < 0 || static_cast<size_t>(v) >= p.values.size() || !defined[static_cast<size_t>(v)]) {
        detail::internal_error("verify",
                               fmt::format("{} uses %{} before it is defined", where(i), v));
      }
      avals.push_back(p.aval(v));
    }
    std::vector<Aval> expect = in.prim->typing().infer(avals, in.attrs, in.regions);
    if (expect.size() != in.outputs.size()) {
      detail::internal_error("verify", fmt::format("{} has {} results, expected {}", where(i),
                                                   in.outputs.size(), expect.size()));
    }
    for (size_t k = 0; k < expect.size(); ++k) {
      int v = in.outputs[k];
      if (v < 0 || static_cast<size_t>(v) >= p.values.size() || defined[static_cast<size_t>(v)]) {
        detail::internal_error("verify", fmt::format("{} redefines %{}", where(i), v));
      }
      defined[static_cast<size_t>(v)] = true;
      if (!(p.aval(v) == expect[k])) {
        detail::internal_error("verify",
                               fmt::format("{}: %{} is {} but the primitive gives {}", where(i), v,
                                           p.aval(v).to_string(), expect[k].to_string()));
      }
    }
  }
  for (int v : p.results) {
    if (v < 0 || static_cast<size_t>(v) >= p.values.size() || !defined[static_cast<size_t>(v)]) {
      detail::internal_error("verify", fmt::format("result %{} of @{} is not defined", v, p.name));
    }
  }
}

std::optional<Mesh> named_mesh(const Program& p) {
  for (const Instr& in : p.instrs) {
    if (in.attrs.has("mesh")) return in.attrs.get<Mesh>("mesh");
    for (const auto& r : in.regions) {
      if (std::optional<Mesh> m = named_mesh(*r)) return m;
    }
  }
  return std::nullopt;
}

bool has_effects(const Instr& in) {
  if (in.prim->has_effects()) return true;
  for (const auto& r : in.regions) {
    for (const Instr& inner : r->instrs) {
      if (has_effects(inner)) return true;
    }
  }
  return false;
}

void eliminate_dead_code(Program& p) {
  std::vector<bool> live(p.values.size(), false);
  for (int v : p.results) live[static_cast<size_t>(v)] = true;
  std::vector<bool> keep(p.instrs.size(), false);
  for (size_t i = p.instrs.size(); i-- > 0;) {
    const Instr& in = p.instrs[i];
    bool needed = false;
    for (int o : in.outputs) needed = needed || live[static_cast<size_t>(o)];
    if (!needed && !has_effects(in)) continue;
    keep[i] = true;
    for (int v : in.inputs) live[static_cast<size_t>(v)] = true;
  }
  std::vector<Instr> kept;
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    if (keep[i]) kept.push_back(std::move(p.instrs[i]));
  }
  p.instrs = std::move(kept);
}

}  // namespace partix::ir

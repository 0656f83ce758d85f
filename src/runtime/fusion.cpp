#include "runtime/fusion.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>

namespace partix::runtime {

namespace {

enum class Role { kNone, kLiteral, kView, kBroadcast, kUnary, kBinary };

// How instruction `in` takes part in a group; a broadcast's operand strides go to `strides`.
Role role_of(const ir::Program& p, const ir::Instr& in, const prim::FusedKernel& backend,
             std::vector<int64_t>* strides) {
  if (in.outputs.size() != 1 || !in.regions.empty()) return Role::kNone;
  const ir::Aval& out = p.aval(in.outputs[0]);
  if (out.dtype != DType::F32) return Role::kNone;
  for (int v : in.inputs) {
    if (p.aval(v).dtype != DType::F32) return Role::kNone;
  }
  const prim::Primitive& op = *in.prim;
  if (op.execution().constant_value(in.attrs)) {
    return in.inputs.empty() && out.shape.empty() ? Role::kLiteral : Role::kNone;
  }
  if (in.inputs.size() == 1) {
    const ir::Aval& a = p.aval(in.inputs[0]);
    if (auto s = op.execution().broadcast_strides(a, out, in.attrs)) {
      *strides = std::move(*s);
      return Role::kBroadcast;
    }
    if (op.execution().is_view(a, out, in.attrs)) return Role::kView;
  }
  if (!op.execution().is_elementwise() || backend.resolve(op.name()) == nullptr) return Role::kNone;
  if (in.inputs.size() == 1) return Role::kUnary;
  if (in.inputs.size() == 2) return Role::kBinary;
  return Role::kNone;
}

bool computes(Role r) { return r == Role::kBroadcast || r == Role::kUnary || r == Role::kBinary; }

}  // namespace

namespace {
std::atomic<bool>& fusion_flag() {
  static std::atomic<bool> on = [] {
    const char* env = std::getenv("PARTIX_FUSION");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return on;
}
}  // namespace

bool fusion_enabled() { return fusion_flag().load(); }
void set_fusion_enabled(bool on) { fusion_flag().store(on); }

std::vector<std::string> describe_fusion(
    const ir::Program& p, const std::vector<std::shared_ptr<const prim::FusedLoop>>& groups) {
  std::vector<std::string> out;
  for (size_t i = 0; i < groups.size(); ++i) {
    const prim::FusedLoop* g = groups[i].get();
    if (!g) continue;
    const int r = p.instrs[i].outputs[0];
    std::string line = "%" + std::to_string(r) + " = " + g->name + "(";
    for (size_t k = 0; k < g->inputs.size(); ++k) {
      line += (k ? ", %" : "%") + std::to_string(g->inputs[k]);
    }
    line +=
        ") : " + std::string(dtype_name(p.aval(r).dtype)) + shape_to_string(p.aval(r).shape) + " {";
    for (size_t k = 0; k < g->members.size(); ++k) {
      line += (k ? " %" : "%") +
              std::to_string(p.instrs[static_cast<size_t>(g->members[k])].outputs[0]);
    }
    out.push_back(line + "}");
  }
  return out;
}

Fusion plan_fusion(const ir::Program& p, const prim::FusedKernel& backend) {
  const size_t n = p.instrs.size();
  Fusion f;
  f.root_of.assign(n, -1);
  f.group.resize(n);
  std::vector<int> def(p.values.size(), -1);
  std::vector<std::vector<int>> users(p.values.size());
  std::vector<bool> result(p.values.size(), false);
  std::vector<Role> role(n);
  std::vector<std::vector<int64_t>> strides(n);  // of broadcasts
  for (size_t i = 0; i < n; ++i) {
    const ir::Instr& in = p.instrs[i];
    for (int v : in.outputs) def[static_cast<size_t>(v)] = static_cast<int>(i);
    for (int v : in.inputs) users[static_cast<size_t>(v)].push_back(static_cast<int>(i));
    role[i] = role_of(p, in, backend, &strides[i]);
  }
  for (int v : p.results) result[static_cast<size_t>(v)] = true;
  auto count = [&](int v) { return p.aval(v).size(); };

  std::vector<int> mark(n, -1);  // the root whose group is being gathered
  auto in_group = [&](int j) { return mark[static_cast<size_t>(j)] >= 0; };
  for (size_t i = n; i-- > 0;) {
    if (in_group(static_cast<int>(i)) || (role[i] != Role::kUnary && role[i] != Role::kBinary))
      continue;
    const int64_t N = count(p.instrs[i].outputs[0]);
    std::vector<int> members{static_cast<int>(i)};
    mark[i] = static_cast<int>(i);
    std::vector<int> work(p.instrs[i].inputs.begin(), p.instrs[i].inputs.end());
    while (!work.empty() && members.size() < prim::kMaxFusedNodes / 2) {
      const int v = work.back();
      work.pop_back();
      const int j = def[static_cast<size_t>(v)];
      if (j < 0 || in_group(j)) continue;
      const Role r = role[static_cast<size_t>(j)];
      if (r == Role::kNone || result[static_cast<size_t>(v)]) continue;
      if (r != Role::kLiteral && count(v) != N) continue;
      // Every use inside the group, and none by a broadcast (which reads its operand from
      // memory); a use not yet taken in brings v back when it is.
      bool inside = true;
      for (int u : users[static_cast<size_t>(v)]) {
        inside = inside && mark[static_cast<size_t>(u)] == static_cast<int>(i) &&
                 role[static_cast<size_t>(u)] != Role::kBroadcast;
      }
      if (!inside) continue;
      mark[static_cast<size_t>(j)] = static_cast<int>(i);
      members.push_back(j);
      if (r != Role::kBroadcast) {
        for (int w : p.instrs[static_cast<size_t>(j)].inputs) work.push_back(w);
      }
    }
    const auto ops = std::count_if(members.begin(), members.end(),
                                   [&](int j) { return computes(role[static_cast<size_t>(j)]); });
    if (ops < 2) {
      for (int j : members) mark[static_cast<size_t>(j)] = -1;
      continue;
    }
    std::sort(members.begin(), members.end());

    auto loop = std::make_shared<prim::FusedLoop>();
    loop->size = N;
    loop->members = members;
    std::map<int, int> node_of;   // program value -> node
    std::map<int, int> input_of;  // program value -> index in inputs
    auto input = [&](int v) {
      auto [it, fresh] = input_of.emplace(v, static_cast<int>(loop->inputs.size()));
      if (fresh) loop->inputs.push_back(v);
      return it->second;
    };
    auto add = [&](prim::FusedLoop::Node node) {
      loop->nodes.push_back(std::move(node));
      return static_cast<int>(loop->nodes.size()) - 1;
    };
    auto node = [&](int v) {
      auto it = node_of.find(v);
      if (it != node_of.end()) return it->second;
      prim::FusedLoop::Node in;
      in.kind = count(v) == N ? prim::FusedLoop::Kind::kInput : prim::FusedLoop::Kind::kScalar;
      in.input = input(v);
      return node_of[v] = add(std::move(in));
    };
    std::vector<std::string> names;
    for (int j : members) {
      const ir::Instr& in = p.instrs[static_cast<size_t>(j)];
      const int out = in.outputs[0];
      prim::FusedLoop::Node nd;
      switch (role[static_cast<size_t>(j)]) {
        case Role::kLiteral: {
          const ir::Literal* lit = in.prim->execution().constant_value(in.attrs);
          nd.kind = prim::FusedLoop::Kind::kScalar;
          std::memcpy(&nd.literal, lit->bytes.data(), sizeof(float));
          node_of[out] = add(std::move(nd));
          continue;
        }
        case Role::kView:
          node_of[out] = node(in.inputs[0]);
          continue;
        case Role::kBroadcast:
          nd.kind = prim::FusedLoop::Kind::kBroadcast;
          nd.input = input(in.inputs[0]);
          nd.shape = p.aval(out).shape;
          nd.strides = strides[static_cast<size_t>(j)];
          break;
        case Role::kUnary:
          nd.kind = prim::FusedLoop::Kind::kUnary;
          nd.a = node(in.inputs[0]);
          break;
        case Role::kBinary:
          nd.kind = prim::FusedLoop::Kind::kBinary;
          nd.a = node(in.inputs[0]);
          nd.b = node(in.inputs[1]);
          break;
        case Role::kNone:
          break;
      }
      nd.op = in.prim->name();
      nd.fn = nd.kind == prim::FusedLoop::Kind::kBroadcast ? nullptr : backend.resolve(nd.op);
      node_of[out] = add(std::move(nd));
      names.emplace_back(in.prim->name());
    }
    loop->name = "fusion(";
    for (size_t k = 0; k < names.size(); ++k) loop->name += (k ? "," : "") + names[k];
    loop->name += ")";
    for (int j : members) f.root_of[static_cast<size_t>(j)] = static_cast<int>(i);
    f.group[i] = std::move(loop);
  }
  return f;
}

}  // namespace partix::runtime

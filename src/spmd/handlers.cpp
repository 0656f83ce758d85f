#include "spmd/handlers.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/errors.h"
#include "core/scalar.h"
#include "sharding/axes.h"
#include "spmd/reshard.h"

namespace partix::spmd {

namespace {

int scalar_const(LocalBuilder& b, double v, DType dt) {
  auto lit = std::make_shared<ir::Literal>();
  lit->dtype = dt;
  lit->bytes.resize(static_cast<size_t>(dtype_size(dt)));
  detail::store_scalar(lit->bytes.data(), dt, v);
  return b.emit1("constant", {}, {{"value", std::shared_ptr<const ir::Literal>(lit)}});
}

// The identity of a reduction as pad_mask's value: +-inf for max and min, which storing an
// integer saturates to the dtype's exact limits (INT32_MIN is a valid maximum).
double identity_of(prim::ReduceKind k) {
  if (k == prim::ReduceKind::kSum) return 0.0;
  const double inf = std::numeric_limits<double>::infinity();
  return k == prim::ReduceKind::kMax ? -inf : inf;
}

// Attributes of the local instruction: the primitive turns global sizes into its block's.
ir::Attrs local_attrs(const ir::Program& g, const ir::Instr& in, const InstrPlan& plan,
                      const std::vector<int>& local_ins, const LocalBuilder& b) {
  std::vector<ir::Aval> ia, oa, la;
  for (int v : in.inputs) ia.push_back(g.aval(v));
  for (int v : in.outputs) oa.push_back(g.aval(v));
  for (int v : local_ins) la.push_back(b.aval(v));
  return in.prim->partitioning().localize_attrs(in.attrs,
                                                {ia, oa, la, plan.results, &plan.operands});
}

}  // namespace

// Reductions over unevenly split dimensions: padding is garbage until masked with the
// reduction's identity (sums and scatters add zeros, max sees -inf).
void mask_uneven_reductions(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan,
                            std::vector<int>& ins) {
  LocalBuilder& b = c.builder;
  const prim::FactorRule& rule = plan.rule;
  for (size_t f = 0; f < rule.factors.size(); ++f) {
    const prim::Factor& fac = rule.factors[f];
    const AxisList& axes =
        plan.assignment.factor_axes.empty() ? AxisList{} : plan.assignment.factor_axes[f];
    if (fac.kind != prim::FactorKind::kReduction || axes.empty()) continue;
    if (fac.size % axes_product(c.mesh, axes) == 0) continue;
    for (size_t i = 0; i < in.inputs.size(); ++i) {
      for (size_t d = 0; d < rule.operands[i].size(); ++d) {
        if (rule.operands[i][d] != prim::DimFactors{static_cast<int>(f)}) continue;
        DType dt = c.g.aval(in.inputs[i]).dtype;
        // Quantized weights are zero-padded when placed and zero blocks decode to zeros; the
        // other operand's padding is masked.
        if (is_quantized(dt)) continue;
        ins[i] = b.emit1("pad_mask", {ins[i]},
                         {{"axes", ir::Strings(axes.begin(), axes.end())},
                          {"axis", static_cast<int64_t>(d)},
                          {"size", c.g.aval(in.inputs[i]).shape[d]},
                          {"value", identity_of(fac.reduce)}},
                         plan.operands[i]);
      }
    }
  }
}

void emit_generic(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan) {
  LocalBuilder& b = c.builder;
  std::vector<int> ins;
  for (size_t i = 0; i < in.inputs.size(); ++i)
    ins.push_back(c.local(in.inputs[i], plan.operands[i]));
  mask_uneven_reductions(c, in, plan, ins);
  ir::Attrs attrs = local_attrs(c.g, in, plan, ins, b);
  std::vector<int> outs;
  if (plan.results.size() == 1) {
    outs = b.emit(in.prim->name(), ins, attrs, plan.results[0], in.scope, in.regions);
  } else {
    outs = b.emit(in.prim->name(), ins, attrs, std::nullopt, in.scope, in.regions);
    for (size_t k = 0; k < outs.size(); ++k) b.program().info(outs[k]).sharding = plan.results[k];
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    Shape want = plan.results[k].shard_shape(c.g.aval(in.outputs[k]).shape);
    if (b.aval(outs[k]).shape != want) {
      detail::internal_error("partition",
                             fmt::format("{} computes a local {} where its sharding {} needs {}",
                                         in.prim->name(), shape_to_string(b.aval(outs[k]).shape),
                                         plan.results[k].to_string(), shape_to_string(want)));
    }
    int v = outs[k];
    const Shape& global = c.g.aval(in.outputs[k]).shape;
    bool uneven = false;
    for (size_t d = 0; d < global.size(); ++d) {
      uneven |= global[d] % plan.results[k].num_blocks(static_cast<int>(d)) != 0;
    }
    if (uneven && plan.reduce_now[k].empty()) b.program().info(v).global_shape = global;
    if (!plan.reduce_now[k].empty()) {
      // max/min over a split dimension: combine the local extremes now.
      const auto ordered = detail::in_mesh_order(
          c.mesh, std::vector<std::string>(plan.reduce_now[k].begin(), plan.reduce_now[k].end()));
      ir::Strings axes(ordered.begin(), ordered.end());
      const char* kind = plan.reduce_now_kind[k] == prim::ReduceKind::kMax ? "max" : "min";
      v = b.emit1(
          "all_reduce", {v},
          {{"axes", axes}, {"kind", std::string(kind)}, {"group", axes_product(c.mesh, axes)}},
          plan.results[k], in.scope);
    }
    c.bind_result(in.outputs[k], v, plan.results[k]);
  }
}

namespace {

void copy_body(PartitionContext& c, const ir::Program& body, std::vector<int>& map);

// A shard_map nested in a shard_map body. The enclosing body runs per device with this map's
// axes automatic, so its values are whole (replicated) along them: the operands are cut to
// their blocks by in_specs (a local slice, no communication), the body is copied, and the
// results are gathered whole again by out_specs.
void emit_nested_shard_map(PartitionContext& c, const ir::Program& enclosing, const ir::Instr& in,
                           std::vector<int>& map) {
  const Mesh& m = in.attrs.get<Mesh>("mesh");
  const auto& in_specs = in.attrs.get<ir::Specs>("in_specs");
  const auto& out_specs = in.attrs.get<ir::Specs>("out_specs");
  const ir::Program& body = *in.regions[0];
  ReshardContext ctx{c.builder, nullptr, "a nested shard_map's operand"};
  const NamedSharding whole(m, P());
  std::vector<int> inner(body.values.size(), -1);
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    const int v = map[static_cast<size_t>(in.inputs[i])];
    inner[static_cast<size_t>(body.params[i])] =
        reshard(ctx, v, enclosing.aval(in.inputs[i]).shape, whole, NamedSharding(m, in_specs[i]));
  }
  copy_body(c, body, inner);
  for (size_t k = 0; k < in.outputs.size(); ++k) {
    const int r = inner[static_cast<size_t>(body.results[k])];
    const int v =
        reshard(ctx, r, enclosing.aval(in.outputs[k]).shape, NamedSharding(m, out_specs[k]), whole);
    map[static_cast<size_t>(in.outputs[k])] = v;
    c.builder.program().info(v).varying = enclosing.info(in.outputs[k]).varying;
  }
}

// Copies a shard_map body's instructions (each device runs them on its blocks), `map` taking the
// body's values to local ones; nested shard_maps are emitted as such.
void copy_body(PartitionContext& c, const ir::Program& body, std::vector<int>& map) {
  for (const ir::Instr& bi : body.instrs) {
    const auto pin = bi.prim->partitioning().pinned_shardings(bi.attrs);
    if (pin && pin->per_device_body) {
      emit_nested_shard_map(c, body, bi, map);
      continue;
    }
    std::vector<int> ins;
    for (int v : bi.inputs) ins.push_back(map[static_cast<size_t>(v)]);
    auto outs = c.builder.emit(bi.prim->name(), ins, bi.attrs, std::nullopt, bi.scope, bi.regions);
    for (size_t k = 0; k < outs.size(); ++k) {
      map[static_cast<size_t>(bi.outputs[k])] = outs[k];
      c.builder.program().info(outs[k]).varying = body.info(bi.outputs[k]).varying;
    }
  }
}

}  // namespace

void emit_shard_map(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan) {
  const Mesh& m = in.attrs.get<Mesh>("mesh");
  if (m != c.mesh) {
    detail::fail("shard_map",
                 "runs on {}, but the program around it runs on {} (where its arguments are "
                 "committed); device_put them onto {}",
                 m.to_string(), c.mesh.to_string(), m.to_string());
  }
  const ir::Program& body = *in.regions[0];
  std::vector<int> map(body.values.size(), -1);
  for (size_t i = 0; i < in.inputs.size(); ++i) {
    map[static_cast<size_t>(body.params[i])] = c.local(in.inputs[i], plan.operands[i]);
  }
  copy_body(c, body, map);
  for (size_t k = 0; k < in.outputs.size(); ++k) {
    c.bind_result(in.outputs[k], map[static_cast<size_t>(body.results[k])], plan.results[k]);
  }
}

namespace {

// Local indices into a table split along `axis` over L: ids clamped to the global range, minus
// this device's block offset; and whether each one falls in the local block.
std::pair<int, int> local_indices(PartitionContext& c, int ids, int table, int axis,
                                  const NamedSharding& table_sharding, int64_t global_rows) {
  LocalBuilder& b = c.builder;
  const DType it = b.aval(ids).dtype;
  AxisList L = table_sharding.spec()[axis];
  const int64_t rows = b.aval(table).shape[static_cast<size_t>(axis)];
  int lo = scalar_const(b, 0, it), hi = scalar_const(b, static_cast<double>(global_rows - 1), it);
  int clamped = b.emit1("min", {b.emit1("max", {ids, lo}, {}), hi}, {});
  int rank = b.emit1("axis_index", {}, {{"axes", ir::Strings(L.begin(), L.end())}});
  if (it != DType::I32) rank = b.emit1("convert", {rank}, {{"dtype", it}});
  int offset = b.emit1("mul", {rank, scalar_const(b, static_cast<double>(rows), it)}, {});
  int local_ids = b.emit1("sub", {clamped, offset}, {});
  int ge = b.emit1("ge", {local_ids, scalar_const(b, 0, it)}, {});
  int lt = b.emit1("lt", {local_ids, scalar_const(b, static_cast<double>(rows), it)}, {});
  return {local_ids, b.emit1("and", {ge, lt}, {})};
}

// Broadcasts an index-shaped mask over the gathered shape x[:axis] + ids + x[axis+1:].
int mask_over(LocalBuilder& b, int mask, const Shape& gathered, int axis) {
  ir::Ints dims;
  for (int d = 0; d < b.aval(mask).ndim(); ++d) dims.push_back(axis + d);
  return b.emit1("broadcast_in_dim", {mask}, {{"shape", ir::Ints(gathered)}, {"dims", dims}});
}

}  // namespace

void emit_take_sharded(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan) {
  LocalBuilder& b = c.builder;
  int axis = static_cast<int>(in.attrs.i("axis"));
  if (axis < 0) axis += c.g.aval(in.inputs[0]).ndim();
  int table = c.local(in.inputs[0], plan.operands[0]);
  int ids = c.local(in.inputs[1], plan.operands[1]);
  auto [local_ids, valid] = local_indices(c, ids, table, axis, plan.operands[0],
                                          c.g.aval(in.inputs[0]).shape[static_cast<size_t>(axis)]);
  int rows = b.emit1(in.prim->name(), {table, local_ids}, {{"axis", int64_t{axis}}}, std::nullopt,
                     in.scope);
  int mask = mask_over(b, valid, b.aval(rows).shape, axis);
  int zero = scalar_const(b, 0, b.aval(rows).dtype);
  // Exactly one device holds each row: the masked lookups sum to the answer.
  int out = b.emit1("select", {mask, rows, zero}, {}, plan.results[0], in.scope);
  c.bind_result(in.outputs[0], out, plan.results[0]);
}

void emit_scatter_sharded(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan) {
  LocalBuilder& b = c.builder;
  int axis = static_cast<int>(in.attrs.i("axis"));
  if (axis < 0) axis += c.g.aval(in.inputs[0]).ndim();
  std::vector<int> ins;
  for (size_t i = 0; i < 3; ++i) ins.push_back(c.local(in.inputs[i], plan.operands[i]));
  mask_uneven_reductions(c, in, plan, ins);  // padded updates add zero
  const int table = ins[0], ids = ins[1], upd = ins[2];
  auto [local_ids, valid] = local_indices(c, ids, table, axis, plan.operands[0],
                                          c.g.aval(in.inputs[0]).shape[static_cast<size_t>(axis)]);
  int mask = mask_over(b, valid, b.aval(upd).shape, axis);
  int zero = scalar_const(b, 0, b.aval(upd).dtype);
  // Updates for rows of other devices add zero (at a clamped row).
  int kept = b.emit1("select", {mask, upd, zero}, {});
  int out = b.emit1(in.prim->name(), {table, local_ids, kept}, {{"axis", int64_t{axis}}},
                    plan.results[0], in.scope);
  c.bind_result(in.outputs[0], out, plan.results[0]);
}

// Vocab-parallel cross entropy picks the label's logit from logits split over the vocab.
void emit_take_along_sharded(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan) {
  LocalBuilder& b = c.builder;
  int axis = static_cast<int>(in.attrs.i("axis"));
  if (axis < 0) axis += c.g.aval(in.inputs[0]).ndim();
  int x = c.local(in.inputs[0], plan.operands[0]);
  int ids = c.local(in.inputs[1], plan.operands[1]);
  auto [local_ids, valid] = local_indices(c, ids, x, axis, plan.operands[0],
                                          c.g.aval(in.inputs[0]).shape[static_cast<size_t>(axis)]);
  int picked =
      b.emit1(in.prim->name(), {x, local_ids}, {{"axis", int64_t{axis}}}, std::nullopt, in.scope);
  int zero = scalar_const(b, 0, b.aval(picked).dtype);
  int out = b.emit1("select", {valid, picked, zero}, {}, plan.results[0], in.scope);
  c.bind_result(in.outputs[0], out, plan.results[0]);
}

void emit_scatter_along_sharded(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan) {
  LocalBuilder& b = c.builder;
  int axis = static_cast<int>(in.attrs.i("axis"));
  if (axis < 0) axis += c.g.aval(in.inputs[0]).ndim();
  std::vector<int> ins;
  for (size_t i = 0; i < 3; ++i) ins.push_back(c.local(in.inputs[i], plan.operands[i]));
  mask_uneven_reductions(c, in, plan, ins);  // padded updates add zero
  const int x = ins[0], ids = ins[1], upd = ins[2];
  auto [local_ids, valid] = local_indices(c, ids, x, axis, plan.operands[0],
                                          c.g.aval(in.inputs[0]).shape[static_cast<size_t>(axis)]);
  int zero = scalar_const(b, 0, b.aval(upd).dtype);
  int kept = b.emit1("select", {valid, upd, zero}, {});
  int out = b.emit1(in.prim->name(), {x, local_ids, kept}, {{"axis", int64_t{axis}}},
                    plan.results[0], in.scope);
  c.bind_result(in.outputs[0], out, plan.results[0]);
}

// A reversal along split dimensions: each device reverses its block, and the blocks trade
// places over the dimension's axes (block b of n goes to n-1-b, which mirrors every axis
// coordinate, whatever their order). An unevenly split dimension has blocks of different sizes
// that cannot trade places: it is gathered first.
void emit_mirror_sharded(PartitionContext& c, const ir::Instr& in, const InstrPlan& plan) {
  LocalBuilder& b = c.builder;
  const ir::Aval& ga = c.g.aval(in.inputs[0]);
  const auto dims = in.prim->partitioning().mirrored_dims({ga}, in.attrs);
  std::vector<PartitionSpec::Entry> entries;
  for (int d = 0; d < ga.ndim(); ++d) entries.push_back(plan.operands[0].spec()[d]);
  for (int d : dims) {
    auto& e = entries[static_cast<size_t>(d)];
    if (!e.empty() && ga.shape[static_cast<size_t>(d)] % axes_product(c.mesh, e) != 0) e.clear();
  }
  const NamedSharding s(c.mesh, PartitionSpec(entries), plan.operands[0].unreduced());
  int v = b.emit1(in.prim->name(), {c.local(in.inputs[0], s)}, in.attrs, s, in.scope);
  for (int d : dims) {
    const auto& axes = entries[static_cast<size_t>(d)];
    const int64_t n = axes.empty() ? 1 : axes_product(c.mesh, axes);
    if (n == 1) continue;
    ir::Ints perm;
    for (int64_t r = 0; r < n; ++r) perm.insert(perm.end(), {r, n - 1 - r});
    v = b.emit1("ppermute", {v},
                {{"axes", ir::Strings(axes.begin(), axes.end())}, {"perm", perm}, {"group", n}}, s,
                in.scope);
  }
  c.bind_result(in.outputs[0], v, s);
}

}  // namespace partix::spmd

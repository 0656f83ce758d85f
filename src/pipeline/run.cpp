// The schedule as one SPMD loop over its ticks, inside shard_map: each device reads its row of
// the schedule's tables, runs its forward and backward half under conds whose predicate
// varies over the stage axis only (devices of different stages run different work; collectives
// over other axes, tensor parallelism's, run inside), and the activations and cotangents move
// one device on and one back by ppermute after each half.
#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "core/errors.h"
#include "partix/control.h"
#include "partix/ops.h"
#include "partix/pipeline.h"
#include "partix/transforms.h"

namespace partix::pipeline {

namespace {

// A [ticks, devices] table as an int32 constant.
Array constant_table(const std::vector<std::vector<int32_t>>& t) {
  std::vector<int32_t> flat;
  for (const auto& row : t) flat.insert(flat.end(), row.begin(), row.end());
  return from_vector(flat, {static_cast<int64_t>(t.size()), static_cast<int64_t>(t.at(0).size())});
}

// table[tick, device] as an int32 scalar.
Array lookup(const Array& table, const Array& tick, const Array& device) {
  return reshape(dynamic_slice(table, {tick, device}, {1, 1}), {});
}

// Slot `i` of a buffer [slots, ...] without its leading axis.
Array read_slot(const Array& buf, const Array& i) {
  Shape s = buf.shape();
  s.erase(s.begin());
  return reshape(dynamic_slice_in_dim(buf, i, 1, 0), s);
}

Array write_slot(const Array& buf, const Array& value, const Array& i) {
  return dynamic_update_slice_in_dim(buf, expand_dims(value, 0), i, 0);
}

// Chunk v of a leaf holding V chunks along its first axis.
Array chunk_of(const Array& leaf, const Array& v, int64_t V) {
  if (V == 1) return leaf;  // the device's only chunk: no copy of its weights per half
  const int64_t n = leaf.shape().at(0) / V;
  return dynamic_slice_in_dim(leaf, v * static_cast<double>(n), n, 0);
}

// Gradients of half-precision parameters add up in f32 over the microbatches.
DType accumulation_dtype(DType d) { return d == DType::BF16 || d == DType::F16 ? DType::F32 : d; }

}  // namespace

Result run(const Schedule& sc, const std::string& axis, const std::vector<std::string>& batch_axes,
           const Params& chunked_in, const Params& shared_in, const ShapeDtypeStruct& activation,
           const StageFn& stage) {
  constexpr std::string_view api = "pipeline.run";
  const int64_t S = sc.stages, V = sc.virtual_stages, K = sc.chunks();
  detail::check(axis_size(axis) == S, api, "the schedule has {} stages but axis '{}' has {} devices",
                S, axis, axis_size(axis));
  for (const auto& [name, leaf] : chunked_in) {
    if (!(leaf.ndim() >= 1 && leaf.shape()[0] % V == 0)) {
      detail::fail(api, "'{}' of shape {} does not hold {} chunks along its first axis", name,
                   shape_to_string(leaf.shape()), V);
    }
  }
  const Array device = astype(axis_index(axis), DType::I32);
  const Array fwd_chunk = constant_table(sc.fwd_chunk), fwd_mb = constant_table(sc.fwd_mb),
              fwd_in = constant_table(sc.fwd_in), fwd_recv = constant_table(sc.fwd_recv),
              bwd_chunk = constant_table(sc.bwd_chunk), bwd_mb = constant_table(sc.bwd_mb),
              bwd_in = constant_table(sc.bwd_in), bwd_co = constant_table(sc.bwd_co),
              bwd_recv = constant_table(sc.bwd_recv);
  std::vector<std::pair<int, int>> next, prev;
  for (int i = 0; i < static_cast<int>(S); ++i) {
    next.push_back({i, static_cast<int>((i + 1) % S)});
    prev.push_back({i, static_cast<int>((i + S - 1) % S)});
  }
  Shape in_shape = activation.shape, co_shape = activation.shape;
  in_shape.insert(in_shape.begin(), sc.input_slots + 1);
  co_shape.insert(co_shape.begin(), sc.cotangent_slots + 1);

  std::vector<std::string> vary_names{axis};
  vary_names.insert(vary_names.end(), batch_axes.begin(), batch_axes.end());
  auto vary = [&](const Array& x) { return pvary(x, Axes(vary_names)); };
  // The parameters as values varying over the stage and batch axes, made once for the whole
  // loop: widened inside each backward half (to be differentiated there), a parameter that
  // does not vary over some of those axes was copied on every half.
  Params chunked, shared;
  for (const auto& [n, x] : chunked_in) chunked.emplace(n, vary(x));
  for (const auto& [n, x] : shared_in) shared.emplace(n, vary(x));

  // The loop's carry: input buffer, cotangent buffer, loss, gradients (chunked, then shared).
  // Each starts varying over the axes it will vary over (a gradient as its parameter, and over
  // the stage and batch axes), so that the body is traced once with its final types: a carry
  // widened only after a first trace would give that trace narrower types than the collectives
  // in the stages' branches need.
  Params gc0, gs0;
  auto zero_grad = [&](const Array& x) {
    return vary(astype(x, accumulation_dtype(x.dtype())) * 0.0);  // x's varying axes, and more
  };
  for (const auto& [n, x] : chunked) gc0.emplace(n, zero_grad(x));
  for (const auto& [n, x] : shared) gs0.emplace(n, zero_grad(x));
  using Tuple = std::tuple<Array, Array, Array, Params, Params>;
  const Tuple init{vary(zeros(in_shape, activation.dtype)), vary(zeros(co_shape, activation.dtype)),
                   vary(zeros({}, DType::F32)), gc0, gs0};
  const Array zero_act = zeros(activation.shape, activation.dtype);
  auto chunk_params = [&](const Array& k) {
    const Array v = floor_divide(k, static_cast<double>(S));
    Params p;
    for (const auto& [n, x] : chunked) p.emplace(n, chunk_of(x, v, V));
    return p;
  };

  // The loop is named after its schedule in the program's text and in traces.
  NamedScope loop_scope(fmt::format("pipeline_{}_S{}_M{}{}", schedule_name(sc.kind), S,
                                    sc.microbatches, V > 1 ? fmt::format("_V{}", V) : ""));
  Tuple out = fori_loop(0, sc.ticks, [&](const Array& t, const Tuple& c) -> Tuple {
    auto [inputs, cotangents, loss, gc, gs] = c;
    // Forward half.
    const Array fk = lookup(fwd_chunk, t, device), fm = lookup(fwd_mb, t, device);
    const Array x_f = read_slot(inputs, lookup(fwd_in, t, device));
    // The halves are named scopes: a trace shows each device's forward and backward halves
    // (a cond whose untaken branch costs nothing) and, between them, its waits in ppermute.
    std::optional<NamedScope> half(std::in_place, "forward_half");
    auto fwd = cond(
        fk >= 0.0,
        [&](const std::vector<Array>& ops) {
          NamedScope scope("forward");
          StageOut r = stage(chunk_params(ops[0]), shared, ops[2], ops[0], ops[1]);
          return std::vector<Array>{r.out, astype(r.loss, DType::F32)};
        },
        [&](const std::vector<Array>&) { return std::vector<Array>{zero_act, zeros({}, DType::F32)}; },
        std::vector<Array>{fk, fm, x_f});
    half.reset();
    loss = loss + fwd[1];
    inputs = write_slot(inputs, ppermute(fwd[0], axis, next), lookup(fwd_recv, t, device));

    // Backward half: the gradient of loss + <out, cotangent> with respect to the chunk's
    // parameters, the shared ones and the input, the forward recomputed from the input.
    const Array bk = lookup(bwd_chunk, t, device), bm = lookup(bwd_mb, t, device);
    const Array x_b = read_slot(inputs, lookup(bwd_in, t, device));
    const Array dy = read_slot(cotangents, lookup(bwd_co, t, device));
    std::vector<Array> leaves_in;
    for (const auto& [n, g] : gc) leaves_in.push_back(g);
    for (const auto& [n, g] : gs) leaves_in.push_back(g);
    half.emplace("backward_half");
    auto bwd = cond(
        bk >= 0.0,
        [&](const std::vector<Array>& ops) {
          NamedScope scope("backward");
          const Array& k = ops[0];
          const Array& m = ops[1];
          const Params cp = chunk_params(k);
          // Differentiated as values varying over the stage and batch axes: each device's
          // gradient is its own over those axes, and the caller sums it (the stage function's
          // own collectives, over other axes, transpose inside).
          std::vector<Array> leaves;
          for (const auto& [n, x] : cp) leaves.push_back(vary(x));  // already varying: no op
          for (const auto& [n, x] : shared) leaves.push_back(vary(x));
          leaves.push_back(vary(ops[2]));
          const size_t ns = shared.size();
          detail::GradOutput g = detail::grad_engine(
              leaves, std::vector<bool>(leaves.size(), true), [&](const std::vector<Array>& l) {
                Params cpl, spl;
                size_t i = 0;
                for (const auto& [n, x] : cp) cpl.emplace(n, l[i++]);
                for (const auto& [n, x] : shared) spl.emplace(n, l[i++]);
                StageOut r = stage(cpl, spl, l[i], k, m);
                // The last chunk's output goes nowhere: its cotangent is zero.
                const Array last = equal(k, static_cast<double>(K - 1));
                return astype(r.loss, DType::F32) +
                       sum(astype(r.out * where(last, 0.0, ops[3]), DType::F32));
              });
          std::vector<Array> res;
          const Array v = floor_divide(k, static_cast<double>(S));
          size_t i = 0, j = 4;
          for (const auto& [n, x] : chunked) {
            const Array& acc = ops[j++];
            if (V == 1) {
              res.push_back(acc + astype(g.grads[i++], acc.dtype()));
              continue;
            }
            const int64_t len = x.shape()[0] / V;
            const Array start = v * static_cast<double>(len);
            res.push_back(dynamic_update_slice_in_dim(
                acc, dynamic_slice_in_dim(acc, start, len, 0) + astype(g.grads[i++], acc.dtype()),
                start, 0));
          }
          for (size_t s = 0; s < ns; ++s, ++j) res.push_back(ops[j] + astype(g.grads[i++], ops[j].dtype()));
          res.push_back(astype(g.grads[i], activation.dtype));
          return res;
        },
        [&](const std::vector<Array>& ops) {
          std::vector<Array> res(ops.begin() + 4, ops.end());
          res.push_back(zero_act);
          return res;
        },
        [&] {
          std::vector<Array> ops{bk, bm, x_b, dy};
          ops.insert(ops.end(), leaves_in.begin(), leaves_in.end());
          return ops;
        }());
    half.reset();
    size_t i = 0;
    for (auto& [n, g] : gc) g = bwd[i++];
    for (auto& [n, g] : gs) g = bwd[i++];
    cotangents = write_slot(cotangents, ppermute(bwd[i], axis, prev), lookup(bwd_recv, t, device));
    return Tuple{inputs, cotangents, loss, gc, gs};
  }, init);
  Params gc = std::get<3>(out), gs = std::get<4>(out);
  for (auto& [n, g] : gc) g = astype(g, chunked.at(n).dtype());
  for (auto& [n, g] : gs) g = astype(g, shared.at(n).dtype());
  return Result{std::get<2>(out), gc, gs};
}

}  // namespace partix::pipeline

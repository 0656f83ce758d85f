// The schedule as one SPMD loop over its ticks, inside shard_map: each device reads its row of
// the schedule's tables, runs its forward and backward half under conds whose predicate
// varies over the stage axis only (devices of different stages run different work; collectives
// over other axes, tensor parallelism's, run inside), and the activations and cotangents move
// one device on and one back by ppermute after each half.
#include <fmt/format.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "partix/control.h"
#include "partix/ops.h"
#include "partix/pipeline.h"
#include "partix/transforms.h"
#include "trace/loop_carries.h"

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

using Carry = std::tuple<Array, Array, Array, Params, Params>;

// One run of the schedule: what every tick reads (the schedule's tables, the ring's
// permutations, the parameters as varying values) and the two halves of a tick.
class Loop {
 public:
  Loop(const Schedule& sc, const std::string& axis, const std::vector<std::string>& batch_axes,
       const Params& chunked_in, const Params& shared_in, const ShapeDtypeStruct& activation,
       const StageFn& stage)
      : sc_(sc),
        axis_(axis),
        S_(sc.stages),
        V_(sc.virtual_stages),
        K_(sc.chunks()),
        activation_(activation),
        stage_(stage),
        device_(astype(axis_index(axis), DType::I32)),
        fwd_chunk_(constant_table(sc.fwd_chunk)),
        fwd_mb_(constant_table(sc.fwd_mb)),
        fwd_in_(constant_table(sc.fwd_in)),
        fwd_recv_(constant_table(sc.fwd_recv)),
        bwd_chunk_(constant_table(sc.bwd_chunk)),
        bwd_mb_(constant_table(sc.bwd_mb)),
        bwd_in_(constant_table(sc.bwd_in)),
        bwd_co_(constant_table(sc.bwd_co)),
        bwd_recv_(constant_table(sc.bwd_recv)),
        zero_act_(zeros(activation.shape, activation.dtype)) {
    for (int i = 0; i < static_cast<int>(S_); ++i) {
      next_.push_back({i, static_cast<int>((i + 1) % S_)});
      prev_.push_back({i, static_cast<int>((i + S_ - 1) % S_)});
    }
    vary_names_.push_back(axis);
    vary_names_.insert(vary_names_.end(), batch_axes.begin(), batch_axes.end());
    // The parameters as values varying over the stage and batch axes, made once for the whole
    // loop: widened inside each backward half (to be differentiated there), a parameter that
    // does not vary over some of those axes was copied on every half.
    for (const auto& [n, x] : chunked_in) chunked_.emplace(n, vary(x));
    for (const auto& [n, x] : shared_in) shared_.emplace(n, vary(x));
  }

  // The loop's carry: input buffer, cotangent buffer, loss, gradients (chunked, then shared).
  // Each starts varying over the axes it will vary over (a gradient as its parameter, and over
  // the stage and batch axes), so that the body is traced once with its final types: a carry
  // widened only after a first trace would give that trace narrower types than the collectives
  // in the stages' branches need.
  Carry initial() const {
    Shape in_shape = activation_.shape, co_shape = activation_.shape;
    in_shape.insert(in_shape.begin(), sc_.input_slots + 1);
    co_shape.insert(co_shape.begin(), sc_.cotangent_slots + 1);
    Params gc0, gs0;
    auto zero_grad = [&](const Array& x) {
      return vary(astype(x, accumulation_dtype(x.dtype())) * 0.0);  // x's varying axes, and more
    };
    for (const auto& [n, x] : chunked_) gc0.emplace(n, zero_grad(x));
    for (const auto& [n, x] : shared_) gs0.emplace(n, zero_grad(x));
    return Carry{vary(zeros(in_shape, activation_.dtype)), vary(zeros(co_shape, activation_.dtype)),
                 vary(zeros({}, DType::F32)), gc0, gs0};
  }

  Carry tick(const Array& t, const Carry& c) const {
    auto [inputs, cotangents, loss, gc, gs] = c;
    forward_half(t, inputs, loss);
    backward_half(t, inputs, cotangents, gc, gs);
    return Carry{inputs, cotangents, loss, gc, gs};
  }

  // The gradients in their parameters' dtypes.
  Result result(const Carry& out) const {
    Params gc = std::get<3>(out), gs = std::get<4>(out);
    for (auto& [n, g] : gc) g = astype(g, chunked_.at(n).dtype());
    for (auto& [n, g] : gs) g = astype(g, shared_.at(n).dtype());
    return Result{std::get<2>(out), gc, gs};
  }

 private:
  Array vary(const Array& x) const { return pvary(x, Axes(vary_names_)); }
  Array at(const Array& table, const Array& t) const { return lookup(table, t, device_); }

  Params chunk_params(const Array& k) const {
    const Array v = floor_divide(k, static_cast<double>(S_));
    Params p;
    for (const auto& [n, x] : chunked_) p.emplace(n, chunk_of(x, v, V_));
    return p;
  }

  // The forward half: this device's scheduled chunk on its input slot; the output moves one
  // device on into the slot the table names.
  void forward_half(const Array& t, Array& inputs, Array& loss) const {
    const Array fk = at(fwd_chunk_, t), fm = at(fwd_mb_, t);
    const Array x = read_slot(inputs, at(fwd_in_, t));
    // The halves are named scopes: a trace shows each device's forward and backward halves
    // (a cond whose untaken branch costs nothing) and, between them, its waits in ppermute.
    std::vector<Array> fwd;
    {
      NamedScope half("forward_half");
      fwd = cond(
          fk >= 0.0,
          [&](const std::vector<Array>& ops) {
            NamedScope scope("forward");
            StageOut r = stage_(chunk_params(ops[0]), shared_, ops[2], ops[0], ops[1]);
            return std::vector<Array>{r.out, astype(r.loss, DType::F32)};
          },
          [&](const std::vector<Array>&) {
            return std::vector<Array>{zero_act_, zeros({}, DType::F32)};
          },
          std::vector<Array>{fk, fm, x});
    }
    loss = loss + fwd[1];
    inputs = write_slot(inputs, ppermute(fwd[0], axis_, next_), at(fwd_recv_, t));
  }

  // The backward half: the gradient of loss + <out, cotangent> with respect to the chunk's
  // parameters, the shared ones and the input, the forward recomputed from the input; the
  // input's cotangent moves one device back.
  void backward_half(const Array& t, const Array& inputs, Array& cotangents, Params& gc,
                     Params& gs) const {
    std::vector<Array> ops{at(bwd_chunk_, t), at(bwd_mb_, t), read_slot(inputs, at(bwd_in_, t)),
                           read_slot(cotangents, at(bwd_co_, t))};
    for (const auto& [n, g] : gc) ops.push_back(g);
    for (const auto& [n, g] : gs) ops.push_back(g);
    std::vector<Array> bwd;
    {
      NamedScope half("backward_half");
      bwd = cond(
          ops[0] >= 0.0, [&](const std::vector<Array>& o) { return backward(o); },
          [&](const std::vector<Array>& o) {
            std::vector<Array> res(o.begin() + 4, o.end());
            res.push_back(zero_act_);
            return res;
          },
          ops);
    }
    size_t i = 0;
    for (auto& [n, g] : gc) g = bwd[i++];
    for (auto& [n, g] : gs) g = bwd[i++];
    cotangents = write_slot(cotangents, ppermute(bwd[i], axis_, prev_), at(bwd_recv_, t));
  }

  // The backward branch on ops = [chunk, microbatch, input, cotangent, accumulated gradients
  // (chunked, then shared)...]: the gradients with this microbatch's added, then the input's
  // cotangent.
  std::vector<Array> backward(const std::vector<Array>& ops) const {
    NamedScope scope("backward");
    const Array& k = ops[0];
    const Array& m = ops[1];
    const Params cp = chunk_params(k);
    // Differentiated as values varying over the stage and batch axes: each device's
    // gradient is its own over those axes, and the caller sums it (the stage function's
    // own collectives, over other axes, transpose inside).
    std::vector<Array> leaves;
    for (const auto& [n, x] : cp) leaves.push_back(vary(x));  // already varying: no op
    for (const auto& [n, x] : shared_) leaves.push_back(vary(x));
    leaves.push_back(vary(ops[2]));
    detail::GradOutput g = detail::grad_engine(
        leaves, std::vector<bool>(leaves.size(), true), [&](const std::vector<Array>& l) {
          Params cpl, spl;
          size_t i = 0;
          for (const auto& [n, x] : cp) cpl.emplace(n, l[i++]);
          for (const auto& [n, x] : shared_) spl.emplace(n, l[i++]);
          StageOut r = stage_(cpl, spl, l[i], k, m);
          // The last chunk's output goes nowhere: its cotangent is zero.
          const Array last = equal(k, static_cast<double>(K_ - 1));
          return astype(r.loss, DType::F32) +
                 sum(astype(r.out * where(last, 0.0, ops[3]), DType::F32));
        });
    std::vector<Array> res;
    const Array v = floor_divide(k, static_cast<double>(S_));
    size_t i = 0, j = 4;
    for (const auto& [n, x] : chunked_) {
      const Array& acc = ops[j++];
      if (V_ == 1) {
        res.push_back(acc + astype(g.grads[i++], acc.dtype()));
        continue;
      }
      const int64_t len = x.shape()[0] / V_;
      const Array start = v * static_cast<double>(len);
      res.push_back(dynamic_update_slice_in_dim(
          acc, dynamic_slice_in_dim(acc, start, len, 0) + astype(g.grads[i++], acc.dtype()), start,
          0));
    }
    for (size_t s = 0; s < shared_.size(); ++s, ++j) {
      res.push_back(ops[j] + astype(g.grads[i++], ops[j].dtype()));
    }
    res.push_back(astype(g.grads[i], activation_.dtype));
    return res;
  }

  const Schedule& sc_;
  const std::string& axis_;
  const int64_t S_, V_, K_;
  const ShapeDtypeStruct& activation_;
  const StageFn& stage_;
  const Array device_;
  const Array fwd_chunk_, fwd_mb_, fwd_in_, fwd_recv_;
  const Array bwd_chunk_, bwd_mb_, bwd_in_, bwd_co_, bwd_recv_;
  const Array zero_act_;
  std::vector<std::pair<int, int>> next_, prev_;  // the ring, one device on and one back
  std::vector<std::string> vary_names_;           // the stage axis and the batch axes
  Params chunked_, shared_;
};

}  // namespace

Result run(const Schedule& sc, const std::string& axis, const std::vector<std::string>& batch_axes,
           const Params& chunked_in, const Params& shared_in, const ShapeDtypeStruct& activation,
           const StageFn& stage) {
  constexpr std::string_view api = "pipeline.run";
  // The schedule's loop and branches are the library's: their carries (activation slots,
  // gradient accumulators, the loss) start invariant and vary as the ticks fill them.
  const detail::LooseCarriesScope loose;
  const int64_t S = sc.stages, V = sc.virtual_stages;
  detail::check(axis_size(axis) == S, api,
                "the schedule has {} stages but axis '{}' has {} devices", S, axis,
                axis_size(axis));
  for (const auto& [name, leaf] : chunked_in) {
    if (!(leaf.ndim() >= 1 && leaf.shape()[0] % V == 0)) {
      detail::fail(api, "'{}' of shape {} does not hold {} chunks along its first axis", name,
                   shape_to_string(leaf.shape()), V);
    }
  }
  const Loop loop(sc, axis, batch_axes, chunked_in, shared_in, activation, stage);
  const Carry init = loop.initial();
  // The loop is named after its schedule in the program's text and in traces.
  NamedScope loop_scope(fmt::format("pipeline_{}_S{}_M{}{}", schedule_name(sc.kind), S,
                                    sc.microbatches, V > 1 ? fmt::format("_V{}", V) : ""));
  const Carry out = fori_loop(
      0, sc.ticks, [&](const Array& t, const Carry& c) { return loop.tick(t, c); }, init);
  return loop.result(out);
}

}  // namespace partix::pipeline

// GPT-2 under pipeline parallelism: the stacked blocks split over the mesh's 'stage' axis, the
// step's loss and gradients computed by a pipeline schedule inside one shard_map, with data
// parallelism over 'data' and Megatron tensor parallelism over 'model' written out manually.
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "models/gpt2/block.h"
#include "models/gpt2/layout.h"
#include "partix/control.h"
#include "partix/models/gpt2.h"
#include "partix/ops.h"
#include "partix/pipeline.h"
#include "partix/random.h"
#include "partix/transforms.h"

namespace partix::models::gpt2 {

namespace {

constexpr std::string_view kApi = "gpt2.pipeline";

// Manual-mode helpers over the optional tensor-parallel axis `tp` (empty: none).
struct Axes3 {
  std::string stage = "stage", data, tp;
  int64_t tp_size = 1;
};

// Token embeddings from a table split over the vocabulary on `tp` (each device looks up the ids
// its rows hold; the rest add zeros).
Array embed(const Array& wte, const Array& ids, const Axes3& ax) {
  if (ax.tp.empty()) return take(wte, ids, 0);
  const int64_t rows = wte.shape()[0];
  const Array local = ids - astype(axis_index(ax.tp), ids.dtype()) * static_cast<double>(rows);
  const Array mine = logical_and(local >= 0.0, local < static_cast<double>(rows));
  const Array e = take(wte, where(mine, local, 0.0), 0);
  return psum(where(expand_dims(mine, -1), e, 0.0), ax.tp);
}

// Summed next-token cross entropy of x [b, T, C] against targets, logits over the tied
// embedding split over the vocabulary on `tp` (padding rows past the vocabulary masked).
Array summed_cross_entropy(const Array& x, const Array& wte, const Array& targets, const Config& c,
                           const Axes3& ax) {
  Array logits = astype(einsum("btc,vc->btv", {x, wte}), DType::F32);
  if (ax.tp.empty()) return sum(cross_entropy(logits, targets));
  const int64_t rows = wte.shape()[0];
  const Array lo = astype(axis_index(ax.tp), DType::I32) * static_cast<double>(rows);
  const Array col = iota({1, 1, rows}, 2, DType::I32) + lo;
  logits = where(col < static_cast<double>(c.vocab_size), logits, -1e30);
  const Array mx = stop_gradient(pmax(max(logits, {-1}, true), ax.tp));
  const Array lse = log(psum(sum(exp(logits - mx), {-1}, true), ax.tp)) + mx;  // [b, T, 1]
  const Array hit = equal(col, expand_dims(astype(targets, DType::I32), -1));
  const Array target_logit = psum(sum(where(hit, logits, 0.0), {-1}, true), ax.tp);
  return sum(lse - target_logit);
}

PartitionSpec spec_of(const nn::ParamSpec& s, const nn::LogicalRules& rules, const Mesh& mesh) {
  return nn::logical_to_spec(s.axes, rules, mesh);
}

// The mesh a pipelined GPT-2 runs on: an Auto mesh with 'stage' and optionally 'data' and
// 'model'. A 'model' axis of one device still types the weights split over it as varying over
// it: the same manual code runs, its sums over one device.
Axes3 pipeline_axes(const Mesh& mesh) {
  if (!(mesh.has_axis("stage"))) {
    detail::fail(kApi, "the mesh {} has no 'stage' axis", mesh.to_string());
  }
  for (const std::string& a : mesh.axis_names()) {
    if (!(a == "stage" || a == "data" || a == "model")) {
      detail::fail(kApi,
                   "the mesh {} has axis '{}'; a pipelined GPT-2 takes 'stage', 'data' and 'model'",
                   mesh.to_string(), a);
    }
  }
  for (AxisType t : mesh.axis_types()) {
    if (t != AxisType::Auto) {
      detail::fail(kApi, "the pipeline runs on an Auto mesh, not {}", mesh.to_string());
    }
  }
  Axes3 ax;
  if (mesh.has_axis("data")) ax.data = "data";
  if (mesh.has_axis("model")) {
    ax.tp = "model";
    ax.tp_size = mesh.axis_size("model");
  }
  return ax;
}

// FSDP: the dimension of each parameter split over 'data' (-1: none). Such a parameter is
// gathered where it is used (a layer at a time) and its gradient comes back summed over
// 'data' and sliced by the gather's transpose. The stacked parameters must split their layers
// over 'stage'.
std::map<std::string, int> data_dims(const nn::ParamSpecs& specs, const nn::LogicalRules& rules,
                                     const Mesh& mesh) {
  std::map<std::string, int> data_dim;
  for (const auto& [name, s] : specs) {
    const PartitionSpec spec = spec_of(s, rules, mesh);
    data_dim[name] = -1;
    for (int d = 0; d < spec.size(); ++d) {
      for (const std::string& a : spec[d]) {
        if (a == "data") data_dim[name] = d;
      }
    }
    if (s.axes.at(0) == "layers" && spec[0] != PartitionSpec::Entry{"stage"}) {
      detail::fail(kApi,
                   "the stacked parameter '{}' is {}: the rules must split 'layers' over 'stage'",
                   name, spec.to_string());
    }
  }
  return data_dim;
}

// Interleaved: device d holds chunks d, S + d, ...: its contiguous block of the stored layers
// must be those, so the layers are permuted on the way in (`to`) and back on the way out
// (`from`). Empty for one chunk per device.
void layer_permutations(int64_t S, int64_t V, int64_t L, std::vector<int32_t>& to,
                        std::vector<int32_t>& from) {
  if (V == 1) return;
  const int64_t Lc = L / (S * V);
  to.resize(static_cast<size_t>(L));
  from.resize(static_cast<size_t>(L));
  for (int64_t d = 0; d < S; ++d) {
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t j = 0; j < Lc; ++j) {
        const int64_t pos = (d * V + v) * Lc + j, layer = (v * S + d) * Lc + j;
        to[static_cast<size_t>(pos)] = static_cast<int32_t>(layer);
        from[static_cast<size_t>(layer)] = static_cast<int32_t>(pos);
      }
    }
  }
}

// The leaves into shard_map and their specs. shard_map takes equal blocks: a dimension split
// unevenly is padded, and the padding sliced off the gradients again (unpad). Layers split
// evenly (check_layers_split); padded vocabulary rows are masked out of the logits and never
// looked up; padded MLP columns add zeros.
struct ShardMapLeaves {
  const Mesh& mesh;
  std::vector<Array> leaves;
  std::vector<PartitionSpec> specs;

  void add(Array x, const PartitionSpec& spec) {
    Shape high(static_cast<size_t>(x.ndim()), 0);
    bool padded = false;
    for (int d = 0; d < x.ndim(); ++d) {
      int64_t k = 1;
      for (const std::string& a : spec[d]) k *= mesh.axis_size(a);
      const int64_t n = x.shape()[static_cast<size_t>(d)];
      high[static_cast<size_t>(d)] = (n + k - 1) / k * k - n;
      padded = padded || high[static_cast<size_t>(d)] != 0;
    }
    if (padded) x = pad(x, Shape(static_cast<size_t>(x.ndim()), 0), high);
    leaves.push_back(x);
    specs.push_back(spec);
  }
  static Array unpad(const Array& g, const Shape& shape) {
    return g.shape() == shape ? g : slice(g, Shape(shape.size(), 0), shape);
  }
};

// What the stage function of one device reads: its rows of the batch split into microbatches,
// the dropout key, and where each parameter is split over 'data'.
struct StageContext {
  const Config& c;
  const ForwardOptions& o;
  const Axes3& ax;
  const std::map<std::string, int>& data_dim;
  int64_t K, T, b, Lc;     // chunks, sequence, local rows per microbatch, layers per chunk
  double scale;            // 1 / (the global batch's tokens)
  Array ids_m, targets_m;  // [M, b, T]
  std::optional<Array> data_key;

  // A parameter whole along 'data' for use; `shift`: leading dimensions sliced off (a layer of
  // a stacked parameter).
  Array gathered(const std::string& n, const Array& x, int shift) const {
    const int d = data_dim.at(n);
    return d < 0 ? x : all_gather(x, "data", d - shift, /*tiled=*/true);
  }
  Array shared(const Params& sp, const std::string& n) const { return gathered(n, sp.at(n), 0); }

  // The stage function: chunk k's layers on x for microbatch m; chunk 0 embeds the tokens
  // first, the last chunk adds the head's loss.
  pipeline::StageOut operator()(const Params& cp, const Params& sp, const Array& x, const Array& k,
                                const Array& m) const {
    std::optional<Array> mkey;
    if (data_key) mkey = random::fold_in(*data_key, m);
    Array h = cond(
        equal(k, 0.0), [&](const Array&) { return embedded(sp, m, mkey); },
        [&](const Array& xx) { return xx; }, x);
    h = layers(cp, h, k, mkey);
    Array loss = cond(
        equal(k, static_cast<double>(K - 1)), [&](const Array& hh) { return head_loss(sp, hh, m); },
        [&](const Array&) { return zeros({}, DType::F32); }, h);
    return {h, loss};
  }

 private:
  Array embedded(const Params& sp, const Array& m, const std::optional<Array>& mkey) const {
    NamedScope scope("embed");
    const Array mb_ids = reshape(dynamic_slice_in_dim(ids_m, m, 1, 0), {b, T});
    Array e = embed(shared(sp, "transformer.wte.weight"), mb_ids, ax) +
              slice_axis(shared(sp, "transformer.wpe.weight"), 0, 0, T);
    return astype(embed_dropout(e, c, mkey), c.dtype);
  }

  Array layers(const Params& cp, const Array& h, const Array& k,
               const std::optional<Array>& mkey) const {
    ForwardOptions bo;
    bo.remat = o.remat;
    auto layer = [&](const Array& hh, const Params& lp_in, const std::vector<Array>& lk) {
      Params lp;
      for (const auto& [n, w] : lp_in) lp.emplace(n, gathered(n, w, 1));
      return block(lp, std::string(kStackedPrefix), hh, c, bo, 0,
                   lk.empty() ? std::nullopt : std::optional<Array>(lk[0]), ax.tp);
    };
    return scan(
               [&](const Array& hh, const std::pair<Params, Array>& in) {
                 NamedScope scope("h");
                 const Array global = k * static_cast<double>(Lc) + in.second;
                 std::vector<Array> lk;
                 if (mkey) lk.push_back(random::fold_in(*mkey, global));
                 Array out =
                     o.remat ? checkpoint(layer)(hh, in.first, lk) : layer(hh, in.first, lk);
                 return std::pair{out, std::vector<Array>{}};
               },
               h, std::pair{cp, arange(Lc, DType::I32)})
        .first;
  }

  Array head_loss(const Params& sp, const Array& h, const Array& m) const {
    NamedScope scope("head");
    const Array mb_targets = reshape(dynamic_slice_in_dim(targets_m, m, 1, 0), {b, T});
    Array y = layer_norm(h, shared(sp, "transformer.ln_f.weight"),
                         shared(sp, "transformer.ln_f.bias"), c.layer_norm_epsilon);
    return summed_cross_entropy(y, shared(sp, "transformer.wte.weight"), mb_targets, c, ax) * scale;
  }
};

}  // namespace

std::pair<Array, Params> pipeline_value_and_grad(const Params& params, const Array& ids,
                                                 const Array& targets, const Config& c,
                                                 const ForwardOptions& o,
                                                 const PipelineOptions& po) {
  detail::check(o.mesh && o.rules, kApi, "needs the mesh and the logical rules in ForwardOptions");
  const Mesh& mesh = *o.mesh;
  const nn::LogicalRules& rules = *o.rules;
  const Axes3 ax = pipeline_axes(mesh);
  detail::check(is_stacked(params), kApi, "needs the parameters stacked over layers");
  check_params(kApi, params, c);
  const int64_t S = mesh.axis_size("stage");
  const int64_t D = mesh.has_axis("data") ? mesh.axis_size("data") : 1;
  const pipeline::Schedule sc =
      pipeline::make_schedule(po.schedule, S, po.microbatches, po.virtual_stages);
  const int64_t M = po.microbatches, V = po.virtual_stages, K = S * V, L = c.n_layer;
  const int64_t B = ids.shape().at(0), T = ids.shape().at(1);
  detail::check(B % (D * M) == 0, kApi,
                "the batch {} does not split into {} microbatches on each of {} data devices", B, M,
                D);
  check_layers_split(kApi, L, S, V);
  if (ax.tp_size > 1) {
    detail::check(c.n_head % ax.tp_size == 0, kApi, "{} heads do not split over {} model devices",
                  c.n_head, ax.tp_size);
  }
  const nn::ParamSpecs specs = param_specs(c, /*stacked=*/true);
  const std::map<std::string, int> data_dim = data_dims(specs, rules, mesh);

  // The leaves in and out of shard_map: stacked blocks (chunked), the rest (shared), ids,
  // targets, the dropout key.
  std::vector<std::string> chunk_names, shared_names;
  for (const auto& [name, s] : specs) {
    (s.axes.at(0) == "layers" ? chunk_names : shared_names).push_back(name);
  }
  std::vector<int32_t> to_pipeline, from_pipeline;
  layer_permutations(S, V, L, to_pipeline, from_pipeline);
  ShardMapLeaves in{mesh, {}, {}};
  for (const std::string& n : chunk_names) {
    Array x = params.at(n);
    if (V > 1) x = take(x, from_vector(to_pipeline, {L}), 0);
    in.add(x, spec_of(specs.at(n), rules, mesh));
  }
  for (const std::string& n : shared_names) in.add(params.at(n), spec_of(specs.at(n), rules, mesh));
  const PartitionSpec batch_spec = ax.data.empty() ? P() : P("data");
  in.leaves.push_back(ids);
  in.specs.push_back(batch_spec);
  in.leaves.push_back(targets);
  in.specs.push_back(batch_spec);
  const bool has_key = o.dropout_key.has_value() && c.dropout > 0;
  if (has_key) {
    in.leaves.push_back(*o.dropout_key);
    in.specs.push_back(P());
  }
  std::vector<PartitionSpec> out_specs{P()};  // loss
  for (const std::string& n : chunk_names) out_specs.push_back(spec_of(specs.at(n), rules, mesh));
  for (const std::string& n : shared_names) out_specs.push_back(spec_of(specs.at(n), rules, mesh));

  detail::ShardMapState state(mesh, in.specs, out_specs, /*check_vma=*/true);
  std::shared_ptr<void> proto;
  std::vector<Array> outs = state.call(
      in.leaves, std::vector<size_t>(in.leaves.size(), 1),
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        size_t i = 0;
        Params chunked, shared;
        for (const std::string& n : chunk_names) chunked.emplace(n, t[i++]);
        for (const std::string& n : shared_names) shared.emplace(n, t[i++]);
        const Array ids_l = t[i++], targets_l = t[i++];
        std::optional<Array> key;
        if (has_key) key = t[i++];
        const int64_t b = ids_l.shape()[0] / M;  // local rows per microbatch
        StageContext stage{c,
                           o,
                           ax,
                           data_dim,
                           K,
                           T,
                           b,
                           chunked.begin()->second.shape()[0] / V,  // layers per chunk (local)
                           1.0 / static_cast<double>(B * T),
                           reshape(ids_l, {M, b, T}),
                           reshape(targets_l, {M, b, T}),
                           std::nullopt};
        // Masks differ per microbatch and data device (each draws its own rows).
        if (key) {
          stage.data_key = ax.data.empty() ? *key : random::fold_in(*key, axis_index(ax.data));
        }
        const ShapeDtypeStruct act{{b, T, c.n_embd}, c.dtype};
        pipeline::Result r = pipeline::run(
            sc, "stage",
            ax.data.empty() ? std::vector<std::string>{} : std::vector<std::string>{ax.data},
            chunked, shared, act, stage);
        Axes over_all = ax.data.empty() ? Axes{"stage"} : Axes{"stage", "data"};
        std::vector<Array> res{psum(r.loss, over_all)};
        // Gradients of FSDP parameters are summed over 'data' already (the gathers' transposes).
        for (const std::string& n : chunk_names) {
          const Array& g = r.chunked_grads.at(n);
          res.push_back(ax.data.empty() || data_dim.at(n) >= 0 ? g : psum(g, ax.data));
        }
        for (const std::string& n : shared_names) {
          const Array& g = r.shared_grads.at(n);
          res.push_back(data_dim.at(n) >= 0 ? psum(g, "stage") : psum(g, over_all));
        }
        return res;
      },
      proto);
  Params grads;
  size_t i = 1;
  for (const std::string& n : chunk_names) {
    Array g = ShardMapLeaves::unpad(outs[i++], specs.at(n).shape);
    if (V > 1) g = take(g, from_vector(from_pipeline, {L}), 0);
    grads.emplace(n, g);
  }
  for (const std::string& n : shared_names) {
    grads.emplace(n, ShardMapLeaves::unpad(outs[i++], specs.at(n).shape));
  }
  return {outs[0], grads};
}

}  // namespace partix::models::gpt2

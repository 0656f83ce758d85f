// shard_map's VJP: a new shard_map whose body is the original body's VJP, with the collectives
// transposed by the varying-axes rules (a psum's transpose is a pvary and back).
#include "autodiff/vjp.h"
#include "core/errors.h"
#include "partix/ops.h"
#include "partix/transforms.h"
#include "trace/trace.h"

namespace partix::autodiff {

namespace {

// Cotangents with zeros in place of empty (zero) ones, for regions that need every input.
std::vector<Array> filled(const std::vector<Array>& cts, const std::vector<Array>& like) {
  std::vector<Array> out;
  for (size_t k = 0; k < cts.size(); ++k) {
    out.push_back(cts[k].valid() ? cts[k] : zeros_like(like[k]));
  }
  return out;
}

}  // namespace

std::vector<Array> shard_map_vjp(const prim::VjpArgs& a) {
  const Mesh& mesh = a.attrs.get<Mesh>("mesh");
  const auto& in_specs = a.attrs.get<ir::Specs>("in_specs");
  const auto& out_specs = a.attrs.get<ir::Specs>("out_specs");
  const ir::Program& body = *a.regions[0];
  const size_t n_in = a.primals.size(), n_out = a.outputs.size();
  const auto in_unreduced = ir::axis_sets(a.attrs, "in_unreduced", n_in);
  const auto in_reduced = ir::axis_sets(a.attrs, "in_reduced", n_in);
  std::vector<Array> cts = filled(a.cotangents, a.outputs);
  // Inputs: the primals (in their in_specs) and the cotangents (in the out_specs); outputs:
  // the primals' cotangents (in the in_specs).
  std::vector<PartitionSpec> specs(in_specs.begin(), in_specs.end());
  specs.insert(specs.end(), out_specs.begin(), out_specs.end());
  std::vector<PartitionSpec> grad_specs(in_specs.begin(), in_specs.end());
  // Nested in another map's body, the backward map runs on the mesh in context there; it is
  // manual over the axes the forward map was.
  const detail::TraceState* t = detail::current_trace();
  detail::ShardMapState sm(t && t->manual_mesh ? detail::manual_context(*t) : mesh, specs,
                           grad_specs, a.attrs.b_or("check_vma", true));
  if (a.attrs.has("manual_axes")) {
    const auto& axes = a.attrs.get<ir::Strings>("manual_axes");
    sm.set_manual_axes(std::set<std::string>(axes.begin(), axes.end()));
  }
  // The primals enter as they did (partial sums stay partial sums); a reduced input's
  // cotangent leaves unreduced: each device's own share, not summed (JAX's reduced -> unreduced
  // transpose).
  detail::ShardMapState::AxisSets unreduced_in(in_unreduced), reduced_in(in_reduced);
  unreduced_in.resize(n_in + n_out);
  reduced_in.resize(n_in + n_out);
  sm.set_unreduced(std::move(unreduced_in), in_reduced);
  sm.set_reduced(std::move(reduced_in), {});
  std::vector<Array> leaves = a.primals;
  leaves.insert(leaves.end(), cts.begin(), cts.end());
  std::vector<size_t> counts(leaves.size(), 1);
  std::shared_ptr<void> proto;
  std::vector<Array> grads = sm.call(
      leaves, counts,
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        std::vector<Array> primals(t.begin(), t.begin() + static_cast<long>(n_in));
        std::vector<Array> local_cts(t.begin() + static_cast<long>(n_in), t.end());
        // A result invariant over an axis its out_spec names is one value that every block
        // along that axis shows: its cotangent is the sum of those blocks' cotangents.
        for (size_t k = 0; k < local_cts.size(); ++k) {
          const auto& varying = body.info(body.results[k]).varying;
          std::vector<std::string> missing;
          for (const auto& ax : out_specs[k].axes()) {
            if (!varying.count(ax)) missing.push_back(ax);
          }
          if (!missing.empty()) local_cts[k] = psum(local_cts[k], Axes(missing));
        }
        Residuals saved;
        std::vector<Array> env = evaluate(body, primals, &saved, a.active);
        std::vector<Array> g = backward(body, env, local_cts, &saved, a.active);
        for (size_t i = 0; i < n_in; ++i) {
          if (!g[i].valid()) g[i] = zeros_like(primals[i]);
          // An input entered as partial sums over U is a function of their sum: its blocks'
          // cotangents agree, and the map returns that one value (replicated over U; JAX's
          // reduced). The mean states it in types (each block's, where they agree exactly).
          if (!in_unreduced[i].empty()) {
            std::vector<std::string> u;
            for (const auto& ax : in_unreduced[i]) {
              if (detail::vary_of(g[i]).count(ax)) u.push_back(ax);
            }
            if (!u.empty()) g[i] = pmean(g[i], Axes(u));
          }
          // A reduced input's cotangent leaves as partial sums over its reduced axes R: the
          // first device of each group holds the (already summed) cotangent, the others zeros.
          // (Its sum is the cotangent, as JAX's unreduced one; JAX also skips the sum itself.)
          if (!in_reduced[i].empty()) {
            const Axes r(std::vector<std::string>(in_reduced[i].begin(), in_reduced[i].end()));
            g[i] = where(equal(axis_index(r), 0.0), pvary(g[i], r), 0.0);
          }
          // A cotangent must vary over at least the axes its input's spec names.
          auto axes = in_specs[i].axes();
          if (!axes.empty()) g[i] = pvary(g[i], Axes(std::vector<std::string>(axes)));
        }
        return g;
      },
      proto);
  (void)n_out;
  std::vector<Array> out;
  for (size_t i = 0; i < n_in; ++i) {
    out.push_back(is_floating(a.primals[i].dtype()) ? grads[i] : Array());
  }
  return out;
}

}  // namespace partix::autodiff

// Values and gradients of shard_map programs against JAX (tools/golden/shard_map_grads.py):
// every collective in its varying and invariant forms, and results invariant over an axis
// that out_specs names. The programs here and in the script share names; the loss is
// sum_k sum(out_k * w_k) with per-element weights, so a transpose that sums or slices the
// wrong blocks changes the gradient.
//
// Ported from the collective autodiff checks of JAX's tests/shard_map_test.py
// (ShardMapTest.test_all_gather_invariant_basic, test_all_to_all_grad,
// test_psum_transpose_non_zero_cts, test_fanout_specs_transpose_to_psum,
// test_fanin_psum_transposes_to_fanout, test_psum_with_implicit_fanout_self_transposes,
// ShardMapSystematicTest.test_grads) extended to every collective.
#include <functional>
#include <map>
#include <set>

#include "jax_port/jax_port_util.h"

using namespace partix;

namespace {

using Body = std::function<std::vector<Array>(const std::vector<Array>&)>;

const std::vector<std::pair<int, int>> kShift4 = {{0, 1}, {1, 2}, {2, 3}, {3, 0}};

Array f32_index(Axes axes) { return astype(axis_index(std::move(axes)), DType::F32); }

// The partix side of each program of the script, by name. JAX's default all_gather varies over
// its axes; partix's is invariant, so JAX's varying form is pvary(all_gather(...)).
const std::map<std::string, Body>& bodies() {
  static const std::map<std::string, Body> m = {
      {"psum_varying", [](auto a) { return std::vector{psum(sin(a[0]), "i")}; }},
      {"psum_varying_out_names_axis", [](auto a) { return std::vector{psum(sin(a[0]), "i")}; }},
      {"psum_invariant", [](auto a) { return std::vector{psum(a[0] * a[0], "i")}; }},
      {"psum_invariant_out_names_axis", [](auto a) { return std::vector{psum(a[0] * a[0], "i")}; }},
      {"psum_two_axes",
       [](auto a) {
         return std::vector{psum(a[0] * a[0], Axes{"i", "j"})};
       }},
      {"psum_one_of_two_axes", [](auto a) { return std::vector{psum(exp(a[0]), "i")}; }},
      {"psum_one_of_two_axes_out_names_both",
       [](auto a) { return std::vector{psum(exp(a[0]), "i")}; }},
      {"psum_times_varying", [](auto a) { return std::vector{a[0] * psum(a[0], "i")}; }},
      {"psum_of_scalar_sum", [](auto a) { return std::vector{psum(sum(a[0] * a[0]), "k")}; }},
      {"pmean_varying", [](auto a) { return std::vector{pmean(exp(a[0]), "i")}; }},
      {"pmean_varying_out_names_axis", [](auto a) { return std::vector{pmean(exp(a[0]), "i")}; }},
      {"pmean_invariant_out_names_axis", [](auto a) { return std::vector{pmean(sin(a[0]), "j")}; }},
      {"pmean_two_axes",
       [](auto a) {
         return std::vector{pmean(sin(a[0]), Axes{"i", "j"})};
       }},
      {"pmax_varying", [](auto a) { return std::vector{pmax(a[0], "i")}; }},
      {"pmin_two_axes",
       [](auto a) {
         return std::vector{pmin(a[0], Axes{"i", "j"})};
       }},
      {"pmax_invariant_out_names_axis", [](auto a) { return std::vector{pmax(a[0], "i")}; }},
      {"varying_all_gather_tiled",
       [](auto a) { return std::vector{pvary(all_gather(a[0] * a[0], "i", 0, true), "i")}; }},
      {"varying_all_gather_untiled",
       [](auto a) { return std::vector{pvary(all_gather(sin(a[0]), "i", 0, false), "i")}; }},
      {"varying_all_gather_axis1_two_axes",
       [](auto a) {
         Axes ij{"i", "j"};
         return std::vector{pvary(all_gather(a[0] * a[0], ij, 1, true), ij)};
       }},
      {"invariant_all_gather_tiled",
       [](auto a) { return std::vector{all_gather(a[0] * a[0], "i", 0, true)}; }},
      {"invariant_all_gather_tiled_out_names_axis",
       [](auto a) { return std::vector{all_gather(a[0] * a[0], "i", 0, true)}; }},
      {"invariant_all_gather_untiled_axis1",
       [](auto a) { return std::vector{all_gather(exp(a[0]), "j", 1, false)}; }},
      {"invariant_all_gather_untiled_out_names_axis",
       [](auto a) { return std::vector{all_gather(sin(a[0]), "j", 0, false)}; }},
      {"invariant_all_gather_two_axes",
       [](auto a) {
         return std::vector{all_gather(a[0] * a[0], Axes{"i", "j"}, 0, true)};
       }},
      {"invariant_all_gather_of_invariant",
       [](auto a) { return std::vector{all_gather(sin(a[0]), "i", 0, true)}; }},
      {"invariant_all_gather_then_varying_use",
       [](auto a) { return std::vector{a[0] * sum(all_gather(a[0], "i", 0, true), {0})}; }},
      {"psum_scatter_tiled",
       [](auto a) { return std::vector{psum_scatter(a[0] * a[0], "i", 1, true)}; }},
      {"psum_scatter_untiled",
       [](auto a) { return std::vector{psum_scatter(sin(a[0]), "j", 1, false)}; }},
      {"psum_scatter_invariant",
       [](auto a) { return std::vector{psum_scatter(a[0] * a[0], "i", 0, true)}; }},
      {"psum_scatter_two_axes",
       [](auto a) {
         return std::vector{psum_scatter(sin(a[0]), Axes{"i", "j"}, 0, true)};
       }},
      {"ppermute_cycle", [](auto a) { return std::vector{ppermute(a[0] * a[0], "i", kShift4)}; }},
      {"ppermute_partial",
       [](auto a) {
         return std::vector{ppermute(sin(a[0]), "i", {{0, 1}, {1, 2}})};
       }},
      {"ppermute_invariant", [](auto a) { return std::vector{ppermute(exp(a[0]), "i", kShift4)}; }},
      {"ppermute_two_axes",
       [](auto a) {
         return std::vector{ppermute(tanh(a[0]), Axes{"i", "j"}, {{0, 7}, {7, 3}, {3, 0}, {5, 6}})};
       }},
      {"all_to_all_tiled",
       [](auto a) { return std::vector{all_to_all(a[0] * a[0], "j", 1, 0, true)}; }},
      {"all_to_all_tiled_8",
       [](auto a) { return std::vector{all_to_all(sin(a[0]), "k", 1, 0, true)}; }},
      {"all_to_all_untiled_same_axis",
       [](auto a) { return std::vector{all_to_all(a[0] * a[0], "i", 0, 0, false)}; }},
      {"all_to_all_untiled",
       [](auto a) {
         return std::vector{all_to_all(reshape(a[0], {4, 4, 1}) * 2.0, "i", 0, 2, false)};
       }},
      {"all_to_all_invariant",
       [](auto a) { return std::vector{all_to_all(exp(a[0]), "i", 0, 1, true)}; }},
      {"axis_index_scales_varying",
       [](auto a) { return std::vector{a[0] * a[0] * (f32_index("i") + 1.0)}; }},
      {"axis_index_scales_invariant",
       [](auto a) { return std::vector{sin(a[0]) * (f32_index("i") + 1.0)}; }},
      {"axis_index_two_axes_then_psum",
       [](auto a) {
         Axes ij{"i", "j"};
         return std::vector{psum(a[0] * f32_index(ij), ij)};
       }},
      {"two_args_matmul_psum", [](auto a) { return std::vector{psum(matmul(a[0], a[1]), "i")}; }},
      {"two_args_invariant_weight",
       [](auto a) {
         Array h = matmul(a[0], a[1]);
         return std::vector{tanh(h), pmean(sum(h, {0}), "i")};
       }},
      {"two_results_mixed",
       [](auto a) {
         return std::vector{sin(a[0]), psum(a[0] * a[0], "i")};
       }},
  };
  return m;
}

// sin(0.7 n + 1.3 a + 0.25) for input a, computed in double and rounded (as the script does).
Array program_input(int a, const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(jax_port::numel(shape)));
  for (size_t n = 0; n < v.size(); ++n) {
    v[n] = static_cast<float>(std::sin(0.7 * static_cast<double>(n) + 1.3 * a + 0.25));
  }
  return from_vector(v, shape);
}

const nlohmann::json& golden() {
  static const nlohmann::json g = jax_port::load_golden("shard_map_grads.json");
  return g;
}

const nlohmann::json* find_program(const std::string& name) {
  for (const auto& p : jax_port::golden_list(golden(), "programs")) {
    if (p["name"] == name) return &p;
  }
  return nullptr;
}

std::vector<double> data_of(const nlohmann::json& t) {
  return t["data"].get<std::vector<double>>();
}

Mesh mesh_of(const nlohmann::json& p) {
  return Mesh(p["mesh"]["shape"].get<Shape>(), p["mesh"]["names"].get<std::vector<std::string>>());
}

// A callable running the program's shard_map on a vector of arguments.
std::function<std::vector<Array>(const std::vector<Array>&)> make_program(const nlohmann::json& p,
                                                                          const Body& body) {
  Mesh mesh = mesh_of(p);
  std::vector<PartitionSpec> in_specs, out_specs;
  for (const auto& s : p["in_specs"]) in_specs.push_back(jax_port::spec_from_json(s));
  for (const auto& s : p["out_specs"]) out_specs.push_back(jax_port::spec_from_json(s));
  if (in_specs.size() == 1) {
    auto sm = shard_map([body](const Array& a) { return body({a}); }, mesh, in_specs, out_specs);
    return [sm](const std::vector<Array>& xs) { return sm(xs[0]); };
  }
  auto sm = shard_map(
      [body](const Array& a, const Array& b) {
        return body({a, b});
      },
      mesh, in_specs, out_specs);
  return [sm](const std::vector<Array>& xs) { return sm(xs[0], xs[1]); };
}

// Programs whose result is invariant over an axis that its out_spec names. JAX (and the
// meaning of the program) sends each output block's cotangent to every device of that axis:
// the implicit pvary at the output transposes to a psum. partix gives each device only its own
// block's cotangent, so the gradients are those of one copy of the result.
const std::set<std::string> kOutSpecsNamingInvariantAxis = {
    "psum_varying_out_names_axis",
    "psum_invariant_out_names_axis",
    "psum_one_of_two_axes_out_names_both",
    "pmean_varying_out_names_axis",
    "pmean_invariant_out_names_axis",
    "invariant_all_gather_tiled_out_names_axis",
    "invariant_all_gather_untiled_out_names_axis",
};

class ShardMapGradsVsJax : public testing::TestWithParam<std::string> {};

TEST_P(ShardMapGradsVsJax, ValuesAndGradientsMatchJax) {
  const std::string name = GetParam();
  const nlohmann::json* p = find_program(name);
  ASSERT_NE(p, nullptr) << name << " is not in shard_map_grads.json: regenerate it";
  auto run = make_program(*p, bodies().at(name));
  std::vector<Array> xs;
  for (size_t a = 0; a < (*p)["input_shapes"].size(); ++a) {
    xs.push_back(program_input(static_cast<int>(a), (*p)["input_shapes"][a].get<Shape>()));
  }
  // Forward values, eagerly and under jit.
  const auto& want_outs = (*p)["outputs"];
  for (bool jitted : {false, true}) {
    SCOPED_TRACE(jitted ? "jit" : "eager");
    std::vector<Array> outs =
        jitted ? jit([&](const std::vector<Array>& v) { return run(v); })(xs) : run(xs);
    ASSERT_EQ(outs.size(), want_outs.size());
    for (size_t r = 0; r < outs.size(); ++r) {
      EXPECT_EQ(outs[r].shape(), want_outs[r]["shape"].get<Shape>()) << "result " << r;
      jax_port::expect_close(outs[r].to_vector<float>(), data_of(want_outs[r]), 1e-5,
                             "result " + std::to_string(r));
    }
  }
  std::vector<Array> ws;
  for (size_t r = 0; r < want_outs.size(); ++r) {
    ws.push_back(jax_port::result_weight(static_cast<int>(r), want_outs[r]["shape"].get<Shape>()));
  }
  auto loss = [&](const std::vector<Array>& v) {
    std::vector<Array> outs = run(v);
    Array l = sum(outs[0] * ws[0]);
    for (size_t r = 1; r < outs.size(); ++r) l = l + sum(outs[r] * ws[r]);
    return l;
  };
  auto loss1 = [&](const Array& a) { return loss({a}); };
  auto loss2 = [&](const Array& a, const Array& b) { return loss({a, b}); };
  // Eager grad needs the arguments on the mesh (see UncommittedArgumentOfEagerGrad below);
  // jit(grad) takes them as they are.
  std::vector<Array> placed;
  for (size_t a = 0; a < xs.size(); ++a) {
    placed.push_back(device_put(
        xs[a], NamedSharding(mesh_of(*p), jax_port::spec_from_json((*p)["in_specs"][a]))));
  }
  // The gradients with respect to every argument, eagerly or under jit.
  auto grads = [&](bool jitted) -> std::vector<Array> {
    const std::vector<Array>& args = jitted ? xs : placed;
    if (args.size() == 1) {
      auto g = [&](const Array& a) -> Array { return grad(loss1)(a); };
      return {jitted ? jit(g)(args[0]) : g(args[0])};
    }
    auto g = [&](const Array& a, const Array& b) {
      std::vector<Tree> t = grad(loss2, std::vector<int>{0, 1})(a, b);
      return std::vector<Array>{t[0], t[1]};
    };
    return jitted ? jit(g)(args[0], args[1]) : g(args[0], args[1]);
  };
  if ((*p)["grad_error"].get<bool>()) {
    // JAX has no differentiation rule here either; partix refuses with its own error.
    EXPECT_PARTIX_ERROR(grads(false), "not differentiable");
    return;
  }
  const auto& want_grads = (*p)["grads"];
  for (bool jitted : {false, true}) {
    SCOPED_TRACE(jitted ? "jit(grad)" : "grad");
    std::vector<Array> gs = grads(jitted);
    if (kOutSpecsNamingInvariantAxis.count(name) &&
        !jax_port::all_close(gs[0].to_vector<float>(), data_of(want_grads[0]), 1e-5)) {
      GTEST_SKIP() << "divergence: a result invariant over an axis that out_specs names gets "
                      "only its own block's cotangent (the transpose of the implicit pvary, a "
                      "psum over that axis, is missing)";
    }
    ASSERT_EQ(gs.size(), want_grads.size());
    for (size_t a = 0; a < gs.size(); ++a) {
      EXPECT_EQ(gs[a].shape(), want_grads[a]["shape"].get<Shape>());
      jax_port::expect_close(gs[a].to_vector<float>(), data_of(want_grads[a]), 1e-5,
                             "gradient of argument " + std::to_string(a));
    }
  }
}

std::vector<std::string> program_names() {
  std::vector<std::string> names;
  for (const auto& [k, v] : bodies()) names.push_back(k);
  return names;
}

INSTANTIATE_TEST_SUITE_P(JaxPortGrad, ShardMapGradsVsJax, testing::ValuesIn(program_names()),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

// Every program of the golden file has a partix body (and the other way round, above).
TEST(JaxPortGrad, EveryGoldenShardMapProgramIsRun) {
  for (const auto& p : jax_port::golden_list(golden(), "programs")) {
    EXPECT_TRUE(bodies().count(p["name"].get<std::string>())) << p["name"];
  }
  EXPECT_EQ(jax_port::golden_list(golden(), "programs").size(), bodies().size());
}

}  // namespace

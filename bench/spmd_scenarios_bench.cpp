// SPMD scenarios: bytes each device sends per collective kind, as partix's cost analysis
// reports them for 8 virtual devices. One JSON line per scenario; bench/spmd_vs_jax.py runs
// the same scenarios through JAX/XLA and compares.
//   build/bin/partix_bench_spmd_scenarios                # every scenario, JSON lines
//   build/bin/partix_bench_spmd_scenarios --list         # scenario names
//   build/bin/partix_bench_spmd_scenarios --text NAME    # per-device program
//   build/bin/partix_bench_spmd_scenarios --global NAME  # global program with shardings
//   build/bin/partix_bench_spmd_scenarios --check        # runs each sharded vs on one device
// Shapes and shardings below are the contract with the Python side: it checks that the
// "args" and "out" fields printed here match its own definitions before comparing.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "partix/partix.h"

using namespace partix;

namespace {

using Args = std::vector<Array>;

struct ArgDef {
  std::string name;
  Shape shape;
  PartitionSpec spec;
};

struct Scenario {
  std::string name;
  Shape mesh_shape;
  std::vector<std::string> axis_names;
  std::vector<ArgDef> args;
  PartitionSpec out_spec;
  std::function<Array(const Args&)> fn;
};

// ---- sizes (f32 everywhere) ----
// Sharded matmuls: A[I, J] @ B[J, K].
constexpr int64_t kI = 256, kJ = 512, kK = 384;
// MLP: x[N, E] -> [N, G] -> [N, E].
constexpr int64_t kN = 64, kE = 512, kG = 2048;
// Transformer block: B batch, T sequence, C channels, H heads, D head dim, F MLP hidden.
constexpr int64_t kB = 8, kT = 128, kC = 256, kH = 8, kD = 32, kF = 1024;

// ---- matmul scenarios ("How to Scale Your Model", sharded matrices) ----

Array matmul2(const Args& a) { return matmul(a[0], a[1]); }

std::vector<Scenario> matmul_scenarios() {
  const Shape x8 = {8};
  const std::vector<std::string> x_name = {"X"};
  const Shape xy = {4, 2};
  const std::vector<std::string> xy_names = {"X", "Y"};
  std::vector<Scenario> s;
  // Neither contracting dimension is sharded: C[I_X, K_Y] is local, no communication.
  s.push_back({"matmul_IX_KY",
               xy,
               xy_names,
               {{"A", {kI, kJ}, P("X", None)}, {"B", {kJ, kK}, P(None, "Y")}},
               P("X", "Y"),
               matmul2});
  // Both contracting dimensions sharded on X: partial sums, all-reduced to a replicated C.
  s.push_back({"matmul_JX_out_replicated",
               x8,
               x_name,
               {{"A", {kI, kJ}, P(None, "X")}, {"B", {kJ, kK}, P("X", None)}},
               P(),
               matmul2});
  // Same, but C[I, K_X]: the partial sums are reduce-scattered.
  s.push_back({"matmul_JX_out_KX",
               x8,
               x_name,
               {{"A", {kI, kJ}, P(None, "X")}, {"B", {kJ, kK}, P("X", None)}},
               P(None, "X"),
               matmul2});
  // Conflicting: A's rows and B's contracting rows both on X; C[I_X, K].
  s.push_back({"matmul_IX_JX_conflict",
               x8,
               x_name,
               {{"A", {kI, kJ}, P("X", None)}, {"B", {kJ, kK}, P("X", None)}},
               P("X", None),
               matmul2});
  // 2-D mesh: A[I_X, J_Y] @ B[J_Y, K] -> C[I_X, K] (partial over Y).
  s.push_back({"matmul_IX_JY_2d",
               xy,
               xy_names,
               {{"A", {kI, kJ}, P("X", "Y")}, {"B", {kJ, kK}, P("Y", None)}},
               P("X", None),
               matmul2});
  return s;
}

// ---- tensor-parallel MLP: column-parallel W1, row-parallel W2 ----

Array mlp(const Args& a) {
  // a: x[N, E], w1[E, G], b1[G], w2[G, E], b2[E]
  Array h = gelu(matmul(a[0], a[1]) + a[2]);  // [N, G]
  return matmul(h, a[3]) + a[4];              // [N, E]
}

std::vector<Scenario> mlp_scenarios() {
  std::vector<Scenario> s;
  auto args = [](PartitionSpec x) {
    return std::vector<ArgDef>{{"x", {kN, kE}, std::move(x)},
                               {"w1", {kE, kG}, P(None, "model")},
                               {"b1", {kG}, P("model")},
                               {"w2", {kG, kE}, P("model", None)},
                               {"b2", {kE}, P()}};
  };
  // Mesh (8,): x replicated, one all-reduce of the row-parallel output.
  s.push_back({"tp_mlp", {8}, {"model"}, args(P()), P(), mlp});
  // Mesh (4,2): x's rows over 'data', the same split of the weights over 'model'.
  s.push_back(
      {"dp_tp_mlp", {4, 2}, {"data", "model"}, args(P("data", None)), P("data", None), mlp});
  return s;
}

// ---- one transformer block (pre-LN GPT-2 style), forward ----

// Argument order; the Python side uses the same.
enum BlockArg { kX, kLn1G, kLn1B, kWq, kWk, kWv, kWo, kLn2G, kLn2B, kWfc, kBfc, kWproj, kBproj };

Array block(const Args& a) {
  const Array& x = a[kX];                          // [B, T, C]
  Array h = layer_norm(x, a[kLn1G], a[kLn1B]);     // [B, T, C]
  Array q = einsum("btc,chd->bthd", {h, a[kWq]});  // [B, T, H, D]
  Array k = einsum("btc,chd->bthd", {h, a[kWk]});
  Array v = einsum("btc,chd->bthd", {h, a[kWv]});
  const int64_t t = x.shape()[1];
  Array s = einsum("bthd,bshd->bhts", {q, k}) * (1.0 / std::sqrt(double{kD}));  // [B, H, T, T]
  s = where(causal_mask(t, t), s, -1e9);
  Array p = softmax(s, -1);
  Array o = einsum("bhts,bshd->bthd", {p, v});          // [B, T, H, D]
  Array x1 = x + einsum("bthd,hdc->btc", {o, a[kWo]});  // [B, T, C]
  Array h2 = layer_norm(x1, a[kLn2G], a[kLn2B]);
  Array f = gelu(einsum("btc,cf->btf", {h2, a[kWfc]}) + a[kBfc]);  // [B, T, F]
  return x1 + einsum("btf,fc->btc", {f, a[kWproj]}) + a[kBproj];   // [B, T, C]
}

// Parameter specs of one layout. `vec` shards the LayerNorm and output-bias vectors.
struct BlockLayout {
  PartitionSpec x, vec, wqkv, wo, wfc, bfc, wproj;
};

Scenario block_scenario(std::string name, Shape mesh_shape, const BlockLayout& l, int64_t t = kT) {
  std::vector<ArgDef> args = {
      {"x", {kB, t, kC}, l.x},      {"ln1_g", {kC}, l.vec},       {"ln1_b", {kC}, l.vec},
      {"wq", {kC, kH, kD}, l.wqkv}, {"wk", {kC, kH, kD}, l.wqkv}, {"wv", {kC, kH, kD}, l.wqkv},
      {"wo", {kH, kD, kC}, l.wo},   {"ln2_g", {kC}, l.vec},       {"ln2_b", {kC}, l.vec},
      {"w_fc", {kC, kF}, l.wfc},    {"b_fc", {kF}, l.bfc},        {"w_proj", {kF, kC}, l.wproj},
      {"b_proj", {kC}, l.vec}};
  return {std::move(name), std::move(mesh_shape), {"data", "model"},
          std::move(args), P("data", None, None), block};
}

std::vector<Scenario> block_scenarios() {
  const PartitionSpec batch = P("data", None, None);
  std::vector<Scenario> s;
  // Data parallel, mesh (8,1): batch over 'data', every parameter replicated.
  s.push_back(block_scenario("block_dp", {8, 1}, {batch, P(), P(), P(), P(), P(), P()}));
  // FSDP, mesh (8,1): batch over 'data'; every parameter's first dimension over 'data'.
  const PartitionSpec d0 = P("data");
  s.push_back(block_scenario("block_fsdp", {8, 1}, {batch, d0, d0, d0, d0, d0, d0}));
  // The same with T = 16: the activations [B, T, C] are now smaller than each weight matrix,
  // so moving activations instead of gathering weights becomes an option.
  s.push_back(block_scenario("block_fsdp_t16", {8, 1}, {batch, d0, d0, d0, d0, d0, d0}, 16));
  // T = 64: activations [B, T, C] half the size of w_fc, but the MLP hidden [B, T, F] twice it.
  s.push_back(block_scenario("block_fsdp_t64", {8, 1}, {batch, d0, d0, d0, d0, d0, d0}, 64));
  // Megatron tensor parallel, mesh (1,8): heads and F column-parallel (wq/wk/wv, w_fc, b_fc),
  // wo and w_proj row-parallel; LayerNorm parameters and b_proj replicated.
  const BlockLayout tp = {batch,
                          P(),
                          P(None, "model", None),
                          P("model", None, None),
                          P(None, "model"),
                          P("model"),
                          P("model", None)};
  s.push_back(block_scenario("block_tp", {1, 8}, tp));
  // DP + TP, mesh (4,2): the Megatron layout over 'model', batch over 'data'.
  s.push_back(block_scenario("block_dp_tp", {4, 2}, tp));
  return s;
}

// ---- reshapes that split or merge a sharded dimension (no communication needed) ----

std::vector<Scenario> reshape_scenarios() {
  std::vector<Scenario> s;
  // [64, 32] over 'data' (8) -> [4, 16, 32]: 4-way on dim 0 and 2-way on dim 1; summed over
  // the last dimension and returned replicated.
  s.push_back({"reshape_split",
               {8},
               {"data"},
               {{"x", {64, 32}, P("data")}},
               P(),
               [](const Args& a) { return sum(reshape(a[0], {4, 16, 32}), {2}); }});
  // Split, compute, merge back to the argument's layout.
  s.push_back({"reshape_split_merge",
               {8},
               {"data"},
               {{"x", {64, 32}, P("data")}},
               P("data"),
               [](const Args& a) { return reshape(reshape(a[0], {4, 16, 32}) * 2.0f, {64, 32}); }});
  // [4, 16, 32] over ('X', 'Y') on dims 0 and 1 -> [64, 32] over ('X', 'Y').
  s.push_back({"reshape_merge",
               {4, 2},
               {"X", "Y"},
               {{"x", {4, 16, 32}, P("X", "Y")}},
               P(Axes{"X", "Y"}),
               [](const Args& a) { return reshape(a[0], {64, 32}) * 2.0f; }});
  return s;
}

std::vector<Scenario> all_scenarios() {
  std::vector<Scenario> s = matmul_scenarios();
  for (auto& r : reshape_scenarios()) s.push_back(std::move(r));
  for (auto& m : mlp_scenarios()) s.push_back(std::move(m));
  for (auto& b : block_scenarios()) s.push_back(std::move(b));
  return s;
}

// ---- JSON ----

std::string json_str(const std::string& s) { return "\"" + s + "\""; }

template <class T, class F>
std::string json_list(const std::vector<T>& xs, F each) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i) out += (i ? ", " : "") + each(xs[i]);
  return out + "]";
}

std::string json_shape(const Shape& s) {
  return json_list(s, [](int64_t d) { return std::to_string(d); });
}

// A spec entry as JAX writes it: null, "x", or ["x", "y"].
std::string json_spec(const PartitionSpec& spec) {
  return json_list(spec.entries(), [](const PartitionSpec::Entry& e) {
    if (e.empty()) return std::string("null");
    if (e.size() == 1) return json_str(e[0]);
    return json_list(e, json_str);
  });
}

std::string json_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

Lowered lower(const Scenario& sc) {
  Mesh mesh(sc.mesh_shape, sc.axis_names);
  Args args;
  for (const ArgDef& d : sc.args)
    args.push_back(device_put(zeros(d.shape), NamedSharding(mesh, d.spec)));
  auto f = jit(sc.fn, {.out_shardings = {NamedSharding(mesh, sc.out_spec)}, .name = sc.name});
  return f.lower(args);
}

std::string scenario_json(const Scenario& sc, const Lowered& l) {
  CostAnalysis c = l.cost_analysis();
  std::string mesh = "{";
  for (size_t i = 0; i < sc.axis_names.size(); ++i) {
    mesh += (i ? ", " : "") + json_str(sc.axis_names[i]) + ": " + std::to_string(sc.mesh_shape[i]);
  }
  mesh += "}";
  std::string bytes = "{";
  bool first = true;
  for (const char* kind :
       {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute"}) {
    bytes += (first ? "" : ", ") + json_str(kind) + ": " + json_number(c.bytes_per_device[kind]);
    first = false;
  }
  bytes += "}";
  std::string args = json_list(sc.args, [](const ArgDef& d) {
    return "{\"name\": " + json_str(d.name) + ", \"shape\": " + json_shape(d.shape) +
           ", \"spec\": " + json_spec(d.spec) + "}";
  });
  return "{\"name\": " + json_str(sc.name) + ", \"mesh\": " + mesh + ", \"args\": " + args +
         ", \"out\": " + json_spec(sc.out_spec) + ", \"bytes_per_device\": " + bytes +
         ", \"flops\": " + json_number(c.flops) +
         ", \"duplicated_flops_fraction\": " + json_number(c.duplicated_flops_fraction) +
         ", \"warnings\": " + std::to_string(l.warnings().size()) + "}";
}

// Runs the scenario sharded and on one device with the same random inputs; the largest
// absolute difference relative to the largest reference magnitude.
double check(const Scenario& sc) {
  Mesh mesh(sc.mesh_shape, sc.axis_names);
  Mesh one({1}, {"one"});
  Args sharded, single;
  for (size_t i = 0; i < sc.args.size(); ++i) {
    Array x = random::normal(random::key(i + 1), sc.args[i].shape);
    sharded.push_back(device_put(x, NamedSharding(mesh, sc.args[i].spec)));
    single.push_back(device_put(x, NamedSharding(one, P())));
  }
  auto f = jit(sc.fn, {.out_shardings = {NamedSharding(mesh, sc.out_spec)}, .name = sc.name});
  std::vector<float> got = f(sharded).to_vector<float>();
  std::vector<float> want = jit(sc.fn)(single).to_vector<float>();
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return err / scale;
}

const Scenario* find(const std::vector<Scenario>& all, const std::string& name) {
  for (const Scenario& s : all) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  init({.num_cpu_devices = 8});
  const std::vector<Scenario> all = all_scenarios();
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const Scenario& s : all) std::printf("%s\n", s.name.c_str());
    return 0;
  }
  if (argc == 3 && (std::strcmp(argv[1], "--text") == 0 || std::strcmp(argv[1], "--global") == 0)) {
    const Scenario* s = find(all, argv[2]);
    if (s == nullptr) {
      std::fprintf(stderr, "unknown scenario '%s' (see --list)\n", argv[2]);
      return 2;
    }
    Lowered l = lower(*s);
    std::printf("%s\n", (argv[1][2] == 't' ? l.as_text() : l.global_text()).c_str());
    for (const std::string& w : l.warnings()) std::printf("warning: %s\n", w.c_str());
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--check") == 0) {
    bool ok = true;
    for (const Scenario& s : all) {
      double rel = check(s);
      ok = ok && rel < 1e-4;
      std::printf("%-26s max |sharded - single| / max |single| = %.2e\n", s.name.c_str(), rel);
    }
    return ok ? 0 : 1;
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: %s [--list | --text NAME | --global NAME | --check]\n", argv[0]);
    return 2;
  }
  for (const Scenario& s : all) std::printf("%s\n", scenario_json(s, lower(s)).c_str());
  return 0;
}

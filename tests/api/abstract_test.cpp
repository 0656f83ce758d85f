// Abstract values: ShapeDtypeStruct and meshes of abstract devices. Lowering abstract arguments
// gives the same per-device programs, costs and memory as lowering real arrays of the same
// shapes and shardings; eval_shape gives the results' shapes, dtypes and shardings without
// running; abstract meshes may be larger than the machine; nothing that needs values accepts
// an abstract array.
#include <filesystem>

#include "io/io_test_util.h"
#include "partix/models/gpt2.h"
#include "partix/models/llama.h"
#include "test_util.h"

using namespace partix;

namespace {

// A Megatron MLP block with a loss, its gradient and an SGD update: collectives of several
// kinds (all_reduce of the row-parallel output and of the data-parallel gradients).
struct Mlp {
  Array operator()(const Params& p, const Array& x) const {
    Array h = relu(matmul(x, p.at("w1")));
    return mean(square(matmul(h, p.at("w2"))));
  }
};

auto train_step() {
  return jit([](const Params& p, const Array& x) {
    auto [loss, g] = value_and_grad([&](const Params& q) { return Mlp{}(q, x); })(p);
    Params next;
    for (const auto& [k, w] : p) next[k] = w - 0.1 * g.params().at(k);
    return std::make_pair(loss, next);
  });
}

Params real_params(const Mesh& m) {
  Params p;
  p["w1"] = device_put(random::normal(random::key(1), {32, 64}), NamedSharding(m, P(None, "model")));
  p["w2"] = device_put(random::normal(random::key(2), {64, 32}), NamedSharding(m, P("model")));
  return p;
}

Params abstract_params(const Mesh& m) {
  Params p;
  p["w1"] = ShapeDtypeStruct{{32, 64}, DType::F32, NamedSharding(m, P(None, "model"))};
  p["w2"] = ShapeDtypeStruct{{64, 32}, DType::F32, NamedSharding(m, P("model"))};
  return p;
}

}  // namespace

TEST(Abstract, LoweringAbstractArgumentsEqualsLoweringRealOnes) {
  Mesh m = make_mesh({4, 2}, {"data", "model"});
  Array x = device_put(random::normal(random::key(3), {16, 32}), NamedSharding(m, P("data")));
  Lowered real = train_step().lower(real_params(m), x);
  Lowered abs = train_step().lower(abstract_params(m),
                                   ShapeDtypeStruct{{16, 32}, DType::F32, NamedSharding(m, P("data"))});
  EXPECT_EQ(abs.as_text(), real.as_text());
  EXPECT_EQ(abs.global_text(), real.global_text());
  EXPECT_EQ(abs.cost_analysis().bytes_per_device, real.cost_analysis().bytes_per_device);
  EXPECT_DOUBLE_EQ(abs.cost_analysis().flops, real.cost_analysis().flops);
  EXPECT_EQ(abs.memory_analysis().argument_bytes, real.memory_analysis().argument_bytes);
  EXPECT_EQ(abs.memory_analysis().peak_temp_bytes, real.memory_analysis().peak_temp_bytes);
  EXPECT_EQ(abs.out_shardings(), real.out_shardings());
  EXPECT_GT(abs.cost_analysis().bytes_per_device.at("all_reduce"), 0);
  // A ShapeDtypeStruct without a sharding is an uncommitted argument, placed by the program.
  auto f = jit([](const Array& a) { return a * 2.0; }, {.in_shardings = {NamedSharding(m, P("data"))}});
  EXPECT_EQ(f.lower(ShapeDtypeStruct{{16, 4}}).as_text(), f.lower(zeros({16, 4})).as_text());
}

TEST(Abstract, AbstractMeshesGiveTheSameProgramsAndMayExceedTheMachine) {
  // The same 4x2 layout on real and on abstract devices: the same programs.
  Mesh real = make_mesh({4, 2}, {"data", "model"});
  Mesh abstract = make_abstract_mesh({4, 2}, {"data", "model"});
  EXPECT_TRUE(abstract.is_abstract());
  EXPECT_FALSE(real.is_abstract());
  EXPECT_FALSE(abstract == real);
  EXPECT_EQ(abstract.to_string(), "AbstractMesh('data': 4, 'model': 2)");
  auto x_on = [](const Mesh& m) {
    return ShapeDtypeStruct{{16, 32}, DType::F32, NamedSharding(m, P("data"))};
  };
  Lowered a = train_step().lower(abstract_params(abstract), x_on(abstract));
  Lowered r = train_step().lower(abstract_params(real), x_on(real));
  EXPECT_EQ(a.as_text(), r.as_text());
  EXPECT_EQ(a.cost_analysis().bytes_per_device, r.cost_analysis().bytes_per_device);
  EXPECT_EQ(a.memory_analysis().peak_temp_bytes, r.memory_analysis().peak_temp_bytes);

  // 64 devices on a machine of 8: per-device figures for all 64.
  Mesh big = make_abstract_mesh({8, 8}, {"data", "model"});
  Lowered b = train_step().lower(abstract_params(big),
                                 ShapeDtypeStruct{{64, 32}, DType::F32, NamedSharding(big, P("data"))});
  const MemoryAnalysis mem = b.memory_analysis();
  ASSERT_EQ(mem.argument_bytes.size(), 64u);
  // w1 and w2 split 8 ways, x split 8 ways: (32*64/8 + 64*32/8 + 8*32) floats per device.
  EXPECT_EQ(mem.argument_bytes[63], (32 * 64 / 8 + 64 * 32 / 8 + 8 * 32) * 4);
  // The row-parallel product sums over 'model' (8 devices): all_reduce of [8, 32] floats.
  EXPECT_GE(b.cost_analysis().bytes_per_device.at("all_reduce"), 2.0 * 7 / 8 * 8 * 32 * 4);
}

TEST(Abstract, EvalShapeGivesResultShapesAndShardingsWithoutRunning) {
  Mesh m = make_mesh({4, 2}, {"data", "model"});
  Array x = device_put(random::normal(random::key(3), {16, 32}), NamedSharding(m, P("data")));
  auto [loss, next] = train_step()(real_params(m), x);
  auto [aloss, anext] = eval_shape(
      [](const Params& p, const Array& a) {
        auto [l, g] = value_and_grad([&](const Params& q) { return Mlp{}(q, a); })(p);
        Params n;
        for (const auto& [k, w] : p) n[k] = w - 0.1 * g.params().at(k);
        return std::make_pair(l, n);
      },
      abstract_params(m), ShapeDtypeStruct{{16, 32}, DType::F32, NamedSharding(m, P("data"))});
  EXPECT_TRUE(aloss.is_abstract());
  EXPECT_EQ(aloss.shape(), loss.shape());
  EXPECT_EQ(aloss.sharding(), loss.sharding());
  for (const auto& [k, w] : next) {
    EXPECT_TRUE(anext.at(k).is_abstract());
    EXPECT_EQ(anext.at(k).shape(), w.shape()) << k;
    EXPECT_EQ(anext.at(k).dtype(), w.dtype()) << k;
    EXPECT_EQ(anext.at(k).sharding(), w.sharding()) << k;
  }
}

TEST(Abstract, ModelBuildersGiveAbstractParametersAtAnySize) {
  // GPT-2 XL's parameters (1.6 B, 6.2 GB in f32) on an abstract 8x8 mesh with FSDP: shapes and
  // shardings only, nothing allocated.
  namespace g2 = models::gpt2;
  g2::Config xl;
  xl.n_embd = 1600;
  xl.n_layer = 48;
  xl.n_head = 25;
  Mesh mesh = make_abstract_mesh({8, 8}, {"data", "model"});
  auto rules = g2::sharding_rules(/*fsdp=*/true);
  const int64_t before = memory_stats(0).bytes_in_use;
  Params p = eval_shape([&](const Array& key) { return g2::init(xl, key, mesh, rules); },
                        ShapeDtypeStruct{{2}, DType::I32});
  EXPECT_EQ(memory_stats(0).bytes_in_use, before);
  auto want = nn::param_shardings(g2::param_specs(xl), rules, mesh);
  ASSERT_EQ(p.size(), want.size());
  int64_t total = 0;
  for (const auto& [name, a] : p) {
    EXPECT_TRUE(a.is_abstract()) << name;
    EXPECT_EQ(a.sharding(), want.at(name)) << name;
    total += a.size();
  }
  EXPECT_GT(total, 1'500'000'000);
  EXPECT_EQ(p.at("transformer.h.7.mlp.c_fc.weight").sharding().spec(), P("data", "model"));
  // Llama: the same through its init.
  namespace L = models::llama;
  Params lp = eval_shape(
      [&](const Array& key) { return L::init(L::tiny(), key, mesh, L::sharding_rules()); },
      ShapeDtypeStruct{{2}, DType::I32});
  EXPECT_EQ(lp.at("model.layers.self_attn.o_proj.weight").sharding().spec(),
            P(None, None, "model"));
  EXPECT_EQ(lp.at("model.layers.self_attn.o_proj.weight").shape()[0], L::tiny().num_layers);
}

TEST(Abstract, NothingThatNeedsValuesTakesAnAbstractArray) {
  Mesh m = make_mesh({4, 2}, {"data", "model"});
  Array a = ShapeDtypeStruct{{8, 4}, DType::F32, NamedSharding(m, P("data"))};
  EXPECT_TRUE(a.is_abstract());
  EXPECT_FALSE(a.is_concrete());
  EXPECT_EQ(a.aval().shape, (Shape{8, 4}));
  EXPECT_PARTIX_ERROR(a.to_vector<float>(), "[Array.to_vector]", "abstract", "f32[8,4]");
  EXPECT_PARTIX_ERROR(a.addressable_shards(), "abstract");
  EXPECT_PARTIX_ERROR(a + 1.0, "abstract");
  EXPECT_PARTIX_ERROR(device_put(a, NamedSharding(m, P())), "[device_put]", "abstract");
  auto f = jit([](const Array& v) { return v * 2.0; });
  EXPECT_PARTIX_ERROR(f(a), "abstract", "lower");
  test::TempDir dir;
  EXPECT_PARTIX_ERROR(ckpt::save(dir.file("ck"), 1, Params{{"w", a}}), "[ckpt.save]", "'['w']'",
                      "abstract");
  // Abstract devices hold no values.
  Mesh big = make_abstract_mesh({16}, {"x"});
  EXPECT_PARTIX_ERROR(device_put(zeros({16}), NamedSharding(big, P("x"))), "[device_put]",
                      "AbstractMesh('x': 16)", "abstract");
  EXPECT_PARTIX_ERROR(zeros({16}, DType::F32, NamedSharding(big, P("x"))), "abstract");
  auto make = jit([] { return zeros({16}); }, {.out_shardings = {NamedSharding(big, P("x"))}});
  EXPECT_NO_THROW(make.lower());
  EXPECT_PARTIX_ERROR(make(), "AbstractMesh('x': 16)", "not run");
  // A mesh is all abstract or all real.
  std::vector<Device> mixed = {devices()[0], Device{1, 0, std::string(kAbstractPlatform)}};
  EXPECT_PARTIX_ERROR(Mesh({2}, {"x"}, mixed), "[Mesh]", "all abstract or all real");
  EXPECT_PARTIX_ERROR(make_abstract_mesh({0, 4}, {"a", "b"}), "[make_abstract_mesh]");
  EXPECT_PARTIX_ERROR(Array(ShapeDtypeStruct{{-1, 4}}), "[ShapeDtypeStruct]", "negative");
  EXPECT_PARTIX_ERROR(
      Array(ShapeDtypeStruct{{8}, DType::F32, NamedSharding(m, P("data", "model"))}), "[8]");
}

TEST(Abstract, CheckpointsRestoreIntoAbstractTargets) {
  Mesh m = make_mesh({4, 2}, {"data", "model"});
  Params p = real_params(m);
  test::TempDir dir;
  ckpt::save(dir.file("ck"), 3, p);
  ckpt::wait();
  // The target: ShapeDtypeStructs in other shardings (the saved values are not needed).
  Mesh m8 = make_mesh({8}, {"x"});
  Params target;
  target["w1"] = ShapeDtypeStruct{{32, 64}, DType::F32, NamedSharding(m8, P("x"))};
  target["w2"] = ShapeDtypeStruct{{64, 32}, DType::F32, NamedSharding(m8, P())};
  Params got = ckpt::restore(dir.file("ck"), 3, target);
  for (const auto& [k, w] : p) {
    EXPECT_EQ(got.at(k).sharding(), target.at(k).sharding()) << k;
    EXPECT_EQ(got.at(k).to_vector<float>(), w.to_vector<float>()) << k;
  }
}

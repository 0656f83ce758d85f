// Allocation fault injection: the Nth allocation (device buffers and host staging) fails, for
// N over the allocations of a shard_map program, a GPT-2 training step, a GGUF load and a
// generate call. Each attempt either succeeds or raises partix::Error (never another
// exception, never a crash), and partix works right after. The default run samples N;
// PARTIX_FAULT_SWEEP=all tries every allocation, PARTIX_FAULT_SWEEP=K samples K of them per
// case (scripts/asan.sh also checks for leaks).
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/fault_injection.h"
#include "partix/models/gpt2.h"
#include "partix/models/llama.h"
#include "test_util.h"

using namespace partix;

namespace {

struct FaultOff {
  ~FaultOff() { detail::fail_nth_allocation(0); }
};

// Counts the allocations of `attempt`, then makes each sampled one fail in turn. Returns how
// many attempts raised.
int sweep(const std::function<void()>& attempt, const std::function<void()>& works_after,
          int samples) {
  FaultOff off;
  detail::fail_nth_allocation(int64_t{1} << 60);  // count only
  attempt();
  const int64_t n = detail::allocations_seen();
  detail::fail_nth_allocation(0);
  EXPECT_GT(n, 0);
  const char* env = std::getenv("PARTIX_FAULT_SWEEP");
  if (env && std::string(env) != "all") {
    char* end = nullptr;
    const long long k = std::strtoll(env, &end, 10);
    if (end == env || *end != '\0' || k <= 0) {
      ADD_FAILURE() << "PARTIX_FAULT_SWEEP is 'all' or a positive count, not '" << env << "'";
    } else {
      samples = static_cast<int>(std::min<long long>(k, 1 << 30));
    }
  }
  const int64_t step = env && std::string(env) == "all" ? 1 : std::max<int64_t>(1, n / samples);
  int raised = 0;
  int64_t tried = 0;
  for (int64_t k = 1; k <= n; k += step, ++tried) {
    detail::fail_nth_allocation(k);
    try {
      attempt();
    } catch (const Error& e) {
      raised++;
      EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos)
          << "allocation " << k << ": " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "allocation " << k << " escaped as " << typeid(e).name() << ": " << e.what();
    }
    detail::fail_nth_allocation(0);
    works_after();
  }
  std::printf("fault sweep: %lld allocations, %lld made to fail, %d raised partix::Error\n",
              static_cast<long long>(n), static_cast<long long>(tried), raised);
  return raised;
}

#define REQUIRE_MODEL()                                                                 \
  if (!std::filesystem::exists(models::llama::default_model_path())) {                  \
    GTEST_SKIP() << "SmolLM2 is not in the cache: run scripts/fetch_smollm2.sh";         \
  }

}  // namespace

TEST(FaultSweep, ShardMapWithCollectives) {
  Mesh m = make_mesh({4, 2}, {"x", "y"});
  Array x = device_put(random::normal(random::key(0), {16, 8}), NamedSharding(m, P("x", "y")));
  auto f = jit(shard_map(
      [](const Array& b) {
        return psum(b, "x") + slice(all_gather(b, "y", 1, true), {0, 0}, {4, 4}) * 0.5f +
               ppermute(b, "x", {{0, 1}, {1, 2}, {2, 3}, {3, 0}});
      },
      m, {P("x", "y")}, {P("x", "y")}));
  const std::vector<float> want = f(x).to_vector<float>();
  const int raised = sweep([&] { f(x); }, [&] { EXPECT_EQ(f(x).to_vector<float>(), want); }, 1000);
  EXPECT_GT(raised, 0);
}

TEST(FaultSweep, Gpt2TrainingStep) {
  models::gpt2::TrainOptions o;
  o.data = 2;
  o.model_parallel = 2;
  o.batch = 4;
  o.seq = 32;
  auto trainer = std::make_unique<models::gpt2::Trainer>(o);
  trainer->step();  // compile
  const double want = models::gpt2::Trainer(o).step().loss;
  // A failed step leaves its donated state gone (as in JAX): each attempt uses a new trainer,
  // and a new trainer afterwards trains as before.
  const int raised = sweep([&] { trainer->step(); },
                           [&] {
                             trainer = std::make_unique<models::gpt2::Trainer>(o);
                             trainer->step();
                             trainer = std::make_unique<models::gpt2::Trainer>(o);
                           },
                           12);
  EXPECT_GT(raised, 0);
  EXPECT_EQ(models::gpt2::Trainer(o).step().loss, want);
}

TEST(FaultSweep, GgufLoadAndGenerate) {
  REQUIRE_MODEL();
  namespace L = models::llama;
  Mesh m = make_mesh({2}, {"model"});
  auto rules = L::sharding_rules("model");
  const std::string path = L::default_model_path();
  std::vector<int32_t> prompt{1, 2, 3, 4, 5};
  L::GenerateOptions o;
  o.max_tokens = 3;
  std::vector<int32_t> want;
  {
    L::Model model = L::load(path, m, rules);
    want = L::Generator(model, m, rules).generate({prompt}, o).tokens[0];
  }
  EXPECT_GT(sweep([&] { L::load(path, m, rules); }, [] {}, 20), 0);
  L::Model model = L::load(path, m, rules);
  L::Generator gen(model, m, rules);
  gen.generate({prompt}, o);  // compile
  EXPECT_GT(sweep([&] { gen.generate({prompt}, o); },
                  [&] { EXPECT_EQ(gen.generate({prompt}, o).tokens[0], want); }, 20),
            0);
}

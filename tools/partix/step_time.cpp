#include "step_time.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/errors.h"
#include "files/atomic_file.h"
#include "files/input_file.h"
#include "files/json_util.h"

namespace partix::cli {

namespace {

// The median of 3 timed runs after one untimed one.
template <class F>
double median_seconds(F&& run) {
  run();
  std::vector<double> t;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[1];
}

double sent(const CostAnalysis& c) {
  double s = 0;
  for (const auto& [kind, bytes] : c.bytes_per_device) s += bytes;
  return s;
}

// What is left of `seconds` for the resource being measured once the costs already known are
// taken off (never less than a tenth of it: a probe is built to be dominated by its resource).
double left(double seconds, double known) { return std::max(seconds - known, 0.1 * seconds); }

}  // namespace

HostRates measure_host(int n) {
  const std::vector<Device> local = local_devices();
  detail::check(n >= 1 && n <= static_cast<int>(local.size()), "plan",
                "step times need the mesh's {} devices on this host, which has {}", n,
                local.size());
  HostRates r;
  r.devices = n;
  r.cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const Mesh mesh({n}, {"d"}, std::vector<Device>(local.begin(), local.begin() + n));
  const NamedSharding split(mesh, P("d"));

  // Per-instruction overhead: a chain of tiny products and tanh (nothing to fuse across a dot).
  {
    auto chain = shard_map(
        [](const Array& x, const Array& w) {
          Array y = x;
          for (int i = 0; i < 64; ++i) y = tanh(matmul(y, w));
          return y;
        },
        mesh, {P("d"), P()}, {P("d")});
    auto f = jit([&](const Array& x, const Array& w) { return chain(x, w); });
    Array x = device_put(full({4 * static_cast<int64_t>(n), 4}, 0.1), split);
    Array w = device_put(full({4, 4}, 0.1), NamedSharding(mesh, P()));
    const CostAnalysis c = f.lower(x, w).cost_analysis();
    const double t = median_seconds([&] { (void)f(x, w); });
    r.seconds_per_instruction = t / c.instructions;
  }
  // Memory: an AdamW-like update of 64 Mi elements over all devices, 1 GiB read and written:
  // beyond the caches, as a training step's parameters, gradients and moments are.
  {
    const int64_t len = (int64_t{1} << 26) / n;
    auto update = shard_map(
        [](const Array& p, const Array& g, const Array& m, const Array& v) {
          Array m2 = m * 0.9 + g * 0.1;
          Array v2 = v * 0.999 + g * g * 0.001;
          Array p2 = p - m2 * 0.01 / (sqrt(v2) + 1e-8);
          return std::vector<Array>{p2, m2, v2};
        },
        mesh, {P("d"), P("d"), P("d"), P("d")}, {P("d")});
    auto f = jit([&](const Array& p, const Array& g, const Array& m, const Array& v) {
      return update(p, g, m, v);
    });
    Array a = device_put(full({len * n}, 0.5), split);
    const CostAnalysis c = f.lower(a, a, a, a).cost_analysis();
    const double t = median_seconds([&] { (void)f(a, a, a, a); });
    r.bytes_per_s =
        c.bytes_accessed / left(t, c.instructions * r.seconds_per_instruction);
  }
  // Compute: the products of a training step, forward and backward: a [R, 768] x [768, 768]
  // layer, self-attention over 12 heads of 64 on sequences of 128, and the gradients of both
  // weights (R = 1024 / n rows per device, at least 128).
  {
    const int64_t rows = std::max<int64_t>(128, 1024 / n);
    auto loss = [](const Array& x, const Array& w, const Array& wq) {
      const int64_t R = x.shape()[0];
      Array h = tanh(matmul(x, w));
      Array q = reshape(matmul(h, wq), {R / 128, 128, 12, 64});
      Array s = softmax(einsum("bqhd,bkhd->bhqk", {q, q}), -1);
      Array o = reshape(einsum("bhqk,bkhd->bqhd", {s, q}), {R, 768});
      return sum(o * h);
    };
    auto step = shard_map(
        [loss](const Array& x, const Array& w, const Array& wq) {
          const auto g = grad(loss, std::vector<int>{1, 2})(x, w, wq);
          return g[0].array() + g[1].array();
        },
        mesh, {P("d"), P(), P()}, {P()}, /*check_vma=*/false);
    auto f = jit([&](const Array& x, const Array& w, const Array& wq) { return step(x, w, wq); });
    Array x = device_put(full({rows * n, 768}, 0.01), split);
    Array w = device_put(full({768, 768}, 0.001), NamedSharding(mesh, P()));
    const CostAnalysis c = f.lower(x, w, w).cost_analysis();
    const double t = median_seconds([&] { (void)f(x, w, w); });
    r.flops_per_s = c.flops / left(t, c.instructions * r.seconds_per_instruction +
                                          c.bytes_accessed / r.bytes_per_s);
  }
  if (n == 1) return r;
  // A collective's fixed cost, the devices meeting: a chain of all-reduces of 16 elements.
  {
    auto chain = shard_map(
        [](const Array& x) {
          Array y = x;
          for (int i = 0; i < 32; ++i) y = psum(y, "d") * 0.125;
          return y;
        },
        mesh, {P("d")}, {P("d")}, /*check_vma=*/false);
    auto f = jit([&](const Array& x) { return chain(x); });
    Array x = device_put(full({16 * static_cast<int64_t>(n)}, 1.0), split);
    const CostAnalysis c = f.lower(x).cost_analysis();
    double count = 0;
    for (const auto& [kind, k] : c.collectives_per_device) count += k;
    const double t = median_seconds([&] { (void)f(x); });
    r.seconds_per_collective =
        left(t, (c.instructions - count) * r.seconds_per_instruction) / count;
  }
  // Collectives: one of each kind on operands of 1 GiB over all devices (a gather's results
  // 1 GiB in all): gradients and parameters do not stay in the caches either.
  std::vector<std::pair<int, int>> ring;
  for (int i = 0; i < n; ++i) ring.emplace_back(i, (i + 1) % n);
  auto probe = [&](const std::string& kind, int64_t total,
                   std::function<Array(const Array&)> op) {
    const int64_t len = n * std::max<int64_t>(1, total / n / n);  // per device, a multiple of n
    Array x = device_put(full({len * n}, 1.0), split);
    auto body = shard_map([op](const Array& b) { return op(b); }, mesh, {P("d")}, {P("d")});
    auto f = jit([&](const Array& a) { return body(a); });
    const CostAnalysis c = f.lower(x).cost_analysis();
    const double t = median_seconds([&] { (void)f(x); });
    double count = 0;
    for (const auto& [k, m] : c.collectives_per_device) count += m;
    const double known = c.instructions * r.seconds_per_instruction +
                         c.bytes_accessed / r.bytes_per_s + count * r.seconds_per_collective;
    r.sent_bytes_per_s[kind] = sent(c) / left(t, known);
  };
  const int64_t gib = int64_t{1} << 28;  // f32 elements
  probe("all_reduce", gib, [](const Array& b) { return psum(b, "d"); });
  probe("all_gather", gib / n, [](const Array& b) { return all_gather(b, "d", 0, true); });
  probe("reduce_scatter", gib, [](const Array& b) { return psum_scatter(b, "d", 0, true); });
  probe("all_to_all", gib, [](const Array& b) { return all_to_all(b, "d", 0, 0, true); });
  probe("collective_permute", gib, [ring](const Array& b) { return ppermute(b, "d", ring); });
  return r;
}

HostRates host_rates(int n, const std::string& path) {
  nlohmann::json all = nlohmann::json::object();
  std::error_code ec;
  const std::string key = std::to_string(n);
  if (!path.empty() && std::filesystem::exists(path, ec)) {
    all = detail::parse_untrusted_json(detail::read_text_file(path, "plan", 1 << 20), "plan", path);
    detail::check(all.is_object(), "plan", "--host-rates '{}' is not a JSON object", path);
    if (all.contains(key)) {
      const nlohmann::json& j = all[key];
      HostRates r;
      try {
        r.devices = n;
        r.cores = j.at("cores").get<int>();
        r.flops_per_s = j.at("flops_per_s").get<double>();
        r.bytes_per_s = j.at("bytes_per_s").get<double>();
        r.seconds_per_instruction = j.at("seconds_per_instruction").get<double>();
        r.sent_bytes_per_s = j.at("sent_bytes_per_s").get<std::map<std::string, double>>();
        r.seconds_per_collective = j.at("seconds_per_collective").get<double>();
      } catch (const nlohmann::json::exception& e) {
        detail::fail("plan", "--host-rates '{}': the rates of {} device(s) are malformed ({})",
                     path, n, e.what());
      }
      const bool positive = r.cores > 0 && r.flops_per_s > 0 && r.bytes_per_s > 0 &&
                            r.seconds_per_instruction > 0 && r.seconds_per_collective >= 0 &&
                            std::all_of(r.sent_bytes_per_s.begin(), r.sent_bytes_per_s.end(),
                                        [](const auto& kv) { return kv.second > 0; });
      detail::check(positive, "plan",
                    "--host-rates '{}': the rates of {} device(s) must all be positive", path, n);
      return r;
    }
  }
  HostRates r = measure_host(n);
  if (!path.empty()) {
    all[key] = {{"cores", r.cores},
                {"flops_per_s", r.flops_per_s},
                {"bytes_per_s", r.bytes_per_s},
                {"seconds_per_instruction", r.seconds_per_instruction},
                {"sent_bytes_per_s", r.sent_bytes_per_s},
                {"seconds_per_collective", r.seconds_per_collective}};
    detail::write_file_atomic(path, "plan", all.dump(2) + "\n");
  }
  return r;
}

StepTime predict_step(const CostAnalysis& c, const HostRates& r, double bubble) {
  StepTime t;
  t.compute = c.flops / r.flops_per_s;
  t.memory = c.bytes_accessed / r.bytes_per_s;
  t.overhead = c.instructions * r.seconds_per_instruction;
  for (const auto& [kind, bytes] : c.bytes_per_device) {
    if (bytes <= 0) continue;
    auto it = r.sent_bytes_per_s.find(kind);
    detail::check(it != r.sent_bytes_per_s.end(), "plan",
                  "no measured rate for the collective kind '{}' on {} device(s)", kind,
                  r.devices);
    t.collectives += bytes / it->second;
  }
  for (const auto& [kind, count] : c.collectives_per_device) {
    t.collectives += count * r.seconds_per_collective;
  }
  if (r.devices <= r.cores && bubble > 0 && bubble < 1) {
    const double stretch = 1 / (1 - bubble);
    t.compute *= stretch;
    t.memory *= stretch;
    t.overhead *= stretch;
    t.collectives *= stretch;
  }
  return t;
}

}  // namespace partix::cli

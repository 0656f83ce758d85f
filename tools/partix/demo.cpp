// partix demo: a (4,2) mesh over 8 virtual CPU devices and the seed's shardings.
#include <fmt/format.h>

#include <iostream>

#include "commands.h"
#include "flags.h"
#include "partix/partix.h"

namespace partix::cli {

namespace {

struct DemoOptions {
  int devices = 8;
  int rows = 8, cols = 8;
};

void run_demo(const DemoOptions& o) {
  init({.num_cpu_devices = o.devices});
  Mesh mesh = make_mesh({4, 2}, {"data", "model"});
  fmt::print("{} over {} virtual CPU devices\n\n", mesh.to_string(), device_count());
  Array x = arange(static_cast<int64_t>(o.rows) * o.cols, DType::F32);
  Array a = from_vector(x.to_vector<float>(), {o.rows, o.cols});
  for (const PartitionSpec& spec :
       {P("data", None), P(None, "model"), P("data", "model"), P(Axes{"data", "model"})}) {
    NamedSharding s(mesh, spec);
    Array y = device_put(a, s);
    fmt::print("{}: shard shape {} of global {}\n", spec.to_string(),
               shape_to_string(s.shard_shape(y.shape())), shape_to_string(y.shape()));
    std::cout << visualize_sharding(y) << "\n";
  }
}

}  // namespace

void add_demo(CLI::App& app) {
  auto opts = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand("demo", "Shard arrays over a (4,2) mesh and draw them");
  add_int(cmd, "--devices", opts->devices, 8, static_cast<int>(kMaxDevices),
          "Virtual CPU devices (at least 8)");
  add_int(cmd, "--rows", opts->rows, 1, 1 << 12, "Rows of the demo array");
  add_int(cmd, "--cols", opts->cols, 1, 1 << 12, "Columns of the demo array");
  cmd->callback([opts] {
    if (!parse_only()) run_demo(*opts);
  });
}

}  // namespace partix::cli

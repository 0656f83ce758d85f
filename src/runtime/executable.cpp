#include "runtime/executable.h"

#include <algorithm>

#include "comm/communicator.h"
#include "core/array_impl.h"
#include "core/device_registry.h"
#include "core/errors.h"
#include "core/memory.h"
#include "runtime/device_pool.h"

namespace partix::runtime {

Executable::Executable(ir::Program local, Mesh mesh, std::vector<NamedSharding> in_shardings,
                       std::vector<NamedSharding> out_shardings, std::vector<ir::Aval> out_avals)
    : local_(std::move(local)),
      plan_(make_plan(local_)),
      mesh_(std::move(mesh)),
      in_(std::move(in_shardings)),
      out_(std::move(out_shardings)),
      out_avals_(std::move(out_avals)),
      peak_bytes_(peak_live_bytes(local_, plan_)) {}

int64_t Executable::peak_beyond_arguments(const std::vector<bool>& donate) const {
  if (std::find(donate.begin(), donate.end(), true) == donate.end()) return peak_bytes_;
  std::vector<bool> d(donate);
  d.resize(local_.params.size(), false);
  std::lock_guard<std::mutex> lock(beyond_mu_);
  auto it = beyond_.find(d);
  if (it != beyond_.end()) return it->second;
  int64_t args = 0;
  for (int v : local_.params) args += local_.aval(v).nbytes();
  const int64_t beyond = std::max<int64_t>(0, peak_bytes_with_arguments(d) - args);
  beyond_.emplace(std::move(d), beyond);
  return beyond;
}

void Executable::check_memory(const std::vector<int>& ids, const std::vector<bool>& donate) const {
  // Before running: a program that cannot fit fails here, naming its plan, instead of being
  // killed by the kernel half way (Linux overcommits) or failing on some devices only.
  const int64_t limit = detail::device_memory_limit();
  if (limit > 0) {
    // The arguments are in use already; donated ones may be written over during the run.
    const int64_t need = peak_beyond_arguments(donate);
    for (int d : ids) {
      const int64_t in_use = detail::device_counters(d).in_use.load();
      if (in_use + need > limit) {
        detail::fail(local_.name,
                     "out of memory on device {}: the program needs up to {} beyond its "
                     "arguments, which already hold {} of the limit {} per device "
                     "(memory_analysis() shows the plan)",
                     d, detail::format_bytes(need),
                     detail::format_bytes(in_use), detail::format_bytes(limit));
      }
    }
  }
  const int64_t total = peak_bytes_ * static_cast<int64_t>(ids.size());
  if (total >= detail::kCheckedAllocationBytes) {
    const int64_t avail = detail::available_host_bytes_for(total);
    if (total > avail) {
      detail::fail(local_.name,
                   "out of host memory: the program needs up to {} per device beyond its "
                   "arguments, {} on {} local devices, but {} is available (memory_analysis() "
                   "shows the plan)",
                   detail::format_bytes(peak_bytes_), detail::format_bytes(total),
                   ids.size(), detail::format_bytes(avail));
    }
  }
}

std::vector<Array> Executable::run(const std::vector<Array>& args,
                                   const std::vector<bool>& donate) const {
  if (mesh_.is_abstract()) {
    detail::fail(local_.name,
                 "the program is compiled for {}, whose devices are abstract: it can be lowered "
                 "and inspected, not run",
                 mesh_.to_string());
  }
  if (args.size() != in_.size()) {
    detail::internal_error("Executable", fmt::format("{} arguments for {} parameters", args.size(), in_.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& impl = args[i].impl();
    if (impl->tracer || !impl->sharding || !(*impl->sharding == in_[i])) {
      detail::internal_error("Executable", fmt::format("argument {} is not in {}", i, in_[i].to_string()));
    }
    detail::check_alive(args[i], local_.name);
  }
  const int me = process_index();
  std::vector<int> positions, ids;
  for (int64_t k = 0; k < mesh_.size(); ++k) {
    const Device& d = mesh_.devices()[static_cast<size_t>(k)];
    if (d.process_index == me) {
      positions.push_back(static_cast<int>(k));
      ids.push_back(d.id);
    }
  }
  check_memory(ids, donate);  // before any argument is donated
  // Gather per-device argument buffers; donated arguments give theirs up.
  std::vector<std::vector<detail::Buffer>> dev_args(positions.size());
  for (size_t j = 0; j < positions.size(); ++j) {
    for (size_t i = 0; i < args.size(); ++i) {
      dev_args[j].push_back(args[i].impl()->shards[static_cast<size_t>(positions[j])]);
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (i < donate.size() && donate[i]) detail::mark_donated(*args[i].impl());
  }
  std::vector<std::vector<detail::Buffer>> dev_out(positions.size());
  // This execution's own collective state: a failure here cancels only its collectives.
  std::unique_ptr<comm::Communicator> comm = comm::communicator_for_run(mesh_);
  const std::atomic<bool>* cancel = detail::cancel_flag();  // the caller's thread, not the pool's
  auto errors = DevicePool::instance().run(ids, [&](size_t j) {
    try {
      prim::ExecContext ctx;
      ctx.device = ids[j];
      ctx.mesh = &mesh_;
      ctx.mesh_coords = mesh_.coords(positions[j]);
      ctx.mesh_position = positions[j];
      ctx.comm = comm.get();
      ctx.cancel = cancel;
      dev_out[j] = interpret(local_, plan_, ctx, std::move(dev_args[j]));
    } catch (...) {
      comm->abort(ids[j], std::current_exception());  // wake peers waiting in a collective
      throw;
    }
  });
  rethrow_first(errors, ids);
  std::vector<Array> outs;
  for (size_t r = 0; r < out_.size(); ++r) {
    std::vector<detail::Buffer> shards(static_cast<size_t>(mesh_.size()));
    for (size_t j = 0; j < positions.size(); ++j) {
      shards[static_cast<size_t>(positions[j])] = std::move(dev_out[j][r]);
    }
    outs.push_back(detail::make_array(out_avals_[r].shape, out_avals_[r].dtype, out_[r], std::move(shards)));
  }
  return outs;
}

}  // namespace partix::runtime

namespace partix::detail {

namespace {
thread_local const std::atomic<bool>* t_cancel = nullptr;
}  // namespace

CancelScope::CancelScope(const std::atomic<bool>* flag) : prev_(t_cancel) { t_cancel = flag; }
CancelScope::~CancelScope() { t_cancel = prev_; }
const std::atomic<bool>* cancel_flag() { return t_cancel; }

}  // namespace partix::detail

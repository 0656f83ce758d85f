// A compiled program: the per-device program (the same on every device: SPMD), the mesh it
// runs on, and the shardings of its arguments and results.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ir/program.h"
#include "partix/array.h"
#include "runtime/interpreter.h"

namespace partix::runtime {

class Executable {
 public:
  Executable(ir::Program local, Mesh mesh, std::vector<NamedSharding> in_shardings,
             std::vector<NamedSharding> out_shardings, std::vector<ir::Aval> out_avals);

  // Arguments must already carry in_shardings (callers reshard first). donate[i] lets the
  // program reuse argument i's buffers; the argument Array is invalidated.
  std::vector<Array> run(const std::vector<Array>& args, const std::vector<bool>& donate = {}) const;

  const ir::Program& program() const { return local_; }
  const Plan& plan() const { return plan_; }
  const Mesh& mesh() const { return mesh_; }
  const std::vector<NamedSharding>& in_shardings() const { return in_; }
  const std::vector<NamedSharding>& out_shardings() const { return out_; }
  const std::vector<ir::Aval>& out_avals() const { return out_avals_; }
  // The most bytes of results and intermediates live at once on each device (arguments aside).
  int64_t peak_bytes() const { return peak_bytes_; }
  // The most bytes live on a device during one run, its arguments included (donated[i]: the
  // caller gives argument i up, so it dies after its last use).
  int64_t peak_bytes_with_arguments(const std::vector<bool>& donated) const {
    return runtime::peak_bytes_with_arguments(local_, plan_, donated);
  }
  std::vector<int64_t> live_bytes_after(const std::vector<bool>& donated) const {
    return runtime::live_bytes_after(local_, plan_, donated);
  }

 private:
  // Raises partix::Error when the planned peak cannot fit on devices `ids` (arguments donated
  // per `donate` may be written over, as the interpreter does).
  void check_memory(const std::vector<int>& ids, const std::vector<bool>& donate) const;
  // The most bytes one run adds on a device beyond its arguments: peak_bytes() when nothing is
  // donated, else the replay with the donated arguments dying at their last use (computed once
  // per donation pattern).
  int64_t peak_beyond_arguments(const std::vector<bool>& donate) const;

  ir::Program local_;
  Plan plan_;
  Mesh mesh_;
  std::vector<NamedSharding> in_, out_;
  std::vector<ir::Aval> out_avals_;
  int64_t peak_bytes_ = 0;
  mutable std::mutex beyond_mu_;
  mutable std::map<std::vector<bool>, int64_t> beyond_;  // by donation pattern
};

}  // namespace partix::runtime

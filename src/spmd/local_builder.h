// Emits instructions into a per-device (local) program, inferring result avals.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/program.h"
#include "ir/primitive.h"

namespace partix::spmd {

class LocalBuilder {
 public:
  LocalBuilder(ir::Program& program, Mesh mesh) : p_(program), mesh_(std::move(mesh)) {}

  ir::Program& program() { return p_; }
  const Mesh& mesh() const { return mesh_; }

  int param(const ir::Aval& aval, std::optional<NamedSharding> sharding);
  // Appends prim(inputs){attrs}; results carry `sharding` (the global sharding they stand for).
  std::vector<int> emit(std::string_view prim, const std::vector<int>& inputs, ir::Attrs attrs,
                        std::optional<NamedSharding> sharding = std::nullopt,
                        const std::string& scope = "", const prim::Regions& regions = {});
  int emit1(std::string_view prim, const std::vector<int>& inputs, ir::Attrs attrs,
            std::optional<NamedSharding> sharding = std::nullopt, const std::string& scope = "");
  const ir::Aval& aval(int v) const { return p_.aval(v); }

 private:
  ir::Program& p_;
  Mesh mesh_;
};

}  // namespace partix::spmd

#include "prim/fusion.h"

#include <map>
#include <string>

namespace partix::prim {

namespace {
std::map<std::string, FusedKernel, std::less<>>& fused_registry() {
  static std::map<std::string, FusedKernel, std::less<>> r;
  return r;
}
}  // namespace

void register_fused_kernel(std::string_view platform, FusedKernel k) {
  fused_registry()[std::string(platform)] = std::move(k);
}

const FusedKernel* find_fused_kernel(std::string_view platform) {
  auto it = fused_registry().find(platform);
  return it == fused_registry().end() ? nullptr : &it->second;
}

}  // namespace partix::prim

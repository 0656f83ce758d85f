#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

namespace partix::detail {

void warn_once(const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> seen;
  static const bool enabled = [] {
    const char* e = std::getenv("PARTIX_WARNINGS");
    return e == nullptr || std::string(e) != "0";
  }();
  if (!enabled) return;
  std::lock_guard<std::mutex> lock(mu);
  if (!seen.insert(message).second) return;
  std::fprintf(stderr, "partix warning: %s\n", message.c_str());
}

}  // namespace partix::detail

#include "core/errors.h"

#include <atomic>

namespace partix::detail {

int64_t checked_size(std::string_view api, const Shape& shape, DType dtype) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      fail(api, "negative dimension in shape {}", shape_to_string(shape));
    }
  }
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) n = -1;
    if (n < 0) break;
  }
  int64_t bytes = 0;
  if (n < 0 || __builtin_mul_overflow(n, int64_t{dtype_size(dtype)}, &bytes)) {
    fail(api, "shape {} has too many elements for a {} array (its size overflows 64 bits)",
         shape_to_string(shape), dtype_name(dtype));
  }
  return n;
}

std::string message_without_api(const Error& e) {
  const std::string what = e.what();
  const size_t close = what.find("] ");
  return !what.empty() && what[0] == '[' && close != std::string::npos ? what.substr(close + 2)
                                                                       : what;
}

void internal_error(std::string_view where, const std::string& what) {
  throw Error(fmt::format("[{}] internal error (a bug in partix, please report): {}", where, what));
}

}  // namespace partix::detail

namespace partix {
namespace {
std::atomic<LocationProvider> g_location_provider{nullptr};
}  // namespace

void set_location_provider(LocationProvider provider) { g_location_provider.store(provider); }
}  // namespace partix

namespace partix::detail {

std::string user_location() {
  LocationProvider p = g_location_provider.load();
  return p ? p() : std::string();
}

}  // namespace partix::detail

#include "core/errors.h"

namespace partix::detail {

void internal_error(std::string_view where, const std::string& what) {
  throw Error(fmt::format("[{}] internal error (a bug in partix, please report): {}", where, what));
}

}  // namespace partix::detail

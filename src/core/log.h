// Warnings for the user, printed once each to stderr ("partix warning: ..."). PARTIX_WARNINGS=0
// silences them.
#pragma once

#include <string>

namespace partix::detail {

void warn_once(const std::string& message);

}  // namespace partix::detail

// What the commands print about sizes and memory, formatted one way for all of them.
#pragma once

#include <cstdint>
#include <string>

#include "partix/partix.h"

namespace partix::cli {

// "512 B", "1.50 KiB", "12.3 MiB", "44.0 GiB": three significant digits in the largest unit
// that keeps the number at least 1.
std::string format_bytes(double bytes);

// " 0:12.3 MiB 1:12.3 MiB ...": the allocator's peak bytes in use on each device of `mesh`.
std::string peak_memory_per_device(const Mesh& mesh);

}  // namespace partix::cli

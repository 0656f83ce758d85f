#include "report.h"

#include <fmt/format.h>

#include <array>
#include <cmath>

namespace partix::cli {

std::string format_bytes(double bytes) {
  static constexpr std::array<const char*, 6> kUnits = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t u = 0;
  while (u + 1 < kUnits.size() && std::abs(bytes) >= 1024.0) {
    bytes /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} B", bytes);
  const int decimals = std::abs(bytes) >= 100 ? 0 : std::abs(bytes) >= 10 ? 1 : 2;
  return fmt::format("{:.{}f} {}", bytes, decimals, kUnits[u]);
}

std::string peak_memory_per_device(const Mesh& mesh) {
  std::string out;
  for (const Device& d : mesh.devices()) {
    if (d.process_index != process_index()) continue;  // another process's: not known here
    out += fmt::format(" {}:{}", d.id,
                       format_bytes(static_cast<double>(memory_stats(d.id).peak_bytes_in_use)));
  }
  return out;
}

}  // namespace partix::cli

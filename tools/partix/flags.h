// Numeric command-line values, parsed completely and range-checked in one place for every
// flag of every command: "8abc", "3x3" where one integer belongs, "0x10", "nan" and "inf" are
// partix::Error naming the command, the flag and the text, never a silently different value.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace partix::cli {

// Where a real number must lie; both bounds finite or infinite, each open or closed.
struct RealRange {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  std::string describe() const;  // "> 0", ">= 0", "in (0, 1]"
};

// Decimal digits with an optional sign, nothing else; the value must lie in [lo, hi].
int64_t parse_int(std::string_view command, std::string_view flag, std::string_view text,
                  int64_t lo, int64_t hi);
// Any uint64 in decimal (seeds).
uint64_t parse_uint64(std::string_view command, std::string_view flag, std::string_view text);
// A finite decimal number in `range` (NaN and infinities are never accepted).
double parse_real(std::string_view command, std::string_view flag, std::string_view text,
                  const RealRange& range);
// "AxBx..." with exactly `axes` positive integers whose product is at most max_devices.
std::vector<int64_t> parse_mesh(std::string_view command, std::string_view flag,
                                std::string_view text, size_t axes, int64_t max_devices);

// A mesh by axis names, "stage=2,data=2,model=2" (any order, each name of `names` at most
// once, absent ones of size 1), or unnamed, "4x2", sizes of the first `unnamed` names in order.
// Sizes are positive, their product at most max_devices. One size per name of `names`.
std::vector<int64_t> parse_named_mesh(std::string_view command, std::string_view flag,
                                      std::string_view text, const std::vector<std::string>& names,
                                      const std::vector<std::string>& unnamed, int64_t max_devices);

// The devices each process gets when `total` devices are split over the processes mpirun
// started (all of them without mpirun); an error when they do not split evenly.
int devices_per_process(std::string_view command, int64_t total);

// Options read as text and converted with the parsers above while the command line is parsed,
// so a bad value stops the command before it does any work. The current value is the default.
CLI::Option* add_int(CLI::App* cmd, const std::string& flag, int64_t& dst, int64_t lo, int64_t hi,
                     const std::string& help);
CLI::Option* add_int(CLI::App* cmd, const std::string& flag, int& dst, int lo, int hi,
                     const std::string& help);
CLI::Option* add_seed(CLI::App* cmd, const std::string& flag, uint64_t& dst,
                      const std::string& help);
CLI::Option* add_real(CLI::App* cmd, const std::string& flag, double& dst, RealRange range,
                      const std::string& help);

// The most devices any command accepts (virtual CPU devices are threads).
inline constexpr int64_t kMaxDevices = 4096;

}  // namespace partix::cli

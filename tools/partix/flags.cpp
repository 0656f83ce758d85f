#include "flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/errors.h"
#include "partix/distributed.h"
#include "partix/error.h"

namespace partix::cli {

namespace {

[[noreturn]] void bad_value(std::string_view command, std::string_view flag, std::string_view text,
                            const std::string& expected) {
  throw Error(fmt::format("[{}] {} must be {}, got '{}'", command, flag, expected, text));
}

// Digits with an optional leading sign: from_chars alone would stop at the first non-digit
// and leave the rest ("8abc") unread.
bool plain_integer(std::string_view text) {
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) text.remove_prefix(1);
  return !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
}

std::string_view without_plus(std::string_view text) {
  return text.starts_with('+') ? text.substr(1) : text;
}

std::string fmt_real(double v) { return fmt::format("{}", v); }

}  // namespace

std::string RealRange::describe() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi) {
    return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", fmt_real(lo), fmt_real(hi),
                       hi_open ? ")" : "]");
  }
  if (has_lo) return fmt::format("{} {}", lo_open ? ">" : ">=", fmt_real(lo));
  if (has_hi) return fmt::format("{} {}", hi_open ? "<" : "<=", fmt_real(hi));
  return "finite";
}

int64_t parse_int(std::string_view command, std::string_view flag, std::string_view text,
                  int64_t lo, int64_t hi) {
  const std::string expected = fmt::format("an integer in [{}, {}]", lo, hi);
  if (!plain_integer(text)) bad_value(command, flag, text, expected);
  const std::string_view digits = without_plus(text);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size() || v < lo || v > hi) {
    bad_value(command, flag, text, expected);
  }
  return v;
}

uint64_t parse_uint64(std::string_view command, std::string_view flag, std::string_view text) {
  const std::string expected = fmt::format("an integer in [0, {}]", UINT64_MAX);
  if (!plain_integer(text) || text.starts_with('-')) bad_value(command, flag, text, expected);
  const std::string_view digits = without_plus(text);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    bad_value(command, flag, text, expected);
  }
  return v;
}

double parse_real(std::string_view command, std::string_view flag, std::string_view text,
                  const RealRange& r) {
  const std::string expected = "a finite number " + r.describe();
  const std::string_view body = without_plus(text);
  double v = 0;
  auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
  if (body.empty() || ec != std::errc() || end != body.data() + body.size() || !std::isfinite(v)) {
    bad_value(command, flag, text, expected);
  }
  const bool below = r.lo_open ? !(v > r.lo) : !(v >= r.lo);
  const bool above = r.hi_open ? !(v < r.hi) : !(v <= r.hi);
  if (below || above) bad_value(command, flag, text, expected);
  return v;
}

std::vector<int64_t> parse_mesh(std::string_view command, std::string_view flag,
                                std::string_view text, size_t axes, int64_t max_devices) {
  std::vector<std::string> shape(axes, "N");
  const std::string expected =
      fmt::format("{} positive integers joined by 'x' ({}) with at most {} devices in all", axes,
                  fmt::join(shape, "x"), max_devices);
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    const size_t x = text.find('x', start);
    const std::string_view part = text.substr(start, x == std::string_view::npos ? x : x - start);
    if (!plain_integer(part) || part.starts_with('-') || part.starts_with('+')) {
      bad_value(command, flag, text, expected);
    }
    int64_t v = 0;
    auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (ec != std::errc() || v < 1 || v > max_devices) bad_value(command, flag, text, expected);
    out.push_back(v);
    if (x == std::string_view::npos) break;
    start = x + 1;
  }
  if (out.size() != axes) bad_value(command, flag, text, expected);
  int64_t total = 1;
  for (int64_t v : out) {
    total *= v;  // both <= max_devices before, so no overflow
    if (total > max_devices) bad_value(command, flag, text, expected);
  }
  return out;
}

std::vector<int64_t> parse_named_mesh(std::string_view command, std::string_view flag,
                                      std::string_view text, const std::vector<std::string>& names,
                                      const std::vector<std::string>& unnamed, int64_t max_devices) {
  std::vector<int64_t> out(names.size(), 1);
  auto index = [&](std::string_view n) {
    return static_cast<size_t>(std::find(names.begin(), names.end(), n) - names.begin());
  };
  if (text.find('=') == std::string_view::npos) {
    const std::vector<int64_t> sizes = parse_mesh(command, flag, text, unnamed.size(), max_devices);
    for (size_t i = 0; i < unnamed.size(); ++i) out[index(unnamed[i])] = sizes[i];
    return out;
  }
  const std::string expected = fmt::format(
      "axes as name=size joined by ',' (names: {}; each at most once) with at most {} devices in "
      "all, or {}",
      fmt::join(names, ", "), max_devices, fmt::join(std::vector<std::string>(unnamed.size(), "N"), "x"));
  std::vector<bool> seen(names.size(), false);
  int64_t total = 1;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view item =
        text.substr(start, comma == std::string_view::npos ? comma : comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) bad_value(command, flag, text, expected);
    const size_t i = index(item.substr(0, eq));
    if (i == names.size() || seen[i]) bad_value(command, flag, text, expected);
    seen[i] = true;
    const std::string_view size = item.substr(eq + 1);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(size.data(), size.data() + size.size(), v);
    if (!plain_integer(size) || size.starts_with('+') || ec != std::errc() || v < 1 ||
        v > max_devices) {
      bad_value(command, flag, text, expected);
    }
    total *= v;  // both <= max_devices before, so no overflow
    if (total > max_devices) bad_value(command, flag, text, expected);
    out[i] = v;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

namespace {
// One integer option of either width: parsed as int64 in [lo, hi], which fits T.
template <class T>
CLI::Option* add_integer(CLI::App* cmd, const std::string& flag, T& dst, int64_t lo, int64_t hi,
                         const std::string& help) {
  const std::string command = cmd->get_name();
  return cmd
      ->add_option_function<std::string>(
          flag,
          [command, flag, &dst, lo, hi](const std::string& s) {
            dst = static_cast<T>(parse_int(command, flag, s, lo, hi));
          },
          help)
      ->default_str(std::to_string(dst))
      ->type_name("INT");
}
}  // namespace

CLI::Option* add_int(CLI::App* cmd, const std::string& flag, int64_t& dst, int64_t lo, int64_t hi,
                     const std::string& help) {
  return add_integer(cmd, flag, dst, lo, hi, help);
}

CLI::Option* add_int(CLI::App* cmd, const std::string& flag, int& dst, int lo, int hi,
                     const std::string& help) {
  return add_integer(cmd, flag, dst, lo, hi, help);
}

CLI::Option* add_seed(CLI::App* cmd, const std::string& flag, uint64_t& dst,
                      const std::string& help) {
  const std::string command = cmd->get_name();
  return cmd
      ->add_option_function<std::string>(
          flag,
          [command, flag, &dst](const std::string& s) { dst = parse_uint64(command, flag, s); },
          help)
      ->default_str(std::to_string(dst))
      ->type_name("UINT");
}

CLI::Option* add_real(CLI::App* cmd, const std::string& flag, double& dst, RealRange range,
                      const std::string& help) {
  const std::string command = cmd->get_name();
  return cmd
      ->add_option_function<std::string>(
          flag,
          [command, flag, &dst, range](const std::string& s) {
            dst = parse_real(command, flag, s, range);
          },
          help)
      ->default_str(fmt::format("{}", dst))
      ->type_name("FLOAT");
}

}  // namespace partix::cli

namespace partix::cli {

int devices_per_process(std::string_view command, int64_t total) {
  const int procs = distributed::launch_process_count();
  if (total % procs != 0) {
    detail::fail(command, "the mesh's {} devices do not split evenly over {} processes", total,
                 procs);
  }
  return static_cast<int>(total / procs);
}

}  // namespace partix::cli

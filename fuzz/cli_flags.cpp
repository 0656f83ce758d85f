// The partix command line: the input's lines are the arguments after "partix". Parsed with the
// tool's own app (every subcommand, every flag's converter and range check) in parse-only
// mode, so no input trains, generates or plans. A command line either parses or is refused with
// CLI::ParseError (usage) or partix::Error (a bad value).
//
// Each argument also goes through the numeric parsers directly, which must return values in
// their range that print back to the same number.
#include <CLI/CLI.hpp>

#include <cmath>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "fuzz_util.h"

namespace {

namespace cli = partix::cli;
using partix::fuzz::die;

void check_parsers(const std::string& arg) {
  int64_t v = 0;
  if (partix::fuzz::expect_partix_error(
          [&] { v = cli::parse_int("fuzz", "--n", arg, -5, 4096); })) {
    if (v < -5 || v > 4096) die("parse_int returned " + std::to_string(v) + " out of range");
    if (cli::parse_int("fuzz", "--n", std::to_string(v), -5, 4096) != v)
      die("parse_int round trip");
  }
  double r = 0;
  const cli::RealRange unit{.lo = 0, .hi = 1, .lo_open = true};
  if (partix::fuzz::expect_partix_error([&] { r = cli::parse_real("fuzz", "--p", arg, unit); })) {
    if (!std::isfinite(r) || !(r > 0) || !(r <= 1)) die("parse_real returned a value out of range");
  }
  std::vector<int64_t> mesh;
  if (partix::fuzz::expect_partix_error(
          [&] { mesh = cli::parse_mesh("fuzz", "--mesh", arg, 2, 1 << 20); })) {
    if (mesh.size() != 2 || mesh[0] < 1 || mesh[1] < 1 || mesh[0] * mesh[1] > (1 << 20)) {
      die("parse_mesh returned a mesh out of range for '" + arg + "'");
    }
  }
  partix::fuzz::expect_partix_error([&] { cli::parse_uint64("fuzz", "--seed", arg); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args{"partix"};
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    if (end > start || end < text.size()) args.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (args.size() > 64) return 0;  // long command lines add nothing a parser would not see
  for (size_t i = 1; i < args.size(); ++i) check_parsers(args[i]);

  CLI::App app{"partix"};
  cli::set_parse_only(true);
  cli::add_commands(app);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return 0;  // a usage error, or --help
  } catch (const partix::Error& e) {
    if (std::string_view(e.what()).empty()) die("a partix::Error with an empty message");
    return 0;
  } catch (const std::exception& e) {
    die(std::string("an exception other than partix::Error or CLI::ParseError escaped: ") +
        typeid(e).name() + ": " + e.what());
  } catch (...) {
    die("a non-std exception escaped");
  }
  return 0;
}

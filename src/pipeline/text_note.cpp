// What the analyses of a pipelined program learn from its schedule. The loop is a named scope
// ("pipeline_1f1b_S2_M8", "pipeline_interleaved_S2_M8_V2") that says which schedule it runs:
//   - Lowered text prints that schedule's per-device timeline as comments above the program;
//   - cost analysis weighs each half's cond by how often its work branch runs (M*V of the
//     ticks on every device), so flops and bytes are what a device computes, bubbles left out.
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "partix/pipeline.h"
#include "spmd/analysis.h"

namespace partix::pipeline {

namespace {

void collect_scopes(const ir::Program& p, std::set<std::string>& seen, std::vector<std::string>& out) {
  for (const ir::Instr& in : p.instrs) {
    if (!in.scope.empty() && seen.insert(in.scope).second) out.push_back(in.scope);
    for (const auto& r : in.regions) collect_scopes(*r, seen, out);
  }
}

std::string schedule_note(const ir::Program& p) {
  std::set<std::string> seen_scopes;
  std::vector<std::string> scopes;
  collect_scopes(p, seen_scopes, scopes);
  static const std::regex name(R"((^|/)(pipeline_(gpipe|1f1b|interleaved)_S(\d+)_M(\d+)(_V(\d+))?)(/|$))");
  std::set<std::string> done;
  std::string out;
  for (const std::string& scope : scopes) {
    if (scope.find("pipeline_") == std::string::npos) continue;
    std::smatch m;
    if (!std::regex_search(scope, m, name) || !done.insert(m[2].str()).second) continue;
    const Schedule sc = make_schedule(parse_schedule(m[3].str()), std::stoll(m[4].str()),
                                      std::stoll(m[5].str()), m[7].matched ? std::stoll(m[7].str()) : 1);
    out += "# " + m[2].str() +
           ": the loop of that scope runs this schedule; per stage and tick, Fm / Bm is the "
           "forward / backward of microbatch m (Fm.v: on virtual stage v), . is idle\n";
    std::string table = sc.to_string();
    size_t start = 0;
    while (start < table.size()) {
      size_t end = table.find('\n', start);
      if (end == std::string::npos) end = table.size();
      out += "#   " + table.substr(start, end - start) + "\n";
      start = end + 1;
    }
  }
  return out;
}

std::optional<std::vector<double>> half_weights(const ir::Program&, const ir::Instr& in) {
  if (in.regions.size() != 2 || in.scope.find("pipeline_") == std::string::npos) return std::nullopt;
  static const std::regex half(
      R"((^|/)pipeline_(gpipe|1f1b|interleaved)_S(\d+)_M(\d+)(_V(\d+))?/(forward|backward)_half$)");
  std::smatch m;
  if (!std::regex_search(in.scope, m, half)) return std::nullopt;
  const Schedule sc = make_schedule(parse_schedule(m[2].str()), std::stoll(m[3].str()),
                                    std::stoll(m[4].str()), m[6].matched ? std::stoll(m[6].str()) : 1);
  const auto& chunk = m[7].str() == "forward" ? sc.fwd_chunk : sc.bwd_chunk;
  double work = 0, all = 0;
  for (const auto& tick : chunk) {
    for (int32_t c : tick) {
      work += c >= 0 ? 1 : 0;
      all += 1;
    }
  }
  if (all == 0) return std::nullopt;
  return std::vector<double>{work / all, 1 - work / all};  // the true branch works
}

struct Registrar {
  Registrar() {
    spmd::register_text_note(&schedule_note);
    spmd::register_branch_weights(&half_weights);
  }
} registrar;

}  // namespace

}  // namespace partix::pipeline

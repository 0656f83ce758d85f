// Pipeline schedules: a tick-by-tick simulation of every device's ordered forwards and
// backwards, and the buffer slots their inputs and cotangents occupy.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/errors.h"
#include "partix/pipeline.h"

namespace partix::pipeline {

std::string_view schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
  }
  return "?";
}

ScheduleKind parse_schedule(std::string_view name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "interleaved") return ScheduleKind::kInterleaved;
  detail::fail("pipeline.schedule", "unknown schedule '{}': one of gpipe, 1f1b, interleaved", name);
}

namespace {

struct Op {
  int32_t chunk, mb;
};

// Lifetimes [from, to] in ticks, assigned to the fewest slots: a slot is reused once its last
// occupant's interval ended before the next one begins (`strict`) or no later than it.
std::vector<int32_t> assign_slots(const std::vector<std::pair<int64_t, int64_t>>& life, bool strict,
                                  int64_t& slots) {
  std::vector<size_t> order(life.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return life[a] < life[b]; });
  std::vector<int64_t> busy_until;  // per slot
  std::vector<int32_t> slot(life.size(), -1);
  for (size_t i : order) {
    const auto [from, to] = life[i];
    for (size_t s = 0; s < busy_until.size(); ++s) {
      if (strict ? busy_until[s] < from : busy_until[s] <= from) {
        slot[i] = static_cast<int32_t>(s);
        break;
      }
    }
    if (slot[i] < 0) {
      slot[i] = static_cast<int32_t>(busy_until.size());
      busy_until.push_back(0);
    }
    busy_until[static_cast<size_t>(slot[i])] = to;
  }
  slots = std::max<int64_t>(slots, static_cast<int64_t>(busy_until.size()));
  return slot;
}

void check_schedule_args(ScheduleKind kind, int64_t S, int64_t M, int64_t V) {
  constexpr std::string_view api = "pipeline.make_schedule";
  detail::check(S >= 1 && S <= 4096, api, "stages is {}, must be in [1, 4096]", S);
  detail::check(M >= 1 && M <= 65536, api, "microbatches is {}, must be in [1, 65536]", M);
  detail::check(V >= 1 && V <= 256, api, "virtual_stages is {}, must be in [1, 256]", V);
  if (kind == ScheduleKind::kInterleaved) {
    detail::check(V >= 2, api, "the interleaved schedule needs at least 2 virtual stages, got {}",
                  V);
    detail::check(M % S == 0, api,
                  "the interleaved schedule runs microbatches in groups of the {} stages; {} "
                  "microbatches is not a multiple of {}",
                  S, M, S);
  } else {
    detail::check(V == 1, api, "the {} schedule has one virtual stage per device, got {}",
                  schedule_name(kind), V);
  }
}

using Table = std::vector<std::vector<int64_t>>;  // [chunk][microbatch]

// Each device's forwards (`fwd`) and backwards (`bwd`) in the order it runs them: microbatch by
// microbatch on its one chunk, or, interleaved, groups of S microbatches through its chunks
// (backwards in reverse chunk order).
void device_orders(int64_t S, int64_t M, int64_t V, std::vector<std::vector<Op>>& fwd,
                   std::vector<std::vector<Op>>& bwd) {
  fwd.assign(static_cast<size_t>(S), {});
  bwd.assign(static_cast<size_t>(S), {});
  auto op = [](int64_t k, int64_t m) {
    return Op{static_cast<int32_t>(k), static_cast<int32_t>(m)};
  };
  for (int64_t d = 0; d < S; ++d) {
    auto& f = fwd[static_cast<size_t>(d)];
    auto& b = bwd[static_cast<size_t>(d)];
    if (V == 1) {
      for (int64_t m = 0; m < M; ++m) {
        f.push_back(op(d, m));
        b.push_back(op(d, m));
      }
      continue;
    }
    for (int64_t g = 0; g < M / S; ++g) {
      for (int64_t v = 0; v < V; ++v) {
        for (int64_t j = 0; j < S; ++j) f.push_back(op(v * S + d, g * S + j));
      }
      for (int64_t v = V - 1; v >= 0; --v) {
        for (int64_t j = 0; j < S; ++j) b.push_back(op(v * S + d, g * S + j));
      }
    }
  }
}

// Runs the devices' orders tick by tick: each tick a device runs its next forward once the
// previous chunk's forward of that microbatch is done (a tick earlier), and its next backward
// once the next chunk's backward is (GPipe: after all its forwards). Fills sc's per-tick chunk
// and microbatch tables and the tick each forward (done_f) and backward (done_b) ran.
void simulate(Schedule& sc, const std::vector<std::vector<Op>>& fwd,
              const std::vector<std::vector<Op>>& bwd, Table& done_f, Table& done_b) {
  const int64_t S = sc.stages, M = sc.microbatches, V = sc.virtual_stages, K = S * V;
  const auto Su = static_cast<size_t>(S), Ku = static_cast<size_t>(K);
  done_f.assign(Ku, std::vector<int64_t>(static_cast<size_t>(M), -1));
  done_b = done_f;
  std::vector<size_t> fp(Su, 0), bp(Su, 0);
  const int64_t limit = 4 * (M * V + K) + 16;
  int64_t remaining = 2 * M * K;
  for (int64_t t = 0; remaining > 0; ++t) {
    detail::check(t < limit, "pipeline.make_schedule",
                  "internal: the {} schedule for S={} M={} V={} does not finish",
                  schedule_name(sc.kind), S, M, V);
    std::vector<int32_t> fk(Su, -1), fm(Su, -1), bk(Su, -1), bm(Su, -1);
    for (size_t d = 0; d < Su; ++d) {
      if (fp[d] == fwd[d].size()) continue;
      const Op op = fwd[d][fp[d]];
      const auto k = static_cast<size_t>(op.chunk), m = static_cast<size_t>(op.mb);
      if (k > 0 && (done_f[k - 1][m] < 0 || done_f[k - 1][m] >= t)) continue;
      done_f[k][m] = t;
      fk[d] = op.chunk;
      fm[d] = op.mb;
      ++fp[d];
      --remaining;
    }
    for (size_t d = 0; d < Su; ++d) {
      if (bp[d] == bwd[d].size()) continue;
      if (sc.kind == ScheduleKind::kGPipe && fp[d] != fwd[d].size()) continue;
      const Op op = bwd[d][bp[d]];
      const auto k = static_cast<size_t>(op.chunk), m = static_cast<size_t>(op.mb);
      const bool ready =
          k + 1 == Ku ? done_f[k][m] >= 0 : done_b[k + 1][m] >= 0 && done_b[k + 1][m] < t;
      if (!ready) continue;
      done_b[k][m] = t;
      bk[d] = op.chunk;
      bm[d] = op.mb;
      ++bp[d];
      --remaining;
    }
    sc.fwd_chunk.push_back(fk);
    sc.fwd_mb.push_back(fm);
    sc.bwd_chunk.push_back(bk);
    sc.bwd_mb.push_back(bm);
  }
  sc.ticks = static_cast<int64_t>(sc.fwd_chunk.size());
}

using Slots = std::vector<std::vector<int32_t>>;  // [chunk][microbatch]

// Buffer slots, per device, from the lifetimes the simulation gives; sets sc's slot counts.
// in_slot[k][m]: the input buffer slot of chunk k's input for microbatch m (k > 0);
// co_slot[k][m]: the cotangent slot of chunk k's output for microbatch m (k < K-1).
void assign_buffers(Schedule& sc, const Table& done_f, const Table& done_b, Slots& in_slot,
                    Slots& co_slot) {
  const int64_t S = sc.stages, M = sc.microbatches, K = S * sc.virtual_stages;
  in_slot.assign(static_cast<size_t>(K), std::vector<int32_t>(static_cast<size_t>(M), -1));
  co_slot = in_slot;
  for (int64_t d = 0; d < S; ++d) {
    std::vector<std::pair<int64_t, int64_t>> in_life, co_life;
    std::vector<Op> in_ops, co_ops;
    for (int64_t k = d; k < K; k += S) {
      for (int64_t m = 0; m < M; ++m) {
        const auto ku = static_cast<size_t>(k), mu = static_cast<size_t>(m);
        if (k > 0) {  // arrives after the previous chunk's forward, read by this backward
          in_life.push_back({done_f[ku - 1][mu], done_b[ku][mu]});
          in_ops.push_back({static_cast<int32_t>(k), static_cast<int32_t>(m)});
        }
        if (k + 1 < K) {  // arrives after the next chunk's backward, read by this backward
          co_life.push_back({done_b[ku + 1][mu], done_b[ku][mu]});
          co_ops.push_back({static_cast<int32_t>(k), static_cast<int32_t>(m)});
        }
      }
    }
    // An input is written after a forward half and read in the backward half: its slot may be
    // taken by an input arriving a tick after the read. A cotangent is read before the arrival
    // in the same backward half is written.
    std::vector<int32_t> is = assign_slots(in_life, /*strict=*/true, sc.input_slots);
    std::vector<int32_t> cs = assign_slots(co_life, /*strict=*/false, sc.cotangent_slots);
    for (size_t i = 0; i < in_ops.size(); ++i)
      in_slot[static_cast<size_t>(in_ops[i].chunk)][static_cast<size_t>(in_ops[i].mb)] = is[i];
    for (size_t i = 0; i < co_ops.size(); ++i)
      co_slot[static_cast<size_t>(co_ops[i].chunk)][static_cast<size_t>(co_ops[i].mb)] = cs[i];
  }
}

// Per tick and device, the slots each half reads and what it receives from its neighbours;
// the discard slot (index: the count of real ones) takes what nobody reads.
void fill_slot_tables(Schedule& sc, const Slots& in_slot, const Slots& co_slot) {
  const int64_t K = sc.stages * sc.virtual_stages;
  const auto T = static_cast<size_t>(sc.ticks), Su = static_cast<size_t>(sc.stages);
  const auto in_discard = static_cast<int32_t>(sc.input_slots);
  const auto co_discard = static_cast<int32_t>(sc.cotangent_slots);
  auto in_of = [&](int32_t k, int32_t m) {
    return in_slot[static_cast<size_t>(k)][static_cast<size_t>(m)];
  };
  auto co_of = [&](int32_t k, int32_t m) {
    return co_slot[static_cast<size_t>(k)][static_cast<size_t>(m)];
  };
  auto table = [&] { return std::vector<std::vector<int32_t>>(T, std::vector<int32_t>(Su, 0)); };
  sc.fwd_in = table();
  sc.fwd_recv = table();
  sc.bwd_in = table();
  sc.bwd_co = table();
  sc.bwd_recv = table();
  for (size_t t = 0; t < T; ++t) {
    for (size_t d = 0; d < Su; ++d) {
      const int32_t k = sc.fwd_chunk[t][d], m = sc.fwd_mb[t][d];
      sc.fwd_in[t][d] = k > 0 ? in_of(k, m) : in_discard;
      // What arrives from the previous device: the input of the chunk after the one it ran.
      const size_t prev = (d + Su - 1) % Su;
      const int32_t pk = sc.fwd_chunk[t][prev], pm = sc.fwd_mb[t][prev];
      sc.fwd_recv[t][d] = pk >= 0 && pk + 1 < K ? in_of(pk + 1, pm) : in_discard;
      const int32_t b = sc.bwd_chunk[t][d], bmb = sc.bwd_mb[t][d];
      sc.bwd_in[t][d] = b > 0 ? in_of(b, bmb) : in_discard;
      sc.bwd_co[t][d] = b >= 0 && b + 1 < K ? co_of(b, bmb) : co_discard;
      // What arrives from the next device: the cotangent of the chunk before the one it ran.
      const size_t next = (d + 1) % Su;
      const int32_t nk = sc.bwd_chunk[t][next], nm = sc.bwd_mb[t][next];
      sc.bwd_recv[t][d] = nk > 0 ? co_of(nk - 1, nm) : co_discard;
    }
  }
}

// Microbatches in flight per device: forward done, backward not yet.
void count_held(Schedule& sc) {
  sc.held.assign(static_cast<size_t>(sc.stages), 0);
  for (size_t d = 0; d < sc.held.size(); ++d) {
    int64_t live = 0, most = 0;
    for (size_t t = 0; t < static_cast<size_t>(sc.ticks); ++t) {
      if (sc.fwd_chunk[t][d] >= 0) most = std::max(most, ++live);
      if (sc.bwd_chunk[t][d] >= 0) --live;
    }
    sc.held[d] = most;
  }
}

}  // namespace

Schedule make_schedule(ScheduleKind kind, int64_t S, int64_t M, int64_t V) {
  check_schedule_args(kind, S, M, V);
  Schedule sc;
  sc.kind = kind;
  sc.stages = S;
  sc.microbatches = M;
  sc.virtual_stages = V;
  std::vector<std::vector<Op>> fwd, bwd;
  device_orders(S, M, V, fwd, bwd);
  Table done_f, done_b;
  simulate(sc, fwd, bwd, done_f, done_b);
  Slots in_slot, co_slot;
  assign_buffers(sc, done_f, done_b, in_slot, co_slot);
  fill_slot_tables(sc, in_slot, co_slot);
  count_held(sc);
  return sc;
}

void label_spans(std::vector<profiler::Span>& spans, const Schedule& sc,
                 const std::function<int64_t(int)>& stage_of) {
  const std::string fwd = "forward_half/cond", bwd = "backward_half/cond";
  auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  std::vector<size_t> order(spans.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return spans[a].start_us < spans[b].start_us; });
  std::map<int, int64_t> fwd_seen, bwd_seen;  // per device: halves seen so far
  for (size_t i : order) {
    profiler::Span& sp = spans[i];
    const bool f = ends_with(sp.name, fwd), b = !f && ends_with(sp.name, bwd);
    if (!f && !b) continue;
    const int64_t stage = stage_of(sp.device);
    if (stage < 0 || stage >= sc.stages || sc.ticks == 0) continue;
    const auto t = static_cast<size_t>((f ? fwd_seen : bwd_seen)[sp.device]++ % sc.ticks);
    const auto d = static_cast<size_t>(stage);
    const int32_t k = f ? sc.fwd_chunk[t][d] : sc.bwd_chunk[t][d];
    const int32_t m = f ? sc.fwd_mb[t][d] : sc.bwd_mb[t][d];
    std::string label = "idle";
    if (k >= 0) {
      label = fmt::format("{}{}", f ? 'F' : 'B', m);
      if (sc.virtual_stages > 1) label += fmt::format(".{}", k / sc.stages);
    }
    sp.name = sp.name.substr(0, sp.name.size() - 4) + label;  // "cond" -> the label
  }
}

double Schedule::bubble_fraction(double tf, double tb) const {
  double time = 0;
  for (int64_t t = 0; t < ticks; ++t) {
    const auto& f = fwd_chunk[static_cast<size_t>(t)];
    const auto& b = bwd_chunk[static_cast<size_t>(t)];
    if (std::any_of(f.begin(), f.end(), [](int32_t k) { return k >= 0; })) time += tf;
    if (std::any_of(b.begin(), b.end(), [](int32_t k) { return k >= 0; })) time += tb;
  }
  const double busy = static_cast<double>(microbatches * virtual_stages) * (tf + tb);
  return time > 0 ? 1.0 - busy / time : 0.0;
}

double Schedule::ideal_bubble_fraction() const {
  const auto s = static_cast<double>(stages), m = static_cast<double>(microbatches),
             v = static_cast<double>(virtual_stages);
  return (s - 1) / (v * m + s - 1);
}

std::string Schedule::to_string() const {
  auto token = [&](char c, int32_t k, int32_t m) {
    if (k < 0) return std::string(".");
    std::string s = fmt::format("{}{}", c, m);
    if (virtual_stages > 1) s += fmt::format(".{}", k / stages);
    return s;
  };
  size_t width = 1;
  for (int64_t t = 0; t < ticks; ++t) {
    for (int64_t d = 0; d < stages; ++d) {
      const auto tu = static_cast<size_t>(t), du = static_cast<size_t>(d);
      width = std::max({width, token('F', fwd_chunk[tu][du], fwd_mb[tu][du]).size(),
                        token('B', bwd_chunk[tu][du], bwd_mb[tu][du]).size()});
    }
  }
  std::string out = fmt::format(
      "{} schedule: {} stages, {} microbatches{}, {} ticks (forward half | backward half); "
      "bubble {:.1f}% (ideal {:.1f}%)\n",
      schedule_name(kind), stages, microbatches,
      virtual_stages > 1 ? fmt::format(", {} virtual stages", virtual_stages) : "", ticks,
      100 * bubble_fraction(), 100 * ideal_bubble_fraction());
  for (int64_t d = 0; d < stages; ++d) {
    const auto du = static_cast<size_t>(d);
    std::string line = fmt::format("  stage {:>2} (holds {:>2}):", d, held[du]);
    for (int64_t t = 0; t < ticks; ++t) {
      const auto tu = static_cast<size_t>(t);
      line += fmt::format(" {:<{}}|{:<{}}", token('F', fwd_chunk[tu][du], fwd_mb[tu][du]), width,
                          token('B', bwd_chunk[tu][du], bwd_mb[tu][du]), width);
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace partix::pipeline

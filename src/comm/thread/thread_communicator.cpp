#include "comm/thread/thread_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <thread>
#include <type_traits>
#include <utility>

#include "comm/rendezvous.h"
#include "comm/thread/collective_team.h"
#include "core/errors.h"

namespace partix::comm {

struct ThreadCommunicator::Slot : Rendezvous {
  explicit Slot(size_t members) : Rendezvous(members), aliases(members) {}
  // Set by the member that ran the round's work when it failed; every member raises it.
  std::exception_ptr failure;
  // The round's shared result as each member's alias, by rank: made by the member that ran
  // the work, so that the result is never held by the slot after the round.
  std::vector<detail::Buffer> aliases;
};

ThreadCommunicator::ThreadCommunicator() = default;
ThreadCommunicator::~ThreadCommunicator() = default;

ThreadCommunicator::Slot& ThreadCommunicator::slot(const Group& group) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& s = slots_[group];
  if (!s) {
    s = std::make_unique<Slot>(group.size());
  }
  return *s;
}

namespace {

int rank_of(const Group& group, int self, const char* what) {
  auto it = std::find(group.begin(), group.end(), self);
  if (it == group.end()) {
    detail::internal_error(
        what, fmt::format("device {} is not in group [{}]", self, fmt::join(group, ",")));
  }
  return static_cast<int>(it - group.begin());
}

// The combining functions, in the accumulation type. Integer sums wrap (two's complement);
// max and min propagate NaN.
template <class Acc>
struct SumOp {
  Acc operator()(Acc a, Acc v) const {
    if constexpr (std::is_integral_v<Acc>) {
      using U = std::make_unsigned_t<Acc>;
      return static_cast<Acc>(static_cast<U>(a) + static_cast<U>(v));
    } else {
      return a + v;
    }
  }
};

template <class Acc, bool kMax>
struct ExtremumOp {
  Acc operator()(Acc a, Acc v) const {
    if (a != a) return a;  // NaN stays
    if (v != v) return v;
    return (kMax ? v > a : v < a) ? v : a;
  }
};

constexpr int64_t kTile = 16;

// One tile of `m` elements starting at `b`: every source is read once, element by element
// across all sources, so that the hardware streams every input at once (reducing source
// after source over a block is about half as fast from memory, measured with 8 sources).
template <class T, class Acc, int kN, class Op>
void reduce_fixed(const std::vector<void*>& dsts, const std::vector<const void*>& srcs,
                  int64_t count, Op op) {
  const T* s[kN];
  for (int r = 0; r < kN; ++r) s[r] = static_cast<const T*>(srcs[static_cast<size_t>(r)]);
  Acc acc[kTile];
  auto tile = [&](int64_t b, int64_t m) {
    for (int64_t i = 0; i < m; ++i) {
      Acc a = static_cast<Acc>(s[0][b + i]);
      for (int r = 1; r < kN; ++r) a = op(a, static_cast<Acc>(s[r][b + i]));
      acc[i] = a;
    }
    for (void* d : dsts) {
      T* out = static_cast<T*>(d) + b;
      for (int64_t i = 0; i < m; ++i) out[i] = static_cast<T>(acc[i]);
    }
  };
  int64_t b = 0;
  for (; b + kTile <= count; b += kTile) tile(b, kTile);
  if (b < count) tile(b, count - b);
}

// Any number of sources: source after source over a tile.
template <class T, class Acc, class Op>
void reduce_any(const std::vector<void*>& dsts, const std::vector<const void*>& srcs, int64_t count,
                Op op) {
  Acc acc[kTile];
  for (int64_t b = 0; b < count; b += kTile) {
    const int64_t m = std::min(kTile, count - b);
    const T* s0 = static_cast<const T*>(srcs[0]) + b;
    for (int64_t i = 0; i < m; ++i) acc[i] = static_cast<Acc>(s0[i]);
    for (size_t r = 1; r < srcs.size(); ++r) {
      const T* s = static_cast<const T*>(srcs[r]) + b;
      for (int64_t i = 0; i < m; ++i) acc[i] = op(acc[i], static_cast<Acc>(s[i]));
    }
    for (void* d : dsts) {
      T* out = static_cast<T*>(d) + b;
      for (int64_t i = 0; i < m; ++i) out[i] = static_cast<T>(acc[i]);
    }
  }
}

template <class T, class Acc, class Op>
void reduce_with(const std::vector<void*>& dsts, const std::vector<const void*>& srcs,
                 int64_t count, Op op) {
  switch (srcs.size()) {
    case 1:
      reduce_fixed<T, Acc, 1>(dsts, srcs, count, op);
      break;
    case 2:
      reduce_fixed<T, Acc, 2>(dsts, srcs, count, op);
      break;
    case 3:
      reduce_fixed<T, Acc, 3>(dsts, srcs, count, op);
      break;
    case 4:
      reduce_fixed<T, Acc, 4>(dsts, srcs, count, op);
      break;
    case 5:
      reduce_fixed<T, Acc, 5>(dsts, srcs, count, op);
      break;
    case 6:
      reduce_fixed<T, Acc, 6>(dsts, srcs, count, op);
      break;
    case 7:
      reduce_fixed<T, Acc, 7>(dsts, srcs, count, op);
      break;
    case 8:
      reduce_fixed<T, Acc, 8>(dsts, srcs, count, op);
      break;
    default:
      reduce_any<T, Acc>(dsts, srcs, count, op);
      break;
  }
}

template <class T, class Acc>
void reduce_typed(const std::vector<void*>& dsts, const std::vector<const void*>& srcs,
                  int64_t count, ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum:
      reduce_with<T, Acc>(dsts, srcs, count, SumOp<Acc>{});
      break;
    case ReduceKind::kMax:
      reduce_with<T, Acc>(dsts, srcs, count, ExtremumOp<Acc, true>{});
      break;
    case ReduceKind::kMin:
      reduce_with<T, Acc>(dsts, srcs, count, ExtremumOp<Acc, false>{});
      break;
  }
}

}  // namespace

void reduce_into(const std::vector<void*>& dsts, const std::vector<const void*>& srcs,
                 int64_t count, DType dtype, ReduceKind kind) {
  switch (dtype) {
    case DType::F32:
      reduce_typed<float, float>(dsts, srcs, count, kind);
      break;
    case DType::F64:
      reduce_typed<double, double>(dsts, srcs, count, kind);
      break;
    // Half precision is reduced in f32.
    case DType::BF16:
      reduce_typed<bfloat16, float>(dsts, srcs, count, kind);
      break;
    case DType::F16:
      reduce_typed<float16, float>(dsts, srcs, count, kind);
      break;
    // Integer sums wrap (two's complement): accumulate in 64 bits and truncate.
    case DType::I32:
      reduce_typed<int32_t, int64_t>(dsts, srcs, count, kind);
      break;
    case DType::I64:
      reduce_typed<int64_t, int64_t>(dsts, srcs, count, kind);
      break;
    case DType::Bool:
    case DType::U8:
      reduce_typed<uint8_t, int64_t>(dsts, srcs, count, kind);
      break;
    case DType::I8:
      reduce_typed<int8_t, int64_t>(dsts, srcs, count, kind);
      break;
    case DType::I16:
      reduce_typed<int16_t, int64_t>(dsts, srcs, count, kind);
      break;
    case DType::U16:
      reduce_typed<uint16_t, int64_t>(dsts, srcs, count, kind);
      break;
    case DType::U32:
      reduce_typed<uint32_t, int64_t>(dsts, srcs, count, kind);
      break;
    default:
      detail::internal_error("reduce", "a quantized array cannot be reduced");
  }
}

Move copy_move(const void* src, std::vector<void*> dsts, int64_t bytes) {
  return Move{Move::kCopy, std::move(dsts), {src}, bytes, 1, DType::F32, ReduceKind::kSum};
}

Move zero_move(std::vector<void*> dsts, int64_t bytes) {
  return Move{Move::kZero, std::move(dsts), {}, bytes, 1, DType::F32, ReduceKind::kSum};
}

Move reduce_move(std::vector<const void*> srcs, std::vector<void*> dsts, int64_t count, DType dtype,
                 ReduceKind kind) {
  return Move{Move::kReduce, std::move(dsts), std::move(srcs), count, dtype_size(dtype), dtype,
              kind};
}

namespace {

// Elements [lo, hi) of a move.
void run_part(const Move& m, int64_t lo, int64_t hi) {
  if (hi <= lo) return;
  const int64_t off = lo * m.es;
  const auto n = static_cast<size_t>((hi - lo) * m.es);
  switch (m.kind) {
    case Move::kCopy:
      for (void* d : m.dsts) {
        std::memcpy(static_cast<char*>(d) + off, static_cast<const char*>(m.srcs[0]) + off, n);
      }
      break;
    case Move::kZero:
      for (void* d : m.dsts) std::memset(static_cast<char*>(d) + off, 0, n);
      break;
    case Move::kReduce: {
      std::vector<const void*> srcs;
      std::vector<void*> dsts;
      for (const void* p : m.srcs) srcs.push_back(static_cast<const char*>(p) + off);
      for (void* p : m.dsts) dsts.push_back(static_cast<char*>(p) + off);
      reduce_into(dsts, srcs, hi - lo, m.dtype, m.reduce);
      break;
    }
  }
}

// Below this many bytes moved in all, the waking of helpers costs more than it saves.
constexpr int64_t kSerialBytes = int64_t{256} << 10;

}  // namespace

// Runs the moves, split by bytes over the collective team. Pieces start at multiples of 4 KiB
// from each stream's start (so two threads share no cache line of an aligned buffer, as the
// allocator's are) and span at most 512 KiB of one stream, so that a copy to several
// destinations reads its source from cache after the first.
// Every element is reduced over the same sources in the same order whichever thread runs it,
// so the result does not depend on the split.
void run_moves(const std::vector<Move>& moves) {
  int64_t total = 0;
  for (const Move& m : moves) {
    total += m.count * m.es * static_cast<int64_t>(m.dsts.size() + m.srcs.size());
  }
  CollectiveTeam& team = CollectiveTeam::instance();
  if (total < kSerialBytes || team.size() == 1) {
    for (const Move& m : moves) run_part(m, 0, m.count);
    return;
  }
  int64_t stream_bytes = 0;
  for (const Move& m : moves) stream_bytes += m.count * m.es;
  constexpr int64_t kBlock = 4096;
  const int64_t grain =
      std::clamp(stream_bytes / (8 * team.size()) / kBlock * kBlock, 16 * kBlock, 128 * kBlock);
  struct Piece {
    size_t move;
    int64_t lo, hi;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < moves.size(); ++i) {
    const int64_t step = grain / moves[i].es;
    for (int64_t lo = 0; lo < moves[i].count; lo += step) {
      pieces.push_back({i, lo, std::min(moves[i].count, lo + step)});
    }
  }
  team.run(static_cast<int64_t>(pieces.size()), [&](int64_t k) {
    const Piece& p = pieces[static_cast<size_t>(k)];
    run_part(moves[p.move], p.lo, p.hi);
  });
}

namespace {

const char* at(const void* p, int64_t off) { return static_cast<const char*>(p) + off; }
char* at(void* p, int64_t off) { return static_cast<char*>(p) + off; }

}  // namespace

void ThreadCommunicator::wake_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [g, s] : slots_) s->notify();
}

template <class Work>
int ThreadCommunicator::meet(Slot& s, const Call& call, const Group& group, int self,
                             const void* in, void* out, Work work) {
  const char* what = call.what;
  const int rank = rank_of(group, self, what);
  s.in[static_cast<size_t>(rank)] = in;
  s.out[static_cast<size_t>(rank)] = out;
  s.calls[static_cast<size_t>(rank)] = call;
  // The last member to arrive does the work for all of them and only then releases them: one
  // meeting per collective.
  // Work depends only on what every member published and on the call, which the members
  // agree on once compare_calls passes.
  s.wait_all_then(
      what, group, rank, [&] { check_abort(what, group); }, [this] { return aborted(); },
      [&] {
        s.compare_calls(group);
        s.failure = nullptr;
      },
      [&] {
        if (!s.mismatch.empty()) return;
        try {
          work();
        } catch (...) {
          s.failure = std::current_exception();
          for (auto& a : s.aliases) a = detail::Buffer();
        }
        s.result = detail::Buffer();
      },
      slack_);
  // Safe to read after the release: the next round's work needs this member to arrive first.
  s.throw_if_mismatched(what);
  if (s.failure) std::rethrow_exception(s.failure);
  return rank;
}

void ThreadCommunicator::all_reduce(const void* in, void* out, int64_t count, DType dtype,
                                    ReduceKind kind, const Group& group, int self) {
  Slot& s = slot(group);
  meet(s, reduction_call("all_reduce", count, dtype, kind), group, self, in, out,
       [&] { run_moves({reduce_move(s.in, s.out, count, dtype, kind)}); });
}

detail::Buffer ThreadCommunicator::all_reduce_to_buffer(const void* in, int64_t count, DType dtype,
                                                        ReduceKind kind, const Group& group,
                                                        int self) {
  Slot& s = slot(group);
  const int rank = meet(s, reduction_call("all_reduce", count, dtype, kind, true), group, self, in,
                        nullptr, [&] {
                          s.result = detail::Buffer::shared(count * dtype_size(dtype));
                          run_moves({reduce_move(s.in, {s.result.data()}, count, dtype, kind)});
                          share_result(s, group);
                        });
  return std::move(s.aliases[static_cast<size_t>(rank)]);
}

void ThreadCommunicator::share_result(Slot& s, const Group& group) {
  for (size_t r = 0; r < group.size(); ++r) s.aliases[r] = s.result.alias_for(group[r]);
}

void ThreadCommunicator::all_gather(const void* in, void* out, int64_t bytes, const Group& group,
                                    int self) {
  Slot& s = slot(group);
  meet(s, Call{"all_gather", bytes}, group, self, in, out, [&] {
    // Member q's block goes to block q of every output, read once.
    std::vector<Move> moves;
    for (size_t q = 0; q < group.size(); ++q) {
      std::vector<void*> dsts;
      for (void* o : s.out) dsts.push_back(at(o, static_cast<int64_t>(q) * bytes));
      moves.push_back(copy_move(s.in[q], std::move(dsts), bytes));
    }
    run_moves(moves);
  });
}

detail::Buffer ThreadCommunicator::all_gather_to_buffer(const void* in, int64_t bytes,
                                                        const Group& group, int self) {
  Slot& s = slot(group);
  const int64_t n = static_cast<int64_t>(group.size());
  const int rank = meet(s, Call{"all_gather", bytes, -1, -1, true}, group, self, in, nullptr, [&] {
    s.result = detail::Buffer::shared(bytes * n);
    std::vector<Move> moves;
    for (int64_t q = 0; q < n; ++q) {
      moves.push_back(
          copy_move(s.in[static_cast<size_t>(q)], {at(s.result.data(), q * bytes)}, bytes));
    }
    run_moves(moves);
    share_result(s, group);
  });
  return std::move(s.aliases[static_cast<size_t>(rank)]);
}

void ThreadCommunicator::reduce_scatter(const void* in, void* out, int64_t count, DType dtype,
                                        ReduceKind kind, const Group& group, int self) {
  Slot& s = slot(group);
  const int64_t n = static_cast<int64_t>(group.size());
  meet(s, reduction_call("reduce_scatter", count * n, dtype, kind), group, self, in, out, [&] {
    // Output r is the reduction of chunk r of every input.
    const int64_t chunk = count * dtype_size(dtype);
    std::vector<Move> moves;
    for (int64_t r = 0; r < n; ++r) {
      std::vector<const void*> srcs;
      for (const void* p : s.in) srcs.push_back(at(p, r * chunk));
      moves.push_back(
          reduce_move(std::move(srcs), {s.out[static_cast<size_t>(r)]}, count, dtype, kind));
    }
    run_moves(moves);
  });
}

void ThreadCommunicator::all_to_all(const void* in, void* out, int64_t bytes, const Group& group,
                                    int self) {
  Slot& s = slot(group);
  const int64_t n = static_cast<int64_t>(group.size());
  meet(s, Call{"all_to_all", bytes * n}, group, self, in, out, [&] {
    // Chunk b of member a's input is chunk a of member b's output.
    std::vector<Move> moves;
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t b = 0; b < n; ++b) {
        moves.push_back(copy_move(at(s.in[static_cast<size_t>(a)], b * bytes),
                                  {at(s.out[static_cast<size_t>(b)], a * bytes)}, bytes));
      }
    }
    run_moves(moves);
  });
}

void ThreadCommunicator::permute(const void* in, void* out, int64_t bytes,
                                 const std::vector<std::pair<int, int>>& pairs, const Group& group,
                                 int self) {
  Slot& s = slot(group);
  meet(s, Call{"ppermute", bytes}, group, self, in, out, [&] {
    // Every member of an SPMD program passes the same pairs.
    std::vector<Move> moves;
    std::vector<void*> untargeted;
    for (size_t r = 0; r < group.size(); ++r) {
      int source = -1;
      for (const auto& [src, dst] : pairs) {
        if (dst == group[r]) source = src;
      }
      if (source < 0) {
        untargeted.push_back(s.out[r]);
      } else {
        const int q = rank_of(group, source, "ppermute");
        moves.push_back(copy_move(s.in[static_cast<size_t>(q)], {s.out[r]}, bytes));
      }
    }
    if (!untargeted.empty()) {
      moves.push_back(zero_move(std::move(untargeted), bytes));
    }
    run_moves(moves);
  });
}

void ThreadCommunicator::barrier(const Group& group, int self) {
  Slot& s = slot(group);
  meet(s, Call{"barrier", 0}, group, self, nullptr, nullptr, [] {});
}

}  // namespace partix::comm

#include "comm/mpi/process_communicator.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <type_traits>

#include "core/errors.h"
#include "core/memory.h"
#include "partix/device.h"

namespace partix::comm {

struct ProcessCommunicator::Slot : Rendezvous {
  Slot(size_t members, Split split, std::vector<int> local_devices)
      : Rendezvous(members),
        split(std::move(split)),
        local_devices(std::move(local_devices)),
        aliases(members) {}
  Split split;
  std::vector<int> local_devices;  // this process's members, rank order
  // The leader's staging of the current round (partial sums, what other processes sent),
  // set by the leader. From the buffer pool: a fresh zero-filled vector of hundreds of MiB
  // costs page faults and a memset on every call, about a copy of the data.
  detail::Buffer scratch;
  // A shared result as each local member's alias, by local rank (the leader makes them).
  std::vector<detail::Buffer> aliases;
};

namespace {

// Members inside a process wait this much longer for each other than leaders wait for other
// processes: when a process goes silent, its leader's timeout names it first.
constexpr std::chrono::milliseconds kSlack{2000};

// Executions on each set of processes, and the failure notices they receive.
struct Runs {
  std::mutex mu;
  std::map<uint64_t, uint64_t> next;  // key -> next run number
  std::map<std::pair<uint64_t, uint64_t>, ProcessCommunicator*> live;
  std::map<std::pair<uint64_t, uint64_t>, mpi::Notice> early;  // for runs not started yet
  std::vector<mpi::Notice> stopped;                            // processes that stopped
};

Runs& runs() {
  static Runs* r = new Runs;
  return *r;
}

uint64_t key_of(const std::vector<int>& processes) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (int p : processes) {
    h ^= static_cast<uint64_t>(p) + 1;
    h *= 1099511628211ull;
  }
  return h;
}

std::exception_ptr remote_cause(const mpi::Notice& n) {
  if (n.run == mpi::kJob) {
    return std::make_exception_ptr(
        Error(fmt::format("process {} stopped: {}", n.process, n.cause)));
  }
  return std::make_exception_ptr(Error(fmt::format("in process {}: {}", n.process, n.cause)));
}

bool involves(const std::vector<int>& processes, int p) {
  return std::binary_search(processes.begin(), processes.end(), p);
}

// A notice from another process cancels the executions it concerns; one for an execution this
// process has not started yet waits for it.
void deliver(const mpi::Notice& n) {
  Runs& r = runs();
  std::lock_guard<std::mutex> lock(r.mu);
  // abort() only records and wakes: safe under the lock (communicators unregister under it).
  if (n.run == mpi::kJob) {
    r.stopped.push_back(n);
    for (auto& [k, c] : r.live) {
      if (involves(c->processes(), n.process)) c->abort(n.device, remote_cause(n));
    }
    return;
  }
  auto it = r.live.find({n.key, n.run});
  if (it != r.live.end()) {
    it->second->abort(n.device, remote_cause(n));
  } else if (n.run >= r.next[n.key]) {
    r.early[{n.key, n.run}] = n;
  }
}

// A device's index among its process's devices (devices are numbered process by process), as
// message tags write it: at most 255.
int local_index(int device) {
  const auto& all = devices();
  const int p = all[static_cast<size_t>(device)].process_index;
  int first = device;
  while (first > 0 && all[static_cast<size_t>(first - 1)].process_index == p) --first;
  const int i = device - first;
  if (i > 0xFF) {
    detail::fail("collective",
                 "device {} is its process's device number {}: collectives across "
                 "processes address at most 256 devices per process",
                 device, i);
  }
  return i;
}

std::string group_text(const Group& group) {
  return fmt::format("group [{}]", fmt::join(group, ","));
}

}  // namespace

ProcessCommunicator::ProcessCommunicator(const Mesh& mesh) {
  local_.set_wait_slack(kSlack);
  std::set<int> procs;
  for (const Device& d : mesh.devices()) procs.insert(d.process_index);
  processes_.assign(procs.begin(), procs.end());
  key_ = key_of(processes_);
  static std::once_flag handler_once;
  std::call_once(handler_once, [] { mpi::set_notice_handler(deliver); });
  Runs& r = runs();
  std::lock_guard<std::mutex> lock(r.mu);
  run_ = r.next[key_]++;
  r.live[{key_, run_}] = this;
  auto early = r.early.find({key_, run_});
  if (early != r.early.end()) {
    abort(early->second.device, remote_cause(early->second));
    r.early.erase(early);
  }
  // Notices for executions this process has passed are of no use any more.
  for (auto it = r.early.begin(); it != r.early.end();) {
    it = (it->first.first == key_ && it->first.second < run_) ? r.early.erase(it) : std::next(it);
  }
  for (const mpi::Notice& n : r.stopped) {
    if (involves(processes_, n.process)) abort(n.device, remote_cause(n));
  }
}

ProcessCommunicator::~ProcessCommunicator() {
  Runs& r = runs();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live.erase({key_, run_});
}

void ProcessCommunicator::wake_all() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [g, s] : slots_) s->notify();
  }
  local_.abort(failed_device(), std::make_exception_ptr(Error(failure_cause())));
  // A failure of this process's device: the other processes of the mesh cancel too.
  const int dev = failed_device();
  if (dev >= 0 && dev < device_count() &&
      devices()[static_cast<size_t>(dev)].process_index == process_index()) {
    mpi::send_notice(mpi::Notice{key_, run_, process_index(), dev, failure_cause()}, processes_);
  }
}

ProcessCommunicator::Slot& ProcessCommunicator::slot(const Group& group) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& s = slots_[group];
  if (!s) {
    Split sp;
    const auto& all = devices();
    std::set<int> procs;
    for (int d : group) procs.insert(all[static_cast<size_t>(d)].process_index);
    sp.procs.assign(procs.begin(), procs.end());
    sp.ranks_of.resize(sp.procs.size());
    const int me = process_index();
    std::vector<int> local_devices;
    for (size_t r = 0; r < group.size(); ++r) {
      const int p = all[static_cast<size_t>(group[r])].process_index;
      const int idx = static_cast<int>(std::lower_bound(sp.procs.begin(), sp.procs.end(), p) -
                                       sp.procs.begin());
      sp.proc_of_rank.push_back(idx);
      sp.ranks_of[static_cast<size_t>(idx)].push_back(static_cast<int>(r));
      if (p == me) {
        sp.me = idx;
        local_devices.push_back(group[r]);
      }
    }
    s = std::make_unique<Slot>(local_devices.size(), std::move(sp), std::move(local_devices));
  }
  return *s;
}

mpi::ExchangeContext ProcessCommunicator::context(const char* what, const Group& group, int phase) {
  mpi::ExchangeContext ctx;
  ctx.what = what;
  ctx.group = group_text(group);
  // A message from process p to q is sent by p's leader for the group (its first member in
  // rank order) and received by q's leader; its tag names both leaders. Two collectives whose
  // messages share a tag then have the same two leaders, which run them in program order
  // (SPMD: every device meets its collectives in the same order), so MPI's non-overtaking
  // rule pairs every send with its own receive. (A tag of the group alone would not: groups
  // {0,3} and {0,1,2,4} meet in device 0, but process 1's leaders for them, devices 3 and 2,
  // may send in either order.) The execution's number keeps a message that a failed execution
  // left unreceived from matching a later one, until the number's low bits come round again:
  // the leaders are written as their index among their own process's devices (8 bits each, the
  // processes being the message's source and destination), which leaves 14 bits of execution
  // number in MPI's 31-bit tags: a message a failed execution left behind could be taken by the
  // 16384th execution after it (with the global device ids, 6 bits: the 64th did, summing stale
  // partial sums into a reduce-scatter).
  const Split& sp = slot(group).split;
  std::vector<int> leaders(sp.procs.size());
  for (size_t j = 0; j < sp.procs.size(); ++j) {
    leaders[j] = local_index(group[static_cast<size_t>(sp.ranks_of[j].front())]);
  }
  const int mine = leaders[static_cast<size_t>(sp.me)];
  const uint64_t run = run_ & 0x3FFF;
  ctx.tag_of = [procs = sp.procs, leaders, mine, run, phase](int peer, bool send) {
    const size_t j =
        static_cast<size_t>(std::lower_bound(procs.begin(), procs.end(), peer) - procs.begin());
    const uint64_t from = static_cast<uint64_t>(send ? mine : leaders[j]);
    const uint64_t to = static_cast<uint64_t>(send ? leaders[j] : mine);
    return static_cast<int>((run << 17) | (from << 9) | (to << 1) |
                            static_cast<uint64_t>(phase & 1));
  };
  ctx.check_abort = [this, what, &group] { throw_if_aborted(what, group); };
  return ctx;
}

// The local members meet (checking that they all entered this same call); the leader runs
// work(slot), which does the local memory work on the collective team and makes every MPI
// call; then all leave. The other members sleep meanwhile: with one thread per core the team
// does the local reductions and copies in one pass, as in the in-process communicator.
template <class Work>
void ProcessCommunicator::run(const Call& call, const Group& group, int self, const void* in,
                              void* out, Work work) {
  const char* what = call.what;
  Slot& s = slot(group);
  auto it = std::find(s.local_devices.begin(), s.local_devices.end(), self);
  if (it == s.local_devices.end()) {
    detail::internal_error(
        what, fmt::format("device {} is not in group [{}]", self, fmt::join(group, ",")));
  }
  const int lr = static_cast<int>(it - s.local_devices.begin());
  s.in[static_cast<size_t>(lr)] = in;
  s.out[static_cast<size_t>(lr)] = out;
  s.calls[static_cast<size_t>(lr)] = call;
  auto check = [&] { throw_if_aborted(what, group); };
  auto aborted_now = [this] { return aborted(); };
  s.wait_all(
      what, s.local_devices, lr, check, aborted_now, [&] { s.compare_calls(s.local_devices); },
      kSlack);
  s.throw_if_mismatched(what);
  if (lr == 0) {
    // A leader whose work fails cancels the round for the others (a barrier that raises has
    // already been cancelled, or timed out, which the executor reports).
    try {
      work(s);
    } catch (...) {
      abort(self, std::current_exception());
      throw;
    }
  }
  // The last to leave drops the round's staging; members took their aliases of a shared
  // result from s.aliases, made by the leader.
  s.wait_all(
      what, s.local_devices, lr, check, aborted_now, [&s] { s.scratch = detail::Buffer(); },
      kSlack);
}

namespace {
std::pair<int64_t, int64_t> chunk_of(int64_t count, int n, int r) {
  const int64_t c = (count + n - 1) / n;
  const int64_t lo = std::min(count, r * c);
  return {lo, std::min(count, lo + c)};
}
char* at(void* p, int64_t off) { return static_cast<char*>(p) + off; }
const char* at(const void* p, int64_t off) { return static_cast<const char*>(p) + off; }
void* mut(const void* p) { return const_cast<void*>(p); }  // MPI sends only read

// The reduction of a group spanning processes into a shared result, run by the leader:
//   1. the local inputs are reduced, in rank order, into this process's partial sum;
//   2. chunk i of the partial sum goes to the i-th process, which receives the other
//      processes' partials of its chunk;
//   3. this process's chunk is reduced over the processes in order;
//   4. the chunk goes to every other process, and theirs come in.
// The local reductions run on the collective team; reduce_into combines element by element,
// so the split changes no bit: the result is the same as one thread's, and the same on every
// process.
template <class Exchange>
detail::Buffer reduce_across(ProcessCommunicator::Slot& s, Exchange exchange, int64_t count,
                             DType dtype, ReduceKind kind) {
  const ProcessCommunicator::Split& sp = s.split;
  const int P = static_cast<int>(sp.procs.size());
  const int L = static_cast<int>(s.local_devices.size());
  const int64_t es = dtype_size(dtype);
  auto [mlo, mhi] = chunk_of(count, P, sp.me);
  const int64_t mine = (mhi - mlo) * es;
  const int64_t partial_bytes = L > 1 ? count * es : 0;
  // Pooled and uninitialised: every byte is written below before it is read.
  detail::Buffer result = detail::Buffer::shared(count * es);
  s.scratch = detail::Buffer::shared(partial_bytes + mine * (P - 1));
  char* out = result.as<char>();
  char* got = s.scratch.as<char>() + partial_bytes;
  const char* partial = L > 1 ? s.scratch.as<char>() : static_cast<const char*>(s.in[0]);
  if (L > 1) run_moves({reduce_move(s.in, {s.scratch.data()}, count, dtype, kind)});
  {
    std::vector<mpi::Transfer> sends, recvs;
    for (int j = 0, k = 0; j < P; ++j) {
      if (j == sp.me) continue;
      auto [lo, hi] = chunk_of(count, P, j);
      sends.push_back({sp.procs[static_cast<size_t>(j)], mut(partial + lo * es), (hi - lo) * es});
      recvs.push_back({sp.procs[static_cast<size_t>(j)], got + (k++) * mine, mine});
    }
    exchange(0, sends, recvs);
  }
  std::vector<const void*> srcs;
  for (int j = 0, k = 0; j < P; ++j) {
    srcs.push_back(j == sp.me ? partial + mlo * es : got + (k++) * mine);
  }
  run_moves({reduce_move(std::move(srcs), {out + mlo * es}, mhi - mlo, dtype, kind)});
  std::vector<mpi::Transfer> sends, recvs;
  for (int j = 0; j < P; ++j) {
    if (j == sp.me) continue;
    auto [lo, hi] = chunk_of(count, P, j);
    sends.push_back({sp.procs[static_cast<size_t>(j)], out + mlo * es, mine});
    recvs.push_back({sp.procs[static_cast<size_t>(j)], out + lo * es, (hi - lo) * es});
  }
  exchange(1, sends, recvs);
  return result;
}

// The gather of a group spanning processes into a shared result, run by the leader: the local
// blocks are copied in, and the leader exchanges the blocks of this process and the others'
// directly in and out of the result.
template <class Exchange>
detail::Buffer gather_across(ProcessCommunicator::Slot& s, Exchange exchange, int64_t bytes,
                             int64_t members) {
  const ProcessCommunicator::Split& sp = s.split;
  const std::vector<int>& local = sp.local();
  detail::Buffer result = detail::Buffer::shared(bytes * members);
  char* out = result.as<char>();
  std::vector<Move> moves;
  for (size_t l = 0; l < local.size(); ++l) {
    moves.push_back(copy_move(s.in[l], {out + local[l] * bytes}, bytes));
  }
  run_moves(moves);
  std::vector<mpi::Transfer> sends, recvs;
  for (size_t j = 0; j < sp.procs.size(); ++j) {
    if (static_cast<int>(j) == sp.me) continue;
    for (size_t l = 0; l < local.size(); ++l) sends.push_back({sp.procs[j], mut(s.in[l]), bytes});
    for (int r : sp.ranks_of[j]) recvs.push_back({sp.procs[j], out + r * bytes, bytes});
  }
  exchange(0, sends, recvs);
  return result;
}

// Every local member's alias of a shared result.
void share(ProcessCommunicator::Slot& s, const detail::Buffer& result) {
  for (size_t l = 0; l < s.local_devices.size(); ++l) {
    s.aliases[l] = result.alias_for(s.local_devices[l]);
  }
}

// Takes this member's alias out of the slot.
detail::Buffer take_alias(ProcessCommunicator::Slot& s, int self) {
  auto it = std::find(s.local_devices.begin(), s.local_devices.end(), self);
  return std::move(s.aliases[static_cast<size_t>(it - s.local_devices.begin())]);
}

}  // namespace

// The pointer forms compute the shared result as the buffer forms do, then copy it to every
// local member's output (one read of the result, on the collective team).
void ProcessCommunicator::all_reduce(const void* in, void* out, int64_t count, DType dtype,
                                     ReduceKind kind, const Group& group, int self) {
  if (slot(group).split.procs.size() == 1) {
    local_.all_reduce(in, out, count, dtype, kind, group, self);
    return;
  }
  auto exchange = [&](int phase, const std::vector<mpi::Transfer>& sends,
                      const std::vector<mpi::Transfer>& recvs) {
    mpi::exchange(context("all_reduce", group, phase), sends, recvs);
  };
  const Call call = reduction_call("all_reduce", count, dtype, kind);
  run(call, group, self, in, out, [&](Slot& s) {
    detail::Buffer result = reduce_across(s, exchange, count, dtype, kind);
    run_moves({copy_move(result.data(), s.out, count * dtype_size(dtype))});
  });
}

// Every local member gets an alias of one result, as in the in-process communicator.
detail::Buffer ProcessCommunicator::all_reduce_to_buffer(const void* in, int64_t count, DType dtype,
                                                         ReduceKind kind, const Group& group,
                                                         int self) {
  if (slot(group).split.procs.size() == 1) {
    return local_.all_reduce_to_buffer(in, count, dtype, kind, group, self);
  }
  auto exchange = [&](int phase, const std::vector<mpi::Transfer>& sends,
                      const std::vector<mpi::Transfer>& recvs) {
    mpi::exchange(context("all_reduce", group, phase), sends, recvs);
  };
  const Call call = reduction_call("all_reduce", count, dtype, kind, true);
  run(call, group, self, in, nullptr,
      [&](Slot& s) { share(s, reduce_across(s, exchange, count, dtype, kind)); });
  return take_alias(slot(group), self);
}

void ProcessCommunicator::all_gather(const void* in, void* out, int64_t bytes, const Group& group,
                                     int self) {
  if (slot(group).split.procs.size() == 1) {
    local_.all_gather(in, out, bytes, group, self);
    return;
  }
  auto exchange = [&](int phase, const std::vector<mpi::Transfer>& sends,
                      const std::vector<mpi::Transfer>& recvs) {
    mpi::exchange(context("all_gather", group, phase), sends, recvs);
  };
  const int64_t members = static_cast<int64_t>(group.size());
  run(Call{"all_gather", bytes}, group, self, in, out, [&](Slot& s) {
    detail::Buffer result = gather_across(s, exchange, bytes, members);
    run_moves({copy_move(result.data(), s.out, bytes * members)});
  });
}

detail::Buffer ProcessCommunicator::all_gather_to_buffer(const void* in, int64_t bytes,
                                                         const Group& group, int self) {
  if (slot(group).split.procs.size() == 1) {
    return local_.all_gather_to_buffer(in, bytes, group, self);
  }
  auto exchange = [&](int phase, const std::vector<mpi::Transfer>& sends,
                      const std::vector<mpi::Transfer>& recvs) {
    mpi::exchange(context("all_gather", group, phase), sends, recvs);
  };
  const int64_t members = static_cast<int64_t>(group.size());
  const Call call{"all_gather", bytes, -1, -1, true};
  run(call, group, self, in, nullptr,
      [&](Slot& s) { share(s, gather_across(s, exchange, bytes, members)); });
  return take_alias(slot(group), self);
}

void ProcessCommunicator::reduce_scatter(const void* in, void* out, int64_t count, DType dtype,
                                         ReduceKind kind, const Group& group, int self) {
  if (slot(group).split.procs.size() == 1) {
    local_.reduce_scatter(in, out, count, dtype, kind, group, self);
    return;
  }
  const Call call =
      reduction_call("reduce_scatter", count * static_cast<int64_t>(group.size()), dtype, kind);
  run(call, group, self, in, out, [&](Slot& s) {
    const Split& sp = s.split;
    const std::vector<int>& local = sp.local();
    const int64_t es = dtype_size(dtype);
    const int64_t chunk = count * es;
    const int64_t n = static_cast<int64_t>(group.size());
    const int P = static_cast<int>(sp.procs.size());
    const int64_t L = static_cast<int64_t>(local.size());
    // One pooled, uninitialised staging buffer (every byte is written before it is read): this
    // process's partial sums of all n chunks (when it has several members), then
    // got[(k * L + l) * chunk], the k-th other process's partial of local rank l.
    const int64_t partial_bytes = L > 1 ? n * chunk : 0;
    s.scratch = detail::Buffer::shared(partial_bytes + chunk * L * (P - 1));
    const void* partial = s.in[0];
    if (L > 1) {
      run_moves({reduce_move(s.in, {s.scratch.data()}, n * count, dtype, kind)});
      partial = s.scratch.data();
    }
    char* got = s.scratch.as<char>() + partial_bytes;
    std::vector<mpi::Transfer> sends, recvs;
    for (int64_t j = 0, k = 0; j < P; ++j) {
      if (j == sp.me) continue;
      for (int r : sp.ranks_of[static_cast<size_t>(j)]) {
        sends.push_back({sp.procs[static_cast<size_t>(j)], mut(at(partial, r * chunk)), chunk});
      }
      for (size_t l = 0; l < local.size(); ++l) {
        recvs.push_back({sp.procs[static_cast<size_t>(j)],
                         got + (k * L + static_cast<int64_t>(l)) * chunk, chunk});
      }
      ++k;
    }
    mpi::exchange(context("reduce_scatter", group, 0), sends, recvs);
    std::vector<Move> moves;
    for (size_t l = 0; l < local.size(); ++l) {
      std::vector<const void*> srcs;
      for (int64_t j = 0, k = 0; j < P; ++j) {
        if (j == sp.me) {
          srcs.push_back(at(partial, local[l] * chunk));
        } else {
          srcs.push_back(got + (static_cast<int64_t>(k++) * L + static_cast<int64_t>(l)) * chunk);
        }
      }
      moves.push_back(reduce_move(std::move(srcs), {s.out[l]}, count, dtype, kind));
    }
    run_moves(moves);
  });
}

void ProcessCommunicator::all_to_all(const void* in, void* out, int64_t bytes, const Group& group,
                                     int self) {
  if (slot(group).split.procs.size() == 1) {
    local_.all_to_all(in, out, bytes, group, self);
    return;
  }
  run(Call{"all_to_all", bytes}, group, self, in, out, [&](Slot& s) {
    const Split& sp = s.split;
    const std::vector<int>& local = sp.local();
    std::vector<mpi::Transfer> sends, recvs;
    for (size_t j = 0; j < sp.procs.size(); ++j) {
      if (static_cast<int>(j) == sp.me) continue;
      for (size_t l = 0; l < local.size(); ++l) {
        for (int r : sp.ranks_of[j])
          sends.push_back({sp.procs[j], mut(at(s.in[l], r * bytes)), bytes});
      }
      for (int r : sp.ranks_of[j]) {
        for (size_t l = 0; l < local.size(); ++l) {
          recvs.push_back({sp.procs[j], at(s.out[l], r * bytes), bytes});
        }
      }
    }
    mpi::exchange(context("all_to_all", group, 0), sends, recvs);
    std::vector<Move> moves;
    for (size_t a = 0; a < local.size(); ++a) {
      for (size_t b = 0; b < local.size(); ++b) {
        moves.push_back(
            copy_move(at(s.in[a], local[b] * bytes), {at(s.out[b], local[a] * bytes)}, bytes));
      }
    }
    run_moves(moves);
  });
}

void ProcessCommunicator::permute(const void* in, void* out, int64_t bytes,
                                  const std::vector<std::pair<int, int>>& pairs, const Group& group,
                                  int self) {
  if (slot(group).split.procs.size() == 1) {
    local_.permute(in, out, bytes, pairs, group, self);
    return;
  }
  run(Call{"ppermute", bytes}, group, self, in, out, [&](Slot& s) {
    const auto& all = devices();
    auto local_index = [&](int device) {
      auto it = std::find(s.local_devices.begin(), s.local_devices.end(), device);
      return it == s.local_devices.end() ? -1 : static_cast<int>(it - s.local_devices.begin());
    };
    std::vector<bool> targeted(s.local_devices.size(), false);
    std::vector<mpi::Transfer> sends, recvs;
    std::vector<Move> moves;
    for (const auto& [src, dst] : pairs) {
      const int ls = local_index(src), ld = local_index(dst);
      if (ld >= 0) targeted[static_cast<size_t>(ld)] = true;
      if (ls >= 0 && ld >= 0) {
        moves.push_back(
            copy_move(s.in[static_cast<size_t>(ls)], {s.out[static_cast<size_t>(ld)]}, bytes));
      } else if (ls >= 0) {
        sends.push_back({all[static_cast<size_t>(dst)].process_index,
                         mut(s.in[static_cast<size_t>(ls)]), bytes});
      } else if (ld >= 0) {
        recvs.push_back(
            {all[static_cast<size_t>(src)].process_index, s.out[static_cast<size_t>(ld)], bytes});
      }
    }
    std::vector<void*> untargeted;
    for (size_t l = 0; l < targeted.size(); ++l) {
      if (!targeted[l]) untargeted.push_back(s.out[l]);
    }
    if (!untargeted.empty()) moves.push_back(zero_move(std::move(untargeted), bytes));
    run_moves(moves);
    mpi::exchange(context("ppermute", group, 0), sends, recvs);
  });
}

void ProcessCommunicator::barrier(const Group& group, int self) {
  if (slot(group).split.procs.size() == 1) {
    local_.barrier(group, self);
    return;
  }
  run(Call{"barrier", 0}, group, self, nullptr, nullptr, [&](Slot& s) {
    std::vector<mpi::Transfer> sends, recvs;
    for (size_t j = 0; j < s.split.procs.size(); ++j) {
      if (static_cast<int>(j) == s.split.me) continue;
      sends.push_back({s.split.procs[j], nullptr, 0});
      recvs.push_back({s.split.procs[j], nullptr, 0});
    }
    mpi::exchange(context("barrier", group, 0), sends, recvs);
  });
}

}  // namespace partix::comm

// In-process collectives large enough to be split over the collective team: results against
// naive oracles for every kind, dtype and group size (uneven sizes, so that pieces end inside
// a block), the team itself, and failures inside a round (every member raises, nobody hangs).
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <thread>

#include "comm/rendezvous.h"
#include "comm/thread/collective_team.h"
#include "comm/thread/thread_communicator.h"
#include "test_util.h"

using namespace partix;
using detail::ReduceKind;

namespace {

// Enough elements that every collective below moves well over the size below which the work
// stays on one thread, and a count that is no multiple of any block or tile.
constexpr int64_t kCount = 300007;

// Runs fn(rank) on one thread per member and rethrows the first failure.
void on_members(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> ts;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

comm::Group first_devices(int n) {
  comm::Group g;
  for (int r = 0; r < n; ++r) g.push_back(r);
  return g;
}

// Values of every dtype from one integer pattern; sums of half precision values round.
template <class T>
T make(int r, int64_t i) {
  const int v = static_cast<int>((r * 131 + i * 7) % 23) - 11;
  if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) {
    return T(static_cast<float>(v) * 0.37f);
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v) * static_cast<T>(0.37);
  } else {
    return static_cast<T>(v) * static_cast<T>(100000007);  // i32 sums wrap
  }
}

// The reduction the oracle expects: in rank order, in the accumulation type (f32 for half
// precision, 64-bit for integers, truncated), as the communicator documents.
template <class T>
std::vector<T> oracle(const std::vector<std::vector<T>>& in, int64_t lo, int64_t count,
                      ReduceKind kind) {
  using Acc = std::conditional_t<std::is_integral_v<T>, int64_t,
                                 std::conditional_t<std::is_same_v<T, double>, double, float>>;
  std::vector<T> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    Acc a = static_cast<Acc>(in[0][static_cast<size_t>(lo + i)]);
    for (size_t r = 1; r < in.size(); ++r) {
      const Acc v = static_cast<Acc>(in[r][static_cast<size_t>(lo + i)]);
      if (kind == ReduceKind::kSum) {
        if constexpr (std::is_integral_v<Acc>) {
          a = static_cast<Acc>(static_cast<uint64_t>(a) + static_cast<uint64_t>(v));
        } else {
          a = a + v;
        }
      } else {
        a = kind == ReduceKind::kMax ? (v > a ? v : a) : (v < a ? v : a);
      }
    }
    out[static_cast<size_t>(i)] = static_cast<T>(a);
  }
  return out;
}

template <class T>
bool same_bits(const T* a, const T* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(T)) == 0;
}

template <class T>
void check_reductions(DType dtype) {
  for (int n : {1, 2, 3, 8}) {
    const comm::Group g = first_devices(n);
    std::vector<std::vector<T>> in(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < kCount * n; ++i) in[static_cast<size_t>(r)].push_back(make<T>(r, i));
    }
    for (ReduceKind kind : {ReduceKind::kSum, ReduceKind::kMax, ReduceKind::kMin}) {
      SCOPED_TRACE(testing::Message()
                   << dtype_name(dtype) << " n=" << n << " kind " << static_cast<int>(kind));
      const std::vector<T> want = oracle(in, 0, kCount, kind);
      comm::ThreadCommunicator c;
      std::vector<std::vector<T>> out(static_cast<size_t>(n), std::vector<T>(kCount));
      std::vector<detail::Buffer> shared(static_cast<size_t>(n));
      std::vector<std::vector<T>> scattered(static_cast<size_t>(n), std::vector<T>(kCount));
      on_members(n, [&](int r) {
        const T* mine = in[static_cast<size_t>(r)].data();
        c.all_reduce(mine, out[static_cast<size_t>(r)].data(), kCount, dtype, kind, g, r);
        shared[static_cast<size_t>(r)] = c.all_reduce_to_buffer(mine, kCount, dtype, kind, g, r);
        c.reduce_scatter(mine, scattered[static_cast<size_t>(r)].data(), kCount, dtype, kind, g, r);
      });
      for (int r = 0; r < n; ++r) {
        EXPECT_TRUE(same_bits(out[static_cast<size_t>(r)].data(), want.data(), kCount))
            << "all_reduce, member " << r;
        ASSERT_EQ(shared[static_cast<size_t>(r)].nbytes(),
                  kCount * static_cast<int64_t>(sizeof(T)));
        EXPECT_EQ(shared[static_cast<size_t>(r)].device(), r);
        EXPECT_TRUE(same_bits(shared[static_cast<size_t>(r)].as<T>(), want.data(), kCount))
            << "all_reduce_to_buffer, member " << r;
        const std::vector<T> chunk = oracle(in, r * kCount, kCount, kind);
        EXPECT_TRUE(same_bits(scattered[static_cast<size_t>(r)].data(), chunk.data(), kCount))
            << "reduce_scatter, member " << r;
      }
    }
  }
}

}  // namespace

TEST(CollectiveTeam, EveryPieceRunsOnceAndErrorsReachTheCaller) {
  for (int helpers : {0, 1, 3}) {
    comm::CollectiveTeam team(helpers);
    EXPECT_EQ(team.size(), helpers + 1);
    for (int64_t pieces : {0, 1, 2, 5, 64, 1000}) {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(pieces));
        team.run(pieces, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
        for (int64_t i = 0; i < pieces; ++i) {
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << helpers << " " << pieces << " " << i;
        }
      }
    }
    std::atomic<int> ran{0};
    EXPECT_THROW(team.run(100,
                          [&](int64_t i) {
                            ran++;
                            if (i == 37) throw std::runtime_error("piece 37");
                          }),
                 std::runtime_error);
    EXPECT_EQ(ran.load(), 100);  // the other pieces still ran
  }
}

TEST(CollectiveTeam, ConcurrentCallersEachGetTheirWholeJob) {
  comm::CollectiveTeam team(2);
  std::vector<std::thread> ts;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep) {
        std::vector<std::atomic<int>> hits(97);
        team.run(97, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
        for (auto& h : hits) wrong += h.load() != 1;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(LocalCollectives, ReductionsMatchOracleBitForBit) {
  check_reductions<float>(DType::F32);
  check_reductions<double>(DType::F64);
  check_reductions<bfloat16>(DType::BF16);
  check_reductions<float16>(DType::F16);
  check_reductions<int32_t>(DType::I32);
  check_reductions<int64_t>(DType::I64);
}

TEST(LocalCollectives, CopiesMatchOracle) {
  const int64_t bytes = kCount * 4 + 3;  // odd: pieces end off any block
  for (int n : {1, 2, 3, 8}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const comm::Group g = first_devices(n);
    const auto un = static_cast<size_t>(n);
    auto byte = [](int r, int64_t i) {
      return static_cast<char>((r * 31 + i * 17 + i / 4099) & 0xFF);
    };
    std::vector<std::vector<char>> in(un);
    for (int r = 0; r < n; ++r) {
      for (int64_t i = 0; i < bytes * n; ++i) in[static_cast<size_t>(r)].push_back(byte(r, i));
    }
    comm::ThreadCommunicator c;
    std::vector<std::vector<char>> gathered(un, std::vector<char>(static_cast<size_t>(bytes * n)));
    std::vector<std::vector<char>> exchanged(un, std::vector<char>(static_cast<size_t>(bytes * n)));
    std::vector<std::vector<char>> permuted(un, std::vector<char>(static_cast<size_t>(bytes), 'x'));
    std::vector<detail::Buffer> shared(un);
    // A rotation that leaves the last device untargeted (it receives zeros).
    std::vector<std::pair<int, int>> pairs;
    for (int r = 0; r + 1 < n; ++r) pairs.push_back({r + 1, r});
    on_members(n, [&](int r) {
      const char* mine = in[static_cast<size_t>(r)].data();
      c.all_gather(mine, gathered[static_cast<size_t>(r)].data(), bytes, g, r);
      shared[static_cast<size_t>(r)] = c.all_gather_to_buffer(mine, bytes, g, r);
      c.all_to_all(mine, exchanged[static_cast<size_t>(r)].data(), bytes, g, r);
      c.permute(mine, permuted[static_cast<size_t>(r)].data(), bytes, pairs, g, r);
    });
    for (int r = 0; r < n; ++r) {
      const auto ur = static_cast<size_t>(r);
      ASSERT_EQ(shared[ur].nbytes(), bytes * n);
      for (int q = 0; q < n; ++q) {
        const auto uq = static_cast<size_t>(q);
        EXPECT_EQ(
            std::memcmp(gathered[ur].data() + q * bytes, in[uq].data(), static_cast<size_t>(bytes)),
            0)
            << "all_gather member " << r << " block " << q;
        EXPECT_EQ(std::memcmp(shared[ur].as<char>() + q * bytes, in[uq].data(),
                              static_cast<size_t>(bytes)),
                  0)
            << "all_gather_to_buffer member " << r << " block " << q;
        EXPECT_EQ(std::memcmp(exchanged[ur].data() + q * bytes, in[uq].data() + r * bytes,
                              static_cast<size_t>(bytes)),
                  0)
            << "all_to_all member " << r << " block " << q;
      }
      if (r + 1 < n) {
        EXPECT_EQ(std::memcmp(permuted[ur].data(), in[ur + 1].data(), static_cast<size_t>(bytes)),
                  0)
            << "ppermute member " << r;
      } else {
        EXPECT_EQ(permuted[ur], std::vector<char>(static_cast<size_t>(bytes), 0)) << "untargeted";
      }
    }
  }
}

// Aliases of a shared result count on each member's device, and the result's memory is freed
// with the last alias (the communicator keeps no handle to it after the round).
TEST(LocalCollectives, SharedResultsCountPerDeviceAndAreNotRetained) {
  const comm::Group g{4, 5, 6};
  std::vector<float> in(kCount, 1.0f);
  std::vector<int64_t> before;
  for (int d : g) before.push_back(memory_stats(d).bytes_in_use);
  comm::ThreadCommunicator c;
  std::vector<detail::Buffer> got(3);
  on_members(3, [&](int r) {
    got[static_cast<size_t>(r)] = c.all_reduce_to_buffer(
        in.data(), kCount, DType::F32, ReduceKind::kSum, g, g[static_cast<size_t>(r)]);
  });
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(memory_stats(g[r]).bytes_in_use - before[r], kCount * 4) << "device " << g[r];
    EXPECT_EQ(got[r].as<float>()[kCount - 1], 3.0f);
    EXPECT_EQ(got[r].data(), got[0].data());  // one result, shared
    EXPECT_FALSE(got[r].unique());
  }
  got.clear();
  for (size_t r = 0; r < 3; ++r) EXPECT_EQ(memory_stats(g[r]).bytes_in_use, before[r]);
}

// A round whose work fails (a quantized dtype cannot be reduced) raises the same error in
// every member, and the communicator still serves the next round.
TEST(LocalCollectives, FailedWorkRaisesInEveryMember) {
  comm::set_collective_timeout_seconds(20);  // a member left waiting would fail, not hang
  comm::ThreadCommunicator c;
  const comm::Group g{0, 1, 2};
  std::vector<char> in(1 << 20, 0), out0(1 << 20), out1(1 << 20), out2(1 << 20);
  char* outs[] = {out0.data(), out1.data(), out2.data()};
  std::vector<std::string> errors(3);
  on_members(3, [&](int r) {
    try {
      c.all_reduce(in.data(), outs[r], 1024, DType::Q8_0, ReduceKind::kSum, g, r);
    } catch (const Error& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("a quantized array cannot be reduced"), std::string::npos) << e;
  }
  std::vector<float> a(kCount, 2.0f);
  std::vector<std::vector<float>> o(3, std::vector<float>(kCount));
  on_members(3, [&](int r) {
    c.all_reduce(a.data(), o[static_cast<size_t>(r)].data(), kCount, DType::F32, ReduceKind::kSum,
                 g, r);
  });
  for (auto& v : o) EXPECT_EQ(v[kCount - 1], 6.0f);
  comm::set_collective_timeout_seconds(300);
}

// A device that fails while its peers wait in a large collective cancels them, naming itself;
// a device that never comes makes the others time out naming it.
TEST(LocalCollectives, DeviceFailingMidCollectiveCancelsPeers) {
  comm::set_collective_timeout_seconds(20);
  std::vector<float> in(kCount * 8, 1.0f);
  {
    comm::ThreadCommunicator c;
    const comm::Group g = first_devices(8);
    std::vector<std::string> errors(8);
    on_members(8, [&](int r) {
      try {
        if (r == 6) {
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          throw Error("[dot] out of memory on device 6");
        }
        detail::Buffer b =
            c.all_reduce_to_buffer(in.data(), kCount, DType::F32, ReduceKind::kSum, g, r);
        ADD_FAILURE() << "member " << r << " returned";
      } catch (const CollectiveCancelled& e) {
        errors[static_cast<size_t>(r)] = e.what();
      } catch (const Error& e) {
        c.abort(r, std::current_exception());
      }
    });
    for (int r = 0; r < 8; ++r) {
      if (r == 6) continue;
      EXPECT_EQ(errors[static_cast<size_t>(r)],
                "[all_reduce] cancelled on group [0,1,2,3,4,5,6,7]: device 6 failed: [dot] out of "
                "memory on device 6");
    }
  }
  {
    comm::set_collective_timeout_seconds(0.3);
    comm::ThreadCommunicator c;
    const comm::Group g{0, 1, 2};
    std::vector<std::string> errors(2);
    std::vector<std::vector<float>> out(2, std::vector<float>(kCount * 3));
    on_members(2, [&](int r) {
      try {
        c.all_gather(in.data(), out[static_cast<size_t>(r)].data(), kCount * 4, g, r);
      } catch (const TimeoutError& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
    for (const std::string& e : errors) {
      EXPECT_NE(e.find("[all_gather] timed out after 0.3 s waiting for device(s) 2 of group "
                       "[0,1,2]"),
                std::string::npos)
          << e;
    }
  }
  comm::set_collective_timeout_seconds(300);
}

// The member doing a round's work reads its peers' buffers: while it works, they neither time
// out (however long the work takes) nor leave on an abort; afterwards they see the abort.
TEST(LocalCollectives, PeersWaitForTheWorkPastTimeoutAndAbort) {
  comm::set_collective_timeout_seconds(0.1);
  comm::Rendezvous rv(3);
  const std::vector<int> members{0, 1, 2};
  std::atomic<bool> aborted{false}, work_done{false};
  std::vector<std::string> seen(3);
  on_members(3, [&](int r) {
    if (r == 2) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the worker
    auto check = [&] {
      if (aborted) throw CollectiveCancelled("cancelled");
    };
    try {
      rv.wait_all_then(
          "test", members, r, check, [&] { return aborted.load(); }, [] {},
          [&] {
            aborted = true;  // a peer fails meanwhile
            std::this_thread::sleep_for(std::chrono::milliseconds(400));
            work_done = true;
          });
      seen[static_cast<size_t>(r)] = work_done ? "after work" : "before work";
    } catch (const Error& e) {
      seen[static_cast<size_t>(r)] = e.what();
    }
  });
  comm::set_collective_timeout_seconds(300);
  EXPECT_EQ(seen, (std::vector<std::string>{"after work", "after work", "after work"}));
}

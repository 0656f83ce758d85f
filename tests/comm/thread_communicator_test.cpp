// The in-process communicator on its own: timeouts name the missing devices, abort wakes
// waiting members, results are right under concurrent groups.
#include <cmath>
#include <functional>
#include <limits>
#include <thread>

#include "comm/thread/thread_communicator.h"
#include "test_util.h"

using namespace partix;

TEST(ThreadCommunicator, MissingPeerTimesOutNamingTheDevice) {
  comm::ThreadCommunicator c;
  comm::set_collective_timeout_seconds(0.2);
  comm::Group g{0, 1, 2};
  std::vector<float> in(4, 1.0f), out0(4), out1(4);
  std::string e0, e1;
  std::thread t0([&] {
    try {
      c.all_reduce(in.data(), out0.data(), 4, DType::F32, detail::ReduceKind::kSum, g, 0);
    } catch (const TimeoutError& e) {
      e0 = e.what();
    }
  });
  std::thread t1([&] {
    try {
      c.all_reduce(in.data(), out1.data(), 4, DType::F32, detail::ReduceKind::kSum, g, 1);
    } catch (const TimeoutError& e) {
      e1 = e.what();
    }
  });
  t0.join();
  t1.join();
  comm::set_collective_timeout_seconds(300);
  EXPECT_NE(e0.find("[all_reduce] timed out"), std::string::npos) << e0;
  EXPECT_NE(e0.find("device(s) 2 of group [0,1,2]"), std::string::npos) << e0;
  EXPECT_NE(e1.find("device(s) 2"), std::string::npos) << e1;
}

TEST(ThreadCommunicator, AbortWakesWaitingMembersNamingTheCause) {
  comm::ThreadCommunicator c;
  comm::Group g{3, 4};
  std::string err;
  std::thread t([&] {
    try {
      c.barrier(g, 3);
    } catch (const CollectiveCancelled& e) {
      err = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  c.abort(4, std::make_exception_ptr(Error("[matmul] out of memory on device 4")));
  t.join();
  EXPECT_EQ(err, "[barrier] cancelled on group [3,4]: device 4 failed: [matmul] out of memory "
                 "on device 4");
  // A member that arrives later fails at once, and the first cause stays the one reported.
  c.abort(3, std::make_exception_ptr(Error("second")));
  try {
    c.barrier(g, 3);
    ADD_FAILURE() << "a barrier after abort returned";
  } catch (const CollectiveCancelled& e) {
    EXPECT_NE(std::string(e.what()).find("device 4 failed"), std::string::npos) << e.what();
  }
}

TEST(ThreadCommunicator, TimeoutsAreValidatedAndClamped) {
  EXPECT_THROW(comm::set_collective_timeout_seconds(std::numeric_limits<double>::infinity()),
               Error);
  EXPECT_THROW(comm::set_collective_timeout_seconds(std::nan("")), Error);
  EXPECT_THROW(comm::set_collective_timeout_seconds(-1), Error);
  comm::set_collective_timeout_seconds(1e30);
  EXPECT_EQ(comm::collective_timeout_seconds(), comm::kMaxCollectiveTimeout);
  // The deadline of the largest timeout is still in the future (no overflow).
  EXPECT_GT(comm::collective_deadline(), std::chrono::steady_clock::now());
  comm::set_collective_timeout_seconds(300);
  for (const char* bad : {"inf", "nan", "-3", "0", "1e400", "5s", "", "0x"}) {
    EXPECT_THROW(comm::parse_collective_timeout("PARTIX_COLLECTIVE_TIMEOUT", bad), Error) << bad;
  }
  EXPECT_EQ(comm::parse_collective_timeout("T", "1e18"), comm::kMaxCollectiveTimeout);
  EXPECT_EQ(comm::parse_collective_timeout("T", "2.5"), 2.5);
}

TEST(ThreadCommunicator, ConcurrentGroupsAndRepeatedRounds) {
  comm::ThreadCommunicator c;
  // Two groups of four run 200 rounds of all_reduce and all_gather concurrently.
  std::vector<std::thread> ts;
  std::vector<int> failures(8, 0);
  for (int d = 0; d < 8; ++d) {
    ts.emplace_back([&, d] {
      comm::Group g = d < 4 ? comm::Group{0, 1, 2, 3} : comm::Group{4, 5, 6, 7};
      for (int round = 0; round < 200; ++round) {
        std::vector<int32_t> in(5, d + round), out(5);
        c.all_reduce(in.data(), out.data(), 5, DType::I32, detail::ReduceKind::kSum, g, d);
        int base = d < 4 ? 0 : 4;
        int want = 4 * round + base * 4 + 6;
        for (int32_t v : out) failures[static_cast<size_t>(d)] += v != want;
        std::vector<int32_t> gathered(4);
        int32_t mine = d * 10 + round;
        c.all_gather(&mine, gathered.data(), 4, g, d);
        for (int r = 0; r < 4; ++r) failures[static_cast<size_t>(d)] += gathered[static_cast<size_t>(r)] != (base + r) * 10 + round;
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int d = 0; d < 8; ++d) EXPECT_EQ(failures[static_cast<size_t>(d)], 0) << "device " << d;
}

// all_reduce against a naive oracle for every group size up to 10 (sizes above 8 take the
// generic path), sum/max/min, counts that are not a multiple of the tile, NaN propagation
// in max and min, and i64 sums that wrap.
TEST(ThreadCommunicator, AllReduceMatchesOracleForEveryGroupSize) {
  comm::ThreadCommunicator c;
  const int64_t count = 37;
  auto value = [](int r, int64_t i) { return static_cast<float>((r * 7 + i * 3) % 11) - 5.0f; };
  for (int n = 1; n <= 10; ++n) {
    comm::Group g;
    for (int r = 0; r < n; ++r) g.push_back(r);
    for (auto kind : {detail::ReduceKind::kSum, detail::ReduceKind::kMax, detail::ReduceKind::kMin}) {
      std::vector<std::vector<float>> in(static_cast<size_t>(n), std::vector<float>(count));
      std::vector<std::vector<float>> out(static_cast<size_t>(n), std::vector<float>(count));
      for (int r = 0; r < n; ++r) {
        for (int64_t i = 0; i < count; ++i) in[static_cast<size_t>(r)][static_cast<size_t>(i)] = value(r, i);
      }
      in[static_cast<size_t>(n - 1)][5] = std::nanf("");  // element 5 is NaN for every kind
      std::vector<std::thread> ts;
      for (int r = 0; r < n; ++r) {
        ts.emplace_back([&, r] {
          c.all_reduce(in[static_cast<size_t>(r)].data(), out[static_cast<size_t>(r)].data(), count,
                       DType::F32, kind, g, r);
        });
      }
      for (auto& t : ts) t.join();
      for (int64_t i = 0; i < count; ++i) {
        float want = in[0][static_cast<size_t>(i)];
        for (int r = 1; r < n; ++r) {
          float v = in[static_cast<size_t>(r)][static_cast<size_t>(i)];
          want = kind == detail::ReduceKind::kSum ? want + v
                 : kind == detail::ReduceKind::kMax ? std::max(want, v)
                                                  : std::min(want, v);
        }
        for (int r = 0; r < n; ++r) {
          float got = out[static_cast<size_t>(r)][static_cast<size_t>(i)];
          if (i == 5) {
            EXPECT_TRUE(std::isnan(got)) << "n " << n << " member " << r;
          } else {
            EXPECT_EQ(got, want) << "n " << n << " element " << i << " member " << r;
          }
        }
      }
    }
  }
}

TEST(ThreadCommunicator, IntegerSumsWrap) {
  comm::ThreadCommunicator c;
  comm::Group g{0, 1, 2};
  const int64_t big = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> in{big, 5};
  std::vector<std::vector<int64_t>> out(3, std::vector<int64_t>(2));
  std::vector<std::thread> ts;
  for (int r = 0; r < 3; ++r) {
    ts.emplace_back([&, r] {
      c.all_reduce(in.data(), out[static_cast<size_t>(r)].data(), 2, DType::I64,
                   detail::ReduceKind::kSum, g, r);
    });
  }
  for (auto& t : ts) t.join();
  // 3 * (2^63 - 1) mod 2^64, as a signed value: 2^63 - 3.
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[static_cast<size_t>(r)][0], big - 2);
    EXPECT_EQ(out[static_cast<size_t>(r)][1], 15);
  }
}

// Regression: members of a group that entered different collectives, or the same one with
// different sizes, read each other's buffers as the wrong thing. Every member now raises an
// error naming each device's call.
TEST(ThreadCommunicator, MembersInDifferentCallsRaiseNamingEachCall) {
  comm::set_collective_timeout_seconds(10);  // a failure here must not wait long
  comm::Group g{5, 6};
  auto both = [&](const std::function<void()>& a, const std::function<void()>& b) {
    std::vector<std::string> errors(2);
    auto guarded = [&](size_t k, const std::function<void()>& fn) {
      return std::thread([&, k, fn] {
        try {
          fn();
        } catch (const TimeoutError& e) {
          errors[k] = std::string("timeout: ") + e.what();
        } catch (const Error& e) {
          errors[k] = e.what();
        }
      });
    };
    std::thread t0 = guarded(0, a), t1 = guarded(1, b);
    t0.join();
    t1.join();
    return errors;
  };
  {
    comm::ThreadCommunicator c;
    std::vector<float> in(8, 1.0f), out(8);
    auto errors = both(
        [&] { c.all_reduce(in.data(), out.data(), 4, DType::F32, detail::ReduceKind::kSum, g, 5); },
        [&] { c.all_reduce(in.data(), out.data(), 8, DType::F32, detail::ReduceKind::kMax, g, 6); });
    for (const std::string& e : errors) {
      EXPECT_NE(e.find("[all_reduce] the devices of group [5,6] entered different collectives"),
                std::string::npos)
          << e;
      EXPECT_NE(e.find("device 5: all_reduce of 16 bytes (sum f32); device 6: all_reduce of 32 "
                       "bytes (max f32)"),
                std::string::npos)
          << e;
    }
  }
  {
    comm::ThreadCommunicator c;
    std::vector<float> in(4, 1.0f);
    auto errors = both(
        [&] { c.all_reduce_to_buffer(in.data(), 4, DType::F32, detail::ReduceKind::kSum, g, 5); },
        [&] { c.all_gather_to_buffer(in.data(), 16, g, 6); });
    EXPECT_NE(errors[0].find("[all_reduce]"), std::string::npos) << errors[0];
    EXPECT_NE(errors[1].find("[all_gather]"), std::string::npos) << errors[1];
    for (const std::string& e : errors) {
      EXPECT_NE(e.find("device 6: all_gather of 16 bytes"), std::string::npos) << e;
    }
  }
  {
    // Members that agree meet as before.
    comm::ThreadCommunicator c;
    std::vector<float> a{1, 2}, b{3, 4}, oa(2), ob(2);
    auto errors = both(
        [&] { c.all_reduce(a.data(), oa.data(), 2, DType::F32, detail::ReduceKind::kSum, g, 5); },
        [&] { c.all_reduce(b.data(), ob.data(), 2, DType::F32, detail::ReduceKind::kSum, g, 6); });
    EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
    EXPECT_EQ(oa, (std::vector<float>{4, 6}));
    EXPECT_EQ(ob, (std::vector<float>{4, 6}));
  }
  comm::set_collective_timeout_seconds(300);
}

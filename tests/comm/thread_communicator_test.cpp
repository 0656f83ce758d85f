// The in-process communicator on its own: timeouts name the missing devices, abort wakes
// waiting members, results are right under concurrent groups.
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
      c.all_reduce(in.data(), out0.data(), 4, DType::F32, prim::ReduceKind::kSum, g, 0);
    } catch (const TimeoutError& e) {
      e0 = e.what();
    }
  });
  std::thread t1([&] {
    try {
      c.all_reduce(in.data(), out1.data(), 4, DType::F32, prim::ReduceKind::kSum, g, 1);
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

TEST(ThreadCommunicator, AbortWakesWaitingMembers) {
  comm::ThreadCommunicator c;
  comm::Group g{3, 4};
  std::string err;
  std::thread t([&] {
    try {
      c.barrier(g, 3);
    } catch (const Error& e) {
      err = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  c.abort();
  t.join();
  EXPECT_NE(err.find("aborted"), std::string::npos) << err;
  c.reset_abort();
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
        c.all_reduce(in.data(), out.data(), 5, DType::I32, prim::ReduceKind::kSum, g, d);
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

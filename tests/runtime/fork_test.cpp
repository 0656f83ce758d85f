// fork() after the runtime started: the child's copy of the runtime has none of its threads, so
// its first program raises partix::Error naming the fork instead of waiting forever; reading
// arrays made before the fork still works, and the child exits normally (exit handlers and
// static destructors run) without hanging. The parent goes on as before.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "test_util.h"

using namespace partix;

namespace {

// The wait status of `pid` once it ended, or -1 when it was still running after `seconds`
// (then it is killed).
int wait_for(pid_t pid, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

// In the child: 0 when `run` raised the fork error; else says why on stderr.
int expect_fork_error(const char* what, const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& e) {
    const std::string m = e.what();
    if (m.find("before fork()") != std::string::npos &&
        m.find("process " + std::to_string(getppid())) != std::string::npos) {
      return 0;
    }
    std::fprintf(stderr, "child: %s raised an unclear error: %s\n", what, m.c_str());
    return 1;
  }
  std::fprintf(stderr, "child: %s ran without an error\n", what);
  return 1;
}

int child(const Array& x, const std::function<Array(const Array&)>& total) {
  int failures = expect_fork_error("a jit over 8 devices", [&] { (void)total(x); });
  failures += expect_fork_error("an eager op", [&] { (void)(x * 2.0); });
  const std::vector<float> host = x.to_vector<float>();  // reading needs no device thread
  if (host.size() != 64 || host[63] != 63.0f) {
    std::fprintf(stderr, "child: reading the array gave the wrong values\n");
    ++failures;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

TEST(Fork, AChildForkedAfterTheRuntimeStartedRaisesAtItsFirstProgramAndExits) {
  Mesh mesh({8}, {"x"});
  std::vector<float> values(64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  Array x = from_vector(values, {64}, NamedSharding(mesh, P("x")));
  auto total = jit([](const Array& v) { return sum(v); });
  ASSERT_EQ(total(x).item<float>(), 2016.0f);  // the runtime's threads have started
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) std::exit(child(x, total));  // a normal exit: it must not hang either
  const int status = wait_for(pid, 60);
  ASSERT_NE(status, -1) << "the forked child hung";
  ASSERT_TRUE(WIFEXITED(status)) << "the forked child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the forked child's checks failed (its stderr says why)";
  EXPECT_EQ(total(x * 2.0).item<float>(), 4032.0f);  // the parent carries on
}

// main returns while another host thread is in the middle of running programs with
// collectives: the process must exit promptly (ctest's timeout fails it otherwise), without a
// crash, whatever instant the exit lands on.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>

#include "partix/partix.h"

using namespace partix;

int main() {
  init({.num_cpu_devices = 8});
  Mesh mesh = make_mesh({8}, {"x"});
  // The thread's state outlives main (it is still running when main returns).
  static Array* x = new Array(
      device_put(random::normal(random::key(0), {64, 256}), NamedSharding(mesh, P("x"))));
  static auto* f = new std::function<Array(const Array&)>(
      jit([](const Array& a) { return sum(a * 2.0f, {0}); }));
  static std::atomic<int> runs{0};
  std::thread([] {
    while (true) {
      (*f)(*x);
      runs++;
    }
  }).detach();
  while (runs.load() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::printf("returning after %d runs\n", runs.load());
  return 0;
}

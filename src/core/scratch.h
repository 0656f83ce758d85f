// A kernel's per-call scratch array: on the stack up to N elements, on the heap past that.
// Kernels that run on every instruction of a decode step (reductions, concatenations, box
// copies) keep their small index and partial-sum arrays here instead of in a std::vector,
// which would call malloc on every call.
#pragma once

#include <cstddef>
#include <vector>

namespace partix::detail {

template <class T, size_t N>
class Scratch {
 public:
  // n elements, value-initialised (zeros for arithmetic types).
  explicit Scratch(size_t n) : big_(n > N ? n : 0), data_(n > N ? big_.data() : small_) {
    if (n <= N) {
      for (size_t i = 0; i < n; ++i) small_[i] = T{};
    }
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* data() { return data_; }
  T& operator[](size_t i) { return data_[i]; }

 private:
  T small_[N];
  std::vector<T> big_;
  T* data_;
};

}  // namespace partix::detail

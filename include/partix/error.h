// partix::Error: every user error. The message starts with the API in brackets,
// e.g. "[NamedSharding] mesh axis 'q' is not in Mesh('x': 4, 'y': 2)".
#pragma once

#include <atomic>
#include <stdexcept>
#include <string>

namespace partix {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A collective whose peers never arrived within the timeout.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A collective cancelled because another device of the same program failed; the message
// names that device and its error. Callers of jit and shard_map see the original error.
class CollectiveCancelled : public Error {
 public:
  using Error::Error;
};

// A program stopped because its caller asked it to (Ctrl-C in Python); nothing it made is kept.
class Cancelled : public Error {
 public:
  using Error::Error;
};

// Where in the user's program the op being traced or run was written, as "file:line". Errors
// about the user's program (explicit sharding) cite it. Front ends install a provider: the
// Python module reports the innermost frame outside the partix package. None is installed for
// C++ programs, whose errors cite the named scope (partix::named_scope) instead.
using LocationProvider = std::string (*)();
void set_location_provider(LocationProvider provider);

namespace detail {
// While alive, programs started from this thread check *flag between instructions (and loop
// iterations) and stop with Cancelled once it is set; their collectives wake their peers.
class CancelScope {
 public:
  explicit CancelScope(const std::atomic<bool>* flag);
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  const std::atomic<bool>* prev_;
};
// The flag of the innermost CancelScope on this thread (null: none).
const std::atomic<bool>* cancel_flag();
}  // namespace detail

}  // namespace partix

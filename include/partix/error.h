// partix::Error: every user error. The message starts with the API in brackets,
// e.g. "[NamedSharding] mesh axis 'q' is not in Mesh('x': 4, 'y': 2)".
#pragma once

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

}  // namespace partix

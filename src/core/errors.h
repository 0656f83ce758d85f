// Internal helpers to raise partix::Error with the "[API] message" convention.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <string_view>

#include "partix/dtype.h"
#include "partix/error.h"

namespace partix::detail {

template <class... Args>
[[noreturn]] void fail(std::string_view api, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format("[{}] ", api) + fmt::format(f, std::forward<Args>(args)...));
}

// Raises when a check does not hold. Its arguments are evaluated on every call: a message that
// needs text made for it (to_string(), shape_to_string(), fmt::join) is written
// `if (!cond) fail(...)` instead, so that nothing is made on the path that succeeds (on the
// runtime's per-instruction paths that cost a few percent of a decode step).
template <class... Args>
void check(bool ok, std::string_view api, fmt::format_string<Args...> f, Args&&... args) {
  if (!ok) fail(api, f, std::forward<Args>(args)...);
}

// The element count of an array of `shape` and `dtype`. Throws naming the API and the shape
// when a dimension is negative or the count, or its size in bytes, does not fit in int64.
int64_t checked_size(std::string_view api, const Shape& shape, DType dtype);

// e's message without its "[API] " prefix: for an API that reports another's error as its own.
std::string message_without_api(const Error& e);

// An internal invariant broke: a bug in partix, not in the user's program.
[[noreturn]] void internal_error(std::string_view where, const std::string& what);

}  // namespace partix::detail

namespace partix::detail {

// What the installed location provider (partix::set_location_provider) says; empty when none
// is installed or it knows nothing.
std::string user_location();

}  // namespace partix::detail

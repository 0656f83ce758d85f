// JSON from untrusted files: parse errors, deep nesting and duplicate keys become
// partix::Error naming the file, before any value is used.
#pragma once

#include <nlohmann/json.hpp>

#include <string_view>

namespace partix::detail {

// Parses `text` (the contents of `file`). Rejects: invalid JSON or UTF-8, nesting deeper
// than max_depth (a hostile file must not exhaust the stack), and an object with the same
// key twice (which value wins would be a guess).
nlohmann::json parse_untrusted_json(std::string_view text, std::string_view api,
                                    std::string_view file, int max_depth = 64);

// "object", "array", "string", "number", ... for error messages.
const char* json_kind(const nlohmann::json& j);

}  // namespace partix::detail

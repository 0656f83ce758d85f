#include "files/json_util.h"

#include <set>
#include <string>
#include <vector>

#include "core/errors.h"

namespace partix::detail {

const char* json_kind(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "object";
    case nlohmann::json::value_t::array:
      return "array";
    case nlohmann::json::value_t::string:
      return "string";
    case nlohmann::json::value_t::boolean:
      return "boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "integer";
    case nlohmann::json::value_t::number_float:
      return "number";
    default:
      return "value";
  }
}

namespace {

// The deepest bracket nesting outside strings; a cheap scan so the parser never sees a
// pathological document.
int nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

nlohmann::json parse_untrusted_json(std::string_view text, std::string_view api,
                                    std::string_view file, int max_depth) {
  int depth = nesting_depth(text);
  if (depth > max_depth) {
    fail(api, "'{}': JSON nested {} levels deep (at most {} accepted)", file, depth, max_depth);
  }
  // One key set per open object, to find duplicate keys while parsing.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      open_objects.emplace_back();
    } else if (event == E::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == E::key && !open_objects.empty() && duplicate.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) duplicate = key;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    fail(api, "'{}': invalid JSON: {}", file, e.what());
  }
  if (!duplicate.empty()) fail(api, "'{}': JSON object has the key '{}' twice", file, duplicate);
  return j;
}

}  // namespace partix::detail

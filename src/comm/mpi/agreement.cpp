#include "comm/mpi/agreement.h"

#include <set>
#include <utility>
#include <vector>

#include "comm/mpi/mpi_runtime.h"
#include "core/errors.h"
#include "files/checksum.h"
#include "partix/device.h"
#include "partix/distributed.h"

namespace partix {

namespace {

// Splits "a\0b\0..." into its fields.
std::vector<std::string> fields(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\0', at);
    out.push_back(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    out += p;
    out.push_back('\0');
  }
  return out;
}

std::vector<int> all_processes() {
  std::vector<int> all;
  for (int p = 0; p < distributed::launch_process_count(); ++p) all.push_back(p);
  return all;
}

}  // namespace

namespace detail {

void check_host_data_agrees(const char* api, const NamedSharding& sharding, DType dtype,
                            const Shape& global_shape, const std::string& block, const void* data,
                            size_t bytes) {
  if (process_count() == 1) return;
  std::set<int> procs;
  for (const Device& d : sharding.mesh().devices()) procs.insert(d.process_index);
  if (procs.size() < 2) return;
  const std::vector<int> ps(procs.begin(), procs.end());
  const std::string array = std::string(dtype_name(dtype)) + shape_to_string(global_shape);
  const std::string hash = hex64(xxh64(data, bytes));
  const std::vector<std::string> all =
      comm::mpi::exchange_control(ps, joined({array, block, hash}), api);
  const int me = process_index();
  for (size_t i = 0; i < ps.size(); ++i) {
    const std::vector<std::string> theirs = fields(all[i]);
    if (theirs.size() != 3) {
      internal_error(api, fmt::format("process {} sent a malformed agreement message", ps[i]));
    }
    if (theirs[0] != array) {
      fail(api,
           "process {} places a {} array on {} but process {} places a {} array: every process "
           "must build the same global array",
           me, array, sharding.to_string(), ps[i], theirs[0]);
    }
    if (theirs[1] != block || theirs[2] == hash) continue;
    if (block.empty()) {
      fail(api,
           "process {} and process {} passed different values for the {} array placed on {} "
           "(hashes {} and {}): a sharding that spans processes holds one value, so every "
           "process must pass the same host data; to give each process its own part, use "
           "make_array_from_process_local_data",
           me, ps[i], array, sharding.to_string(), hash, theirs[2]);
    }
    fail(api,
         "process {} and process {} both hold block {} of the {} array on {}, but passed "
         "different local data for it (hashes {} and {}): processes that hold the same block "
         "must pass the same data",
         me, ps[i], block, array, sharding.to_string(), hash, theirs[2]);
  }
}

}  // namespace detail

namespace distributed {

void assert_same_settings(const std::string& api,
                          const std::vector<std::pair<std::string, std::string>>& settings) {
  if (launch_process_count() == 1) return;
  std::vector<std::string> mine;
  for (const auto& [name, value] : settings) {
    mine.push_back(name);
    mine.push_back(value);
  }
  const std::vector<int> all = all_processes();
  const std::vector<std::string> got = comm::mpi::exchange_control(all, joined(mine), api.c_str());
  const int me = launch_process_index();
  auto shown = [](const std::string& name, const std::string* value) {
    if (value == nullptr) return fmt::format("no {}", name);
    return value->empty() ? fmt::format("{} (not given)", name)
                          : fmt::format("{} {}", name, *value);
  };
  for (size_t p = 0; p < all.size(); ++p) {
    const std::vector<std::string> theirs = fields(got[p]);
    auto find = [&](const std::vector<std::string>& f, const std::string& name) {
      for (size_t i = 0; i + 1 < f.size(); i += 2) {
        if (f[i] == name) return &f[i + 1];
      }
      return static_cast<const std::string*>(nullptr);
    };
    std::vector<std::string> names;
    for (const auto& s : settings) names.push_back(s.first);
    for (size_t i = 0; i + 1 < theirs.size(); i += 2) names.push_back(theirs[i]);
    for (const std::string& name : names) {
      const std::string* a = find(mine, name);
      const std::string* b = find(theirs, name);
      if (a != nullptr && b != nullptr && *a == *b) continue;
      detail::fail(api,
                   "process {} has {} but process {} has {}: every process of the job must be "
                   "given the same settings",
                   me, shown(name, a), all[p], shown(name, b));
    }
  }
}

}  // namespace distributed

}  // namespace partix

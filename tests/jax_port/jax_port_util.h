// Helpers shared by the tests ported from JAX's own test suite: golden JSON written by
// tools/golden/*.py, host-side expected values, shard index checks.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "partix/partix.h"
#include "test_util.h"

namespace jax_port {

// The parsed file, or null if it is missing or unreadable: test cases are listed from these
// files while tests register, where an exception would abort the whole test binary; each file
// has a test that fails when it did not load.
inline nlohmann::json load_golden(const std::string& file) {
  std::ifstream in(std::string(PARTIX_TESTS_DIR) + "/golden/jax_port/" + file);
  if (!in) return nullptr;
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// The entries under `key`, or an empty list when the file did not load.
inline const nlohmann::json& golden_list(const nlohmann::json& doc, const char* key) {
  static const nlohmann::json empty = nlohmann::json::array();
  if (!doc.is_object() || !doc.contains(key)) return empty;
  return doc[key];
}

// A spec written as a JSON list of entries: null, "axis" or ["a", "b"].
inline partix::PartitionSpec spec_from_json(const nlohmann::json& j) {
  std::vector<partix::PartitionSpec::Entry> entries;
  for (const auto& e : j) {
    if (e.is_null())
      entries.push_back({});
    else if (e.is_string())
      entries.push_back({e.get<std::string>()});
    else
      entries.push_back(e.get<std::vector<std::string>>());
  }
  return partix::PartitionSpec(entries);
}

inline int64_t numel(const partix::Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// The cotangent weights of result r (the golden scripts use the same): 1 + ((7 n + 3 r) mod 11)
// / 8 at flat position n, so a gradient check sees every element with a distinct weight.
inline partix::Array result_weight(int r, const partix::Shape& shape) {
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (size_t n = 0; n < v.size(); ++n) {
    v[n] = static_cast<float>(1.0 +
                              static_cast<double>((7 * n + 3 * static_cast<size_t>(r)) % 11) / 8.0);
  }
  return partix::from_vector(v, shape);
}

// np.arange(prod(shape)).reshape(shape) as float32: the input most of JAX's sharding tests use.
inline partix::Array iota_f32(const partix::Shape& shape) {
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  return partix::from_vector(v, shape);
}

inline std::vector<float> iota_values(int64_t n, float scale = 1.0f, float offset = 0.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * scale + offset;
  return v;
}

// The row-major block [start, stop) of a host array of shape `shape`.
template <class T>
std::vector<T> host_block(const std::vector<T>& v, const partix::Shape& shape,
                          const std::vector<partix::Slice>& index) {
  std::vector<T> out;
  const size_t nd = shape.size();
  std::vector<int64_t> pos(nd);
  for (size_t d = 0; d < nd; ++d) {
    if (index[d].size() <= 0) return out;
    pos[d] = index[d].start;
  }
  if (nd == 0) return v;
  while (true) {
    int64_t flat = 0;
    for (size_t d = 0; d < nd; ++d) flat = flat * shape[d] + pos[d];
    out.push_back(v[static_cast<size_t>(flat)]);
    size_t d = nd;
    while (d > 0) {
      --d;
      if (++pos[d] < index[d].stop) break;
      pos[d] = index[d].start;
      if (d == 0) return out;
    }
  }
}

// Every addressable shard of x holds exactly its index's block of the global value `want`.
template <class T>
void expect_shards_hold_blocks(const partix::Array& x, const std::vector<T>& want) {
  for (const partix::Shard& s : x.addressable_shards()) {
    EXPECT_EQ(s.data.template to_vector<T>(), host_block(want, x.shape(), s.index))
        << "shard on device " << s.device.id;
  }
}

// |got - want| <= rtol * (|want| + max |want|) elementwise (plus a hair for exact zeros).
inline bool all_close(const std::vector<float>& got, const std::vector<double>& want, double rtol) {
  if (got.size() != want.size()) return false;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= rtol * (std::abs(want[i]) + scale) + 1e-7)) return false;
  }
  return true;
}

// The same check as all_close, reporting the first element that differs.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                         double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], rtol * (std::abs(want[i]) + scale) + 1e-7)
        << what << " [" << i << "]";
  }
}

}  // namespace jax_port

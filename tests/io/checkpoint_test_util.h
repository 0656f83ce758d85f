// Helpers for the checkpoint tests: arrays with distinct values in any sharding, bitwise
// comparison.
#pragma once


#include <cstring>
#include <string>
#include <vector>

#include "io/io_test_util.h"
#include "partix/partix.h"

namespace partix::test {

// Values 0, 1, 2, ... (times `scale`) of `dtype` in `sharding`: every element differs.
inline Array iota(const Shape& shape, DType dtype, const NamedSharding& sharding,
                  double scale = 1.0) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  Array flat = arange(n, DType::F64) * scale;
  return device_put(astype(reshape(flat, shape), dtype), sharding);
}

// The global value's bytes, for bitwise comparison whatever the dtype.
inline std::string bytes_of(const Array& a) {
  Array one = device_put(a, Device{0});
  switch (a.dtype()) {
    case DType::F32: {
      auto v = one.to_vector<float>();
      return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    }
    case DType::F64: {
      auto v = one.to_vector<double>();
      return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
    }
    case DType::I32: {
      auto v = one.to_vector<int32_t>();
      return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int32_t));
    }
    case DType::I64: {
      auto v = one.to_vector<int64_t>();
      return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
    }
    case DType::Bool: {
      auto v = one.to_vector<bool>();
      return std::string(v.begin(), v.end());
    }
    default: {
      auto v = astype(one, DType::F32).to_vector<float>();  // bf16/f16 widen exactly
      return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    }
  }
}


}  // namespace partix::test

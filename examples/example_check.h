// A tiny helper shared by the examples: compare to a reference and report.
#pragma once

#include <cmath>
#include <cstdio>
#include <vector>

inline bool close_to(const std::vector<float>& got, const std::vector<float>& want,
                     float tol = 1e-4f) {
  if (got.size() != want.size()) {
    std::printf("size mismatch: %zu vs %zu\n", got.size(), want.size());
    return false;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tol * (1.0f + std::fabs(want[i]))) {
      std::printf("mismatch at %zu: %g vs %g\n", i, got[i], want[i]);
      return false;
    }
  }
  return true;
}

// copy_box against an element-by-element oracle: random ranks, shapes, boxes and offsets,
// including boxes that cover trailing dimensions whole (copied as one contiguous run) and
// ones that do not.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/layout.h"

using partix::Shape;

namespace {

int64_t flat(const Shape& shape, const Shape& at) {
  int64_t f = 0;
  for (size_t i = 0; i < shape.size(); ++i) f = f * shape[i] + at[i];
  return f;
}

// dst[dst_offset + i] = src[src_offset + i] for every i in the box, one element at a time.
void oracle(const std::vector<int32_t>& src, const Shape& src_shape, const Shape& src_offset,
            std::vector<int32_t>& dst, const Shape& dst_shape, const Shape& dst_offset,
            const Shape& extent) {
  const size_t rank = extent.size();
  int64_t n = 1;
  for (int64_t e : extent) n *= e;
  Shape i(rank, 0), s(rank), d(rank);
  for (int64_t k = 0; k < n; ++k) {
    for (size_t r = 0; r < rank; ++r) {
      s[r] = src_offset[r] + i[r];
      d[r] = dst_offset[r] + i[r];
    }
    dst[static_cast<size_t>(flat(dst_shape, d))] = src[static_cast<size_t>(flat(src_shape, s))];
    for (size_t r = rank; r-- > 0;) {
      if (++i[r] < extent[r]) break;
      i[r] = 0;
    }
  }
}

// copy_box of a numbered source into a destination of -1s, against the oracle.
bool copy_box_matches_oracle(const Shape& src_shape, const Shape& src_offset,
                             const Shape& dst_shape, const Shape& dst_offset, const Shape& extent) {
  int64_t ns = 1, nd = 1;
  for (size_t r = 0; r < extent.size(); ++r) {
    ns *= src_shape[r];
    nd *= dst_shape[r];
  }
  std::vector<int32_t> src(static_cast<size_t>(ns));
  for (size_t k = 0; k < src.size(); ++k) src[k] = static_cast<int32_t>(k + 1);
  std::vector<int32_t> want(static_cast<size_t>(nd), -1), got(want);
  oracle(src, src_shape, src_offset, want, dst_shape, dst_offset, extent);
  partix::detail::copy_box(src.data(), src_shape, src_offset, got.data(), dst_shape, dst_offset,
                           extent, sizeof(int32_t));
  return got == want;
}

// `trials` random boxes of rank in [min_rank, max_rank], extents up to max_extent, each array
// up to max_pad larger than the box per dimension (with `some_whole`, half the dimensions are
// covered whole in both): copy_box against the oracle. Returns the first failing trial, or -1.
int first_failing_box(unsigned seed, int trials, int64_t min_rank, int64_t max_rank,
                      int64_t max_extent, int64_t max_pad, bool some_whole) {
  std::mt19937 rng(seed);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < trials; ++trial) {
    const size_t rank = static_cast<size_t>(pick(min_rank, max_rank));
    Shape extent(rank), src_shape(rank), dst_shape(rank), src_offset(rank), dst_offset(rank);
    for (size_t r = 0; r < rank; ++r) {
      extent[r] = pick(1, max_extent);
      const bool whole = some_whole && pick(0, 1) == 0;
      src_shape[r] = whole ? extent[r] : extent[r] + pick(0, max_pad);
      dst_shape[r] = whole ? extent[r] : extent[r] + pick(0, max_pad);
      src_offset[r] = pick(0, src_shape[r] - extent[r]);
      dst_offset[r] = pick(0, dst_shape[r] - extent[r]);
    }
    if (!copy_box_matches_oracle(src_shape, src_offset, dst_shape, dst_offset, extent)) {
      return trial;
    }
  }
  return -1;
}

}  // namespace

TEST(Layout, CopyBoxMatchesTheElementwiseOracle) {
  EXPECT_EQ(first_failing_box(11, 2000, 1, 4, 5, 3, /*some_whole=*/true), -1);
}

// Past rank 8 copy_box keeps its strides in a vector instead of on the stack: the same oracle.
TEST(Layout, CopyBoxOfHighRankMatchesTheElementwiseOracle) {
  EXPECT_EQ(first_failing_box(12, 200, 7, 11, 2, 1, /*some_whole=*/false), -1);
}

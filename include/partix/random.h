// Counter-based random numbers (threefry2x32). A key is an i32[2] array. The value at global
// flat index i of a draw depends only on the key and i: drawing directly into a sharding gives
// the same values on every mesh, and no device materialises more than its block.
#pragma once

#include <cstdint>
#include <utility>

#include "partix/array.h"

namespace partix::random {

Array key(uint64_t seed);
// n new keys as an i32[n, 2] array; row i is key i.
Array split(const Array& key, int64_t n);
// Two new keys.
std::pair<Array, Array> split2(const Array& key);
// The i-th row of split's result as a key.
Array key_at(const Array& keys, int64_t i);
Array fold_in(const Array& key, int64_t data);
Array fold_in(const Array& key, const Array& data);  // an integer scalar (traceable)

Array uniform(const Array& key, Shape shape, DType dtype = DType::F32, double minval = 0.0,
              double maxval = 1.0);
Array normal(const Array& key, Shape shape, DType dtype = DType::F32);
// Standard normal truncated to (lower, upper).
Array truncated_normal(const Array& key, double lower, double upper, Shape shape,
                       DType dtype = DType::F32);
Array bernoulli(const Array& key, double p, Shape shape);  // bool
// Raw random bits of an integer dtype (i32, u32 and the 8/16-bit integers, whose values are the
// low bits of a 32-bit draw), each element its own draw.
Array bits(const Array& key, Shape shape, DType dtype = DType::U32);
// Integers uniform in [minval, maxval).
Array randint(const Array& key, Shape shape, int64_t minval, int64_t maxval,
              DType dtype = DType::I32);
// The same draws made directly in `sharding`: each device computes only its block, and the
// values equal the unsharded draw's.
Array uniform(const Array& key, Shape shape, DType dtype, double minval, double maxval,
              const NamedSharding& sharding);
Array normal(const Array& key, Shape shape, DType dtype, const NamedSharding& sharding);
Array randint(const Array& key, Shape shape, int64_t minval, int64_t maxval, DType dtype,
              const NamedSharding& sharding);
// Samples from softmax(logits) along `axis` (Gumbel-max).
Array categorical(const Array& key, const Array& logits, int axis = -1);

}  // namespace partix::random

// Element conversion from stored (file) types to partix dtypes, and the per-device slice
// copy both file readers share: each device's block is filled row by row from a small
// window of the file, so no host copy of a whole tensor is ever made.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "core/buffer.h"
#include "partix/array.h"
#include "partix/dtype.h"
#include "partix/sharding.h"

namespace partix::detail {

// Element types a file may store that partix can convert from.
enum class StoredType { Bool, I32, I64, F16, BF16, F32, F64, I8, I16, U8, U16, U32 };

int stored_size(StoredType t);
std::string_view stored_name(StoredType t);  // "BOOL", "I32", ... (safetensors spelling)
// The partix dtype of the same type.
DType stored_dtype(StoredType t);

// Whether `from` converts to `to` at load (floats to floats, anything to a floating type,
// bool/ints to ints, bool to bool). Float to integer is refused: it would silently truncate.
bool convertible(StoredType from, DType to);

// Converts n elements (src possibly unaligned). Integer narrowing that does not fit and
// non-0/1 bools are reported by returning false (the caller names the tensor); so are finite
// values that overflow a narrower float to infinity when `finite_only`.
bool convert_elements(const uint8_t* src, StoredType from, void* dst, DType to, int64_t n,
                      bool finite_only = false);

// f64 -> f32 rounding to odd: the result keeps a sticky bit, so a second rounding to a
// narrower float (bf16, f16) gives the correctly rounded value of the double.
float round_to_odd_f32(double v);

// Calls row(row_index, dst_elem_offset) for each innermost row of the box `idx` (the
// device's slice of `shape`), where row_index is the row-major index of the row in the
// global tensor (all dims but the last) and dst_elem_offset is where the row starts in the
// padded local block of shape `local`. A rank-0 tensor has one row of one element.
void for_each_box_row(const Shape& shape, const std::vector<Slice>& idx, const Shape& local,
                      const std::function<void(int64_t row_index, int64_t dst_offset)>& row);

}  // namespace partix::detail

// Reading and writing one element of any dtype as double, and printing values.
#pragma once

#include <string>

#include "partix/dtype.h"

namespace partix::detail {

void store_scalar(void* dst, DType dtype, double value);
double load_scalar(const void* src, DType dtype);
// Exact for integer dtypes (and Bool as 0/1); floats are truncated.
int64_t load_int(const void* src, DType dtype);
// The smallest and largest values of integer dtype `dtype`.
int64_t int_lowest(DType dtype);
int64_t int_highest(DType dtype);
void store_int(void* dst, DType dtype, int64_t value);
// numpy-like nested brackets, eliding the middle of long dimensions.
std::string format_values(const void* data, DType dtype, const Shape& shape);

}  // namespace partix::detail

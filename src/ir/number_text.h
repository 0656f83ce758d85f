// A number's shortest text that parses back to the same value of `dtype` (nan, inf, true /
// false, integers without a point): the form both the program text and the HLO text write.
#pragma once

#include <string>

#include "partix/dtype.h"

namespace partix::ir {

std::string number_text(double v, DType dtype);

}  // namespace partix::ir

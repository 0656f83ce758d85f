// Golden tests of primitives and ops against numpy: the cases in tests/golden/primitives.json
// (written by tools/golden/primitives.py, which documents the tolerances) run through partix
// in both kernel modes (reference and fast) and, where a case binds a primitive, through the
// primitive's reference kernel called directly on host buffers.
//
// Tolerances travel with each case (|got - want| <= atol + rtol * |want|): bit-exact for data
// movement, integers, comparisons and conversions; 1e-6 relative for f32 arithmetic; about 4
// ulp (5e-7 relative, 1e-7 absolute) for transcendentals; 1e-6 of the sum of |terms| for
// reductions and contractions; one bf16 ulp for bf16 math. The script explains each.
//
// Each family test file registers a table from op name to a function of the op library:
//   const int kRegistered = golden::register_family("reduce", reduce_ops);
//   PARTIX_GOLDEN_SUITE(ReduceGolden, "reduce");
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ir/attrs.h"
#include "partix/partix.h"
#include "ir/primitive.h"
#include "runtime/interpreter.h"

namespace partix::golden {

using Json = nlohmann::json;

// An array's value on the host: row-major bytes.
struct HostTensor {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<char> bytes;
  int64_t size() const { return shape_size(shape); }
};

HostTensor tensor_from_json(const Json& t);
HostTensor to_host(const Array& a);
Array to_array(const HostTensor& t);

// `got` equals the expected JSON tensor within |got - want| <= atol + rtol * |want| (NaN
// matches NaN, infinities match exactly); rtol = atol = 0 asks for bit-exact floats, sign of
// zero included. Integers and bools always compare exactly.
testing::AssertionResult matches(const HostTensor& got, const Json& want, double rtol, double atol);

using OpFn = std::function<std::vector<Array>(const std::vector<Array>& in, const Json& attrs)>;
struct OpEntry {
  OpFn fn;
  // The primitive the op binds one to one when its operands already have the primitive's
  // dtypes and shapes; its reference kernel is then also checked directly.
  std::string prim;
};
using OpTable = std::map<std::string, OpEntry, std::less<>>;

// Registers a family's op table; returns a dummy so it can initialise a namespace constant.
int register_family(const std::string& family, OpTable (*table)());

// Case names of one family, for INSTANTIATE_TEST_SUITE_P (a single "golden_file_unreadable"
// when the file cannot be loaded, so that the failure shows up as a test).
std::vector<std::string> case_names(const std::string& family);
const Json& golden_file();
// Runs one case in both kernel modes, and the reference kernel directly where it applies.
void run_case(const std::string& name);

// Primitive attributes from their typed JSON form ({"ints": [...]}, {"int": n}, ...).
ir::Attrs prim_attrs(const Json& attrs);
// Runs a primitive's reference kernel on host buffers, outside the runtime.
std::vector<HostTensor> call_reference(const prim::Primitive& p, const std::vector<HostTensor>& in,
                                       const ir::Attrs& attrs);
// The primitives a case checks directly: "prim:NAME" cases, and ops whose entry names a
// primitive whose inference accepts the case's operands and gives its outputs' avals.
std::vector<std::string> primitives_checked(const Json& c);

// Sets the kernel mode for a scope.
class KernelModeScope {
 public:
  explicit KernelModeScope(runtime::KernelMode mode) : saved_(runtime::kernel_mode()) {
    runtime::set_kernel_mode(mode);
  }
  ~KernelModeScope() { runtime::set_kernel_mode(saved_); }
  KernelModeScope(const KernelModeScope&) = delete;
  KernelModeScope& operator=(const KernelModeScope&) = delete;

 private:
  runtime::KernelMode saved_;
};

// Typed access to op attributes.
template <class T>
T attr(const Json& attrs, const char* name) {
  return attrs.at(name).get<T>();
}
template <class T>
T attr_or(const Json& attrs, const char* name, T dflt) {
  return attrs.contains(name) ? attrs.at(name).get<T>() : dflt;
}

}  // namespace partix::golden

// One parameterised test per golden case of `family`.
#define PARTIX_GOLDEN_SUITE(Suite, family)                                  \
  class Suite : public testing::TestWithParam<std::string> {};              \
  TEST_P(Suite, MatchesNumpy) { partix::golden::run_case(GetParam()); }     \
  INSTANTIATE_TEST_SUITE_P(                                                 \
      Golden, Suite, testing::ValuesIn(partix::golden::case_names(family)), \
      [](const testing::TestParamInfo<std::string>& info) { return info.param; })

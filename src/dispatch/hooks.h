// What the dispatch layer supplies to the layers below it through trace's hooks
// (trace/dispatch_hooks.h), installed by hooks.cpp when the library loads.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "trace/trace.h"

namespace partix::detail {

// eager.cpp
std::vector<Array> dispatch_execute_eager(
    const prim::Primitive& p, const std::vector<Array>& inputs, const ir::Attrs& attrs,
    const prim::Regions& regions, const std::vector<std::optional<NamedSharding>>& out_types);
Array dispatch_execute_created(const char* api, const NamedSharding& sharding,
                               const std::function<Array()>& make);
// explicit_rules.cpp
std::vector<std::optional<NamedSharding>> dispatch_explicit_result_types(
    const prim::Primitive& p, const std::vector<std::optional<NamedSharding>>& in_types,
    const std::vector<ir::Aval>& in, const std::vector<ir::Aval>& out, const ir::Attrs& attrs,
    const prim::Regions& regions);
// explicit.cpp
Array dispatch_give_type(const Array& x, const NamedSharding& type);
Array dispatch_with_out_sharding(const char* api, const std::vector<Array>& operands,
                                 const OutSharding& out, const std::function<Array()>& make);

}  // namespace partix::detail

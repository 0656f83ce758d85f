// The dispatch layer's entry points as hooks (ARCHITECTURE.md "Layers at link time"): layers
// below dispatch (trace, autodiff, prim, ops) call execute_eager, give_type, ... declared in
// trace/trace.h and the placement functions below; trace defines them as calls through the
// hooks that src/dispatch/hooks.cpp installs when the library loads. So at link time every
// call goes down into trace, and dispatch, above them, supplies what runs.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "partix/array.h"
#include "partix/sharding.h"
#include "partix/transforms.h"
#include "trace/trace.h"

namespace partix::detail {

struct DispatchHooks {
  std::vector<Array> (*execute_eager)(const prim::Primitive&, const std::vector<Array>&,
                                      const ir::Attrs&, const prim::Regions&,
                                      const std::vector<std::optional<NamedSharding>>&) = nullptr;
  Array (*execute_created)(const char*, const NamedSharding&,
                           const std::function<Array()>&) = nullptr;
  std::vector<std::optional<NamedSharding>> (*explicit_result_types)(
      const prim::Primitive&, const std::vector<std::optional<NamedSharding>>&,
      const std::vector<ir::Aval>&, const std::vector<ir::Aval>&, const ir::Attrs&,
      const prim::Regions&) = nullptr;
  Array (*give_type)(const Array&, const NamedSharding&) = nullptr;
  Array (*with_out_sharding)(const char*, const std::vector<Array>&, const OutSharding&,
                             const std::function<Array()>&) = nullptr;
  Array (*device_put)(const Array&, const NamedSharding&) = nullptr;
  Array (*with_sharding_constraint)(const Array&, const NamedSharding&) = nullptr;
  Array (*reshard)(const Array&, const NamedSharding&) = nullptr;
};

// Installed once, by the dispatch layer, when the library loads.
void set_dispatch_hooks(const DispatchHooks& hooks);

// device_put, with_sharding_constraint and reshard (partix/transforms.h), for the layers below
// dispatch.
Array put_on(const Array& x, const NamedSharding& s);
Array constrain_to(const Array& x, const NamedSharding& s);
Array reshard_to(const Array& x, const NamedSharding& s);

}  // namespace partix::detail

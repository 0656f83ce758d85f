// Installs the dispatch layer's entry points as trace's hooks when the library loads
// (trace/dispatch_hooks.h; ARCHITECTURE.md "Layers at link time").
#include "dispatch/hooks.h"

#include "partix/array.h"
#include "partix/transforms.h"
#include "trace/dispatch_hooks.h"

namespace partix::detail {

namespace {

DispatchHooks dispatch_layer_hooks() {
  DispatchHooks h;
  h.execute_eager = &dispatch_execute_eager;
  h.execute_created = &dispatch_execute_created;
  h.explicit_result_types = &dispatch_explicit_result_types;
  h.give_type = &dispatch_give_type;
  h.with_out_sharding = &dispatch_with_out_sharding;
  h.device_put = [](const Array& x, const NamedSharding& s) { return device_put(x, s); };
  h.with_sharding_constraint = [](const Array& x, const NamedSharding& s) {
    return with_sharding_constraint(x, s);
  };
  h.reshard = [](const Array& x, const NamedSharding& s) { return reshard(x, s); };
  return h;
}

[[maybe_unused]] const bool g_installed = [] {
  set_dispatch_hooks(dispatch_layer_hooks());
  return true;
}();

}  // namespace

}  // namespace partix::detail

#include "trace/dispatch_hooks.h"

#include "core/errors.h"

namespace partix::detail {

namespace {

DispatchHooks g_hooks;

// The hook `f`, which the dispatch layer installs when the library loads.
template <class F>
F need(F f, const char* what) {
  if (f == nullptr) {
    throw Error(fmt::format("internal error: the dispatch layer's {} is not installed", what));
  }
  return f;
}

}  // namespace

void set_dispatch_hooks(const DispatchHooks& hooks) { g_hooks = hooks; }

std::vector<Array> execute_eager(const prim::Primitive& p, const std::vector<Array>& inputs,
                                 const ir::Attrs& attrs, const prim::Regions& regions,
                                 const std::vector<std::optional<NamedSharding>>& out_types) {
  return need(g_hooks.execute_eager, "execute_eager")(p, inputs, attrs, regions, out_types);
}

Array execute_created(const char* api, const NamedSharding& sharding,
                      const std::function<Array()>& make) {
  return need(g_hooks.execute_created, "execute_created")(api, sharding, make);
}

std::vector<std::optional<NamedSharding>> explicit_result_types(
    const prim::Primitive& p, const std::vector<std::optional<NamedSharding>>& in_types,
    const std::vector<ir::Aval>& in, const std::vector<ir::Aval>& out, const ir::Attrs& attrs,
    const prim::Regions& regions) {
  return need(g_hooks.explicit_result_types, "explicit_result_types")(p, in_types, in, out, attrs,
                                                                      regions);
}

Array give_type(const Array& x, const NamedSharding& type) {
  return need(g_hooks.give_type, "give_type")(x, type);
}

Array with_out_sharding(const char* api, const std::vector<Array>& operands, const OutSharding& out,
                        const std::function<Array()>& make) {
  return need(g_hooks.with_out_sharding, "with_out_sharding")(api, operands, out, make);
}

Array put_on(const Array& x, const NamedSharding& s) {
  return need(g_hooks.device_put, "device_put")(x, s);
}
Array constrain_to(const Array& x, const NamedSharding& s) {
  return need(g_hooks.with_sharding_constraint, "with_sharding_constraint")(x, s);
}
Array reshard_to(const Array& x, const NamedSharding& s) {
  return need(g_hooks.reshard, "reshard")(x, s);
}

}  // namespace partix::detail

#include "models/stacking.h"

#include "core/errors.h"
#include "partix/ops.h"

namespace partix::models {

namespace {

const Array& need(const Params& p, const std::string& name, std::string_view api) {
  auto it = p.find(name);
  if (it == p.end()) detail::fail(api, "the parameters lack '{}'", name);
  return it->second;
}

}  // namespace

nn::ParamSpecs stacked_specs(nn::ParamSpecs per_layer, int64_t layers, const LayerNames& names) {
  return stack_entries(std::move(per_layer), layers, names, [layers](std::vector<nn::ParamSpec> l) {
    nn::ParamSpec one = std::move(l.front());
    one.shape.insert(one.shape.begin(), layers);
    one.axes.insert(one.axes.begin(), "layers");
    return one;
  });
}

Array stack_balanced(std::vector<Array> per_layer) {
  // Pairwise, in a balanced tree: planning one concatenation costs its operand count squared.
  while (per_layer.size() > 1) {
    std::vector<Array> next;
    for (size_t k = 0; k + 1 < per_layer.size(); k += 2) {
      next.push_back(concatenate({per_layer[k], per_layer[k + 1]}, 0));
    }
    if (per_layer.size() % 2 == 1) next.push_back(per_layer.back());
    per_layer = std::move(next);
  }
  return per_layer.front();
}

Params stack_layers(const Params& per_layer, int64_t layers, const LayerNames& names,
                    std::string_view api) {
  Params out;
  for (const auto& [name, a] : per_layer) {
    if (!name.starts_with(names.stacked_prefix)) out.emplace(name, a);
  }
  for (const std::string& suffix : names.suffixes) {
    std::vector<Array> parts;
    for (int64_t i = 0; i < layers; ++i) {
      parts.push_back(expand_dims(need(per_layer, names.layer_prefix(i) + suffix, api), 0));
    }
    out.emplace(std::string(names.stacked_prefix) + suffix, stack_balanced(std::move(parts)));
  }
  return out;
}

Params unstack_layers(const Params& stacked, int64_t layers, const LayerNames& names,
                      std::string_view api) {
  Params out;
  for (const auto& [name, a] : stacked) {
    if (!name.starts_with(names.stacked_prefix)) out.emplace(name, a);
  }
  for (const std::string& suffix : names.suffixes) {
    const std::string name = std::string(names.stacked_prefix) + suffix;
    const Array& w = need(stacked, name, api);
    if (!(w.ndim() >= 1 && w.shape()[0] == layers)) {
      detail::fail(api, "'{}' has shape {}, not {} layers first", name, shape_to_string(w.shape()),
                   layers);
    }
    for (int64_t i = 0; i < layers; ++i) {
      out.emplace(names.layer_prefix(i) + suffix, squeeze(slice_axis(w, 0, i, i + 1), {0}));
    }
  }
  return out;
}

}  // namespace partix::models

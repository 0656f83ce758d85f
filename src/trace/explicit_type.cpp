// Explicit sharding's types (trace/trace.h): an array's type along its mesh's Explicit axes,
// and the lenient scope in which ambiguous result types give untyped results.
#include "sharding/axes.h"
#include "trace/trace.h"

namespace partix::detail {

namespace {

thread_local int g_lenient = 0;

bool is_explicit_axis(const Mesh& mesh, const std::string& name) {
  return is_axis_type(mesh, name, AxisType::Explicit);
}

}  // namespace

ExplicitLenientScope::ExplicitLenientScope() { ++g_lenient; }
ExplicitLenientScope::~ExplicitLenientScope() { --g_lenient; }
bool explicit_lenient() { return g_lenient > 0; }

std::optional<NamedSharding> explicit_type(const std::optional<NamedSharding>& sharding) {
  if (!sharding || !has_axis_type(sharding->mesh(), AxisType::Explicit)) return std::nullopt;
  const Mesh& mesh = sharding->mesh();
  std::vector<PartitionSpec::Entry> entries;
  for (const PartitionSpec::Entry& e : sharding->spec().entries()) {
    PartitionSpec::Entry kept;
    for (const std::string& a : e) {
      if (is_explicit_axis(mesh, a)) kept.push_back(a);
    }
    entries.push_back(kept);
  }
  while (!entries.empty() && entries.back().empty()) entries.pop_back();
  std::set<std::string> unreduced, reduced;
  for (const std::string& a : sharding->unreduced()) {
    if (is_explicit_axis(mesh, a)) unreduced.insert(a);
  }
  for (const std::string& a : sharding->reduced()) {
    if (is_explicit_axis(mesh, a)) reduced.insert(a);
  }
  return NamedSharding(mesh, PartitionSpec(entries), std::move(unreduced), std::move(reduced));
}

}  // namespace partix::detail

// Collective primitives (valid only inside shard_map bodies and partitioned programs):
//   all_reduce{axes, kind, group}          psum / pmax / pmin
//   all_gather{axes, axis, tiled, group}
//   reduce_scatter{axes, axis, tiled, group}   psum_scatter
//   all_to_all{axes, split_axis, concat_axis, tiled, group}
//   ppermute{axes, perm, group}            perm: flattened (source, target) pairs of ranks
//   axis_index{axes}                       i32 scalar: this device's rank over axes
//   pvary{axes}                            identity; marks a value as varying
//   axis_slice{axes, axis, group}          this device's block along axis (no communication)
// `group` is the product of the axis sizes (shape inference needs it). all_reduce, all_gather,
// reduce_scatter and all_to_all may carry index_groups (JAX's axis_index_groups, flattened):
// the ranks over axes split into groups of `group` ranks each; the collective runs within the
// group holding this device, and its result varies over the axes.
#include <algorithm>
#include <bit>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>

#include "core/errors.h"
#include "core/layout.h"
#include "core/scalar.h"
#include "partix/ops.h"
#include "partix/transforms.h"
#include "prim/collective.h"
#include "prim/collective_batching.h"
#include "prim/util.h"
#include "sharding/axes.h"
#include "trace/trace.h"

namespace partix::prim {

int64_t mixed_radix_index(const Mesh& mesh, const std::vector<int64_t>& coords,
                          const std::vector<std::string>& axes) {
  int64_t r = 0;
  for (const std::string& a : axes) r = r * mesh.axis_size(a) + mesh.axis_coord(coords, a);
  return r;
}

detail::Buffer filled_block(const Aval& a, double value) {
  static std::mutex mu;
  static std::map<std::tuple<DType, int64_t, uint64_t>, detail::Buffer> cache;
  static int64_t cached_bytes = 0;
  constexpr int64_t kCacheBytes = int64_t{64} << 20;
  const int64_t nbytes = a.nbytes();
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_tuple(a.dtype, nbytes, std::bit_cast<uint64_t>(value));
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  if (cached_bytes + nbytes > kCacheBytes || nbytes <= 0) return {};
  detail::Buffer b = detail::Buffer::shared(nbytes);
  const int es = dtype_size(a.dtype);
  char* p = static_cast<char*>(b.data());
  detail::store_scalar(p, a.dtype, value);
  for (int64_t done = es; done < nbytes;) {
    const int64_t n = std::min(done, nbytes - done);
    std::memcpy(p + done, p, static_cast<size_t>(n));
    done += n;
  }
  cached_bytes += nbytes;
  cache.emplace(key, b);
  return b;
}

ir::Attrs with_uneven_operands(ir::Attrs attrs, const std::vector<ir::Aval>& global_in,
                               const std::vector<ir::Aval>& local_in,
                               const std::vector<NamedSharding>& in_shardings) {
  ir::Ints uneven;
  ir::Strings axes;
  for (size_t i = 0; i < global_in.size() && i < in_shardings.size() && i < local_in.size(); ++i) {
    const PartitionSpec& spec = in_shardings[i].spec();
    for (int d = 0; d < global_in[i].ndim(); ++d) {
      const PartitionSpec::Entry e = spec[d];
      if (e.empty()) continue;
      const int64_t global = global_in[i].shape[static_cast<size_t>(d)];
      const int64_t block = local_in[i].shape[static_cast<size_t>(d)];
      int64_t n = 1;
      for (const std::string& a : e) n *= in_shardings[i].mesh().axis_size(a);
      if (block * n == global) continue;  // even
      uneven.insert(uneven.end(),
                    {static_cast<int64_t>(i), d, global, static_cast<int64_t>(e.size())});
      axes.insert(axes.end(), e.begin(), e.end());
    }
  }
  if (!uneven.empty()) {
    attrs.set("uneven", uneven);
    attrs.set("uneven_axes", axes);
  }
  return attrs;
}

namespace {

bool block_is_all_padding(const KernelCall& c) {
  if (c.ctx.mesh == nullptr || !c.attrs.has("uneven")) return false;
  const ir::Ints& u = c.attrs.ints("uneven");
  const ir::Strings& names = c.attrs.get<ir::Strings>("uneven_axes");
  size_t next = 0;
  for (size_t k = 0; k + 3 < u.size(); k += 4) {
    const size_t i = static_cast<size_t>(u[k]), d = static_cast<size_t>(u[k + 1]);
    const size_t count = static_cast<size_t>(u[k + 3]);
    if (i >= c.in_avals.size() || d >= c.in_aval(i).shape.size() || next + count > names.size()) {
      detail::internal_error("uneven", "malformed uneven-operand attributes");
    }
    int64_t index = 0;  // this device's block along the dimension (mixed_radix_index)
    for (size_t a = next; a < next + count; ++a) {
      index = index * c.ctx.mesh->axis_size(names[a]) +
              c.ctx.mesh->axis_coord(c.ctx.mesh_coords, names[a]);
    }
    next += count;
    const int64_t len = c.in_aval(i).shape[d];
    if (index * len >= u[k + 2]) return true;
  }
  return false;
}

}  // namespace

bool some_operand_block_is_all_padding(const KernelCall& c) {
  // Asked by the interpreter with the instruction's own attributes, which outlive the run.
  for (const auto& [attrs, all] : c.ctx.all_padding) {
    if (attrs == &c.attrs) return all;
  }
  const bool all = block_is_all_padding(c);
  c.ctx.all_padding.emplace_back(&c.attrs, all);
  return all;
}

const GroupInfo& group_of(const ExecContext& ctx, const std::vector<std::string>& axes) {
  for (const GroupInfo& g : ctx.groups) {
    if (g.axes == axes) return g;
  }
  const Mesh& mesh = *ctx.mesh;
  GroupInfo g;
  g.axes = axes;
  int64_t n = 1;
  for (const std::string& a : axes) n *= mesh.axis_size(a);
  g.devices.assign(static_cast<size_t>(n), -1);
  // The group: devices whose coordinates differ from this one's only along `axes` (whole
  // axes or parts of them).
  const int64_t mine = detail::residual_index(mesh, ctx.mesh_coords, axes);
  for (int64_t k = 0; k < mesh.size(); ++k) {
    std::vector<int64_t> c = mesh.coords(k);
    if (detail::residual_index(mesh, c, axes) != mine) continue;
    g.devices[static_cast<size_t>(mixed_radix_index(mesh, c, axes))] =
        mesh.devices()[static_cast<size_t>(k)].id;
  }
  g.rank = static_cast<int>(mixed_radix_index(mesh, ctx.mesh_coords, axes));
  // Callers hold the reference only while they run: growing the memo later may move it.
  ctx.groups.push_back(std::move(g));
  return ctx.groups.back();
}

namespace {

const ir::Strings& axes_of(const Attrs& a) { return a.get<ir::Strings>("axes"); }
// The group size a collective's attributes give (from program text, any integer): at least 1
// (found by fuzzing: group=0 divided by zero in all_to_all's shape rule).
int64_t group_size(const Attrs& a) {
  const int64_t n = a.i("group");
  detail::check(n >= 1, "collective", "group must be at least 1, got {}", n);
  return n;
}

void check_ctx(const KernelCall& c, std::string_view op) {
  if (c.ctx.mesh == nullptr || c.ctx.comm == nullptr) {
    detail::fail(op, "collectives run only inside shard_map or a partitioned program");
  }
}

ReduceKind kind_of(const Attrs& a) {
  const std::string& k = a.str("kind");
  if (k == "sum") return ReduceKind::kSum;
  if (k == "max") return ReduceKind::kMax;
  if (k == "min") return ReduceKind::kMin;
  detail::internal_error("all_reduce", "unknown kind " + k);
}

// The devices the collective runs over: its axes' group, or the index group holding this
// device when the collective has index_groups.
GroupInfo run_group(const KernelCall& c) {
  const GroupInfo& all = group_of(c.ctx, axes_of(c.attrs));
  if (!c.attrs.has("index_groups")) return all;
  const ir::Ints& flat = c.attrs.ints("index_groups");
  const size_t n = static_cast<size_t>(group_size(c.attrs));
  detail::check(flat.size() == all.devices.size() && flat.size() % n == 0, "collective",
                "index_groups of {} ranks do not split the {} ranks of the axes into groups of {}",
                flat.size(), all.devices.size(), n);
  const auto at = std::find(flat.begin(), flat.end(), int64_t{all.rank});
  detail::check(at != flat.end(), "collective", "rank {} is in no index group", all.rank);
  const size_t start = static_cast<size_t>(at - flat.begin()) / n * n;
  GroupInfo g;
  g.axes = all.axes;
  g.rank = static_cast<int>(static_cast<size_t>(at - flat.begin()) - start);
  for (size_t k = start; k < start + n; ++k) {
    detail::check(flat[k] >= 0 && flat[k] < static_cast<int64_t>(all.devices.size()), "collective",
                  "index_groups rank {} is out of range", flat[k]);
    g.devices.push_back(all.devices[static_cast<size_t>(flat[k])]);
  }
  return g;
}

// The index groups of a collective's attributes, unflattened (empty: none).
IndexGroups groups_arg(const Attrs& a) {
  IndexGroups out;
  if (!a.has("index_groups")) return out;
  const ir::Ints& flat = a.ints("index_groups");
  const size_t n = static_cast<size_t>(group_size(a));
  for (size_t i = 0; i < flat.size(); i += n) {
    out.emplace_back(flat.begin() + static_cast<int64_t>(i),
                     flat.begin() + static_cast<int64_t>(std::min(i + n, flat.size())));
  }
  return out;
}

// The group is one device (the values stay where they are).
bool over_one(const Attrs& a) { return a.has("group") && a.i("group") == 1; }

// The share of its data a device exchanges in a ring over the group: (g-1)/g.
double ring_share(const Attrs& a) {
  const double g = static_cast<double>(a.i_or("group", 1));
  return (g - 1) / g;
}

// Collectives share this base: shape-preserving unless overridden, not elementwise.
class Collective : public Primitive {
 public:
  bool is_collective() const override { return true; }
  // Their varying rules are per axis: operands are not first joined with pvary.
  bool joins_operand_varying() const override { return false; }
  // Results vary over the operand's axes plus the collective's (psum and all_gather override).
  std::vector<std::set<std::string>> varying(const std::vector<std::set<std::string>>& in,
                                             const Attrs& attrs, const Regions&,
                                             size_t n) const override {
    std::set<std::string> v = in.empty() ? std::set<std::string>{} : in[0];
    for (const auto& a : axes_of(attrs)) v.insert(a);
    return std::vector<std::set<std::string>>(n, v);
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  bool identity_on_one_device(const Attrs& attrs) const override { return over_one(attrs); }
  // Collectives are per-device operations: sharding propagation never sees them outside
  // shard_map bodies, so their factor rule keeps everything replicated (the default).
};

// Collectives whose results are invariant over their axes (psum, all_gather), unless they run
// within index groups (then each group holds its own value).
class InvariantCollective : public Collective {
 public:
  std::vector<std::set<std::string>> varying(const std::vector<std::set<std::string>>& in,
                                             const Attrs& attrs, const Regions& r,
                                             size_t n) const override {
    if (attrs.has("index_groups")) return Collective::varying(in, attrs, r, n);
    std::set<std::string> v = in[0];
    for (const auto& a : axes_of(attrs)) v.erase(a);
    return {v};
  }
};

class AllReduce final : public InvariantCollective {
 public:
  std::string_view name() const override { return "all_reduce"; }
  const Batching* batching() const override {
    static const AllReduceBatching b(*this);
    return &b;
  }
  std::string_view comm_kind() const override { return name(); }
  // A reduce_scatter then an all_gather: each moves (g-1)/g of the operand.
  double comm_bytes(const std::vector<Aval>& in, const std::vector<Aval>&,
                    const Attrs& attrs) const override {
    return 2 * ring_share(attrs) * static_cast<double>(in[0].nbytes());
  }
  std::string user_name(const Attrs& attrs) const override {
    const std::string& k = attrs.str("kind");
    return k == "sum" ? "psum" : k == "max" ? "pmax" : "pmin";
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    kind_of(attrs);
    if (in[0].dtype == DType::Bool) {
      detail::fail(name(), "needs a numeric dtype, got {}", in[0].to_string());
    }
    return {in[0]};
  }
  std::vector<Array> vjp(const VjpArgs& a) const override;
  bool allocates_outputs() const override { return true; }
  void reference(const KernelCall& c) const override {
    check_ctx(c, "psum");
    const GroupInfo g = run_group(c);
    (*c.results)[0] =
        c.ctx.comm->all_reduce_to_buffer(c.in[0], c.in_aval(0).size(), c.in_aval(0).dtype,
                                         kind_of(c.attrs), g.devices, c.ctx.device);
  }
};

class AllGather final : public InvariantCollective {
 public:
  std::string_view name() const override { return "all_gather"; }
  const Batching* batching() const override {
    static const AllGatherBatching b(*this);
    return &b;
  }
  std::string_view comm_kind() const override { return name(); }
  double comm_bytes(const std::vector<Aval>&, const std::vector<Aval>& out,
                    const Attrs& attrs) const override {
    return ring_share(attrs) * static_cast<double>(out[0].nbytes());
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    int64_t n = group_size(attrs);
    bool tiled = attrs.b_or("tiled", false);
    Shape s = in[0].shape;
    int rank = static_cast<int>(s.size()) + (tiled ? 0 : 1);
    int axis = norm_axis("all_gather", attrs.i("axis"), rank);
    if (tiled)
      s[static_cast<size_t>(axis)] *= n;
    else
      s.insert(s.begin() + axis, n);
    return {Aval{s, in[0].dtype}};
  }
  std::vector<Array> vjp(const VjpArgs& a) const override;
  bool allocates_outputs() const override { return true; }
  // Blocks gathered whole, then laid out into the result unless nothing precedes `axis`.
  int64_t scratch_bytes(const std::vector<Aval>& in, const std::vector<Aval>& out,
                        const Attrs& attrs) const override {
    const int64_t axis = attrs.i("axis");
    int64_t outer = 1;
    for (int64_t d = 0; d < axis && d < in[0].ndim(); ++d)
      outer *= in[0].shape[static_cast<size_t>(d)];
    return outer == 1 ? 0 : out[0].nbytes();
  }
  void reference(const KernelCall& c) const override {
    check_ctx(c, "all_gather");
    const GroupInfo g = run_group(c);
    const Aval& in = c.in_aval(0);
    const int64_t n = static_cast<int64_t>(g.devices.size());
    bool tiled = c.attrs.b_or("tiled", false);
    int axis = static_cast<int>(c.attrs.i("axis"));
    detail::Buffer gathered =
        c.ctx.comm->all_gather_to_buffer(c.in[0], in.nbytes(), g.devices, c.ctx.device);
    // Blocks concatenated whole are already the result when nothing precedes `axis`.
    int64_t outer = 1;
    for (int d = 0; d < axis && d < in.ndim(); ++d) outer *= in.shape[static_cast<size_t>(d)];
    if (outer == 1) {
      (*c.results)[0] = std::move(gathered);
      return;
    }
    const Shape& out = c.out_aval(0).shape;
    detail::Buffer result = detail::Buffer::allocate(c.ctx.device, c.out_aval(0).nbytes());
    Shape block = in.shape;
    if (!tiled) block.insert(block.begin() + axis, 1);
    Shape zero(block.size(), 0);
    for (int64_t r = 0; r < n; ++r) {
      Shape off(block.size(), 0);
      off[static_cast<size_t>(axis)] = r * block[static_cast<size_t>(axis)];
      detail::copy_box(static_cast<const char*>(gathered.data()) + r * in.nbytes(), block, zero,
                       result.data(), out, off, block, dtype_size(in.dtype));
    }
    (*c.results)[0] = std::move(result);
  }
};

class ReduceScatter final : public Collective {
 public:
  std::string_view name() const override { return "reduce_scatter"; }
  const Batching* batching() const override {
    static const ReduceScatterBatching b(*this);
    return &b;
  }
  std::string_view comm_kind() const override { return name(); }
  double comm_bytes(const std::vector<Aval>& in, const std::vector<Aval>&,
                    const Attrs& attrs) const override {
    return ring_share(attrs) * static_cast<double>(in[0].nbytes());
  }
  std::string user_name(const Attrs&) const override { return "psum_scatter"; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    int64_t n = group_size(attrs);
    bool tiled = attrs.b_or("tiled", false);
    int axis = norm_axis("psum_scatter", attrs.i("axis"), in[0].ndim());
    Shape s = in[0].shape;
    int64_t d = s[static_cast<size_t>(axis)];
    if (tiled) {
      if (d % n != 0) {
        detail::fail("psum_scatter",
                     "dimension {} of {} (size {}) is not divisible by the axis size {}", axis,
                     in[0].to_string(), d, n);
      }
      s[static_cast<size_t>(axis)] = d / n;
    } else {
      if (d != n) {
        detail::fail("psum_scatter",
                     "untiled scatter needs dimension {} of {} to equal the axis size {}", axis,
                     in[0].to_string(), n);
      }
      s.erase(s.begin() + axis);
    }
    detail::check(in[0].dtype != DType::Bool, "psum_scatter", "needs a numeric dtype");
    return {Aval{s, in[0].dtype}};
  }
  std::vector<Array> vjp(const VjpArgs& a) const override;
  void reference(const KernelCall& c) const override {
    check_ctx(c, "psum_scatter");
    const GroupInfo g = run_group(c);
    const Aval& in = c.in_aval(0);
    const int64_t n = static_cast<int64_t>(g.devices.size());
    int axis = static_cast<int>(c.attrs.i("axis"));
    // Make the scattered axis outermost so rank r's chunk is contiguous.
    int64_t outer = 1, inner = 1, d = in.shape[static_cast<size_t>(axis)];
    for (int i = 0; i < axis; ++i) outer *= in.shape[static_cast<size_t>(i)];
    for (size_t i = static_cast<size_t>(axis) + 1; i < in.shape.size(); ++i) inner *= in.shape[i];
    const int es = dtype_size(in.dtype);
    const int64_t chunk = d / n;  // rows of `axis` per rank
    const char* src = static_cast<const char*>(c.in[0]);
    // With nothing outside the scattered axis, rank r's chunk is already contiguous.
    std::unique_ptr<char[]> tmp;
    if (outer > 1) {
      tmp.reset(new char[static_cast<size_t>(in.nbytes())]);  // written whole below
      for (int64_t r = 0; r < n; ++r) {
        for (int64_t o = 0; o < outer; ++o) {
          std::memcpy(tmp.get() + ((r * outer + o) * chunk * inner) * es,
                      src + ((o * d + r * chunk) * inner) * es,
                      static_cast<size_t>(chunk * inner * es));
        }
      }
      src = tmp.get();
    }
    c.ctx.comm->reduce_scatter(src, c.out[0], outer * chunk * inner, in.dtype, ReduceKind::kSum,
                               g.devices, c.ctx.device);
  }
};

class AllToAll final : public Collective {
 public:
  std::string_view name() const override { return "all_to_all"; }
  const Batching* batching() const override {
    static const AllToAllBatching b(*this);
    return &b;
  }
  std::string_view comm_kind() const override { return name(); }
  double comm_bytes(const std::vector<Aval>& in, const std::vector<Aval>&,
                    const Attrs& attrs) const override {
    return ring_share(attrs) * static_cast<double>(in[0].nbytes());
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    int64_t n = group_size(attrs);
    bool tiled = attrs.b_or("tiled", false);
    Shape s = in[0].shape;
    int split = norm_axis("all_to_all", attrs.i("split_axis"), in[0].ndim());
    int64_t d = s[static_cast<size_t>(split)];
    if (tiled) {
      int concat = norm_axis("all_to_all", attrs.i("concat_axis"), in[0].ndim());
      if (d % n != 0) {
        detail::fail("all_to_all",
                     "split dimension {} of {} (size {}) is not divisible by the axis size {}",
                     split, in[0].to_string(), d, n);
      }
      s[static_cast<size_t>(split)] = d / n;
      s[static_cast<size_t>(concat)] *= n;
    } else {
      if (d != n) {
        detail::fail("all_to_all",
                     "untiled all_to_all needs split dimension {} of {} to equal the axis size {}",
                     split, in[0].to_string(), n);
      }
      s.erase(s.begin() + split);
      int concat = norm_axis("all_to_all", attrs.i("concat_axis"), static_cast<int>(s.size()) + 1);
      s.insert(s.begin() + concat, n);
    }
    return {Aval{s, in[0].dtype}};
  }
  std::vector<Array> vjp(const VjpArgs& a) const override;
  void reference(const KernelCall& c) const override {
    check_ctx(c, "all_to_all");
    const GroupInfo g = run_group(c);
    const Aval& in = c.in_aval(0);
    const int64_t n = static_cast<int64_t>(g.devices.size());
    const bool tiled = c.attrs.b_or("tiled", false);
    const int split = static_cast<int>(c.attrs.i("split_axis"));
    const int es = dtype_size(in.dtype);
    // View the input with the split axis as [n, d/n] and pack chunk j contiguously.
    Shape piece = in.shape;
    piece[static_cast<size_t>(split)] /= n;
    const int64_t piece_bytes = shape_size(piece) * es;
    auto leading = [](const Shape& s, int axis) {
      int64_t k = 1;
      for (int i = 0; i < axis; ++i) k *= s[static_cast<size_t>(i)];
      return k;
    };
    // Chunk j is contiguous in the input when nothing lies outside the split axis, and
    // received chunk r lands contiguously in the output when nothing lies outside the concat
    // axis there: then the communicator reads and writes the arrays themselves.
    const Shape& out = c.out_aval(0).shape;
    int concat = static_cast<int>(c.attrs.i("concat_axis"));
    Shape block = piece;  // tiled: the piece; untiled: the piece without split, with a 1 at concat
    if (!tiled) {
      block.erase(block.begin() + split);
      block.insert(block.begin() + concat, 1);
    }
    const bool packed_in = leading(in.shape, split) == 1;
    const bool packed_out = leading(out, concat) == 1;
    std::unique_ptr<char[]> send, recv;  // written whole before they are read
    const void* src = c.in[0];
    void* dst = c.out[0];
    if (!packed_in) {
      send.reset(new char[static_cast<size_t>(piece_bytes * n)]);
      Shape zero(piece.size(), 0);
      for (int64_t j = 0; j < n; ++j) {
        Shape off(piece.size(), 0);
        off[static_cast<size_t>(split)] = j * piece[static_cast<size_t>(split)];
        detail::copy_box(c.in[0], in.shape, off, send.get() + j * piece_bytes, piece, zero, piece,
                         es);
      }
      src = send.get();
    }
    if (!packed_out) {
      recv.reset(new char[static_cast<size_t>(piece_bytes * n)]);
      dst = recv.get();
    }
    c.ctx.comm->all_to_all(src, dst, piece_bytes, g.devices, c.ctx.device);
    if (packed_out) return;
    // Received chunk r (from rank r) goes to position r along the concat axis.
    Shape bzero(block.size(), 0);
    for (int64_t r = 0; r < n; ++r) {
      Shape off(block.size(), 0);
      off[static_cast<size_t>(concat)] = r * block[static_cast<size_t>(concat)];
      detail::copy_box(recv.get() + r * piece_bytes, block, bzero, c.out[0], out, off, block, es);
    }
  }
};

class Ppermute final : public Collective {
 public:
  std::string_view name() const override { return "ppermute"; }
  const Batching* batching() const override {
    static const PpermuteBatching b(*this);
    return &b;
  }
  std::string_view comm_kind() const override { return "collective_permute"; }
  // Each device sends its whole operand (at most once).
  double comm_bytes(const std::vector<Aval>& in, const std::vector<Aval>&,
                    const Attrs&) const override {
    return static_cast<double>(in[0].nbytes());
  }
  // On one device a permutation either keeps the value (0 -> 0) or sends nothing (zeros).
  bool identity_on_one_device(const Attrs& attrs) const override {
    return over_one(attrs) && attrs.ints("perm") == ir::Ints{0, 0};
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    const ir::Ints& perm = attrs.ints("perm");
    int64_t n = group_size(attrs);
    detail::check(perm.size() % 2 == 0, "ppermute", "perm must hold (source, target) pairs");
    std::set<int64_t> src, dst;
    for (size_t i = 0; i < perm.size(); i += 2) {
      detail::check(perm[i] >= 0 && perm[i] < n && perm[i + 1] >= 0 && perm[i + 1] < n, "ppermute",
                    "pair ({}, {}) is out of range for axis size {}", perm[i], perm[i + 1], n);
      detail::check(src.insert(perm[i]).second, "ppermute",
                    "source {} appears twice: perm is not a permutation", perm[i]);
      detail::check(dst.insert(perm[i + 1]).second, "ppermute",
                    "target {} appears twice: perm is not a permutation", perm[i + 1]);
    }
    return {in[0]};
  }
  std::vector<Array> vjp(const VjpArgs& a) const override;
  void reference(const KernelCall& c) const override {
    check_ctx(c, "ppermute");
    const GroupInfo& g = group_of(c.ctx, axes_of(c.attrs));
    const ir::Ints& perm = c.attrs.ints("perm");
    std::vector<std::pair<int, int>> pairs;
    for (size_t i = 0; i < perm.size(); i += 2) {
      pairs.emplace_back(g.devices[static_cast<size_t>(perm[i])],
                         g.devices[static_cast<size_t>(perm[i + 1])]);
    }
    c.ctx.comm->permute(c.in[0], c.out[0], c.in_aval(0).nbytes(), pairs, g.devices, c.ctx.device);
  }
};

class AxisIndex final : public Primitive {
 public:
  std::string_view name() const override { return "axis_index"; }
  const Batching* batching() const override {
    static const AxisIndexBatching b(*this);
    return &b;
  }
  std::vector<std::set<std::string>> varying(const std::vector<std::set<std::string>>&,
                                             const Attrs& attrs, const Regions&,
                                             size_t) const override {
    const auto& a = axes_of(attrs);
    return {std::set<std::string>(a.begin(), a.end())};
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 0);
    axes_of(attrs);
    return {Aval{{}, DType::I32}};
  }
  std::vector<Array> vjp(const VjpArgs&) const override { return {}; }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    if (c.ctx.mesh == nullptr) detail::fail("axis_index", "runs only inside shard_map");
    *static_cast<int32_t*>(c.out[0]) =
        static_cast<int32_t>(mixed_radix_index(*c.ctx.mesh, c.ctx.mesh_coords, axes_of(c.attrs)));
  }
};

class Pvary final : public Primitive {
 public:
  std::string_view name() const override { return "pvary"; }
  const Batching* batching() const override {  // acts on every element alike
    static const CollectiveBatching b(*this, {});
    return &b;
  }
  std::vector<std::set<std::string>> varying(const std::vector<std::set<std::string>>& in,
                                             const Attrs& attrs, const Regions&,
                                             size_t) const override {
    std::set<std::string> v = in[0];
    for (const auto& a : axes_of(attrs)) v.insert(a);
    return {v};
  }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    axes_of(attrs);
    return {in[0]};
  }
  std::vector<Array> vjp(const VjpArgs& a) const override;
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  // A type change only: the runtime aliases the operand's buffer (no copy of a pipeline
  // stage's weights each time they enter a gradient as varying).
  bool is_view(const Aval&, const Aval&, const Attrs&) const override { return true; }
  void reference(const KernelCall& c) const override {
    std::memcpy(c.out[0], c.in[0], static_cast<size_t>(c.in_aval(0).nbytes()));
  }
};

class AxisSlice final : public Primitive {
 public:
  std::string_view name() const override { return "axis_slice"; }
  const Batching* batching() const override {
    static const CollectiveBatching b(*this, {"axis"});
    return &b;
  }
  bool identity_on_one_device(const Attrs& attrs) const override { return over_one(attrs); }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    int axis = norm_axis(name(), attrs.i("axis"), in[0].ndim());
    int64_t n = group_size(attrs);
    Shape s = in[0].shape;
    if (!(s[static_cast<size_t>(axis)] % n == 0)) {
      detail::fail(name(), "dimension {} of {} is not divisible into {} blocks", axis,
                   in[0].to_string(), n);
    }
    s[static_cast<size_t>(axis)] /= n;
    return {Aval{s, in[0].dtype}};
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    if (c.ctx.mesh == nullptr) detail::fail("axis_slice", "runs only in a partitioned program");
    int axis = static_cast<int>(c.attrs.i("axis"));
    int64_t r = mixed_radix_index(*c.ctx.mesh, c.ctx.mesh_coords, axes_of(c.attrs));
    const Shape& out = c.out_aval(0).shape;
    Shape off(out.size(), 0);
    off[static_cast<size_t>(axis)] = r * out[static_cast<size_t>(axis)];
    detail::copy_box(c.in[0], c.in_aval(0).shape, off, c.out[0], out, Shape(out.size(), 0), out,
                     dtype_size(c.in_aval(0).dtype));
  }
};

// pad_mask{axes, axis, size, value}: positions of this device's block along `axis` that lie
// beyond the global size (the padding of uneven blocks) are set to value; reductions over
// unevenly split dimensions read only valid data this way.
class PadMask final : public Primitive {
 public:
  std::string_view name() const override { return "pad_mask"; }
  const Batching* batching() const override {
    static const CollectiveBatching b(*this, {"axis"});
    return &b;
  }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    norm_axis(name(), attrs.i("axis"), in[0].ndim());
    return {in[0]};
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  // The result may take the operand's buffer over (only the padding is written).
  int in_place_operand() const override { return 0; }
  // A device whose block holds no padding shares its operand's buffer, and one whose block is
  // all padding shares a cached block of the fill value: neither copies.
  bool may_share_result(const Attrs&) const override { return true; }
  bool shares_result(const KernelCall& c, const std::vector<const detail::Buffer*>& operands,
                     detail::Buffer* result) const override {
    if (c.ctx.mesh == nullptr) return false;
    const int64_t valid = valid_rows(c);
    if (valid == c.in_aval(0).shape[static_cast<size_t>(c.attrs.i("axis"))]) {
      *result = *operands[0];
      return true;
    }
    if (valid == 0) {
      detail::Buffer fill = filled_block(c.in_aval(0), c.attrs.f("value"));
      if (!fill.valid()) return false;
      *result = fill.alias_for(c.ctx.device);
      return true;
    }
    return false;
  }
  void reference(const KernelCall& c) const override {
    if (c.ctx.mesh == nullptr) detail::fail("pad_mask", "runs only in a partitioned program");
    const Aval& a = c.in_aval(0);
    const int axis = static_cast<int>(c.attrs.i("axis"));
    const int64_t len = a.shape[static_cast<size_t>(axis)];
    const int64_t valid = valid_rows(c);
    const int es = dtype_size(a.dtype);
    if (valid == len) {
      if (c.out[0] != c.in[0]) std::memcpy(c.out[0], c.in[0], static_cast<size_t>(a.nbytes()));
      return;
    }
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= a.shape[static_cast<size_t>(d)];
    for (size_t d = static_cast<size_t>(axis) + 1; d < a.shape.size(); ++d) inner *= a.shape[d];
    if (c.out[0] != c.in[0] && valid > 0) {  // the valid rows of each outer index
      const size_t row = static_cast<size_t>(len * inner) * static_cast<size_t>(es);
      const size_t keep = static_cast<size_t>(valid * inner) * static_cast<size_t>(es);
      for (int64_t o = 0; o < outer; ++o) {
        std::memcpy(static_cast<char*>(c.out[0]) + static_cast<size_t>(o) * row,
                    static_cast<const char*>(c.in[0]) + static_cast<size_t>(o) * row, keep);
      }
    }
    // One run of padding per outer index: (len - valid) * inner elements. The fill value is
    // written once, then doubled by copies within the run.
    const size_t run = static_cast<size_t>((len - valid) * inner) * static_cast<size_t>(es);
    char* out = static_cast<char*>(c.out[0]);
    for (int64_t o = 0; o < outer; ++o) {
      char* dst = out + static_cast<size_t>((o * len + valid) * inner) * static_cast<size_t>(es);
      if (run == 0) break;
      detail::store_scalar(dst, a.dtype, c.attrs.f("value"));
      size_t done = static_cast<size_t>(es);
      while (done < run) {
        const size_t n = std::min(done, run - done);
        std::memcpy(dst + done, dst, n);
        done += n;
      }
    }
  }

 private:
  // The rows of this device's block along `axis` that lie within the global size.
  static int64_t valid_rows(const KernelCall& c) {
    const int64_t len = c.in_aval(0).shape[static_cast<size_t>(c.attrs.i("axis"))];
    const int64_t start = mixed_radix_index(*c.ctx.mesh, c.ctx.mesh_coords, axes_of(c.attrs)) * len;
    return std::max<int64_t>(0, std::min(len, c.attrs.i("size") - start));
  }
};

// unreduce{axes}: a reduced value made a partial sum over axes: device 0 of each group keeps
// it, the others hold zeros (the sum over the group is the value).
class Unreduce final : public Primitive {
 public:
  std::string_view name() const override { return "unreduce"; }
  const Batching* batching() const override {  // acts on every element alike
    static const CollectiveBatching b(*this, {});
    return &b;
  }
  Linearity linearity() const override { return Linearity::kLinear; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    check_arity(name(), in, 1);
    axes_of(attrs);
    return {in[0]};
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    if (c.ctx.mesh == nullptr) detail::fail("unreduce", "runs only in a partitioned program");
    const size_t n = static_cast<size_t>(c.in_aval(0).nbytes());
    if (mixed_radix_index(*c.ctx.mesh, c.ctx.mesh_coords, axes_of(c.attrs)) == 0) {
      std::memcpy(c.out[0], c.in[0], n);
    } else {
      std::memset(c.out[0], 0, n);
    }
  }
};

// VJPs follow the varying-axes rules (each is checked by finite differences):
// psum transposes to pvary and pvary to psum; psum_scatter to all_gather; an all_gather whose
// result is invariant to the local slice of the cotangent; ppermute to the inverse
// permutation; all_to_all to the all_to_all with split and concat swapped.
Axes axes_arg(const Attrs& a) { return Axes(std::vector<std::string>(axes_of(a))); }

// Within index groups the results vary, and each collective transposes to its grouped
// counterpart: psum to psum, all_gather to psum_scatter and back, all_to_all to all_to_all.
std::vector<Array> AllReduce::vjp(const VjpArgs& a) const {
  if (kind_of(a.attrs) != ReduceKind::kSum) {
    detail::fail("grad", "pmax / pmin are not differentiable; use psum-based formulations");
  }
  if (a.attrs.has("index_groups"))
    return {psum(a.cotangents[0], axes_arg(a.attrs), groups_arg(a.attrs))};
  return {pvary(a.cotangents[0], axes_arg(a.attrs))};
}

std::vector<Array> Pvary::vjp(const VjpArgs& a) const {
  return {psum(a.cotangents[0], axes_arg(a.attrs))};
}

std::vector<Array> AllGather::vjp(const VjpArgs& a) const {
  const Array& g = a.cotangents[0];
  const Shape& in = a.primals[0].shape();
  const bool tiled = a.attrs.b_or("tiled", false);
  const int axis = static_cast<int>(a.attrs.i("axis"));
  if (a.attrs.has("index_groups")) {
    return {psum_scatter(g, axes_arg(a.attrs), axis, tiled, groups_arg(a.attrs))};
  }
  // This device's block of the (invariant) gathered cotangent.
  Array rank = axis_index(axes_arg(a.attrs));
  std::vector<Array> starts;
  Shape sizes = g.shape();
  for (int d = 0; d < g.ndim(); ++d) {
    if (d == axis) {
      starts.push_back(tiled ? rank * static_cast<double>(in[static_cast<size_t>(axis)]) : rank);
      sizes[static_cast<size_t>(d)] = tiled ? in[static_cast<size_t>(axis)] : 1;
    } else {
      starts.push_back(zeros({}, DType::I32));
    }
  }
  Array piece = dynamic_slice(g, starts, sizes);
  return {tiled ? piece : reshape(piece, in)};
}

std::vector<Array> ReduceScatter::vjp(const VjpArgs& a) const {
  const int axis = static_cast<int>(a.attrs.i("axis"));
  Array full = all_gather(a.cotangents[0], axes_arg(a.attrs), axis, a.attrs.b_or("tiled", false),
                          groups_arg(a.attrs));
  return {pvary(full, axes_arg(a.attrs))};
}

std::vector<Array> Ppermute::vjp(const VjpArgs& a) const {
  const ir::Ints& perm = a.attrs.ints("perm");
  std::vector<std::pair<int, int>> inverse;
  for (size_t i = 0; i < perm.size(); i += 2) {
    inverse.emplace_back(static_cast<int>(perm[i + 1]), static_cast<int>(perm[i]));
  }
  return {ppermute(a.cotangents[0], axes_arg(a.attrs), inverse)};
}

std::vector<Array> AllToAll::vjp(const VjpArgs& a) const {
  return {all_to_all(a.cotangents[0], axes_arg(a.attrs), static_cast<int>(a.attrs.i("concat_axis")),
                     static_cast<int>(a.attrs.i("split_axis")), a.attrs.b_or("tiled", false),
                     groups_arg(a.attrs))};
}

Register<AllReduce> r_all_reduce;
Register<AllGather> r_all_gather;
Register<ReduceScatter> r_reduce_scatter;
Register<AllToAll> r_all_to_all;
Register<Ppermute> r_ppermute;
Register<AxisIndex> r_axis_index;
Register<Pvary> r_pvary;
Register<AxisSlice> r_axis_slice;
Register<PadMask> r_pad_mask;
Register<Unreduce> r_unreduce;

}  // namespace
}  // namespace partix::prim

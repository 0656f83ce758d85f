// The shared batching rules (vmap) and the rules of the shape primitives; elementwise rows,
// reductions and contractions state theirs beside their definitions. ARCHITECTURE.md,
// "Transformations" (vmap).
#include "prim/batching.h"

#include "core/errors.h"
#include "partix/control.h"
#include "partix/ops.h"
#include "trace/loop_carries.h"
#include "trace/trace.h"

namespace partix::prim {

std::vector<Array> all_at_front(const std::vector<Batched>& operands, int64_t size) {
  std::vector<Array> out;
  for (const Batched& b : operands) out.push_back(at_front(b, size));
  return out;
}

ir::Ints shifted(const ir::Ints& axes) {
  ir::Ints out;
  for (int64_t a : axes) out.push_back(a < 0 ? a : a + 1);
  return out;
}

ir::Ints prepended(int64_t x, const ir::Ints& v) {
  ir::Ints out{x};
  out.insert(out.end(), v.begin(), v.end());
  return out;
}

std::vector<Batched> bind_batched(const Primitive& p, const std::vector<Array>& operands,
                                  const Attrs& attrs, const Regions& regions) {
  std::vector<Batched> out;
  for (const Array& r : detail::bind(p, operands, attrs, regions)) out.push_back({r, 0});
  return out;
}

// Elementwise primitives also take rank-0 operands beside shaped ones: an unbatched scalar
// stays a scalar, a batched one ([size]) is broadcast over the example's shape.
std::vector<Batched> SameShapeBatching::batch(const BatchArgs& a) const {
  Shape example;  // the largest example shape among the operands
  for (const Batched& b : a.operands) {
    const int rank = b.value.ndim() - (b.bdim >= 0 ? 1 : 0);
    if (rank > static_cast<int>(example.size())) {
      example = b.value.shape();
      if (b.bdim >= 0) example.erase(example.begin() + b.bdim);
    }
  }
  Shape full{a.size};
  full.insert(full.end(), example.begin(), example.end());
  std::vector<Array> ops;
  for (const Batched& b : a.operands) {
    const int rank = b.value.ndim() - (b.bdim >= 0 ? 1 : 0);
    if (rank == 0 && !example.empty()) {
      ops.push_back(b.bdim < 0 ? b.value : broadcast_in_dim(b.value, full, {0}));
    } else {
      ops.push_back(at_front(b, a.size));
    }
  }
  return bind_batched(p_, ops, a.attrs, a.regions);
}

std::vector<Batched> AxesBatching::batch(const BatchArgs& a) const {
  Attrs attrs = a.attrs;
  for (const char* f : fields_) {
    if (!attrs.has(f)) continue;
    if (const auto* v = std::get_if<int64_t>(&attrs.items().at(f))) {
      // A negative axis counts from the end, which the leading dimension does not move.
      attrs.set(f, *v < 0 ? *v : *v + 1);
    } else {
      attrs.set(f, shifted(attrs.ints(f)));
    }
  }
  return bind_batched(p_, all_at_front(a.operands, a.size), attrs, a.regions);
}

std::vector<Batched> AttrsBatching::batch(const BatchArgs& a) const {
  return bind_batched(p_, all_at_front(a.operands, a.size), adjust_(a.attrs, a.size), a.regions);
}

std::vector<Batched> RegionsBatching::batch(const BatchArgs& a) const {
  Regions regions;
  for (const auto& r : a.regions) regions.push_back(autodiff::batch_region(*r, a.axis));
  return bind_batched(p_, all_at_front(a.operands, a.size), a.attrs, regions);
}

std::vector<Batched> MapBatching::batch(const BatchArgs& a) const {
  std::vector<Array> xs;
  for (const Batched& b : a.operands) {
    if (b.bdim >= 0) xs.push_back(at_front(b, a.size));
  }
  std::shared_ptr<void> proto;
  const detail::LooseCarriesScope loose;  // a loop of its own making: carries widen
  const std::vector<Array> outs = detail::scan_call(
      {}, xs, a.size, false,
      [&](const std::vector<Array>& t, std::shared_ptr<void>&) {
        std::vector<Array> ops;
        size_t next = 0;
        for (const Batched& b : a.operands) ops.push_back(b.bdim >= 0 ? t[next++] : b.value);
        return detail::bind(p_, ops, a.attrs, a.regions);
      },
      proto);
  std::vector<Batched> out;
  for (const Array& r : outs) out.push_back({r, 0});
  return out;
}

std::vector<Batched> DynamicSliceBatching::batch(const BatchArgs& a) const {
  const size_t first = update_ ? 2 : 1;  // the first start operand
  for (size_t i = first; i < a.operands.size(); ++i) {
    if (a.operands[i].bdim >= 0) return MapBatching(p_).batch(a);
  }
  std::vector<Array> ops;
  for (size_t i = 0; i < first; ++i) ops.push_back(at_front(a.operands[i], a.size));
  ops.push_back(zeros({}, a.operands[first].value.dtype()));
  for (size_t i = first; i < a.operands.size(); ++i) ops.push_back(a.operands[i].value);
  Attrs attrs = a.attrs;
  if (!update_) attrs.set("sizes", prepended(a.size, a.attrs.ints("sizes")));
  return bind_batched(p_, ops, attrs, a.regions);
}

}  // namespace partix::prim

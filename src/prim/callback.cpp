// Host callbacks (prim/callback.h): pure_callback, whose calls may be repeated or dropped like
// any pure op's, and effect_callback, which dead-code elimination keeps (a print, an
// io_callback). Attributes: "callback" (the registered function's id), "api" (the user's name
// for it), "out_shapes"/"out_ranks"/"out_dtypes" (the results), "once" (call on the first
// device only and send its results to the others), "sequential_dims" (leading batch dimensions
// a vmap added, looped over one example per call) and "vmap_method" (how a vmap batches it).
#include "prim/callback.h"

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "core/errors.h"
#include "ir/primitive.h"
#include "partix/ops.h"
#include "prim/batching.h"
#include "prim/collective.h"
#include "prim/util.h"
#include "trace/trace.h"

namespace partix::prim {

namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<int64_t, std::shared_ptr<const HostCallbackFn>> fns;
  int64_t next = 1;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: kernels may run during exit
  return *r;
}

std::shared_ptr<const HostCallbackFn> lookup(int64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.fns.find(id);
  if (it == r.fns.end())
    detail::internal_error("host_callback", "no callback " + std::to_string(id));
  return it->second;
}

std::vector<Aval> result_avals(const Attrs& attrs) {
  const ir::Ints& dims = attrs.ints("out_shapes");
  const ir::Ints& ranks = attrs.ints("out_ranks");
  const ir::Strings& dtypes = attrs.get<ir::Strings>("out_dtypes");
  std::vector<Aval> out;
  size_t at = 0;
  for (size_t k = 0; k < ranks.size(); ++k) {
    Shape s(dims.begin() + static_cast<std::ptrdiff_t>(at),
            dims.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(ranks[k])));
    at += static_cast<size_t>(ranks[k]);
    out.push_back(Aval{std::move(s), dtype_from_name(dtypes[k])});
  }
  return out;
}

void set_result_avals(Attrs& attrs, const std::vector<Aval>& out) {
  ir::Ints dims, ranks;
  ir::Strings dtypes;
  for (const Aval& a : out) {
    dims.insert(dims.end(), a.shape.begin(), a.shape.end());
    ranks.push_back(a.ndim());
    dtypes.emplace_back(dtype_name(a.dtype));
  }
  attrs.set("out_shapes", dims);
  attrs.set("out_ranks", ranks);
  attrs.set("out_dtypes", dtypes);
}

thread_local int t_callback_depth = 0;

struct InCallback {
  InCallback() { ++t_callback_depth; }
  ~InCallback() { --t_callback_depth; }
  InCallback(const InCallback&) = delete;
  InCallback& operator=(const InCallback&) = delete;
};

// `a` without its first `n` dimensions.
Aval inner(const Aval& a, int64_t n) {
  return Aval{Shape(a.shape.begin() + n, a.shape.end()), a.dtype};
}

// Calls the function once per example of the leading `seq` dimensions (one call when 0).
void call_examples(const HostCallbackFn& fn, const KernelCall& c, int64_t seq) {
  int64_t n = 1;
  for (int64_t d = 0; d < seq; ++d)
    n *= c.out_avals.empty() ? c.in_aval(0).shape[d] : c.out_aval(0).shape[d];
  std::vector<Aval> in_avals, out_avals;
  for (const Aval* a : c.in_avals) in_avals.push_back(inner(*a, seq));
  for (const Aval* a : c.out_avals) out_avals.push_back(inner(*a, seq));
  HostCallbackCall call;
  call.device = c.ctx.device;
  call.mesh_position = c.ctx.mesh_position;
  for (const Aval& a : in_avals) call.in_avals.push_back(&a);
  for (const Aval& a : out_avals) call.out_avals.push_back(&a);
  for (int64_t e = 0; e < n; ++e) {
    call.in.clear();
    call.out.clear();
    for (size_t i = 0; i < c.in.size(); ++i) {
      call.in.push_back(static_cast<const char*>(c.in[i]) + e * in_avals[i].nbytes());
    }
    for (size_t k = 0; k < c.out.size(); ++k) {
      call.out.push_back(static_cast<char*>(c.out[k]) + e * out_avals[k].nbytes());
    }
    InCallback guard;
    fn(call);
  }
}

// The first device's results, sent to every device of the program's mesh.
void send_from_first(const KernelCall& c) {
  const GroupInfo& g = group_of(c.ctx, c.ctx.mesh->axis_names());
  for (size_t k = 0; k < c.out.size(); ++k) {
    const int64_t bytes = c.out_aval(k).nbytes();
    if (bytes == 0) continue;
    detail::Buffer all = c.ctx.comm->all_gather_to_buffer(c.out[k], bytes, g.devices, c.ctx.device);
    if (g.rank != 0) std::memcpy(c.out[k], all.data(), static_cast<size_t>(bytes));
  }
}

// vmap: batched operands at the front, unbatched ones broadcast to every example
// ("sequential", "broadcast_all") or given a leading 1 ("expand_dims"); every result batched.
// "sequential" loops over the new dimension, one example per call.
class CallbackBatching final : public Batching {
 public:
  explicit CallbackBatching(const Primitive& p) : p_(p) {}
  std::vector<Batched> batch(const BatchArgs& a) const override {
    const std::string method = a.attrs.has("vmap_method") ? a.attrs.str("vmap_method") : "";
    const std::string& api = a.attrs.str("api");
    if (method.empty()) {
      detail::fail(api,
                   "vmap of {} needs vmap_method= ('sequential', 'expand_dims' or "
                   "'broadcast_all')",
                   api);
    }
    std::vector<Array> operands;
    for (const Batched& b : a.operands) {
      if (b.bdim < 0 && method == "expand_dims") {
        operands.push_back(expand_dims(b.value, 0));
      } else {
        operands.push_back(at_front(b, a.size));
      }
    }
    Attrs attrs = a.attrs;
    std::vector<Aval> out = result_avals(attrs);
    for (Aval& o : out) o.shape.insert(o.shape.begin(), a.size);
    set_result_avals(attrs, out);
    if (method == "sequential") attrs.set("sequential_dims", attrs.i_or("sequential_dims", 0) + 1);
    return bind_batched(p_, operands, attrs);
  }

 private:
  const Primitive& p_;
};

class Callback : public Primitive {
 public:
  const Batching* batching() const override { return &batching_; }
  std::vector<Aval> infer(const std::vector<Aval>& in, const Attrs& attrs,
                          const Regions&) const override {
    const int64_t seq = attrs.i_or("sequential_dims", 0);
    for (const Aval& a : in) {
      detail::check(a.ndim() >= seq, name(), "operand {} has fewer than {} batch dimensions",
                    a.to_string(), seq);
    }
    return result_avals(attrs);
  }
  std::vector<Array> vjp(const VjpArgs& a) const override {
    for (const Array& ct : a.cotangents) {
      if (ct.valid()) {
        detail::fail(a.attrs.str("api"),
                     "{} cannot be differentiated; give it a custom_jvp or "
                     "custom_vjp rule to take gradients through it",
                     a.attrs.str("api"));
      }
    }
    return std::vector<Array>(a.primals.size());
  }
  double flops(const std::vector<Aval>&, const std::vector<Aval>&, const Attrs&) const override {
    return 0;
  }
  void reference(const KernelCall& c) const override {
    const bool once = c.attrs.b("once");
    const bool send = once && !c.out.empty() && c.ctx.mesh != nullptr && c.ctx.mesh->size() > 1;
    std::exception_ptr err;
    if (!once || c.ctx.mesh_position <= 0) {
      try {
        call_examples(*lookup(c.attrs.i("callback")), c, c.attrs.i_or("sequential_dims", 0));
      } catch (...) {
        if (!send) throw;
        err = std::current_exception();  // the others wait for the results: send, then fail
        for (size_t k = 0; k < c.out.size(); ++k) {
          std::memset(c.out[k], 0, static_cast<size_t>(c.out_aval(k).nbytes()));
        }
      }
    }
    if (send) send_from_first(c);
    if (err) std::rethrow_exception(err);
  }

 private:
  CallbackBatching batching_{*this};
};

class PureCallback final : public Callback {
 public:
  std::string_view name() const override { return "pure_callback"; }
};

class EffectCallback final : public Callback {
 public:
  std::string_view name() const override { return "effect_callback"; }
  bool has_effects() const override { return true; }
};

Register<PureCallback> r_pure;
Register<EffectCallback> r_effect;

}  // namespace

bool in_host_callback() { return t_callback_depth > 0; }

int64_t register_host_callback(std::shared_ptr<const HostCallbackFn> fn) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const int64_t id = r.next++;
  r.fns.emplace(id, std::move(fn));
  return id;
}

void clear_host_callbacks() {
  std::unordered_map<int64_t, std::shared_ptr<const HostCallbackFn>> gone;
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    gone.swap(r.fns);
  }
}

std::vector<Array> host_callback(const char* api, int64_t id, const std::vector<Array>& operands,
                                 const std::vector<Aval>& out, bool effect,
                                 const std::string& vmap_method) {
  for (const Array& a : operands) {
    if (is_quantized(a.dtype())) {
      detail::fail(api, "cannot hand a quantized array ({}) to a host callback",
                   dtype_name(a.dtype()));
    }
  }
  Attrs attrs;
  attrs.set("callback", id);
  attrs.set("api", std::string(api));
  set_result_avals(attrs, out);
  // An effect happens once per program, or once per device inside a shard_map body (each
  // device's call sees its own blocks).
  const detail::TraceState* t = detail::current_trace();
  attrs.set("once", effect && !(t != nullptr && t->manual_mesh.has_value()));
  if (!vmap_method.empty()) attrs.set("vmap_method", vmap_method);
  return detail::bind(get_primitive(effect ? "effect_callback" : "pure_callback"), operands,
                      std::move(attrs));
}

}  // namespace partix::prim

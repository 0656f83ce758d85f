// Pipeline parallelism as one SPMD program. A mesh axis (e.g. 'stage') splits a
// model's stacked layers into S stages; with V virtual stages per device the layers form
// K = S * V chunks, chunk k living on device k % S. The batch is split into M microbatches,
// which flow chunk to chunk through ppermutes on the stage axis.
//
// A Schedule is static: a table of ticks, each with a forward half and a backward half. In its
// forward half a device runs at most one chunk's forward on one microbatch, then every device
// passes its output one device on (the last chunk's output goes nowhere); in its backward half
// a device runs at most one chunk's backward, then passes the input's cotangent one device
// back. The same program runs on every device and each device looks up its own row, so devices
// do different work in the same tick (a cond on a device-varying predicate; no collective
// inside it). Kinds:
//   gpipe        every forward of a device before any of its backwards: holds M microbatches.
//   1f1b         a backward as soon as its cotangent is there: a stage holds at most 2(S-s)-1
//                microbatches, however large M is.
//   interleaved  1f1b with V > 1 chunks per device, visited in Megatron's order (groups of S
//                microbatches per chunk): the pipeline fills V times faster.
// A backward recomputes its chunk's forward from the chunk's stashed input (each chunk is
// rematerialised), so what a stage holds per microbatch in flight is one input.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "partix/array.h"
#include "partix/profiler.h"
#include "partix/tree.h"

namespace partix::pipeline {

enum class ScheduleKind { kGPipe, k1F1B, kInterleaved };
std::string_view schedule_name(ScheduleKind kind);   // "gpipe", "1f1b", "interleaved"
ScheduleKind parse_schedule(std::string_view name);  // throws naming the value

struct Schedule {
  ScheduleKind kind = ScheduleKind::k1F1B;
  int64_t stages = 1, microbatches = 1, virtual_stages = 1;
  int64_t ticks = 0;
  // [tick][device]: the chunk (-1: none) and microbatch of the forward / backward half.
  std::vector<std::vector<int32_t>> fwd_chunk, fwd_mb, bwd_chunk, bwd_mb;
  // [tick][device]: slots of the two per-device buffers. Inputs: the slot the forward reads,
  // and the one the activation arriving after this forward half is written to; the backward
  // reads its chunk's input from bwd_in. Cotangents: the slot the backward reads its output's
  // cotangent from, and the one arriving after the backward half is written to. Slot
  // input_slots (cotangent_slots) is the discard slot: nothing is read from it that matters.
  std::vector<std::vector<int32_t>> fwd_in, fwd_recv, bwd_in, bwd_co, bwd_recv;
  int64_t input_slots = 0, cotangent_slots = 0;  // real slots, the most any device needs
  // The most microbatch inputs device d holds at once (stashed for its backwards).
  std::vector<int64_t> held;

  int64_t chunks() const { return stages * virtual_stages; }
  // The fraction of the step a device is idle, with a chunk's forward taking tf and its
  // backward tb and a tick's half as long as its longest op (every device waits for it).
  double bubble_fraction(double tf = 1.0, double tb = 2.0) const;
  // The textbook value: (S-1)/(M+S-1) for gpipe and 1f1b, (S-1)/(V*M+S-1) interleaved.
  double ideal_bubble_fraction() const;
  // One line per device: its ticks as "F3 " (forward of microbatch 3), "B3 ", "." (idle); with
  // V > 1 the chunk is added ("F3.1" is microbatch 3 on virtual stage 1).
  std::string to_string() const;
};

// Names each device's forward and backward halves in a profile of whole steps after what the
// schedule runs there: ".../forward_half/cond" becomes ".../forward_half/F3" (the forward of
// microbatch 3; "F3.1" on virtual stage 1) or ".../forward_half/idle", in tick order.
// stage_of(device id) gives the device's coordinate on the stage axis (-1: not in the mesh).
void label_spans(std::vector<profiler::Span>& spans, const Schedule& schedule,
                 const std::function<int64_t(int)>& stage_of);

// Throws on stages < 1, microbatches < 1, virtual_stages < 1, interleaved with V < 2 or with
// M not a multiple of S, and gpipe or 1f1b with V != 1.
Schedule make_schedule(ScheduleKind kind, int64_t stages, int64_t microbatches,
                       int64_t virtual_stages = 1);

// What one chunk computes, traced inside shard_map on a device's blocks.
//   chunk_params: the chunk's layers (the leaves of `chunked` below, sliced to this chunk);
//   shared: parameters every chunk may use (embeddings, the head);
//   x: the chunk's input activation (ignored by the first chunk, which reads its microbatch);
//   k: the global chunk index (int32 scalar; 0 first, K-1 last), m: the microbatch index.
// Returns the chunk's output activation (x's shape and dtype) and its contribution to the loss
// (a float scalar: nonzero on the last chunk only, already scaled so the step's loss is the
// sum over microbatches).
struct StageOut {
  Array out;
  Array loss;
};
using StageFn = std::function<StageOut(const Params& chunk_params, const Params& shared,
                                       const Array& x, const Array& k, const Array& m)>;

struct Result {
  Array loss;        // this device's sum of its chunks' loss contributions (psum over the axis)
  Params chunked_grads;
  Params shared_grads;  // this device's part: sum over the stage axis for the whole gradient
};

// Runs `schedule` inside shard_map on the manual axis `axis` (size S). `batch_axes` are the
// axes the microbatches' rows are split over (data parallelism). `chunked` leaves have their
// local layers first, V chunks of equal size in order of virtual stage; `activation` gives the
// shape and dtype of the activations passed between chunks (per microbatch, local).
// Gradients are this device's, of its loss contributions, with respect to `chunked` and
// `shared`: the caller sums them over the batch axes (and the shared ones over `axis` too).
// Collectives the stage function runs over other axes (tensor parallelism) stay inside it,
// and with them their transposes.
Result run(const Schedule& schedule, const std::string& axis,
           const std::vector<std::string>& batch_axes, const Params& chunked, const Params& shared,
           const ShapeDtypeStruct& activation, const StageFn& stage);

}  // namespace partix::pipeline

// Many processes, as jax.distributed: one process per host (or per group of
// devices), launched by Open MPI's mpirun, each with PARTIX_NUM_CPU_DEVICES devices of its
// own. Every process runs the same program: the same traced functions, in the same order.
//
//   mpirun -np 2 env PARTIX_NUM_CPU_DEVICES=4 ./my_program   # 8 devices, 2 processes
//
// devices() lists the devices of every process, process-major; a Mesh over them spans the
// processes, and programs on it exchange their collectives over MPI between processes and in
// shared memory inside each. Arrays on such a mesh hold only this process's shards.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "partix/array.h"
#include "partix/sharding.h"

namespace partix::distributed {

// Joins the job mpirun launched (MPI_Init, then agreeing on the device count). Without mpirun,
// or with one process, nothing happens. Optional: the first use of devices does it too.
// Call it before any other partix function when the device count is set with init().
void initialize();
// True when this process is one of several.
bool is_multi_process();
// This process's index and the number of processes mpirun started (0 and 1 without mpirun),
// known before the devices are initialised: e.g. to divide a mesh's devices among processes.
int launch_process_index();
int launch_process_count();
// Tells the other processes that this one stops because of `cause` (their collectives raise
// partix::Error naming this process and the cause, instead of waiting for the timeout), and
// lets it exit without MPI's closing handshake. The CLI calls it on any error; a program's
// own main should call it before exiting on an error. No-op in a single process.
void notify_failure(const std::string& cause);
// Checks that every process of the job has the same `settings` (name, value; "" for one not
// given), e.g. a program's parsed flags: raises partix::Error "[api] ..." naming the first
// setting that differs, this process and another with their values. Every process must call
// it; one that stopped instead (notify_failure) makes the others raise naming it. No-op in a
// single process.
void assert_same_settings(const std::string& api,
                          const std::vector<std::pair<std::string, std::string>>& settings);

}  // namespace partix::distributed

namespace partix {

// The global array of `global_shape` in `sharding` whose part held by this process's devices is
// `local` (as jax.make_array_from_process_local_data): this process's devices must cover one
// box of the global array, and `local` is that box, e.g. the process's rows of a batch split
// over processes. Without global_shape, each dimension the process covers only part of is
// scaled by how many such parts there are. No process ever holds the whole array.
Array make_array_from_process_local_data(const NamedSharding& sharding, const Array& local,
                                         std::optional<Shape> global_shape = std::nullopt);

// The box of a global array of `global_shape` that this process's devices hold under
// `sharding` (its bounding box: one Slice per dimension). Throws when no device of the mesh
// is this process's.
std::vector<Slice> process_local_box(const NamedSharding& sharding, const Shape& global_shape);

// The value of `x` on every process: an array of this process (uncommitted, on its default
// device) holding the global value. Every process of x's mesh must call it.
Array process_allgather(const Array& x);

}  // namespace partix

// partix::distributed's view of the job this process was launched into (its place and its
// failure notice), from the MPI runtime of this layer.
#include "partix/distributed.h"
#include "comm/mpi/mpi_runtime.h"
#include "partix/device.h"

namespace partix::distributed {

void initialize() { (void)partix::devices(); }

bool is_multi_process() { return partix::process_count() > 1; }

int launch_process_index() { return comm::mpi::launch().index; }
int launch_process_count() { return comm::mpi::launch().count; }

void notify_failure(const std::string& cause) { comm::mpi::notify_failure(cause); }

}  // namespace partix::distributed

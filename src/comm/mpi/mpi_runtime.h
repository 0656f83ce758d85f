// The processes of a job launched by Open MPI's mpirun, and the only code that
// calls MPI. MPI carries every byte between processes; partix opens no sockets of its own.
//
// Every MPI call is made under one process-wide lock and is non-blocking, so that any number
// of device threads may communicate, a wait can give up at the collective timeout, and a
// failure notice from another process is seen by whoever is waiting.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace partix::comm::mpi {

struct Launch {
  int index = 0;  // this process
  int count = 1;  // processes in the job
};

// The job's processes: from mpirun's environment (OMPI_COMM_WORLD_SIZE), initialising MPI the
// first time when there is more than one; {0, 1} without mpirun. Thread-safe, idempotent (a
// failed start raises the same error again). MPI_Init waits for every process of the job and
// has no timeout of its own: past the collective timeout a watchdog reports it and ends this
// process. At exit the processes meet in a closing handshake before MPI_Finalize (bounded by
// the watchdog too): one still working answers pings and is waited for; one silent for the
// collective timeout (stopped, hung) is named, and this process exits with status 1. A process
// that exits with a nonzero status instead tells the others that it stopped (notify_failure),
// and one whose program ended while another still waits for it in a collective is named by
// that wait (within seconds). A child forked after MPI started cannot communicate: its
// exchanges raise Error, and it exits without the handshake.
Launch launch();
// True when this process is one of several (MPI is initialised).
bool multi_process();

// One transfer of a point-to-point exchange.
struct Transfer {
  int process = 0;
  void* data = nullptr;  // sends only read it
  int64_t bytes = 0;
};

// What an exchange is part of, for its messages and errors.
struct ExchangeContext {
  const char* what = "collective";  // the collective, e.g. "all_reduce"
  std::string group;                // the group's description, e.g. "devices [0,4]"
  int tag = 0;  // distinguishes exchanges in flight between two processes
  // When set, the tag of the messages to (send) or from a peer process instead.
  std::function<int(int peer, bool send)> tag_of;
  // Raises when the execution this exchange serves was cancelled (called while waiting).
  std::function<void()> check_abort;
};

// Posts every receive and send, then waits until all completed, the execution is cancelled
// (check_abort raises), a process waited for stopped or ended its program (raises Error
// "process N stopped: ..."), or the collective timeout passes: then raises TimeoutError naming
// the collective and the processes that did not answer. Transfers of more than 1 GiB go in
// pieces. Receives must match the peers' sends in size.
void exchange(const ExchangeContext& ctx, const std::vector<Transfer>& sends,
              const std::vector<Transfer>& recvs);

// Failure notices: a failed execution tells the other processes of its mesh, which cancel
// their part of it. `run` identifies the execution among those on the same set of processes
// (key); a notice with run == kJob says the sending process stops altogether.
inline constexpr uint64_t kJob = ~uint64_t{0};
struct Notice {
  uint64_t key = 0;  // the set of processes of the execution's mesh
  uint64_t run = 0;
  int process = 0;   // the process that failed
  int device = -1;   // its device that failed (-1: none in particular)
  std::string cause;
};
void send_notice(const Notice& notice, const std::vector<int>& processes);
// Receives the notices that have arrived, handing each to `deliver`.
void poll_notices();
// Called for every notice received (set by the process communicator).
void set_notice_handler(std::function<void(const Notice&)> handler);

// Channels of exchange_control: exchanges on different channels never take each other's
// messages, so threads that exchange at the same time between the same processes (the main
// thread's program fingerprints, a checkpoint writer's commit) each use their own.
inline constexpr int kControlChannel = 2;     // fingerprints at compile time, start-up
inline constexpr int kCheckpointChannel = 3;  // checkpoint commits (one save at a time)
inline constexpr int kFinalizeChannel = 4;    // the closing handshake at exit

// Every process of `processes` (sorted, including this one) sends `mine` and receives each
// other's; returns the values by position in `processes`. Used at compile time (program
// fingerprints), at start-up and by checkpoint commits, each on its own `channel`. Without
// MPI (one process) it returns `mine` at once.
std::vector<std::string> exchange_control(const std::vector<int>& processes,
                                          const std::string& mine, const char* what,
                                          int channel = kControlChannel);

// Tells every other process that this one stops because of `cause`, then lets exit skip
// MPI_Finalize (whose closing handshake would wait for processes that are still running).
void notify_failure(const std::string& cause);

}  // namespace partix::comm::mpi

// Step time of a planned program on this host's virtual devices: what n devices of this host
// do per second, measured by small programs that go through the same compiler and the same
// cost analysis as the plans, and a step's time from its cost analysis.
#pragma once

#include <map>
#include <string>

#include "partix/partix.h"

namespace partix::cli {

// Rates per device while n devices of this process run the same program.
struct HostRates {
  int devices = 0;
  int cores = 0;
  double flops_per_s = 0;               // CostAnalysis::flops
  double bytes_per_s = 0;               // CostAnalysis::bytes_accessed
  double seconds_per_instruction = 0;   // CostAnalysis::instructions
  std::map<std::string, double> sent_bytes_per_s;  // CostAnalysis::bytes_per_device, by kind
  double seconds_per_collective = 0;  // CostAnalysis::collectives_per_device: the rendezvous
};

// Runs the probes on the first n local devices (about a second).
HostRates measure_host(int n);

// Rates by device count, kept in a JSON file so that plans made apart use the same rates:
// read from `path` where it holds n, else measured and added to it.
HostRates host_rates(int n, const std::string& path);

struct StepTime {
  double compute = 0, memory = 0, overhead = 0, collectives = 0;
  double total() const { return compute + memory + overhead + collectives; }
};

// One step of a program with cost `c` (what a device computes: a pipeline's idle halves are
// not in it) on rates `r`. `bubble` is the fraction of a pipelined step a device waits. Where
// more devices than cores share the host, a device that waits gives its core to one that
// works, so waiting costs nothing; with a core each, the step lasts work / (1 - bubble).
StepTime predict_step(const CostAnalysis& c, const HostRates& r, double bubble);

}  // namespace partix::cli

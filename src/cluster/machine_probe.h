#pragma once
// A quick measurement of what Orchard's own kernels reach on this machine: the weight bytes a
// one-token Q4_0 matmul streams per second (the decode rate) and the FLOP rate of a many-token
// matmul (the prompt rate). The cost model uses these for machines the catalog does not know
// (this Linux host) or to replace the catalog's estimates.
namespace orchard::cluster {

struct MachineProbe {
  double decode_gbs = 0;      // weight bytes read per second by a 1-token matmul, GB/s
  double compute_gflops = 0;  // 64-token matmul, GFLOP/s
  int threads = 0;
};

// Takes about a second. threads: as the run will use (0: all cores).
MachineProbe probe_machine(int threads);

}  // namespace orchard::cluster

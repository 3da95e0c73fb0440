#pragma once
// A quick measurement of what Orchard's own kernels reach on this machine: the weight bytes a
// one-token Q4_0 matmul streams per second (the decode rate) and the FLOP rate of a many-token
// matmul (the prompt rate), over the matrices of one transformer layer of a given shape. The
// cost model uses these for machines the catalog does not know (this Linux host) or to replace
// the catalog's estimates.
#include <cstdint>

namespace orchard::cluster {

struct MachineProbe {
  double decode_gbs = 0;      // weight bytes read per second by 1-token matmuls, GB/s
  double compute_gflops = 0;  // 64-token matmuls, GFLOP/s
  int threads = 0;
};

// The layer whose matrices are timed: q and o [n_embd, n_embd], k and v [kv_dim, n_embd],
// gate and up [n_ff, n_embd], down [n_embd, n_ff]. The default is a Llama-8B layer.
struct ProbeShape {
  int64_t n_embd = 4096;
  int64_t kv_dim = 1024;
  int64_t n_ff = 14336;
};

// Takes about a second. threads: as the run will use (0: all cores).
MachineProbe probe_machine(int threads, const ProbeShape& shape = {});

}  // namespace orchard::cluster

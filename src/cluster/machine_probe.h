#pragma once
// A quick measurement of what Orchard's own kernels reach on this machine: the weight bytes a
// one-token Q4_0 matmul streams per second (the decode rate) and the FLOP rate of a many-token
// matmul (the prompt rate), over the matrices of one transformer layer of a given shape. The
// cost model uses these for machines the catalog does not know (this Linux host) or to replace
// the catalog's estimates.
#include <cstdint>
#include <vector>

namespace orchard::cluster {

// Token counts at which a mixture of experts' products are timed: 1, 2, 4, ... 64.
inline constexpr int kExpertProbePoints = 7;

struct MachineProbe {
  double decode_gbs = 0;      // weight bytes read per second by 1-token matmuls, GB/s
  double compute_gflops = 0;  // 64-token matmuls, GFLOP/s
  int threads = 0;
  // A mixture of experts' prompt multiplies each expert by only the tokens routed to it
  // (prompt x used / experts: 32 for moe-3b's chunk of 256, 11 for Kimi K2's of 512), and
  // small products run below the dense rate. Entry k: the rate of one expert's gate, up and
  // down products over 2^k tokens, as a fraction of their rate over 64 tokens, where
  // compute_gflops is measured (the last entry is 1). Empty: not measured (no experts).
  std::vector<double> expert_efficiency;
};

// The layer whose matrices are timed: q and o [n_embd, n_embd], k and v [kv_dim, n_embd],
// gate and up [n_ff, n_embd], down [n_embd, n_ff]; with n_ff_exp, also one expert's gate and up
// [n_ff_exp, n_embd] and down [n_embd, n_ff_exp]. The default is a Llama-8B layer.
struct ProbeShape {
  int64_t n_embd = 4096;
  int64_t kv_dim = 1024;
  int64_t n_ff = 14336;
  int64_t n_ff_exp = 0;
};

// Takes about a second (and half a second more with experts). threads: as the run will use (0: all cores).
MachineProbe probe_machine(int threads, const ProbeShape& shape = {});

// Only the decode rate (MachineProbe::decode_gbs) with `threads` (half a second): for one rank
// of several on this machine streaming while the others wait (MachineSpec::solo_memory_bw_gbs).
double probe_decode_gbs(int threads, const ProbeShape& shape = {});

}  // namespace orchard::cluster

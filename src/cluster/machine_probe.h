#pragma once
// A quick measurement of what Orchard's own kernels reach on this machine: the weight bytes a
// one-token Q4_0 matmul streams per second (the decode rate), the FLOP rate of a many-token
// matmul (the prompt rate) with the model's weight types, over the matrices of one transformer
// layer of a given shape, and the rate of a prompt's attention over its heads. The
// cost model uses these for machines the catalog does not know (this Linux host) or to replace
// the catalog's estimates.
#include <cstdint>
#include <vector>

#include "cluster/cost_model.h"

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
  // Causal attention over kAttentionProbeTokens positions from an F16 cache, as the engine's
  // kernel computes it (blocks of 8 rows per key-value head), as a fraction of compute_gflops:
  // it runs well below the weight products. 0: not measured (no heads in the shape).
  double attention_efficiency = 0;
};

// Prompt positions the attention probe computes (scores and values of each over those before it).
inline constexpr int32_t kAttentionProbeTokens = 256;

// The layer whose matrices are timed: q [q_dim, n_embd] and o [n_embd, q_dim], k and v [kv_dim,
// n_embd], gate and up [n_ff, n_embd], down [n_embd, n_ff]; with n_ff_exp, also one expert's gate
// and up [n_ff_exp, n_embd] and down [n_embd, n_ff_exp]; each in every type of `types`, the
// rates combined by their shares (time per FLOP weighted by share). With n_heads, the attention
// of n_heads query heads of head_dim over n_kv_heads. The default is a Llama-8B layer in Q4_0.
struct ProbeShape {
  int64_t n_embd = 4096;
  int64_t kv_dim = 1024;
  int64_t n_ff = 14336;
  int64_t n_ff_exp = 0;
  int64_t q_dim = 0;  // 0: n_embd
  std::vector<TypeShare> types = {{core::TensorType::Q4_0, 1}};
  int32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
};

// The probe's shape for a model: its layer's dimensions, heads and prompt_types (Q4_0 when not
// known; a type whose blocks do not divide a matrix's rows is timed as Q4_0).
ProbeShape probe_shape(const ModelFacts& model);

// Takes one to three seconds: about a second, half a second more per weight type with experts,
// a quarter with heads. threads: as the run will use (0: all cores).
MachineProbe probe_machine(int threads, const ProbeShape& shape = {});

// Only the decode rate (MachineProbe::decode_gbs) with `threads` (half a second): for one rank
// of several on this machine streaming while the others wait (MachineSpec::solo_memory_bw_gbs).
double probe_decode_gbs(int threads, const ProbeShape& shape = {});

}  // namespace orchard::cluster

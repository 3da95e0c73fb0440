#pragma once
// Predicts prompt and generation speed of a split from the model's shape and bytes, each
// machine's effective memory bandwidth and compute rate, and the link's latency and bandwidth.
// Pure arithmetic (no sockets, no files except ModelFacts::from_gguf); docs/cluster.md gives
// the formulas.
//
// Units: bytes, GB/s (1e9 bytes/s), GFLOP/s, Gbit/s, microseconds for link latency, ms for
// predicted times. A link's latency is the one-way delay of one message, as comm's link
// emulator applies it (a measured ping round trip is halved).
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"
#include "model/gguf/reader.h"
#include "model/kv_cache.h"
#include "model/shard.h"
#include "parallel/layout.h"

namespace orchard::cluster {

// A weight type and its share of a prompt's multiply-adds.
struct TypeShare {
  core::TensorType type = core::TensorType::Q4_0;
  double share = 1;
};

// What the cost model needs to know about a model.
struct ModelFacts {
  model::ModelConfig config;
  std::string name;
  // Per layer (averaged over layers): parameters and bytes of attention (q, k, v, o, with their
  // norms and biases) and of the FFN (gate, up, down).
  double attn_params = 0, attn_bytes = 0;
  double ffn_params = 0, ffn_bytes = 0;
  // The share of the FFN's bytes (and multiply-adds) one token reads: 1 for a dense FFN; for a
  // mixture of experts the router and n_expert_used of n_expert experts. Memory is set by all
  // the bytes, a decode step's time by this share of them.
  double ffn_active_fraction = 1;
  // Per layer (averaged over layers): parameters of the routed experts, all of them (0: dense).
  double expert_params = 0;
  double embedding_bytes = 0;            // token_embd: mapped whole, one row read per token
  double output_params = 0, output_bytes = 0;  // output head (the embedding when tied)
  // The weight types of the layers' products (attention, FFN, shared and routed experts; not
  // the router, which runs row by row, nor the head), each with its share of a prompt token's
  // multiply-adds (experts at their active share), shares summing to 1. The probe times
  // products of these types (probe_shape): a Q4_K or Q6_K product costs more per FLOP than
  // Q4_0's. Empty: not known (a shape without a type).
  std::vector<TypeShare> prompt_types;

  double total_bytes() const;
  // Weight bytes one decode step reads on a machine holding the whole model: every layer's
  // attention, the active share of its FFN, and the output head (the embedding gives one row).
  // For a mixture of experts this, not total_bytes, sets the decode speed.
  double active_bytes() const;
  // From a GGUF file's tensor table (no weights are read).
  static ModelFacts from_gguf(const model::gguf::Reader& file);
  // A shape at an average number of bits per weight ("llama-70b" at 4.85 for Q4_K_M).
  static ModelFacts from_shape(const model::ModelConfig& config, double bits_per_weight, std::string name);
  // "llama-70b:q4_k_m" (shapes: tinyllama-1.1b, llama-8b, llama-70b, qwen-32b, and the mixtures of
  // experts mixtral-8x7b, qwen3-30b-a3b, qwen3-235b-a22b, gpt-oss-120b, deepseek-v3, kimi-k2; types: f32, f16,
  // bf16, q8_0, q6_k, q4_k_m, q4_0). Throws Error listing both when unknown.
  static ModelFacts from_preset(const std::string& spec);
  // The names from_preset knows, for pickers (the cluster page).
  static std::vector<std::string> preset_shapes();
  static std::vector<std::string> preset_types();
};

struct MachineSpec {
  std::string host;
  double memory_gb = 0;       // total memory (GB, 1e9 bytes)
  double memory_bw_gbs = 0;   // what the CPU kernels reach when decoding (measured, or catalog × efficiency)
  double compute_gflops = 0;  // matmul rate for prompt processing
  // The rate of one expert's products over 2^k tokens as a fraction of its rate over 64, the
  // token count compute_gflops is measured at (MachineProbe::expert_efficiency); empty: taken
  // as compute_gflops (not measured).
  std::vector<double> expert_efficiency = {};
  // Where several ranks share one machine's memory (memory_bw_gbs is then each one's share of
  // what they reach streaming together): what one of them reaches streaming alone, with its
  // threads, while the others wait, as a pipeline's stages take turns in a decode step. One
  // core alone streams more than half of what two stream together. 0: memory_bw_gbs (a rank
  // with its machine to itself).
  double solo_memory_bw_gbs = 0;
  double solo_bw_gbs() const { return solo_memory_bw_gbs > 0 ? solo_memory_bw_gbs : memory_bw_gbs; }
  // A prompt's attention (each row's scores against every earlier position and the weighted
  // sum of their values, read from the KV cache) runs at this fraction of compute_gflops
  // (MachineProbe::attention_efficiency); 1 when not measured.
  double attention_efficiency = 1;
};

// The fraction of compute_gflops a product over `tokens` tokens of one expert reaches on
// `machine`: its measured curve, linear in log2(tokens) between the points, flat beyond them.
double expert_efficiency(const MachineSpec& machine, double tokens);

struct LinkSpec {
  double latency_us = 0;  // one-way, per message
  double gbps = 0;        // Gbit/s; 0 means unlimited (same machine)
};

struct Workload {
  int32_t context = 4096;        // KV cache positions every rank reserves
  int32_t prompt_tokens = 512;   // for the prompt rate
  int32_t position = 512;        // where generation runs (KV read per token)
  int32_t chunk = 512;           // prompt positions per forward pass (pipeline chunk)
  model::KvType cache_type = model::KvType::F16;  // the KV cache's elements (run's --cache-type)
};

// Fraction of a machine's memory a model may take: the OS and other programs keep the rest
// (macOS lets the GPU wire about 75% by default; the same share is a fair CPU budget).
inline constexpr double kUsableMemoryFraction = 0.75;
// Share of Apple's peak memory bandwidth the CPU kernels reach when decoding; the peak is the
// GPU's figure and CPU clusters reach less. A measured figure replaces it.
inline constexpr double kCpuBandwidthEfficiency = 0.6;

struct RankCost {
  std::string host;
  model::Shard shard;
  double weight_bytes = 0;   // resident: its slice (+ the whole embedding on the first stage)
  double kv_bytes = 0;       // its KV cache at Workload::context
  double overhead_bytes = 0;
  double usable_bytes = 0;   // memory_gb × kUsableMemoryFraction
  double gen_ms = 0;         // its share of one token: bytes read ÷ bandwidth
  double gen_solo_ms = 0;    // the same read at MachineSpec::solo_bw_gbs: a rank alone in its stage
  double prompt_chunk_ms = 0;  // one prompt chunk: the larger of FLOPs ÷ rate and bytes ÷ bandwidth
  // The output head over one row (last stage): once per forward pass, not per pipeline chunk.
  double prompt_head_ms = 0;
  // Splits of whole experts: the expected share of a decode step's expert choices the busiest
  // member of its group computes, over the mean share (1: even; expected_busiest_choices).
  double expert_balance = 1;
  // Of prompt_chunk_ms: the work every rank repeats for every row of a chunk (norms, residual
  // adds, quantized inputs, the router, summing partial outputs), which no split divides; and
  // splits of whole experts: the busiest member's expected share of a chunk's expert choices
  // over the mean share (binomial spread; 1: even).
  double prompt_repeated_ms = 0;
  double prompt_expert_balance = 1;
  // Of prompt_chunk_ms: attention over the chunk's rows, on average over the prompt (a row at
  // position p reads p + 1 keys and values, or its window's), at the rate the probe measured.
  double prompt_attention_ms = 0;
  double need_bytes() const { return weight_bytes + kv_bytes + overhead_bytes; }
  bool fits() const { return need_bytes() <= usable_bytes; }
};

struct Prediction {
  parallel::Layout layout;
  std::vector<RankCost> ranks;  // by rank
  LinkSpec link;        // between the ranks of a tensor group
  LinkSpec stage_link;  // between pipeline stages
  double gen_ms = 0;          // per generated token
  double gen_compute_ms = 0;  // of which reading weights and KV on the critical path
  double gen_comm_ms = 0;     // of which messages (all-reduces, hidden states, logits)
  double allreduce_ms = 0;    // of which all-reduces (tensor, hybrid)
  int messages_per_token = 0; // latency steps on the critical path of one token
  // Bytes all links carry together per generated token (all-reduces, hidden states between
  // stages, logits); a prompt token moves the same less the logits.
  double wire_bytes_per_token = 0;
  double prompt_ms = 0;       // the whole Workload::prompt_tokens
  double gen_tok_s = 0, prompt_tok_s = 0;
  bool fits = true;
};

// Cost of `layout` with rank r on machines[r] (machines.size() == layout.world()); the ranks of
// a tensor group talk over `tensor_link`, pipeline stages over `stage_link` (hybrid plans put
// tensor groups on the fast cables). Throws Error when the layout does not suit the model.
Prediction predict(const ModelFacts& model, const parallel::Layout& layout, const std::vector<MachineSpec>& machines,
                   const LinkSpec& tensor_link, const LinkSpec& stage_link, const Workload& work);
// Every pair of ranks joined by `link`.
inline Prediction predict(const ModelFacts& model, const parallel::Layout& layout, const std::vector<MachineSpec>& machines,
                          const LinkSpec& link, const Workload& work) {
  return predict(model, layout, machines, link, link, work);
}

// The expected number of one token's `used` expert choices (drawn uniformly, without repeats,
// from every expert of a layer) that the busiest member of an expert group computes, where
// `only[m]` experts are held by member m alone and `shared` by every member: member m takes
// the i_m choices only it holds, the replicated ones go to the least loaded
// (model::assign_experts), so the busiest takes max(max_m i_m, ⌈used / members⌉). Summed over
// the multivariate hypergeometric probabilities (float64). A decode step waits at every MoE
// layer for that member: over the mean, used / members, it is the price of the imbalance.
double expected_busiest_choices(const std::vector<int32_t>& only, int32_t shared, int32_t used);

// Multiply-adds ×2 (FLOPs) of one row's attention in one layer per key it reads, over the
// query heads of `heads`: scores against the key and the value's weighted sum (latent
// attention: in the latent space, keys of kv_lora_rank + rope_dims, values of kv_lora_rank).
double attention_flops_per_key(const model::ModelConfig& config, int32_t heads);
// The mean number of keys a prompt's rows read, a prompt of `tokens` positions from 0 in a
// layer that sees `window` positions (0: all): (tokens + 1) / 2 without a window.
double mean_prompt_keys(int32_t tokens, int32_t window);

// Time of one message of `bytes` over `link`, in ms.
double message_ms(const LinkSpec& link, double bytes);

}  // namespace orchard::cluster

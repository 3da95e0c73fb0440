#include "cluster/cost_model.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <string_view>

#include "comm/algorithms/collectives.h"
#include "core/error.h"
#include "parallel/distributed_model.h"

namespace orchard::cluster {
namespace {

constexpr double kFloatBytes = 4.0;
// Float passes over a row per layer that every rank makes for every row (rank_cost): two RMS
// norms (read, write), two residual adds (two reads, a write), quantizing two products' inputs
// (a read, a quarter write each); and with partners, two sums that each read the row's two
// parts and write it, then copy it out again (comm's reduce-scatter and all-gather).
constexpr double kRowPasses = 2 * 2 + 2 * 3 + 2 * 1.25;
constexpr double kSumPasses = 2 * 4;
// Fixed runtime memory besides weights, KV cache and scratch: code, thread stacks, allocator.
constexpr double kBaseOverheadBytes = 512.0 * (1 << 20);

struct PresetShape {
  std::string_view name;
  int32_t n_embd, n_layers, n_heads, n_kv_heads, n_ff, vocab;
  int32_t head_dim = 0;  // 0: n_embd / n_heads
  // Mixtures of experts: experts, chosen per token, their width, shared experts, leading dense layers.
  int32_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_expert_shared = 0, n_dense_leading = 0;
  // Latent attention (deepseek2): query and key-value latents, the rotated part of a head, its value width.
  int32_t q_lora_rank = 0, kv_lora_rank = 0, rope_dims = 0, value_head_dim = 0;
  // Sliding-window attention (gpt-oss): the window and the layers' period (ModelConfig's).
  int32_t sliding_window = 0, sliding_window_period = 0;
};
// Public shapes of common models (config.json of each), for what-ifs without a file.
constexpr PresetShape kShapes[] = {
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000},
    {"llama-8b", 4096, 32, 32, 8, 14336, 128256},
    {"qwen-32b", 5120, 64, 40, 8, 27648, 152064},
    {"llama-70b", 8192, 80, 64, 8, 28672, 128256},
    {"mixtral-8x7b", 4096, 32, 32, 8, 14336, 32000, 0, 8, 2, 14336},
    {"qwen3-30b-a3b", 2048, 48, 32, 4, 6144, 151936, 128, 128, 8, 768},
    {"qwen3-235b-a22b", 4096, 94, 64, 4, 12288, 151936, 128, 128, 8, 1536},
    {"gpt-oss-120b", 2880, 36, 64, 8, 2880, 201088, 64, 128, 4, 2880, 0, 0, 0, 0, 0, 0, 128, 2},
    // DeepSeek V3 / R1 and Kimi K2: 128 (Kimi: 64) heads of 128 + 64 rotated dimensions,
    // values of 128, one leading dense layer, one shared expert.
    {"deepseek-v3", 7168, 61, 128, 128, 18432, 129280, 192, 256, 8, 2048, 1, 3, 1536, 512, 64, 128},
    {"kimi-k2", 7168, 61, 64, 64, 18432, 163840, 192, 384, 8, 2048, 1, 1, 1536, 512, 64, 128},
};
struct PresetType {
  std::string_view name;
  double bits;
  core::TensorType type;  // of the layers' matrices (Q4_K_M: besides its Q6_K ones, prompt_types)
};
// Average bits per weight as llama.cpp reports them for whole files.
constexpr PresetType kTypes[] = {{"f32", 32, core::TensorType::F32},     {"f16", 16, core::TensorType::F16},
                                 {"bf16", 16, core::TensorType::BF16},   {"q8_0", 8.5, core::TensorType::Q8_0},
                                 {"q6_k", 6.5625, core::TensorType::Q6_K}, {"q4_k_m", 4.85, core::TensorType::Q4_K},
                                 {"q4_0", 4.5, core::TensorType::Q4_0}};

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// A small message goes to every peer at once: one latency step, and each rank's n - 1 copies
// share its link (one NIC: serialised; a mesh of cables would overlap them — we take the
// slower case). This is comm's direct exchange, used up to kDirectExchangeBytes.
double exchange_ms(const LinkSpec& link, double bytes, int n) {
  if (n <= 1) return 0;
  return message_ms(link, bytes * (n - 1));
}
// comm's all-reduce: direct exchange when small, else ring reduce-scatter + all-gather:
// 2(n-1) steps of one latency and 1/n of the data each.
double all_reduce_ms(const LinkSpec& link, double bytes, int n, int* steps) {
  if (n <= 1) return 0;
  if (bytes <= static_cast<double>(comm::kDirectExchangeBytes)) {
    *steps += 1;
    return exchange_ms(link, bytes, n);
  }
  *steps += 2 * (n - 1);
  return 2 * (n - 1) * message_ms(link, bytes / n);
}
// A tensor group inside a pipeline sums at its first rank and sends the sum back (two steps).
double leader_sum_ms(const LinkSpec& link, double bytes, int n, int* steps) {
  if (n <= 1) return 0;
  *steps += 2;
  return 2 * exchange_ms(link, bytes, n);
}
// Ring all-gather of n slices: n - 1 steps.
double all_gather_ms(const LinkSpec& link, double slice_bytes, int n, int* steps) {
  if (n <= 1) return 0;
  *steps += n - 1;
  return (n - 1) * message_ms(link, slice_bytes);
}
// comm's broadcast: the root sends to each when small or n == 2, else scatter + ring all-gather.
double broadcast_ms(const LinkSpec& link, double bytes, int n, int* steps) {
  if (n <= 1) return 0;
  if (bytes <= static_cast<double>(comm::kDirectExchangeBytes) || n == 2) {
    *steps += 1;
    return exchange_ms(link, bytes, n);
  }
  *steps += 1;
  return exchange_ms(link, bytes / n, n) + all_gather_ms(link, bytes / n, n, steps);
}

// Positions per forward pass of the prompt: what the engine cuts (a pipeline, finer).
double prompt_chunk(const Workload& work, int stages) {
  return std::min(parallel::pipeline_chunk(static_cast<size_t>(work.prompt_tokens), stages, work.chunk), work.prompt_tokens);
}

RankCost rank_cost(const ModelFacts& m, const parallel::Layout& layout, int rank, const MachineSpec& machine,
                   const Workload& work) {
  const model::ModelConfig& c = m.config;
  RankCost r;
  r.host = machine.host;
  r.shard = parallel::shard_for_rank(c, layout, rank);
  const model::Shard& s = r.shard;
  // q and o scale with the query heads held, k and v with the KV heads.
  const double q = c.q_dim(), kv = c.kv_dim();
  const double attn_share = (2 * q * s.n_heads() / c.n_heads + 2 * kv * s.n_kv_heads() / c.n_kv_heads) / (2 * q + 2 * kv);
  double ffn_share = c.n_expert > 0 ? static_cast<double>(s.n_expert_ff()) / c.n_ff_exp
                                    : static_cast<double>(s.n_ff()) / c.n_ff;
  // The share of a token's active FFN this rank reads in a decode step (its rows of every
  // expert under a tensor split), and of a prompt's expert products it computes.
  double decode_share = ffn_share, prompt_share = ffn_share;
  if (layout.splits_experts(c) && s.n_layers() > 0 && !s.expert_holders.empty()) {
    // Whole experts: memory for every one held (its run and the replicas), a decode step
    // waiting at each layer for the busiest member (expected_busiest_choices), a prompt's
    // many choices spread as the runs and the replicas dealt to the lighter member give them.
    double held = 0, busiest = 0, computed = 0;
    const int32_t members = layout.tp;
    for (int32_t l = s.layer_begin; l < s.layer_end; ++l) {
      std::vector<int32_t> only(static_cast<size_t>(members), 0);
      int32_t shared = 0;
      for (uint64_t holders : s.expert_holders[static_cast<size_t>(l)]) {
        if ((holders & (holders - 1)) != 0) {
          ++shared;
          continue;
        }
        for (int32_t m = 0; m < members; ++m)
          if (holders == uint64_t{1} << m) ++only[static_cast<size_t>(m)];
      }
      held += only[static_cast<size_t>(s.expert_member)] + shared;
      busiest += expected_busiest_choices(only, shared, c.n_expert_used) / c.n_expert_used;
      computed += (only[static_cast<size_t>(s.expert_member)] + static_cast<double>(shared) / members) / c.n_expert;
    }
    ffn_share = held / s.n_layers() / c.n_expert;
    decode_share = busiest / s.n_layers();
    prompt_share = computed / s.n_layers();
    r.expert_balance = decode_share * members;
  }
  const double vocab_share = static_cast<double>(s.n_vocab()) / c.vocab_size;
  const double layers = s.n_layers();
  const double layer_bytes = m.attn_bytes * attn_share + m.ffn_bytes * ffn_share;
  const double layer_read_bytes = m.attn_bytes * attn_share + m.ffn_bytes * decode_share * m.ffn_active_fraction;
  // A prompt's many tokens spread over every rank's experts: the mean share.
  const double layer_params = m.attn_params * attn_share + m.ffn_params * prompt_share * m.ffn_active_fraction;
  const double out_bytes = s.has_output ? m.output_bytes * vocab_share : 0;
  const double out_params = s.has_output ? m.output_params * vocab_share : 0;
  // One position, one layer.
  const double kv_row = static_cast<double>(c.kv_cache_floats(s.n_kv_heads())) * model::kv_value_bytes(work.cache_type);

  // A tied head is the embedding table: mapped once when one rank holds both ends.
  const bool head_is_embedding = c.tied_output && s.has_embedding;
  r.weight_bytes = layers * layer_bytes + (head_is_embedding ? 0 : out_bytes) + (s.has_embedding ? m.embedding_bytes : 0);
  // Sliding layers (gpt-oss) keep a ring of their window, and a decode step reads the window.
  double kv_slots = 0, kv_read_positions = 0;
  for (int32_t l = s.layer_begin; l < s.layer_end; ++l) {
    kv_slots += static_cast<double>(c.kv_slots(l, work.context, std::min(work.chunk, work.context)));
    kv_read_positions += c.sliding_layer(l) ? std::min(work.position, c.sliding_window) : work.position;
  }
  r.kv_bytes = kv_row * kv_slots;
  // Scratch grows to one chunk of activations and a row of logits per position.
  r.overhead_bytes = kBaseOverheadBytes +
                     work.chunk * kFloatBytes * (4.0 * c.n_embd + 2.0 * s.n_ff() + std::max(s.n_vocab(), 1));
  r.usable_bytes = machine.memory_gb * 1e9 * kUsableMemoryFraction;

  const double bw = machine.memory_bw_gbs * 1e9;
  ORCHARD_CHECK(bw > 0 && machine.compute_gflops > 0 && machine.attention_efficiency > 0,
                "machine '{}' without bandwidth, compute rate or attention rate", machine.host);
  const double read_per_token = layers * layer_read_bytes + kv_row * kv_read_positions + out_bytes;
  r.gen_ms = read_per_token / bw * 1e3;
  r.gen_solo_ms = read_per_token / (machine.solo_bw_gbs() * 1e9) * 1e3;
  // A chunk multiplies every weight once per position; the weights are read once per chunk.
  // The output head is charged apart (prompt_head_ms): one row, once per forward pass.
  const double chunk = prompt_chunk(work, layout.pp);
  const double flops = 2.0 * chunk * (layers * layer_params);
  // Of those, a mixture of experts multiplies each expert only by the tokens routed to it, in
  // products of chunk x used / experts tokens, which run at the rate measured for that size.
  double expert_flops = 0, expert_tokens = 0;
  if (c.n_expert > 0 && m.expert_params > 0) {
    expert_tokens = chunk * c.n_expert_used / c.n_expert;
    // A split of whole experts waits at each layer for the member with the most of the chunk's
    // choices: binomially spread around its share, the busiest about 0.8 (two members:
    // sqrt(2/π)) to sqrt(2 ln g) standard deviations above it.
    double busiest = prompt_share;
    if (layout.splits_experts(c) && layout.tp > 1) {
      const double choices = chunk * c.n_expert_used, g = layout.tp;
      const double above = g == 2 ? std::sqrt(2 / std::numbers::pi) : std::sqrt(2 * std::log(g));
      busiest = std::min(1.0, prompt_share + above * std::sqrt(choices * prompt_share * (1 - prompt_share)) / choices);
    }
    r.prompt_expert_balance = prompt_share > 0 ? busiest / prompt_share : 1;
    expert_flops = 2.0 * expert_tokens * layers * m.expert_params * busiest;
  }
  const double rate = machine.compute_gflops * 1e9;
  // What every rank does for every row of the chunk whatever its share (RankCost::
  // prompt_repeated_ms): kRowPasses float passes over a row per layer (its two norms, two
  // residual adds, quantizing its attention and FFN inputs; with partners, the sums of the two
  // all-reduces or combines, which read and write whole rows on every rank), and the router,
  // n_embd × n_expert multiply-adds a row, computed row by row at the rate of a product over
  // one token.
  const double passes = kRowPasses + (layout.tp > 1 ? kSumPasses : 0);
  const double router_flops = c.n_expert > 0 ? 2.0 * c.n_embd * c.n_expert : 0;
  const double repeated_s = chunk * layers *
                            (passes * c.n_embd * kFloatBytes / bw + router_flops / (rate * expert_efficiency(machine, 1)));
  r.prompt_repeated_ms = repeated_s * 1e3;
  // Attention over the prompt, each chunk charged the prompt's mean (a pipeline's later chunks
  // read more keys than its first, but every chunk passes every stage).
  double keys = 0;
  for (int32_t l = s.layer_begin; l < s.layer_end; ++l)
    keys += mean_prompt_keys(work.prompt_tokens, c.sliding_layer(l) ? c.sliding_window : 0);
  const double attention_s =
      chunk * keys * attention_flops_per_key(c, s.n_heads()) / (rate * machine.attention_efficiency);
  r.prompt_attention_ms = attention_s * 1e3;
  // The experts' products (at the busiest member's share) at their measured rate; the rest are
  // products over the chunk's positions, at the rate measured for that many tokens (a
  // pipeline's chunks of 32 run below the 64-token rate compute_gflops is measured at).
  const double mean_expert_flops = 2.0 * expert_tokens * layers * m.expert_params * prompt_share;
  const double compute_s = (flops - mean_expert_flops) / (rate * expert_efficiency(machine, chunk)) +
                           expert_flops / (rate * expert_efficiency(machine, expert_tokens)) + repeated_s;
  r.prompt_chunk_ms = (std::max(compute_s, layers * layer_bytes / bw + repeated_s) + attention_s) * 1e3;
  // The head multiplies one row (the pass's last position): it streams its whole matrix for
  // one token's arithmetic, so it takes the longer of its bytes at the bandwidth and its FLOPs
  // at the one-token rate, however long the chunk.
  r.prompt_head_ms = std::max(out_bytes / bw, 2.0 * out_params / (rate * expert_efficiency(machine, 1))) * 1e3;
  return r;
}

}  // namespace

double expert_efficiency(const MachineSpec& machine, double tokens) {
  const std::vector<double>& curve = machine.expert_efficiency;
  if (curve.empty() || !(tokens > 0)) return 1.0;
  const double at = std::clamp(std::log2(tokens), 0.0, static_cast<double>(curve.size() - 1));
  const auto below = static_cast<size_t>(at);
  const size_t above = std::min(below + 1, curve.size() - 1);
  const double e = curve[below] + (curve[above] - curve[below]) * (at - static_cast<double>(below));
  ORCHARD_CHECK(e > 0, "machine '{}' with an expert efficiency of {} at {} tokens", machine.host, e, tokens);
  return e;
}

double expected_busiest_choices(const std::vector<int32_t>& only, int32_t shared, int32_t used) {
  auto choose = [](double n, int32_t k) {
    if (k < 0 || k > n) return 0.0;
    double r = 1;
    for (int32_t i = 1; i <= k; ++i) r = r * (n - k + i) / i;
    return r;
  };
  const auto members = static_cast<int32_t>(only.size());
  ORCHARD_CHECK(members > 0 && used >= 0 && shared >= 0, "{} members, {} chosen, {} replicated", members, used, shared);
  const int32_t n = std::accumulate(only.begin(), only.end(), shared);
  ORCHARD_CHECK(used <= n, "{} choices of {} experts", used, n);
  // ways[s][x]: the ways to draw s choices among the members seen so far, at most x on one.
  const auto side = static_cast<size_t>(used + 1);
  std::vector<double> ways(side * side, 0.0), next(side * side);
  ways[0] = 1;
  for (int32_t held : only) {
    std::fill(next.begin(), next.end(), 0.0);
    for (int32_t sum = 0; sum <= used; ++sum)
      for (int32_t most = 0; most <= sum; ++most) {
        const double w = ways[static_cast<size_t>(sum) * side + static_cast<size_t>(most)];
        if (w == 0) continue;
        for (int32_t i = 0; sum + i <= used && i <= held; ++i)
          next[static_cast<size_t>(sum + i) * side + static_cast<size_t>(std::max(most, i))] += w * choose(held, i);
      }
    ways.swap(next);
  }
  const int32_t even = (used + members - 1) / members;
  double expected = 0;
  for (int32_t sum = 0; sum <= used; ++sum)
    for (int32_t most = 0; most <= sum; ++most)
      expected += ways[static_cast<size_t>(sum) * side + static_cast<size_t>(most)] * choose(shared, used - sum) *
                  std::max(most, even);
  return expected / choose(n, used);
}

double attention_flops_per_key(const model::ModelConfig& config, int32_t heads) {
  if (config.latent_attention())
    return 2.0 * heads * (2.0 * config.kv_lora_rank + config.rope_dims);
  const double value_dim = config.value_head_dim > 0 ? config.value_head_dim : config.head_dim;
  return 2.0 * heads * (config.head_dim + value_dim);
}

double mean_prompt_keys(int32_t tokens, int32_t window) {
  if (tokens <= 0) return 0;
  const double n = tokens;
  if (window <= 0 || window >= tokens) return (n + 1) / 2;
  // Rows 0 .. window - 1 read 1 .. window keys, the rest window each.
  const double w = window;
  return (w * (w + 1) / 2 + (n - w) * w) / n;
}

double ModelFacts::total_bytes() const {
  return config.n_layers * (attn_bytes + ffn_bytes) + embedding_bytes + (config.tied_output ? 0 : output_bytes);
}

double ModelFacts::active_bytes() const {
  return config.n_layers * (attn_bytes + ffn_bytes * ffn_active_fraction) + output_bytes;
}

ModelFacts ModelFacts::from_gguf(const model::gguf::Reader& file) {
  ModelFacts f;
  f.config = model::ModelConfig::from_gguf(file);
  f.name = f.config.name.empty() ? file.path() : f.config.name;
  double embd_params = 0, expert_bytes = 0;
  std::vector<TypeShare> types;
  for (const model::gguf::TensorInfo& t : file.tensors()) {
    const double bytes = static_cast<double>(t.size_bytes), params = static_cast<double>(t.elements());
    if (starts_with(t.name, "blk.")) {
      const bool ffn = t.name.find(".ffn_") != std::string::npos;
      const bool expert = t.name.find("_exps.") != std::string::npos;
      if (expert) {
        expert_bytes += bytes;
        f.expert_params += params;
      }
      // A matrix's products, a routed expert's at the share of tokens that choose it; not the
      // norms (vectors) nor the router (ffn_gate_inp).
      if (t.shape.size() >= 2 && t.name.find(".ffn_gate_inp.") == std::string::npos) {
        const double share = expert ? params * f.config.n_expert_used / f.config.n_expert : params;
        auto same = std::find_if(types.begin(), types.end(), [&](const TypeShare& s) { return s.type == t.type; });
        if (same == types.end()) types.push_back({t.type, share});
        else same->share += share;
      }
      (ffn ? f.ffn_bytes : f.attn_bytes) += bytes;
      (ffn ? f.ffn_params : f.attn_params) += params;
    } else if (t.name == "output.weight") {
      f.output_bytes += bytes;
      f.output_params += params;
    } else {
      // token_embd and the small vectors (output_norm, rope_freqs) live with the first stage.
      f.embedding_bytes += bytes;
      if (t.name == "token_embd.weight") embd_params = params;
    }
  }
  double all = 0;
  for (const TypeShare& t : types) all += t.share;
  for (TypeShare& t : types) t.share /= all;
  f.prompt_types = std::move(types);
  const double layers = f.config.n_layers;
  if (expert_bytes > 0) {
    const double active = expert_bytes * f.config.n_expert_used / f.config.n_expert;
    f.ffn_active_fraction = (f.ffn_bytes - expert_bytes + active) / f.ffn_bytes;
  }
  f.attn_bytes /= layers;
  f.attn_params /= layers;
  f.ffn_bytes /= layers;
  f.ffn_params /= layers;
  f.expert_params /= layers;
  if (f.config.tied_output) {
    // The head multiplies by the embedding table: every last-stage rank reads its rows.
    f.output_bytes = f.embedding_bytes;
    f.output_params = embd_params;
  }
  return f;
}

ModelFacts ModelFacts::from_shape(const model::ModelConfig& config, double bits_per_weight, std::string name) {
  ModelFacts f;
  f.config = config;
  f.name = std::move(name);
  const double bytes_per_param = bits_per_weight / 8;
  const double d = config.n_embd;
  if (config.latent_attention()) {
    // The query (through its latent), the key-value latent with the rotated part, every head's
    // key and value up-projections, the output.
    const double heads = config.n_heads, latent = config.kv_lora_rank, nope = config.head_dim - config.rope_dims;
    const double query = config.q_lora_rank > 0 ? d * config.q_lora_rank + config.q_lora_rank * config.q_dim()
                                                : d * config.q_dim();
    f.attn_params = query + d * (latent + config.rope_dims) + heads * latent * (nope + config.value_head_dim) +
                    heads * config.value_head_dim * d;
  } else {
    f.attn_params = d * (2.0 * config.q_dim() + 2.0 * config.kv_dim());
  }
  f.ffn_params = 3.0 * d * config.n_ff;
  if (config.n_expert > 0) {
    // Per layer on average: the MoE layers' experts, shared experts and router, the leading
    // dense layers' FFN; a token reads its chosen experts, the shared ones and the router.
    const double layers = config.n_layers, moe = layers - config.n_dense_leading;
    const double expert = 3.0 * d * config.n_ff_exp, shared = expert * config.n_expert_shared, router = d * config.n_expert;
    const double all = moe * (expert * config.n_expert + shared + router) + config.n_dense_leading * f.ffn_params;
    const double active = moe * (expert * config.n_expert_used + shared + router) + config.n_dense_leading * f.ffn_params;
    f.ffn_params = all / layers;
    f.ffn_active_fraction = active / all;
    f.expert_params = moe * expert * config.n_expert / layers;
  }
  f.output_params = d * config.vocab_size;
  f.attn_bytes = f.attn_params * bytes_per_param;
  f.ffn_bytes = f.ffn_params * bytes_per_param;
  f.output_bytes = f.output_params * bytes_per_param;
  f.embedding_bytes = f.output_bytes;
  return f;
}

std::vector<std::string> ModelFacts::preset_shapes() {
  std::vector<std::string> out;
  for (const PresetShape& p : kShapes) out.emplace_back(p.name);
  return out;
}

std::vector<std::string> ModelFacts::preset_types() {
  std::vector<std::string> out;
  for (const PresetType& p : kTypes) out.emplace_back(p.name);
  return out;
}

ModelFacts ModelFacts::from_preset(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string shape = spec.substr(0, colon);
  const std::string type = colon == std::string::npos ? "q4_k_m" : spec.substr(colon + 1);
  const PresetShape* s = nullptr;
  const PresetType* t = nullptr;
  std::string shapes, types;
  for (const PresetShape& p : kShapes) {
    shapes += (shapes.empty() ? "" : ", ") + std::string(p.name);
    if (p.name == shape) s = &p;
  }
  for (const PresetType& p : kTypes) {
    types += (types.empty() ? "" : ", ") + std::string(p.name);
    if (p.name == type) t = &p;
  }
  if (!s || !t)
    throw Error(error_message("cluster", "unknown model preset '{}' (shapes: {}; types: {})", spec, shapes, types));
  model::ModelConfig c;
  c.arch_name = s->kv_lora_rank > 0 ? "deepseek2" : "llama";
  c.name = spec;
  c.n_embd = s->n_embd;
  c.n_layers = s->n_layers;
  c.n_heads = s->n_heads;
  c.n_kv_heads = s->n_kv_heads;
  c.head_dim = s->head_dim > 0 ? s->head_dim : s->n_embd / s->n_heads;
  c.rope_dims = s->rope_dims > 0 ? s->rope_dims : c.head_dim;
  c.n_ff = s->n_ff;
  c.vocab_size = s->vocab;
  c.n_expert = s->n_expert;
  c.n_expert_used = s->n_expert_used;
  c.n_ff_exp = s->n_ff_exp;
  c.n_expert_shared = s->n_expert_shared;
  c.n_dense_leading = s->n_dense_leading;
  c.q_lora_rank = s->q_lora_rank;
  c.kv_lora_rank = s->kv_lora_rank;
  c.value_head_dim = s->value_head_dim;
  c.sliding_window = s->sliding_window;
  c.sliding_window_period = s->sliding_window_period;
  c.context_length = 8192;
  ModelFacts f = from_shape(c, t->bits, spec);
  f.prompt_types = {{t->type, 1}};
  if (t->type == core::TensorType::Q4_K) {
    // llama.cpp's Q4_K_M keeps attn_v and ffn_down in Q6_K in about half the layers: half of
    // the value projection's and of a third of the FFN's (the down of gate, up, down)
    // multiply-adds.
    const double v = c.latent_attention() ? 0 : static_cast<double>(c.n_embd) * c.kv_dim();
    const double ffn = f.ffn_params * f.ffn_active_fraction;
    const double q6 = 0.5 * (v + ffn / 3) / (f.attn_params + ffn);
    f.prompt_types = {{core::TensorType::Q4_K, 1 - q6}, {core::TensorType::Q6_K, q6}};
  }
  return f;
}

double message_ms(const LinkSpec& link, double bytes) {
  const double wire_s = link.gbps > 0 ? bytes * 8 / (link.gbps * 1e9) : 0;
  return link.latency_us * 1e-3 + wire_s * 1e3;
}

Prediction predict(const ModelFacts& model, const parallel::Layout& layout, const std::vector<MachineSpec>& machines,
                   const LinkSpec& link, const LinkSpec& stage_link, const Workload& work) {
  const model::ModelConfig& c = model.config;
  ORCHARD_CHECK(static_cast<int>(machines.size()) == layout.world(), "{} machines for a layout of {} ranks",
                machines.size(), layout.world());
  layout.validate(c, layout.world());
  Prediction p;
  p.layout = layout;
  p.link = link;
  p.stage_link = stage_link;
  for (int r = 0; r < layout.world(); ++r) {
    p.ranks.push_back(rank_cost(model, layout, r, machines[static_cast<size_t>(r)], work));
    p.fits = p.fits && p.ranks.back().fits();
  }
  const int tp = layout.tp, pp = layout.pp;
  const double hidden = c.n_embd * kFloatBytes;
  const double logits = c.vocab_size * kFloatBytes;
  int steps = 0;

  // Generation: stages run one after another; inside a stage the tp ranks run side by side
  // and meet at 2 all-reduces per layer. A stage of one rank streams alone while the others
  // wait for it, so it reads at its solo rate even where ranks share a machine; the ranks of a
  // tensor or expert group read at once, at their shares.
  double compute = 0, allreduce = 0;
  for (int stage = 0; stage < pp; ++stage) {
    double slowest = 0;
    for (int t = 0; t < tp; ++t) {
      const RankCost& rank = p.ranks[static_cast<size_t>(layout.rank_at(stage, t))];
      slowest = std::max(slowest, tp == 1 ? rank.gen_solo_ms : rank.gen_ms);
    }
    compute += slowest;
    const double layers = p.ranks[static_cast<size_t>(layout.rank_at(stage, 0))].shard.n_layers();
    int sum_steps = 0;
    const double one = pp == 1 ? all_reduce_ms(link, hidden, tp, &sum_steps) : leader_sum_ms(link, hidden, tp, &sum_steps);
    allreduce += 2 * layers * one;
    steps += static_cast<int>(2 * layers) * sum_steps;
  }
  double transfers = (pp - 1) * message_ms(stage_link, hidden);
  steps += pp - 1;
  const double slice = logits / tp;
  if (pp == 1) {
    transfers += all_gather_ms(link, slice, tp, &steps);
  } else {
    if (tp > 1) {
      transfers += exchange_ms(link, slice, tp);
      steps += 1;
    }
    transfers += broadcast_ms(stage_link, logits, layout.world(), &steps);
  }
  // On the wire: a sum of a group of n is n(n-1) copies when exchanged directly, 2(n-1) ring
  // steps of 1/n otherwise, and n-1 there and n-1 back through a stage's first rank.
  auto sum_bytes = [&](double bytes) {
    if (tp <= 1) return 0.0;
    if (pp > 1) return 2.0 * (tp - 1) * bytes;
    return bytes <= static_cast<double>(comm::kDirectExchangeBytes) ? double(tp) * (tp - 1) * bytes
                                                                     : 2.0 * (tp - 1) * bytes;
  };
  p.wire_bytes_per_token = 2.0 * c.n_layers * sum_bytes(hidden) + (pp - 1) * hidden +
                           (pp == 1 ? (tp - 1) * logits : (tp - 1) * slice + (layout.world() - 1) * logits);
  p.gen_compute_ms = compute;
  p.allreduce_ms = allreduce;
  p.gen_comm_ms = allreduce + transfers;
  p.gen_ms = compute + p.gen_comm_ms;
  p.messages_per_token = steps;

  // Prompt: chunks flow through the stages; after the first chunk fills the pipe, one chunk
  // leaves every max(stage time).
  const double chunk = prompt_chunk(work, pp);
  const double chunks = std::ceil(static_cast<double>(work.prompt_tokens) / chunk);
  int unused = 0;
  double fill = 0, slowest_stage = 0;
  for (int stage = 0; stage < pp; ++stage) {
    double slowest = 0;
    for (int t = 0; t < tp; ++t)
      slowest = std::max(slowest, p.ranks[static_cast<size_t>(layout.rank_at(stage, t))].prompt_chunk_ms);
    const double layers = p.ranks[static_cast<size_t>(layout.rank_at(stage, 0))].shard.n_layers();
    const double sums = 2 * layers *
                        (pp == 1 ? all_reduce_ms(link, hidden * chunk, tp, &unused) : leader_sum_ms(link, hidden * chunk, tp, &unused));
    const double stage_ms = slowest + sums;
    const double send_ms = stage + 1 < pp ? message_ms(stage_link, hidden * chunk) : 0;
    fill += stage_ms + send_ms;
    slowest_stage = std::max(slowest_stage, std::max(stage_ms, send_ms));
  }
  // The last stage computes the head once per forward pass of work.chunk positions (a
  // pipeline's earlier chunks of a pass skip it), after its last chunk.
  double head = 0;
  for (int t = 0; t < tp; ++t)
    head = std::max(head, p.ranks[static_cast<size_t>(layout.rank_at(pp - 1, t))].prompt_head_ms);
  const double passes = std::ceil(static_cast<double>(work.prompt_tokens) / work.chunk);
  p.prompt_ms = fill + (chunks - 1) * slowest_stage + passes * head + transfers;
  p.gen_tok_s = 1e3 / p.gen_ms;
  p.prompt_tok_s = work.prompt_tokens * 1e3 / p.prompt_ms;
  return p;
}

}  // namespace orchard::cluster

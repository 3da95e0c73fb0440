#pragma once
// The forward pass of a decoder-only transformer (every architecture of architecture.h) over the shard of the
// model this rank holds: a batch of tokens (or of hidden states from the previous pipeline
// stage) at consecutive positions goes in; hidden states, or logits on the last stage, come
// out. One Forward may hold several sequences, each with its own KV cache, and run a step of
// each in one pass, so that the weights are read once for all of them. Buffers are sized once
// for the largest batch; a step allocates nothing.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/kernels.h"
#include "core/line_aligned.h"
#include "core/thread_pool.h"
#include "model/kv_cache.h"
#include "model/shard.h"
#include "model/weights.h"

namespace orchard::model {

using TokenId = int32_t;

// One sequence's share of a batched pass: `tokens` at positions [pos, pos + tokens.size()) of
// sequence `sequence`.
struct SequenceStep {
  int32_t sequence = 0;
  std::span<const TokenId> tokens;
  int32_t pos = 0;
};

class Forward {
 public:
  // max_batch: most positions per call, all sequences together. partial: where tensor-parallel
  // ranks sum their parts (nullptr on a rank that holds whole layers). n_sequences: KV caches
  // of n_ctx positions kept (sequences numbered from 0), of elements of cache_type. Throws
  // Error when the model's heads can't be kept in that type (Q8_0 wants multiples of 32).
  Forward(const ModelWeights& weights, int32_t n_ctx, int32_t max_batch, core::ThreadPool& pool,
          PartialSums* partial = nullptr, int32_t n_sequences = 1, KvType cache_type = KvType::F32);

  // Runs positions [pos, pos + n) of sequence 0. Exactly one of `tokens` (first stage) or
  // `hidden_in` (F32 [n, n_embd], later stages) is given. Positions at or after pos are
  // overwritten in the KV cache, so a caller rewinds by passing a smaller pos. `logits_for_all`:
  // compute logits for every position (verification) instead of the last one only.
  void run(std::span<const TokenId> tokens, const float* hidden_in, int32_t n, int32_t pos, bool logits_for_all = false);

  // Runs every step in one pass: the positions of all steps, stacked in step order, go through
  // each matrix product together; each attends to its own sequence's cache, causally within its
  // step. The first stage embeds the steps' tokens; a later pipeline stage gives `hidden_in`
  // (F32 [positions, n_embd], the previous stage's hidden() of the same steps) and the steps'
  // tokens only count its positions. Steps name distinct sequences and hold at least one token,
  // max_batch() tokens at most together. Afterwards logits(i) is the last position of step i;
  // with `logits` false the output head is skipped and logits() keeps the last pass's (a
  // pipeline's prompt chunks before the last: their logits are never read, and the head is a
  // one-row product that streams its whole matrix, a large part of a short chunk's time).
  // Throws Error, before computing anything, when a step breaks this.
  void run_batch(std::span<const SequenceStep> steps, const float* hidden_in = nullptr, bool logits = true);

  // Called once per row and mixture-of-experts layer with the experts the router chose for it,
  // most probable first (expert statistics; tests compare the choice with a reference).
  // Runs on the calling thread, between the layer's routing and its experts.
  using RoutingObserver =
      std::function<void(int32_t layer, int32_t sequence, int32_t position, std::span<const int32_t> experts)>;
  void observe_routing(RoutingObserver observer) { routing_observer_ = std::move(observer); }

  // F32 [n, n_embd]: the residual stream after this shard's last layer (what the next pipeline
  // stage takes), one row per position of the last call.
  const float* hidden() const { return residual_.data(); }
  // F32 [shard n_vocab]: logits of the last call's row i: position i of run (only the last one
  // unless logits_for_all), step i of run_batch; the whole vocabulary unless a tensor split gave
  // this rank a part of it. -1: the last row.
  const float* logits(int32_t i = -1) const;
  int32_t n_ctx() const { return caches_.front().n_ctx(); }
  // Sequence i's keys and values; a prompt cache copies positions between sequences (also of
  // different Forwards over the same shard) with KvCache::copy_prefix.
  KvCache& cache(int32_t sequence) { return caches_.at(static_cast<size_t>(sequence)); }
  const KvCache& cache(int32_t sequence) const { return caches_.at(static_cast<size_t>(sequence)); }
  int32_t n_sequences() const { return static_cast<int32_t>(caches_.size()); }
  // Where sequence `sequence` can go on from when asked for position pos: pos, or 0 when its
  // sliding layers' rings (KvCache) no longer hold the window before pos (it went on further
  // than its rings reach past it), and it must be computed again from its start. run and
  // run_batch refuse such a position with an Error rather than attend to what is gone.
  int32_t resumable(int32_t sequence, int32_t pos) const;
  // Makes sequence `to` hold sequence `from`'s first n positions (KvCache::copy_prefix), and
  // what its rings hold with them.
  void copy_prefix(int32_t from, int32_t to, int32_t n);
  int32_t max_batch() const { return max_batch_; }
  const ModelConfig& config() const { return weights_.config(); }
  const ModelWeights& weights() const { return weights_; }

 private:
  void check_positions(int32_t sequence, int32_t pos, int32_t n) const;
  // The sequence's rings now hold positions [pos, pos + n) too, and none after.
  void hold(int32_t sequence, int32_t pos, int32_t n);
  void check_tokens(std::span<const TokenId> tokens) const;
  // Rows [row, row + n) become positions pos.. of `sequence`, embedding `tokens` when given.
  void place(int32_t sequence, std::span<const TokenId> tokens, int32_t pos, int32_t row, int32_t n);
  // The layers and output head over the n rows placed, logits for the first n_logits entries
  // of logit_rows_.
  void run_rows(int32_t n, int32_t n_logits);
  void attention_block(int32_t layer, int32_t n);
  void ffn_block(int32_t layer, int32_t n);
  // The mixture-of-experts FFN: routes every row, then runs each chosen expert once over all
  // the rows routed to it (a prompt's tokens grouped by expert), summing into proj_.
  void moe_block(int32_t layer, int32_t n);
  // Each row's experts and weights into route_expert_/route_weight_.
  void route(int32_t layer, const LayerWeights& w, int32_t n);
  // Row `row`'s n_expert_used experts from its scores [n_expert] (selection bias, groups).
  void choose_experts(const LayerWeights& w, const float* scores, int32_t row, int32_t* chosen);
  // The route slots of n rows grouped by expert into expert_start_/expert_rows_.
  void group_by_expert(int32_t n);
  void attend(int32_t layer_local, int32_t n);
  // Splits the n rows into attention blocks of up to `rows` rows (block_start_) and sets
  // key_counts_; returns how many.
  int32_t attention_blocks(int32_t n, int32_t rows = kAttentionBlockRows);
  // Multi-head latent attention (config.latent_attention()), in the absorbed form: queries are
  // taken into latent space and attend over the cached latents, one KV "head" for all heads.
  void latent_attention_block(int32_t layer, int32_t n);
  void attend_latent(int32_t layer_local, int32_t n);
  // The FFN's gated activation (silu_mul or gpt-oss's clamped SwiGLU) of n values into gate.
  void activate(float* gate, const float* up, int64_t n) const;
  // gpt-oss: adds each row's weighted expert down biases to proj_ (after the sum of a split's parts).
  void add_expert_down_biases(const LayerWeights& w, int32_t n);
  void add_to_residual(int32_t n);
  // Runs f(row) for rows [0, n) over the pool, in runs of 16 rows per thread: the rows' keys
  // land in the cache's position-contiguous columns, and 16 positions fill a cache line, so
  // threads never write the same line. One row (a decode step) runs inline.
  template <typename F>
  void for_rows(int32_t n, F&& f) {
    pool_.parallel_shares(n, 16, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) f(static_cast<int32_t>(t));
    });
  }
  void output_head(int32_t n_logits);

  const ModelWeights& weights_;
  core::ThreadPool& pool_;
  PartialSums* partial_;
  int32_t max_batch_;
  std::vector<KvCache> caches_;  // one per sequence
  // Positions a sliding layer's ring holds: its window and a batch (a batch stores every row's
  // key before any attends, and its first row sees window - 1 earlier ones). 0: no rings (no
  // sliding layer, or a context too short for a ring to save memory). From the whole model's
  // config, so every rank of a split agrees on what can be resumed.
  int32_t ring_ = 0;
  struct Held {
    int32_t begin = 0, end = 0;  // the positions every ring of the sequence holds
  };
  std::vector<Held> held_;                       // per sequence, with rings
  std::vector<int32_t> ring_first_, ring_keys_;  // [max_batch]: first_keys_ / key_counts_ as ring slots
  core::MatmulScratch scratch_;
  // Per row of the current call: its sequence and position. [max_batch]
  std::vector<int32_t> row_sequence_;
  std::vector<int32_t> row_pos_;
  std::vector<int32_t> logit_rows_;  // rows whose logits are computed, in output order
  // Activation buffers, sized for max_batch positions, each on whole cache lines
  // (core/line_aligned.h): the threads of a step write neighbouring parts of them at once.
  using Floats = core::LineAlignedVector<float>;
  Floats residual_;   // F32 [n, n_embd]
  Floats normed_;     // F32 [n, n_embd]
  Floats q_;          // F32 [n, shard q_dim]
  Floats k_;          // F32 [n, shard kv_dim]
  Floats v_;          // F32 [n, shard kv_dim]
  Floats attn_out_;   // F32 [n, shard q_dim] (latent attention: [n, shard heads × value_head_dim])
  // Latent attention: the query and KV latents, each head's query in latent space
  // [latent | rope part], each head's output in latent space, and one head's rows gathered.
  Floats q_a_;        // F32 [n, q_lora_rank]
  Floats kv_a_;       // F32 [n, kv_lora_rank + rope_dims]
  Floats q_latent_;   // F32 [n, shard heads, kv_lora_rank + rope_dims]
  Floats latent_out_; // F32 [n, shard heads, kv_lora_rank]
  Floats proj_;       // F32 [n, n_embd]
  Floats gate_;       // F32 [n, shard n_ff]; MoE: [n, shard n_ff_exp] or, decoding, [used, ...]
  Floats up_;         // F32, as gate_
  // Mixture of experts: router logits, each row's chosen experts and their weights, and the
  // rows grouped by expert (rows of expert e at expert_rows_[expert_start_[e] ..
  // expert_start_[e + 1]), with the slot of the row's choice in route_*).
  Floats router_logits_;   // F32 [n, n_expert]
  Floats router_choice_;   // F32 [n, n_expert + n_expert_groups]: biased scores, group worths
  std::vector<int32_t> group_choice_;  // [n, n_expert_groups]: each row's kept groups
  std::vector<int32_t> route_expert_;  // [n, n_expert_used]
  Floats route_weight_;    // [n, n_expert_used]
  std::vector<int32_t> route_member_;  // [n, n_expert_used]: expert split: who computes each choice
  std::vector<int32_t> expert_start_;  // [n_expert + 1]
  std::vector<int32_t> expert_cursor_; // [n_expert]: where the grouping writes each expert's next row
  std::vector<int32_t> expert_rows_;   // [n * n_expert_used]: route slots, grouped by expert
  std::vector<int32_t> held_choices_;  // [n_expert_used]: a decode step's choices this shard holds
  RoutingObserver routing_observer_;
  Floats gathered_;        // F32 [n, n_embd]: one expert's input rows
  Floats expert_out_;      // F32 [n, n_embd]: one expert's output rows
  Floats slot_out_;        // F32 [n * n_expert_used, n_embd]: each choice's expert output
  // Attention: where each block of rows starts (and n after the last), each row's key count,
  // and each thread's scores scratch.
  static constexpr int32_t kAttentionBlockRows = 8;
  // AMX converts a chunk's keys and values to tiles once per block (attention_amx.h), and the
  // VNNI path rearranges them into operands (attention_vnni.h): 32 rows spread that over 4× the
  // query vectors of 8 (a 16k prompt's attention 1.2-1.3× faster on AMX, ~5% on VNNI).
  static constexpr int32_t kWideBlockRows = 32;
  static constexpr int32_t kLatentHeadsPerTask = 16;
  std::vector<int32_t> block_start_;
  std::vector<int32_t> key_counts_;
  std::vector<int32_t> first_keys_;  // in a sliding-window layer, each row's first visible position
  size_t scores_per_thread_ = 0;
  Floats scores_;
  Floats rope_cos_;   // F32 [n, rope_dims / 2]
  Floats rope_sin_;   // F32 [n, rope_dims / 2]
  Floats logits_;     // F32 [logits_rows_, shard n_vocab]
  int32_t logits_rows_ = 0;
};

}  // namespace orchard::model

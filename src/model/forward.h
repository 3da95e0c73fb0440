#pragma once
// The forward pass of a decoder-only transformer (llama, qwen2, qwen3) over the shard of the
// model this rank holds: a batch of tokens (or of hidden states from the previous pipeline
// stage) at consecutive positions goes in; hidden states, or logits on the last stage, come
// out. Buffers are sized once for the largest batch; a step allocates nothing.
#include <cstdint>
#include <span>
#include <vector>

#include "core/kernels.h"
#include "core/thread_pool.h"
#include "model/kv_cache.h"
#include "model/shard.h"
#include "model/weights.h"

namespace orchard::model {

using TokenId = int32_t;

class Forward {
 public:
  // max_batch: most positions per call. partial: where tensor-parallel ranks sum their parts
  // (nullptr on a rank that holds whole layers).
  Forward(const ModelWeights& weights, int32_t n_ctx, int32_t max_batch, core::ThreadPool& pool,
          PartialSums* partial = nullptr);

  // Runs positions [pos, pos + n). Exactly one of `tokens` (first stage) or `hidden_in`
  // (F32 [n, n_embd], later stages) is given. Positions at or after pos are overwritten in the
  // KV cache, so a caller rewinds by passing a smaller pos. `logits_for_all`: compute logits for
  // every position (verification) instead of the last one only.
  void run(std::span<const TokenId> tokens, const float* hidden_in, int32_t n, int32_t pos, bool logits_for_all = false);

  // F32 [n, n_embd]: the residual stream after this shard's last layer (what the next pipeline
  // stage takes).
  const float* hidden() const { return residual_.data(); }
  // F32 [shard n_vocab]: logits of position i of the last run (only the last one unless
  // logits_for_all); the whole vocabulary unless a tensor split gave this rank a part of it.
  const float* logits(int32_t i = -1) const;
  int32_t n_ctx() const { return cache_.n_ctx(); }
  int32_t max_batch() const { return max_batch_; }
  const ModelConfig& config() const { return weights_.config(); }
  const ModelWeights& weights() const { return weights_; }

 private:
  void attention_block(int32_t layer, int32_t n, int32_t pos);
  void ffn_block(int32_t layer, int32_t n);
  void attend(int32_t layer_local, int32_t n, int32_t pos);
  void output_head(int32_t n, bool logits_for_all);

  const ModelWeights& weights_;
  core::ThreadPool& pool_;
  PartialSums* partial_;
  int32_t max_batch_;
  KvCache cache_;
  core::MatmulScratch scratch_;
  // Activation buffers, sized for max_batch positions.
  std::vector<float> residual_;   // F32 [n, n_embd]
  std::vector<float> normed_;     // F32 [n, n_embd]
  std::vector<float> q_;          // F32 [n, shard q_dim]
  std::vector<float> k_;          // F32 [n, shard kv_dim]
  std::vector<float> v_;          // F32 [n, shard kv_dim]
  std::vector<float> attn_out_;   // F32 [n, shard q_dim]
  std::vector<float> proj_;       // F32 [n, n_embd]
  std::vector<float> gate_;       // F32 [n, shard n_ff]
  std::vector<float> up_;         // F32 [n, shard n_ff]
  std::vector<float> scores_;     // F32 [threads, n_ctx]
  std::vector<float> rope_cos_;   // F32 [n, rope_dims / 2]
  std::vector<float> rope_sin_;   // F32 [n, rope_dims / 2]
  std::vector<float> logits_;     // F32 [n or 1, shard n_vocab]
  int32_t logits_rows_ = 0;
};

}  // namespace orchard::model

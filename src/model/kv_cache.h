#pragma once
// Keys and values of every past position, for the layers and KV heads this rank holds.
//
// Keys are stored transposed, [layer][kv_head][head_dim][position], so that attention scores
// for a run of positions are contiguous multiply-adds (and vectorize) instead of one short
// dot product per position; values stay [layer][position][kv_dim], read one position at a time.
// A key and a value may differ in width (latent attention: see ModelConfig).
#include <cstdint>
#include <vector>

namespace orchard::model {

class KvCache {
 public:
  // n_layers / n_kv_heads are this rank's (its shard's), n_ctx the positions kept.
  KvCache(int32_t n_layers, int32_t n_ctx, int32_t n_kv_heads, int32_t head_dim)
      : KvCache(n_layers, n_ctx, n_kv_heads, head_dim, head_dim) {}
  // Keys and values of different widths per KV head (latent attention keeps one "head": keys
  // [latent | rotated part], values the latent).
  KvCache(int32_t n_layers, int32_t n_ctx, int32_t n_kv_heads, int32_t key_dim, int32_t value_dim)
      : n_ctx_(n_ctx),
        n_kv_heads_(n_kv_heads),
        head_dim_(key_dim),
        value_dim_(value_dim),
        keys_(static_cast<size_t>(n_layers) * n_ctx * n_kv_heads * key_dim),
        values_(static_cast<size_t>(n_layers) * n_ctx * n_kv_heads * value_dim) {}

  int32_t n_ctx() const { return n_ctx_; }
  // Stores k (F32 [n_kv_heads * key_dim]) and v (F32 [n_kv_heads * value_dim]) for `layer`
  // (counted from the shard's first) at pos.
  void store(int32_t layer, int32_t pos, const float* k, const float* v) {
    for (int32_t h = 0; h < n_kv_heads_; ++h)
      for (int32_t d = 0; d < head_dim_; ++d) key_column(layer, h)[static_cast<size_t>(d) * n_ctx_ + pos] = k[h * head_dim_ + d];
    const size_t kv_dim = static_cast<size_t>(n_kv_heads_) * value_dim_;
    float* dst = &values_[(static_cast<size_t>(layer) * n_ctx_ + static_cast<size_t>(pos)) * kv_dim];
    for (size_t i = 0; i < kv_dim; ++i) dst[i] = v[i];
  }
  // F32 [head_dim][n_ctx]: the keys of one KV head, position-contiguous.
  const float* keys(int32_t layer, int32_t kv_head) const { return &keys_[key_offset(layer, kv_head)]; }
  // F32 [n_ctx][kv_dim] from this KV head's first element: row stride value_stride().
  const float* values(int32_t layer, int32_t kv_head) const {
    return &values_[static_cast<size_t>(layer) * n_ctx_ * n_kv_heads_ * value_dim_ + static_cast<size_t>(kv_head) * value_dim_];
  }
  int64_t value_stride() const { return static_cast<int64_t>(n_kv_heads_) * value_dim_; }
  size_t bytes() const { return (keys_.size() + values_.size()) * sizeof(float); }

 private:
  float* key_column(int32_t layer, int32_t kv_head) { return &keys_[key_offset(layer, kv_head)]; }
  size_t key_offset(int32_t layer, int32_t kv_head) const {
    return ((static_cast<size_t>(layer) * n_kv_heads_ + static_cast<size_t>(kv_head)) * head_dim_) * n_ctx_;
  }
  int32_t n_ctx_;
  int32_t n_kv_heads_;
  int32_t head_dim_;  // of a key
  int32_t value_dim_;
  std::vector<float> keys_;
  std::vector<float> values_;
};

}  // namespace orchard::model

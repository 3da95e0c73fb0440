#pragma once
// Keys and values of every past position, for the layers and heads this rank holds.
#include <cstdint>
#include <vector>

namespace orchard::model {

class KvCache {
 public:
  // n_layers / kv_dim are this rank's (its shard's), n_ctx the positions kept.
  KvCache(int32_t n_layers, int32_t n_ctx, int32_t kv_dim)
      : n_ctx_(n_ctx), kv_dim_(kv_dim),
        keys_(static_cast<size_t>(n_layers) * n_ctx * kv_dim), values_(keys_.size()) {}

  int32_t n_ctx() const { return n_ctx_; }
  // F32 [kv_dim] of layer (counted from the shard's first) at position pos.
  float* key(int32_t layer, int32_t pos) { return &keys_[offset(layer, pos)]; }
  float* value(int32_t layer, int32_t pos) { return &values_[offset(layer, pos)]; }
  size_t bytes() const { return (keys_.size() + values_.size()) * sizeof(float); }

 private:
  size_t offset(int32_t layer, int32_t pos) const {
    return (static_cast<size_t>(layer) * n_ctx_ + static_cast<size_t>(pos)) * kv_dim_;
  }
  int32_t n_ctx_;
  int32_t kv_dim_;
  std::vector<float> keys_;
  std::vector<float> values_;
};

}  // namespace orchard::model

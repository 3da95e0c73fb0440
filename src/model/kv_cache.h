#pragma once
// Keys and values of every past position, for the layers and KV heads this rank holds.
//
// Keys are stored transposed, [layer][kv_head][head_dim][position], so that attention scores
// for a run of positions are contiguous multiply-adds (and vectorize) instead of one short
// dot product per position; values stay [layer][position][kv_dim], read one position at a time.
// A key and a value may differ in width (latent attention: see ModelConfig).
//
// Elements are F32, F16 or Q8_0 (KvType). Q8_0 quantizes each head's key and value of a
// position in blocks of 32 along the head (int8 codes, one F16 scale a block, as GGUF's Q8_0):
// a key's codes follow the transposed layout, its scales are [layer][kv_head][key_dim / 32]
// [position]; a value's scales are [layer][position][kv_dim / 32]. Attention reads every type
// as stored (ops::attend_block), so a smaller cache is less memory read per decoded token.
//
// The memory is reserved zeroed and untouched (calloc): pages become resident as positions are
// stored, so a context sized for the model's trained length costs what is used of it, to a page
// per key row.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "core/quant.h"

namespace orchard::model {

enum class KvType : uint8_t { F32, F16, Q8_0 };
// Values per scale of a Q8_0 cache: the widths of its keys and values are multiples of this.
constexpr int32_t kKvQ8Block = 32;
// "f32", "f16", "q8_0"
std::string_view kv_type_name(KvType type);
// The inverse of kv_type_name; throws Error naming the text and the choices otherwise.
KvType parse_kv_type(std::string_view name);
// Bytes a cache of `type` keeps per key or value element, its block scales included (Q8_0: 34
// bytes per 32), for sizing a cache before making one (planner, node agent).
double kv_value_bytes(KvType type);

class KvCache {
 public:
  // n_layers / n_kv_heads are this rank's (its shard's), n_ctx the positions kept. Keys and
  // values may differ in width per KV head (latent attention keeps one "head": keys [latent |
  // rotated part], values the latent). Throws Error when a Q8_0 cache's widths are not
  // multiples of kKvQ8Block.
  KvCache(int32_t n_layers, int32_t n_ctx, int32_t n_kv_heads, int32_t key_dim, int32_t value_dim,
          KvType type = KvType::F32);
  KvCache(int32_t n_layers, int32_t n_ctx, int32_t n_kv_heads, int32_t head_dim)
      : KvCache(n_layers, n_ctx, n_kv_heads, head_dim, head_dim) {}

  int32_t n_ctx() const { return n_ctx_; }
  KvType type() const { return type_; }
  // Stores k (F32 [n_kv_heads * key_dim]) and v (F32 [n_kv_heads * value_dim]) for `layer`
  // (counted from the shard's first) at pos, converted to the cache's type.
  void store(int32_t layer, int32_t pos, const float* k, const float* v);
  // [key_dim][n_ctx] elements of type(): the keys of one KV head, position-contiguous.
  const void* keys(int32_t layer, int32_t kv_head) const { return keys_.get() + key_offset(layer, kv_head) * element_bytes(); }
  // Q8_0: F16 [key_dim / 32][n_ctx], the keys' block scales; null otherwise.
  const core::Half* key_scales(int32_t layer, int32_t kv_head) const;
  // [n_ctx][kv_dim] elements from this KV head's first: row stride value_stride() elements.
  const void* values(int32_t layer, int32_t kv_head) const {
    return values_.get() + value_offset(layer, kv_head) * element_bytes();
  }
  int64_t value_stride() const { return static_cast<int64_t>(n_kv_heads_) * value_dim_; }
  // Q8_0: F16 scales of this KV head's value blocks, position j's at + j · value_scale_stride();
  // null otherwise.
  const core::Half* value_scales(int32_t layer, int32_t kv_head) const;
  int64_t value_scale_stride() const { return value_stride() / kKvQ8Block; }
  // Makes positions [0, n) hold what `from` holds there (same shape and type): a prompt shared
  // by two sequences is computed once.
  void copy_prefix(const KvCache& from, int32_t n);
  // Bytes of keys and values (scales included) per position, all layers, and reserved in all.
  size_t bytes_per_position() const;
  size_t bytes() const { return bytes_per_position() * static_cast<size_t>(n_ctx_); }

 private:
  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  using Buffer = std::unique_ptr<uint8_t[], FreeDeleter>;
  static Buffer reserve(size_t bytes);
  size_t element_bytes() const;
  // In elements (codes for Q8_0).
  size_t key_offset(int32_t layer, int32_t kv_head) const {
    return ((static_cast<size_t>(layer) * n_kv_heads_ + static_cast<size_t>(kv_head)) * key_dim_) * n_ctx_;
  }
  size_t value_offset(int32_t layer, int32_t kv_head) const {
    return static_cast<size_t>(layer) * n_ctx_ * n_kv_heads_ * value_dim_ + static_cast<size_t>(kv_head) * value_dim_;
  }

  int32_t n_layers_;
  int32_t n_ctx_;
  int32_t n_kv_heads_;
  int32_t key_dim_;
  int32_t value_dim_;
  KvType type_;
  Buffer keys_;
  Buffer values_;
  Buffer key_scales_;    // Q8_0 only
  Buffer value_scales_;  // Q8_0 only
};

}  // namespace orchard::model

#pragma once
// Keys and values of every past position, for the layers and KV heads this rank holds.
//
// Keys are stored transposed in blocks of kKeyBlock positions, [layer][kv_head][slot / 64]
// [head_dim][64], so that attention scores for a run of positions are contiguous multiply-adds
// (and vectorize) instead of one short dot product per position, and a block of keys is one run
// of memory (8 KiB for 64 F16 dimensions) that the hardware prefetcher streams: with whole
// transposed rows n_ctx apart, a decode step read head_dim short runs a page or more apart at
// once, more streams than the prefetcher follows, and its keys came at a third of the speed.
// Values are [layer][kv_head][slot][value_dim], one run per KV head, read one position at a time.
// A key and a value may differ in width (latent attention: see ModelConfig).
//
// Elements are F32, F16 or Q8_0 (KvType). Q8_0 quantizes each head's key and value of a
// position in blocks of 32 along the head (int8 codes, one F16 scale a block, as GGUF's Q8_0):
// a key's codes follow the blocked layout, its scales too as keys of key_dim / 32 dimensions
// (key_element); a value's scales are [layer][kv_head][slot][value_dim / 32]. Attention reads every type
// as stored (ops::attend_block), so a smaller cache is less memory read per decoded token.
//
// The memory is reserved zeroed and untouched (an anonymous mapping, page-aligned so that rows of
// 64 bytes are whole cache lines): pages become resident as positions are
// stored, so a context sized for the model's trained length costs what is used of it, to a
// block of keys per KV head.
//
// A layer that attends through a sliding window may keep a ring of the last `ring` positions
// instead of every one: position p goes to slot p mod ring and, mirrored, to slot p mod ring +
// ring, so any `ring` consecutive positions are consecutive slots (from the first one's slot
// below ring) and attention reads them as one run. Its memory is then 2 × ring slots whatever the
// context. What the ring still holds is the caller's to know (Forward tracks it).
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/quant.h"

namespace orchard::model {

enum class KvType : uint8_t { F32, F16, Q8_0 };
// Values per scale of a Q8_0 cache: the widths of its keys and values are multiples of this.
constexpr int32_t kKvQ8Block = 32;
// Positions per block of a KV head's keys. A layer's slots are allocated in whole blocks, so
// attention may read any aligned run of keys below the layer's slot count rounded up to a block.
constexpr int32_t kKeyBlock = 64;
// The element of dimension d of slot j among one KV head's keys of `dims` dimensions. A Q8_0
// cache's key scales are laid out the same way: key_element(dims / kKvQ8Block, d / kKvQ8Block, j).
constexpr int64_t key_element(int32_t dims, int32_t d, int64_t j) {
  return j / kKeyBlock * kKeyBlock * dims + int64_t{d} * kKeyBlock + j % kKeyBlock;
}
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
  // ring: empty, or per layer 0 (every position kept) or the positions its ring holds (below
  // n_ctx / 2, else a ring saves nothing).
  KvCache(int32_t n_layers, int32_t n_ctx, int32_t n_kv_heads, int32_t key_dim, int32_t value_dim,
          KvType type = KvType::F32, std::vector<int32_t> ring = {});
  KvCache(int32_t n_layers, int32_t n_ctx, int32_t n_kv_heads, int32_t head_dim)
      : KvCache(n_layers, n_ctx, n_kv_heads, head_dim, head_dim) {}

  int32_t n_ctx() const { return n_ctx_; }
  KvType type() const { return type_; }
  // Positions the layer's ring holds; 0 when it keeps every position.
  int32_t ring(int32_t layer) const { return layers_[static_cast<size_t>(layer)].ring; }
  // The slot a position's key and value are read from: the position itself, or in a ring the
  // slot below `ring` (a run of positions from there continues in the mirror above).
  int32_t slot(int32_t layer, int32_t pos) const {
    const int32_t r = ring(layer);
    return r > 0 ? pos % r : pos;
  }
  // Stores k (F32 [n_kv_heads * key_dim]) and v (F32 [n_kv_heads * value_dim]) for `layer`
  // (counted from the shard's first) at pos, converted to the cache's type.
  void store(int32_t layer, int32_t pos, const float* k, const float* v) { store_heads(layer, pos, 0, n_kv_heads_, k, v); }
  // Stores KV heads [head_begin, head_end) of those rows (k and v still whole rows), each as
  // store() would: disjoint ranges of one position may be stored from different threads.
  void store_heads(int32_t layer, int32_t pos, int32_t head_begin, int32_t head_end, const float* k, const float* v);
  // Elements of type(): the keys of one KV head, element (d, slot j) at key_element(key_dim, d, j).
  const void* keys(int32_t layer, int32_t kv_head) const { return keys_.get() + key_offset(layer, kv_head) * element_bytes(); }
  // Q8_0: F16, the keys' block scales, (d / 32, j)'s at key_element(key_dim / 32, d / 32, j); null otherwise.
  const core::Half* key_scales(int32_t layer, int32_t kv_head) const;
  // [slots][value_dim] elements of type(): the values of one KV head, row stride value_stride().
  const void* values(int32_t layer, int32_t kv_head) const {
    return values_.get() + value_offset(layer, kv_head) * element_bytes();
  }
  int64_t value_stride() const { return value_dim_; }
  // Q8_0: F16 scales of this KV head's value blocks, position j's at + j · value_scale_stride();
  // null otherwise.
  const core::Half* value_scales(int32_t layer, int32_t kv_head) const;
  int64_t value_scale_stride() const { return value_dim_ / kKvQ8Block; }
  // Makes positions [0, n) hold what `from` holds there (same shape, type and rings; a ring is
  // copied whole, so it holds what `from`'s does): a prompt shared by two sequences is computed once.
  void copy_prefix(const KvCache& from, int32_t n);
  // Bytes of keys and values (scales included) per position of context: the layers that keep
  // every position (a ring's take none more per position).
  size_t bytes_per_position() const;
  // Bytes reserved in all.
  size_t bytes() const;

 private:
  struct Unmap {
    size_t bytes;  // the mapping's length
    void operator()(uint8_t* p) const;
  };
  using Buffer = std::unique_ptr<uint8_t[], Unmap>;
  static Buffer reserve(size_t bytes);
  size_t element_bytes() const;
  // Bytes of keys and values (scales included) of one slot of one layer.
  size_t bytes_per_slot() const;
  // In elements (codes for Q8_0).
  size_t key_offset(int32_t layer, int32_t kv_head) const {
    const Layer& l = layers_[static_cast<size_t>(layer)];
    return l.first_key + static_cast<size_t>(kv_head) * key_dim_ * l.capacity;
  }
  size_t value_offset(int32_t layer, int32_t kv_head) const {
    const Layer& l = layers_[static_cast<size_t>(layer)];
    return l.first_value + static_cast<size_t>(kv_head) * value_dim_ * l.capacity;
  }
  // Stores one position into slot `index` of the layer.
  void store_slot(int32_t layer, int32_t index, int32_t head_begin, int32_t head_end, const float* k, const float* v);

  struct Layer {
    int32_t ring = 0;   // 0: every position
    int32_t slots = 0;  // n_ctx, or 2 × ring
    int32_t capacity = 0;  // slots rounded up to whole key blocks
    size_t first_key = 0, first_value = 0;  // element offsets of the layer's keys and values
  };

  int32_t n_layers_;
  int32_t n_ctx_;
  int32_t n_kv_heads_;
  int32_t key_dim_;
  int32_t value_dim_;
  KvType type_;
  std::vector<Layer> layers_;
  Buffer keys_;
  Buffer values_;
  Buffer key_scales_;    // Q8_0 only
  Buffer value_scales_;  // Q8_0 only
};

}  // namespace orchard::model

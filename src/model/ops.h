#pragma once
// Element-wise and per-vector operations of the forward pass. The matrix products live in
// core/kernels.h; these are the small ones between them.
#include <cstdint>

#include "model/config.h"
#include "model/kv_cache.h"

namespace orchard::model::ops {

// out[i] = x[i] / rms(x) * weight[i]; out may alias x.
void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps);
// The rotation of position `pos`: cos/sin [rope_dims / 2]. freq_factors (llama 3.1) may be null.
// Computed once per token and shared by every head and layer. Linear scaling or YaRN as the
// config says; cos and sin carry YaRN's magnitude factor (config.rope_mscale).
void rope_angles(int32_t pos, const ModelConfig& config, const float* freq_factors, float* cos, float* sin);
// Rotates one head vector [head_dim] by angles from rope_angles.
void rope(float* head, const float* cos, const float* sin, int32_t rope_dims, RopeOrdering ordering);
// Attention of a block of rows (positions of one sequence) over one KV head: row r has `group`
// query heads and sees keys [first_key[r], n_keys[r]) (first_key null: from 0);
// out[r][g] = softmax(q[r][g] · K · scale) · V, scale 1/√head_dim unless given, where a head with
// a sink logit s_g (gpt-oss) has e^s_g added to its softmax's denominator, a key that adds no value.
// Computed as two small matrix products over the block (scores = Q·K, then out = P·V) in
// register tiles, so each key and value is loaded once per 4 query vectors, not once each;
// keys before a tile's first visible one are not read. Keys and values are of the cache's
// type (KvCache's layouts), converted to F32 as the tiles load them.
struct AttentionBlock {
  const float* q;          // F32: row r's head g at q + r * row_stride + g * head_dim
  float* out;              // F32, laid out like q (or as out_row_stride and value_dim say)
  int64_t row_stride;
  int32_t n_rows, group, head_dim;
  const int32_t* n_keys;   // [n_rows], each ≥ 1
  // `type`, in KvCache's blocks: dimension d of position j at key_element(head_dim, d, j); every
  // block up to the one holding the last key a row sees is there (a tile reads whole aligned runs)
  const void* keys;
  const void* values;      // `type`: position j's values at element j * value_stride
  int64_t value_stride;
  float* scores;           // scratch of attention_scratch_floats(n_rows, group, max n_keys)
  // Latent attention: values of another width than keys, its own score scale, and the output's
  // own layout (row r's head g at out + r * out_row_stride + g * value_dim). 0: as the keys / q.
  float scale = 0;         // 0: 1/√head_dim
  int32_t value_dim = 0;   // 0: head_dim
  int64_t out_row_stride = 0;  // 0: row_stride
  const int32_t* first_key = nullptr;  // [n_rows], each < n_keys[r]: a sliding window; null: none
  const float* sinks = nullptr;        // [group]: each query head's sink logit; null: none
  KvType type = KvType::F32;           // of keys and values
  // Q8_0: the F16 block scales, KvCache::key_scales / value_scales (position j's value scales
  // at value_scales + j * value_scale_stride; the keys' as KvCache lays them out). head_dim and
  // value_dim are multiples of 32.
  const core::Half* key_scales = nullptr;
  const core::Half* value_scales = nullptr;
  int64_t value_scale_stride = 0;
  // Latent attention's blocks (Forward::attend_latent): every query head reads the one latent,
  // so a chunk of the cache serves many query vectors even in a decode step. Where the AVX-512
  // set runs, an F16 cache then takes integer products (attention_vnni.h). Set per model, never
  // per block, so that a row's path does not depend on its batch.
  bool latent = false;
};
void attend_block(const AttentionBlock& block);
// Floats of scratch that attend_block needs for a block of this size.
int64_t attention_scratch_floats(int32_t n_rows, int32_t group, int32_t max_keys);
// Whether attend_block takes blocks of this shape (type and widths, with value_scale_stride)
// without the scores scratch, on AMX tiles or VNNI integer products: such blocks may hold more
// rows than attention_scratch_floats was asked for, so that each chunk of keys and values is
// rearranged once for more query vectors.
bool attention_takes_wide_blocks(const AttentionBlock& shape);
// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);
// gpt-oss's clamped SwiGLU: with g = min(gate[i], 7) and u = clamp(up[i], -7, 7),
// gate[i] = g · σ(1.702 g) · (u + 1).
void swiglu_clamped(float* gate, const float* up, int64_t n);
// y[i] += x[i]
void add(float* y, const float* x, int64_t n);
// y[i] += a * x[i]
void add_scaled(float* y, const float* x, float a, int64_t n);
// Σ a[i] b[i], summed in an order that depends on n alone.
float dot(const float* a, const float* b, int64_t n);
// x = softmax(x), in place.
void softmax(float* x, int64_t n);
// The indices of the k largest of x[0..n), largest first (the lower index first among equals).
void top_k(const float* x, int32_t n, int32_t k, int32_t* indices);

}  // namespace orchard::model::ops

#pragma once
// Element-wise and per-vector operations of the forward pass. The matrix products live in
// core/kernels.h; these are the small ones between them.
#include <cstdint>

#include "model/config.h"

namespace orchard::model::ops {

// out[i] = x[i] / rms(x) * weight[i]; out may alias x.
void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps);
// The rotation of position `pos`: cos/sin [rope_dims / 2]. freq_factors (llama 3.1) may be null.
// Computed once per token and shared by every head and layer.
void rope_angles(int32_t pos, const ModelConfig& config, const float* freq_factors, float* cos, float* sin);
// Rotates one head vector [head_dim] by angles from rope_angles.
void rope(float* head, const float* cos, const float* sin, int32_t rope_dims, RopeOrdering ordering);
// Attention of `group` query heads that share one KV head, at one position that sees n_keys
// keys: out[g] = softmax(q[g] · K / √d) · V.
//   q: F32 [group][head_dim]; keys: F32 [head_dim][key_stride] (transposed, as KvCache keeps
//   them); values: F32 [n_keys] rows of head_dim, value_stride apart; scores: scratch
//   [n_keys]; out: F32 [group][head_dim].
void attend_group(const float* q, int32_t group, int32_t head_dim, const float* keys, int64_t key_stride,
                  const float* values, int64_t value_stride, int32_t n_keys, float* scores, float* out);
// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);
// y[i] += x[i]
void add(float* y, const float* x, int64_t n);

}  // namespace orchard::model::ops

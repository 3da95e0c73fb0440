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
// In place softmax of x[n].
void softmax(float* x, int64_t n);
// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);
// Σ a[i]·b[i]
float dot(const float* a, const float* b, int64_t n);
// y[i] += alpha·x[i]
void axpy(float* y, float alpha, const float* x, int64_t n);
// y[i] += x[i]
void add(float* y, const float* x, int64_t n);

}  // namespace orchard::model::ops

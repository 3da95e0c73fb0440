#pragma once
// Attention over a Q8_0 KV cache, or latent attention's F16 cache, in AVX-512 VNNI integer
// products, beside ops::attend_block's vector loops.
//
// Q8_0: both products are 8-bit. A score is Σ (key code + 128)·(query code) per 32 dimensions
// (the query rounded to 8 bits per 32, as a matrix product's activations are), and an output
// is Σ (weight code)·(value code) over 4 positions at a time, each weight p_j · s_j
// (probability times the value block's scale) rounded to 8 bits of the query's largest such
// weight in the chunk. One VNNI instruction is 64 multiply-adds.
//
// F16 (latent attention only): each chunk's keys and values are rounded to 16-bit codes as it
// is taken, 8191 steps of each position's 32-dimension block's largest magnitude (finer than
// F16's own rounding for the elements that rule a dot product), the query likewise, the
// weights to 4095 steps; products of two dimensions or positions at a time, 32 multiply-adds
// an instruction against 16 for floats. The rounding costs about what the products of 8 query
// vectors save, so it pays where many share a chunk: latent attention's heads all read one
// latent (a 2k prompt at depth 2k of a DeepSeek-shaped model 1.5× faster, its decode steps no
// slower), while a dense model's KV head serves 8 and its decode steps were 1.2–1.7× slower.
//
// A tile of 4 query vectors takes a 64-key chunk in one pass with everything in registers:
// scores, their online softmax (base 2, a running largest score and sum per query), the
// weights' codes, the outputs. Nothing per key is written to memory and read back: in the
// vector loops' form (rows of scores over a span of keys, softmax passes over them, codes
// rounded from them) three quarters of a long prompt's attention went to that bookkeeping and
// a quarter to the products. Each chunk's keys and values are rearranged into VNNI operands
// once for every tile of the block.
#include "model/ops.h"

namespace orchard::model::ops {

// Whether attend_block takes this path where the AVX-512 kernel set runs (whose CPUs all have
// VNNI): key and value widths of whole 32-value blocks, values in whole 64-dimension tiles up
// to 512 (latent attention's among them), and a Q8_0 cache with one scale per 32 values of a
// position or a latent block (AttentionBlock::latent) over an F16 cache. Other blocks take the
// vector loops.
bool vnni_attention_suits(const AttentionBlock& block);
// attend_block's result through the integer products. Call only where the AVX-512 kernel set
// runs; elsewhere (arm64, no AVX-512) it throws.
void attend_block_vnni(const AttentionBlock& block);

}  // namespace orchard::model::ops

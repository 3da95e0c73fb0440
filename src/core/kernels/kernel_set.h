#pragma once
// Internal contract between the matmul driver (kernels.cpp) and the per-ISA kernel files.
// Not part of the public API: only src/core and tests/core include it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/kernels.h"
#include "core/quant.h"

namespace orchard::core::kernels {

// Weight layouts. kRows is GGUF's: row after row, each a run of blocks. The interleaved ones
// group 16 rows: for every block column, the 16 rows' scales then their quants, 4 bytes of each
// row in turn, so one 64-byte load feeds 16 int32 lanes (one per row) of a VNNI dot product (on
// NEON each 16 bytes feed the 4 lanes of one sdot by element) and the output of a block column is
// a vector of 16 rows.
enum Layout : int {
  kRows = 0,
  kQ4_0x16 = 1,  // per block column: d[16], then for k in 0..3, for row: qs[4k..4k+3]
  kQ8_0x16 = 2,  // per block column: d[16], then for k in 0..7, for row: qs[4k..4k+3] ^ 0x80
  kQ4_Kx16 = 3,  // per super-block column: see kQ4_K* below
  kQ6_Kx16 = 4,  // per super-block column: see kQ6_K* below
  // Float weights: for every column, the 16 rows' values in turn (the group is column-major),
  // so a prompt matmul is a sum of outer products: one load of 16 rows' weights times each
  // token's activation broadcast, with the results already laid out as y's rows.
  kF32x16 = 5,
  kF16x16 = 6,
  kBF16x16 = 7,
  kQ5_Kx16 = 8,  // per super-block column: a kQ4_Kx16 column, then qh (see kQ5_K* below)
  kIQ4_XSx16 = 9,  // per super-block column: see kIQ4_XS* below
  kQ3_Kx16 = 10,  // per super-block column: see kQ3_K* below
  kQ2_Kx16 = 11,  // per super-block column: see kQ2_K* below
};
constexpr int64_t kInterleave = 16;

// kQ4_Kx16 column (2368 bytes, a multiple of 64): d[16] and dmin[16] as halves; the 6-bit
// scales and mins unpacked to bytes as pairs, [pair p][row][2] = sub-blocks 2p, 2p+1 (so one
// vpmovzxbw gives a row's pair in each int32 lane); then qs as [k in 0..31][row][4 bytes]
// holding qs[4k..4k+3] of each row (low nibbles: sub-block 2(k/8), high: 2(k/8)+1).
constexpr size_t kQ4_KDmin = 32, kQ4_KScales = 64, kQ4_KMins = 192, kQ4_KQuants = 320, kQ4_KColumn = 2368;
// kQ5_Kx16 column (2880 bytes, a multiple of 64): the kQ4_Kx16 column of the low 4 bits (Q5_K's
// d, dmin, scales and qs mean what Q4_K's do), then qh as [m in 0..7][row][4 bytes] holding
// qh[4m..4m+3] of each row. Bit b of qh[l] is the fifth bit of element 32b + l, so quant word k
// (elements of sub-blocks 2(k/8) and 2(k/8)+1) takes its fifth bits from qh word k % 8, bits
// 2(k/8) and 2(k/8)+1.
constexpr size_t kQ5_KHigh = kQ4_KColumn, kQ5_KColumn = kQ4_KColumn + 512;
// kIQ4_XSx16 column (2240 bytes, a multiple of 64): d[16] as halves; the 6-bit scales less 32
// as int8 pairs [pair p][row][2] (sub-blocks 2p, 2p+1); then qs as [k in 0..31][row][4 bytes]
// holding qs[4k..4k+3] of each row (sub-block k / 4: low nibbles its elements 4 (k % 4).., high
// nibbles 16 + 4 (k % 4)..); 32 bytes of padding.
constexpr size_t kIQ4_XSScales = 32, kIQ4_XSQuants = 160, kIQ4_XSColumn = 2240;
// kQ3_Kx16 column (1856 bytes, a multiple of 64): d[16] as halves; the 16 scales (-32..31) as
// int8 pairs [pair n][row][2] (sub-blocks of 16 2n, 2n+1); qs as [k in 0..15][row][4 bytes]
// holding qs[4k..4k+3]; hmask as [m in 0..7][row][4 bytes] holding hmask[4m..4m+3]; 32 bytes of
// padding. Element 128h + 32j + l (l < 32) has its low 2 bits at bits 2j of qs[32h + l] and its
// third at bit 4h + j of hmask[l]: quant word k = 8h + m takes hmask word m.
constexpr size_t kQ3_KScales = 32, kQ3_KQuants = 288, kQ3_KHigh = 1312, kQ3_KColumn = 1856;
// kQ2_Kx16 column (1344 bytes, a multiple of 64): d[16] and dmin[16] as halves; the scale bytes
// (4-bit scale | 4-bit min << 4) as pairs [pair n][row][2] (sub-blocks of 16 2n, 2n+1); qs as
// [k in 0..15][row][4 bytes] holding qs[4k..4k+3] (element 128h + 32j + l at bits 2j of
// qs[32h + l]).
constexpr size_t kQ2_KDmin = 32, kQ2_KScales = 64, kQ2_KQuants = 320, kQ2_KColumn = 1344;
// kQ6_Kx16 column (3392 bytes, a multiple of 64): d[16] as floats; scales as pairs
// [pair p][row][2] (sub-blocks 2p, 2p+1); ql as [k in 0..31][row][4] and qh as
// [k in 0..15][row][4], the GGUF bytes ql[4k..4k+3] and qh[4k..4k+3] of each row.
constexpr size_t kQ6_KScales = 64, kQ6_KLow = 320, kQ6_KHigh = 2368, kQ6_KColumn = 3392;

// Q8_0-style activation block shared by the kernels of the 32-element types: a float scale (more exact
// than GGUF's half, and the activations never reach a file) and the sum of the quants, which
// the unsigned-times-signed dot products need to remove the weights' offset (8 for Q4_0, 128
// for the shifted Q8_0 of kQ8_0x16) and Q4_1/Q5_1 need for their mins.
struct ActQ8_0 {
  float d;
  int32_t sum;
  int8_t qs[32];
};
static_assert(sizeof(ActQ8_0) == 40);

// One tile of y [n_tokens, rows] = x · Wᵀ: rows [r0, r0 + n_rows) × tokens [t0, t0 + n_tokens).
struct Tile {
  const uint8_t* w;   // row r0 (kRows) or the 16-row group holding r0, r0 % 16 == 0 (interleaved)
  size_t w_stride;    // bytes from one row (kRows) or one 16-row group (interleaved) to the next
  int64_t n_rows;
  int64_t n_blocks;   // blocks per row; for F32/F16/BF16 the number of columns
  const uint8_t* x;   // activations of token t0: f32 [cols], ActQ8_0 or BlockQ8_K [n_blocks]
  size_t x_stride;    // bytes from one token's activations to the next
  int64_t n_tokens;
  float* y;           // &y[t0][r0]
  int64_t y_stride;   // floats from one token's outputs to the next (= rows)
};
using TileFn = void (*)(const Tile&);

// One implementation per (type, layout); null where a set has none (the driver then takes the
// next set this CPU runs that has one, then the generic set, which has them all).
struct KernelSet {
  const char* name;
  VectorIsa isa;  // kPortable: the generic set
  TileFn f32, f16, bf16, q4_0, q8_0, q4_k, q6_k;
  TileFn q4_0x16, q8_0x16, q4_kx16, q6_kx16;
  TileFn f32x16, f16x16, bf16x16;
  // GGUF rows only. Q4_1/Q5_0/Q5_1/IQ4_NL/MXFP4 take ActQ8_0 activations, Q2_K/Q3_K/Q5_K/IQ4_XS
  // take BlockQ8_K.
  TileFn q4_1, q5_0, q5_1, q2_k, q3_k, q5_k, iq4_nl, iq4_xs, mxfp4;
  // Interleaved copies of types that only some sets have a kernel for; WeightMatrix::prepare
  // keeps the GGUF rows where the active set has none.
  TileFn q5_kx16, iq4_xsx16, q3_kx16, q2_kx16;
};

// Kernels for a decode step of several sequences, 2 to kSmallBatch tokens, on the interleaved
// copies: between the one-token stream and the prompt GEMM, they walk a 16-row group's columns
// once for a run of up to 8 tokens (every row of a column before the next, which is prefetched
// meanwhile), so the step reads the weights from memory once at the pace of one token's
// stream while the tokens' arithmetic runs from L1. A token's outputs are bit for
// bit those of its one-token step. Null entries (or no set at all) leave those calls to the
// KernelSet's own kernels.
constexpr int64_t kSmallBatch = 16;
struct SmallBatchSet {
  TileFn q4_0x16, q8_0x16, q4_kx16, q6_kx16;
};
// The small-batch kernels that go with `set`, or null where there are none. One definition per
// architecture, beside supported_simd_kernels().
const SmallBatchSet* small_batch_kernels(const KernelSet& set);
// Off: few-token calls take the KernelSet's kernels, as before these existed. For tests and
// benchmarks that compare the two; not thread-safe, call before any matmul.
void use_small_batch_kernels(bool on);

const KernelSet& generic_kernels();
// The SIMD sets this CPU runs, best first; empty when it runs none. One definition per
// architecture (x86/, arm/, or generic/no_simd.cpp), chosen by CMake, so the driver has no #ifdef.
std::vector<const KernelSet*> supported_simd_kernels();
// Makes matmul and WeightMatrix::prepare use `set` (null: the default, see kernel_isa_name). For tests
// and benchmarks that compare sets; not thread-safe, call before any matmul.
void use_kernel_set(const KernelSet* set);

// Activation quantizers shared by every set, so all kernels see the same quantized inputs.
// x [n_blocks * 32] -> out [n_blocks]
void quantize_act_q8_0(const float* x, ActQ8_0* out, int64_t n_blocks);
// x [n_blocks * 256] -> out [n_blocks], byte for byte what quantize_row_reference(Q8_K) gives.
void quantize_act_q8_k(const float* x, BlockQ8_K* out, int64_t n_blocks);

// Interleaved layouts: bytes of the repacked copy of W [rows, n_blocks blocks of its type],
// rows padded to a multiple of 16 with zero blocks; repacking; and reading one GGUF block back out.
size_t interleaved_bytes(Layout layout, int64_t rows, int64_t n_blocks);
void repack(Layout layout, const void* src, int64_t rows, int64_t n_blocks, void* dst);
// Groups [g0, g1) of 16 rows of that copy, so callers can split a repack their own way.
void repack_groups(Layout layout, const void* src, int64_t rows, int64_t n_blocks, void* dst, int64_t g0, int64_t g1);
// Rebuilds the GGUF block (BlockQ4_0, BlockQ8_0, BlockQ2_K, BlockQ3_K, BlockQ4_K, BlockQ5_K,
// BlockQ6_K or BlockIQ4_XS, or one F32/F16/BF16 value) of row r, block b from an interleaved copy.
void extract_block(Layout layout, const void* data, int64_t n_blocks, int64_t r, int64_t b, void* block);

}  // namespace orchard::core::kernels

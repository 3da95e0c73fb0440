#pragma once
// Matrix kernels of the compute path, dispatched at run time by CPU features (AVX-512/AVX2 on
// x86-64, NEON/dotprod on arm64, a portable fallback otherwise). Every fast path is tested
// against the reference dequantizer in quant.h and a float64 dot product.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace orchard::core {

// Which implementation the dispatcher picked, for logs and benchmarks ("avx512-vnni", "avx2",
// "neon-dotprod", "neon", "generic"): the best this CPU runs, or the one the environment variable
// ORCHARD_KERNELS names (to compare sets side by side, or to compute as a smaller CPU does).
// Throws Error naming the sets this CPU runs when ORCHARD_KERNELS names another; the first call
// reads it, so a program calls this before starting threads that multiply.
std::string kernel_isa_name();

// The vector instructions of the chosen set. The model's own vector code (attention, norms,
// SiLU) takes the same, so ORCHARD_KERNELS=avx2 on an AVX-512 machine computes as an AVX2
// machine does.
enum class VectorIsa { kPortable, kAvx2, kAvx512, kNeon };
VectorIsa active_vector_isa();

// Forces the portable kernels (tests compare them with the fast ones). Not thread-safe:
// call before any matmul.
void force_generic_kernels(bool on);
// The names of the kernel sets this CPU runs, best first, then "generic".
std::vector<std::string> runnable_kernel_sets();
// Makes later matmuls and the model's vector code use the set of that name (empty: the default),
// so tests can run each set in one process. Throws Error for a set this CPU does not run. Not
// thread-safe: call between computations.
void use_kernel_set(std::string_view name);

// Memory for the repacked copies of one model: consecutive places in large blocks on huge pages
// where the system gives them (see kernels.cpp), so no copy ends in a partial huge page of its
// own. Each copy keeps its block alive; the arena itself can go once loading is done.
// Not thread-safe.
class CopyArena {
 public:
  explicit CopyArena(size_t block_bytes = size_t{64} << 20) : block_bytes_(block_bytes) {}
  // `bytes` at a 64-byte boundary; null when the memory cannot be had.
  std::shared_ptr<void> allocate(size_t bytes);

 private:
  size_t block_bytes_;
  std::shared_ptr<void> block_;
  size_t used_ = 0, capacity_ = 0;
};

// A weight matrix W [rows, cols] (cols contiguous per row, as GGUF stores a tensor with
// ne = {cols, rows}). Either a view of bytes owned elsewhere (the mapped model file) or an
// owned repacked copy laid out for the kernels of this CPU.
class WeightMatrix {
 public:
  WeightMatrix() = default;
  // A view; `data` must outlive the matrix. Rows are `row_bytes(type, cols)` apart.
  static WeightMatrix view(TensorType type, const void* data, int64_t rows, int64_t cols);
  // Like view, but may copy into an interleaved layout when that is faster on this CPU
  // (costs load time and the copy's memory; the mapped bytes are then no longer touched).
  // Today: Q4_0, Q8_0, Q4_K, Q6_K, F32, F16 and BF16 with ≥ 16 rows on AVX-512 VNNI, and
  // Q4_0, Q8_0 and Q4_K on AVX2, as 16-row groups (rows padded to 16); the other types stay views.
  // The copy comes from `arena` when given (a model's matrices share one), else is allocated
  // on its own. Throws FormatError when cols is not a positive whole number of blocks.
  static WeightMatrix prepare(TensorType type, const void* data, int64_t rows, int64_t cols, bool allow_repack = true,
                              CopyArena* arena = nullptr);
  // Like prepare, but a copy is only given its place (address space: none of its pages is
  // touched, no byte of `data` read) and filled by the first matmul that reads the matrix, once,
  // whichever thread gets there first, split over that call's pool. For a mixture's experts: one
  // never chosen is never read from the file nor copied. `data` must outlive the matrix.
  static WeightMatrix prepare_on_first_use(TensorType type, const void* data, int64_t rows, int64_t cols,
                                           bool allow_repack = true, CopyArena* arena = nullptr);

  TensorType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  bool repacked() const { return layout_ != 0; }
  // Whether the copy of a prepare_on_first_use matrix is still to be made (no matmul has read it).
  bool pending() const;
  // Bytes read from memory by one full pass over the matrix.
  size_t bytes() const;
  // Dequantizes row r into dst[cols] (any layout).
  void dequantize_row(int64_t r, float* dst) const;

 private:
  friend void matmul_many(std::span<const struct MatmulTarget>, const float*, int64_t, ThreadPool&,
                          struct MatmulScratch&);
  friend void matmul_heads(std::span<const WeightMatrix>, const float*, int64_t, int64_t, int64_t, float*, int64_t,
                           int64_t, ThreadPool&, struct MatmulScratch&);
  friend struct MatmulPart;
  struct PendingCopy;
  static WeightMatrix prepare_copy(TensorType type, const void* data, int64_t rows, int64_t cols, bool allow_repack,
                                   CopyArena* arena, bool on_first_use);
  // Makes a pending copy (on `pool` when given); returns at once when there is none to make.
  void fill(ThreadPool* pool) const;
  TensorType type_ = TensorType::F32;
  const void* data_ = nullptr;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  int layout_ = 0;  // 0: GGUF row-major; others: kernel-specific interleavings
  std::shared_ptr<void> owned_;
  std::shared_ptr<PendingCopy> pending_;  // shared by copies of the matrix, so one fill serves all
};

// Reusable buffers for matmul's quantized activations: grows to the largest call and stays,
// so a decode step allocates nothing once warmed up.
struct MatmulScratch {
  std::vector<uint8_t> activations;
};

// y [n_tokens, rows] = x [n_tokens, cols] · Wᵀ, all float32 row-major, split over the pool.
// x is quantized once per call to the weight's partner type (Q8_0-style blocks of 32 for
// Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL/MXFP4, Q8_K blocks of 256 for Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_XS;
// float types use x as is), so results differ from the exact product of the dequantized weights
// by at most Σ|w|·(block absmax of x)/254 plus float32 rounding.
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool, MatmulScratch& scratch);

// Several products in a single pass over the pool: targets[i].y = xᵢ · Wᵢᵀ, for at most 16
// matrices, where xᵢ is the target's own input when it has one and x otherwise (the matrices
// reading x share its column count). Each input is quantized once for each input type its
// matrices take (one for the 32-element types together, the 256-element ones, or the float
// types) and the matrices' rows share one split over the threads, so a decode step waits for
// its slowest thread once instead of once per matrix (the query, key and value projections; a
// gated FFN's gate and up; the chosen experts' down projections, each of its own input). Each
// output is bit for bit what matmul gives that matrix alone.
struct MatmulTarget {
  const WeightMatrix* w;
  float* y;                  // [n_tokens, w->rows()]
  const float* x = nullptr;  // [n_tokens, w->cols()]; null: the call's shared x
};
void matmul_many(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens, ThreadPool& pool,
                 MatmulScratch& scratch);

// One product per head in a single pass over the pool: for each h, y_h [n_tokens, rows] =
// x_h [n_tokens, cols] · W_hᵀ, where token t's x_h starts at x + t·x_stride + h·x_head_stride
// and its y_h at y + t·y_stride + h·y_head_stride (floats). The matrices share type, layout and
// shape. Latent attention's per-head attn_k_b and attn_v_b: one call per head would wait for
// the pool 2 × heads times a layer (DeepSeek V3 has 128 heads).
void matmul_heads(std::span<const WeightMatrix> w, const float* x, int64_t x_stride, int64_t x_head_stride,
                  int64_t n_tokens, float* y, int64_t y_stride, int64_t y_head_stride, ThreadPool& pool,
                  MatmulScratch& scratch);

}  // namespace orchard::core

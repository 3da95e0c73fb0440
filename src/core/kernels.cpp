#include "core/kernels.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

#include <sys/mman.h>

#include "core/error.h"
#include "core/kernels/kernel_set.h"
#include "core/quant.h"

namespace orchard::core {
namespace {

using kernels::KernelSet;
using kernels::Layout;
using kernels::TileFn;

// The sets this CPU runs, best first, then the generic one.
const std::vector<const KernelSet*>& runnable_sets() {
  static const std::vector<const KernelSet*> sets = [] {
    std::vector<const KernelSet*> simd = kernels::supported_simd_kernels();
    simd.push_back(&kernels::generic_kernels());
    return simd;
  }();
  return sets;
}

const KernelSet& runnable_set(std::string_view name, std::string_view asked_by) {
  for (const KernelSet* set : runnable_sets())
    if (name == set->name) return *set;
  std::string names;
  for (const KernelSet* set : runnable_sets()) names += std::string(names.empty() ? "" : ", ") + set->name;
  throw Error(error_message("kernels", "{}{}: not a kernel set this CPU runs (it runs {})", asked_by, name, names));
}

// The best set this CPU runs, or the one ORCHARD_KERNELS names. An unknown or unsupported name
// throws on every call (the static stays unset), so no caller can run on a set it did not ask for.
const KernelSet& default_kernels() {
  static const KernelSet* chosen = [] {
    const char* wanted = std::getenv("ORCHARD_KERNELS");
    if (!wanted || !*wanted) return runnable_sets().front();
    return &runnable_set(wanted, "ORCHARD_KERNELS=");
  }();
  return *chosen;
}

// Null: the default set. Atomic only so that a test flipping it races with nothing undefined.
std::atomic<const KernelSet*> g_chosen{nullptr};

const KernelSet& active_kernels() {
  const KernelSet* chosen = g_chosen.load(std::memory_order_relaxed);
  return chosen ? *chosen : default_kernels();
}

std::atomic<bool> g_small_batch{true};

TileFn small_batch_tile(const KernelSet& set, int layout) {
  const kernels::SmallBatchSet* small = kernels::small_batch_kernels(set);
  if (!small) return nullptr;
  switch (layout) {
    case kernels::kQ4_0x16: return small->q4_0x16;
    case kernels::kQ8_0x16: return small->q8_0x16;
    case kernels::kQ4_Kx16: return small->q4_kx16;
    case kernels::kQ6_Kx16: return small->q6_kx16;
    default: return nullptr;
  }
}

TileFn find_tile(const KernelSet& set, TensorType type, int layout) {
  switch (layout) {
    case kernels::kQ4_0x16: return set.q4_0x16;
    case kernels::kQ8_0x16: return set.q8_0x16;
    case kernels::kQ4_Kx16: return set.q4_kx16;
    case kernels::kQ6_Kx16: return set.q6_kx16;
    case kernels::kQ5_Kx16: return set.q5_kx16;
    case kernels::kIQ4_XSx16: return set.iq4_xsx16;
    case kernels::kQ3_Kx16: return set.q3_kx16;
    case kernels::kQ2_Kx16: return set.q2_kx16;
    case kernels::kF32x16: return set.f32x16;
    case kernels::kF16x16: return set.f16x16;
    case kernels::kBF16x16: return set.bf16x16;
    default: break;
  }
  switch (type) {
    case TensorType::F32: return set.f32;
    case TensorType::F16: return set.f16;
    case TensorType::BF16: return set.bf16;
    case TensorType::Q4_0: return set.q4_0;
    case TensorType::Q8_0: return set.q8_0;
    case TensorType::Q4_K: return set.q4_k;
    case TensorType::Q6_K: return set.q6_k;
    case TensorType::Q4_1: return set.q4_1;
    case TensorType::Q5_0: return set.q5_0;
    case TensorType::Q5_1: return set.q5_1;
    case TensorType::Q2_K: return set.q2_k;
    case TensorType::Q3_K: return set.q3_k;
    case TensorType::Q5_K: return set.q5_k;
    case TensorType::IQ4_NL: return set.iq4_nl;
    case TensorType::IQ4_XS: return set.iq4_xs;
    case TensorType::MXFP4: return set.mxfp4;
    case TensorType::Q8_K: break;
  }
  return nullptr;
}

// The kernel of `set` for (type, layout) or, where it has none, of the next set this CPU runs
// that has one (AVX-512 borrows AVX2's, NEON dotprod NEON's), then of the generic set, which
// has them all.
TileFn find_tile_or_fallback(const KernelSet& set, TensorType type, int layout) {
  if (TileFn tile_fn = find_tile(set, type, layout)) return tile_fn;
  static const std::vector<const KernelSet*> simd = kernels::supported_simd_kernels();
  auto next = std::find(simd.begin(), simd.end(), &set);
  for (auto it = next == simd.end() ? next : next + 1; it != simd.end(); ++it)
    if (TileFn tile_fn = find_tile(**it, type, layout)) return tile_fn;
  return find_tile(kernels::generic_kernels(), type, layout);
}

Layout interleaved_layout(TensorType type) {
  if (type == TensorType::Q4_0) return kernels::kQ4_0x16;
  if (type == TensorType::Q8_0) return kernels::kQ8_0x16;
  if (type == TensorType::Q4_K) return kernels::kQ4_Kx16;
  if (type == TensorType::Q6_K) return kernels::kQ6_Kx16;
  if (type == TensorType::Q5_K) return kernels::kQ5_Kx16;
  if (type == TensorType::IQ4_XS) return kernels::kIQ4_XSx16;
  if (type == TensorType::Q3_K) return kernels::kQ3_Kx16;
  if (type == TensorType::Q2_K) return kernels::kQ2_Kx16;
  if (type == TensorType::F32) return kernels::kF32x16;
  if (type == TensorType::F16) return kernels::kF16x16;
  if (type == TensorType::BF16) return kernels::kBF16x16;
  return kernels::kRows;
}

// What matmul feeds the kernels for a weight type: f32 rows for the float types, Q8_0-style
// blocks for the 32-element types, Q8_K for the 256-element ones.
enum class Activations : size_t { kF32, kQ8_0, kQ8_K };

Activations activations_for(TensorType type) {
  switch (type) {
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::IQ4_NL:
    case TensorType::MXFP4: return Activations::kQ8_0;
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_XS: return Activations::kQ8_K;
    default: return Activations::kF32;
  }
}

size_t activation_row_bytes(Activations kind, int64_t cols) {
  switch (kind) {
    case Activations::kQ8_0: return static_cast<size_t>(cols / 32) * sizeof(kernels::ActQ8_0);
    case Activations::kQ8_K: return static_cast<size_t>(cols / kQK_K) * sizeof(BlockQ8_K);
    case Activations::kF32: break;
  }
  return static_cast<size_t>(cols) * sizeof(float);
}

// Tokens per task in a prompt matmul: their quantized activations (64 × a few KiB) stay in L2
// while a task's rows stream past them once.
constexpr int64_t kTokenChunk = 64;
// Matrices of one matmul_many call: a decode step's chosen experts' gate and up products
// (8 experts of Qwen3's and DeepSeek's mixtures) in one pass. Its bookkeeping is on the stack.
constexpr size_t kMaxTargets = 16;
// Rows per unit of work: the interleaved layouts' group size.
constexpr int64_t kRowUnit = kernels::kInterleave;
// Tasks per thread: enough for the dynamic scheduler to even out a thread that is descheduled
// or slower, few enough that taking a task (one atomic) stays negligible.
constexpr int64_t kTasksPerThread = 8;
// Row units per grain of a few-token matmul's shares (ThreadPool::run_shares): one for a
// decode step, whose kernels take a group at a time; four for a few tokens, the panel of
// groups the multi-token kernels reuse their activations across.
constexpr int64_t kDecodeGrain = 1;
constexpr int64_t kBatchGrain = 4;

// A decode step streams every repacked copy once, and on 4 KiB pages that costs a TLB miss
// every 4 KiB (and the hardware prefetcher stops at each page boundary). So copies of a huge
// page or more start on a 2 MiB boundary and, where the system gives transparent huge pages on
// request (Linux's madvise mode; elsewhere this is a no-op), ask for them over their whole huge
// pages before the repack first touches them. A partial huge page at the end stays on small
// pages: padding that is never written is never resident. Measured, TinyLlama decode
// alternated with and without (2 threads): Q4_K_M 61 → 75 tok/s with a model's copies in one
// arena, 70–73 with each copy on its own (its tail on small pages); load faster (fewer faults).
constexpr size_t kHugePage = size_t{2} << 20;

std::shared_ptr<void> allocate_huge_page_aligned(size_t bytes) {
  const size_t alignment = bytes >= kHugePage ? kHugePage : 64;
  const size_t padded = (bytes + alignment - 1) / alignment * alignment;  // aligned_alloc wants a multiple
  void* memory = std::aligned_alloc(alignment, padded);
  if (!memory) return nullptr;
#ifdef MADV_HUGEPAGE
  if (alignment == kHugePage) madvise(memory, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // a hint only
#endif
  return std::shared_ptr<void>(memory, std::free);
}

}  // namespace

std::string kernel_isa_name() { return active_kernels().name; }

VectorIsa active_vector_isa() { return active_kernels().isa; }

std::shared_ptr<void> CopyArena::allocate(size_t bytes) {
  bytes = (bytes + 63) / 64 * 64;
  if (capacity_ - used_ < bytes) {
    const size_t size = std::max(block_bytes_, (bytes + kHugePage - 1) / kHugePage * kHugePage);
    block_ = allocate_huge_page_aligned(size);
    if (!block_) {
      used_ = capacity_ = 0;
      return nullptr;
    }
    used_ = 0;
    capacity_ = size;
  }
  // Shares ownership of the block, points into it.
  std::shared_ptr<void> place(block_, static_cast<uint8_t*>(block_.get()) + used_);
  used_ += bytes;
  return place;
}

void force_generic_kernels(bool on) { kernels::use_kernel_set(on ? &kernels::generic_kernels() : nullptr); }

std::vector<std::string> runnable_kernel_sets() {
  std::vector<std::string> names;
  for (const KernelSet* set : runnable_sets()) names.emplace_back(set->name);
  return names;
}

void use_kernel_set(std::string_view name) {
  kernels::use_kernel_set(name.empty() ? nullptr : &runnable_set(name, "kernel set "));
}

void kernels::use_kernel_set(const KernelSet* set) { g_chosen.store(set, std::memory_order_relaxed); }

void kernels::use_small_batch_kernels(bool on) { g_small_batch.store(on, std::memory_order_relaxed); }

WeightMatrix WeightMatrix::view(TensorType type, const void* data, int64_t rows, int64_t cols) {
  if (type == TensorType::Q8_K)
    throw FormatError(error_message("kernels", "q8_K is an activation type, not a weight type"));
  const TypeTraits& traits = type_traits(type);
  if (rows < 0 || cols <= 0 || cols % traits.block_elements != 0)
    throw FormatError(error_message("kernels", "a {} weight matrix needs rows ≥ 0 and a positive multiple of {} columns, got {} x {}",
                                    traits.name, traits.block_elements, rows, cols));
  if (!data && rows > 0) throw FormatError(error_message("kernels", "weight matrix {} x {} has no data", rows, cols));
  WeightMatrix w;
  w.type_ = type;
  w.data_ = data;
  w.rows_ = rows;
  w.cols_ = cols;
  return w;
}

struct WeightMatrix::PendingCopy {
  const void* source;  // the GGUF rows the copy is made from
  std::once_flag once;
  std::atomic<bool> done{false};
};

WeightMatrix WeightMatrix::prepare(TensorType type, const void* data, int64_t rows, int64_t cols, bool allow_repack,
                                   CopyArena* arena) {
  return prepare_copy(type, data, rows, cols, allow_repack, arena, false);
}

WeightMatrix WeightMatrix::prepare_on_first_use(TensorType type, const void* data, int64_t rows, int64_t cols,
                                                bool allow_repack, CopyArena* arena) {
  return prepare_copy(type, data, rows, cols, allow_repack, arena, true);
}

WeightMatrix WeightMatrix::prepare_copy(TensorType type, const void* data, int64_t rows, int64_t cols,
                                        bool allow_repack, CopyArena* arena, bool on_first_use) {
  WeightMatrix w = view(type, data, rows, cols);
  const KernelSet& set = active_kernels();
  Layout layout = interleaved_layout(type);
  // Only SIMD sets repack: the generic kernels read interleaved copies block by block, slower
  // than the plain rows. Below one group the padding would cost more than the layout gains.
  if (!allow_repack || set.isa == VectorIsa::kPortable || layout == kernels::kRows || !find_tile(set, type, layout) ||
      rows < kernels::kInterleave)
    return w;
  int64_t n_blocks = cols / type_traits(type).block_elements;
  size_t bytes = kernels::interleaved_bytes(layout, rows, n_blocks);
  // The place is taken now either way, so a copy made later sits where an eager one would
  // (beside the others, on the arena's huge pages); its pages stay untouched until it is made.
  w.owned_ = arena ? arena->allocate(bytes) : allocate_huge_page_aligned(bytes);
  if (!w.owned_)
    throw Error(error_message("kernels", "cannot allocate {} bytes to repack a {} x {} matrix", bytes, rows, cols));
  void* copy = w.owned_.get();
  w.data_ = copy;
  w.layout_ = layout;
  if (on_first_use) {
    w.pending_ = std::make_shared<PendingCopy>();
    w.pending_->source = data;
  } else {
    kernels::repack(layout, data, rows, n_blocks, copy);
  }
  return w;
}

bool WeightMatrix::pending() const { return pending_ && !pending_->done.load(std::memory_order_acquire); }

void WeightMatrix::fill(ThreadPool* pool) const {
  if (!pending()) return;
  std::call_once(pending_->once, [&] {
    const auto layout = static_cast<Layout>(layout_);
    const int64_t n_blocks = cols_ / type_traits(type_).block_elements;
    const int64_t groups = (rows_ + kernels::kInterleave - 1) / kernels::kInterleave;
    // The copy is written through a pointer this matrix holds as const: it is the caller's
    // to fill, and no reader sees it before `done`.
    void* copy = const_cast<void*>(data_);
    if (!pool) {
      kernels::repack(layout, pending_->source, rows_, n_blocks, copy);
    } else {
      const int64_t tasks = std::min<int64_t>(groups, 4 * int64_t{pool->size()});
      pool->parallel_for(tasks, [&](int64_t task, int) {
        kernels::repack_groups(layout, pending_->source, rows_, n_blocks, copy, groups * task / tasks,
                               groups * (task + 1) / tasks);
      });
    }
    pending_->done.store(true, std::memory_order_release);
  });
}

size_t WeightMatrix::bytes() const {
  if (layout_ != kernels::kRows)
    return kernels::interleaved_bytes(static_cast<Layout>(layout_), rows_, cols_ / type_traits(type_).block_elements);
  return row_bytes(type_, cols_) * static_cast<size_t>(rows_);
}

void WeightMatrix::dequantize_row(int64_t r, float* dst) const {
  ORCHARD_CHECK(r >= 0 && r < rows_, "[kernels] row {} of a matrix with {} rows", r, rows_);
  fill(nullptr);
  if (layout_ == kernels::kRows) {
    dequantize_row_reference(type_, static_cast<const uint8_t*>(data_) + row_bytes(type_, cols_) * static_cast<size_t>(r), dst, cols_);
    return;
  }
  // Each block is rebuilt in GGUF form and dequantized by the reference code.
  const int64_t block_elements = type_traits(type_).block_elements;
  const int64_t n_blocks = cols_ / block_elements;
  alignas(BlockQ8_K) uint8_t block[sizeof(BlockQ6_K)];  // the largest interleaved block
  for (int64_t b = 0; b < n_blocks; ++b) {
    kernels::extract_block(static_cast<Layout>(layout_), data_, n_blocks, r, b, block);
    dequantize_row_reference(type_, block, dst + block_elements * b, block_elements);
  }
}

// One matrix of a call as the kernels see it: its weights, its input's activations and where
// its output goes.
struct MatmulPart {
  TileFn tile_fn;
  const uint8_t* base;
  size_t w_stride;
  bool interleaved;
  const uint8_t* act;
  size_t x_stride;  // bytes from one token's activations to the next
  int64_t rows, n_blocks;
  float* y;
  int64_t y_stride;  // floats from one token's outputs to the next

  static MatmulPart of(TileFn tile_fn, const WeightMatrix& w, const uint8_t* act, size_t x_stride, float* y,
                       int64_t y_stride) {
    const int64_t n_blocks = w.cols_ / type_traits(w.type_).block_elements;
    const bool interleaved = w.layout_ != kernels::kRows;
    const size_t w_stride = interleaved
                                ? kernels::interleaved_bytes(static_cast<Layout>(w.layout_), kRowUnit, n_blocks)
                                : row_bytes(w.type_, w.cols_);
    return {tile_fn, static_cast<const uint8_t*>(w.data_), w_stride, interleaved, act, x_stride,
            w.rows_,  n_blocks, y, y_stride};
  }

  // Row units [begin, end) of the matrix for tokens [t0, t1).
  void run(int64_t begin, int64_t end, int64_t t0, int64_t t1) const {
    const int64_t r0 = begin * kRowUnit, r1 = std::min(rows, end * kRowUnit);
    kernels::Tile tile;
    tile.w = base + (interleaved ? static_cast<size_t>(begin) : static_cast<size_t>(r0)) * w_stride;
    tile.w_stride = w_stride;
    tile.n_rows = r1 - r0;
    tile.n_blocks = n_blocks;
    tile.x = act + static_cast<size_t>(t0) * x_stride;
    tile.x_stride = x_stride;
    tile.n_tokens = t1 - t0;
    tile.y = y + t0 * y_stride + r0;
    tile.y_stride = y_stride;
    tile_fn(tile);
  }
};

namespace {

// The kernel for a call of n_tokens tokens: a decode step of several sequences takes the
// small-batch kernels where the active set has them.
TileFn tile_for(TensorType type, int layout, int64_t n_tokens) {
  if (n_tokens >= 2 && n_tokens <= kernels::kSmallBatch && g_small_batch.load(std::memory_order_relaxed))
    if (TileFn small = small_batch_tile(active_kernels(), layout)) return small;
  TileFn tile_fn = find_tile_or_fallback(active_kernels(), type, layout);
  ORCHARD_CHECK(tile_fn, "[kernels] no kernel for {} layout {}", type_name(type), layout);
  return tile_fn;
}

void quantize_activations(Activations kind, const float* src, int64_t cols, uint8_t* dst) {
  if (kind == Activations::kQ8_0)
    kernels::quantize_act_q8_0(src, reinterpret_cast<kernels::ActQ8_0*>(dst), cols / 32);
  else
    kernels::quantize_act_q8_k(src, reinterpret_cast<BlockQ8_K*>(dst), cols / kQK_K);
}

// Splits `units` row units × n_tokens tokens over the pool in one pass; run(u0, u1, t0, t1)
// computes units [u0, u1) for tokens [t0, t1).
template <typename Run>
void split_over_pool(int64_t units, int64_t n_tokens, ThreadPool& pool, Run&& run) {
  if (units == 0) return;
  if (n_tokens <= kTokenChunk) {
    // Few tokens (a decode step): the weights' reading is the cost, so each thread streams
    // through its own share of the rows in order.
    const int64_t grain = n_tokens == 1 ? kDecodeGrain : kBatchGrain;
    pool.parallel_shares(units, grain, [&](int64_t u0, int64_t u1, int) { run(u0, u1, 0, n_tokens); });
    return;
  }
  const int64_t token_chunks = (n_tokens + kTokenChunk - 1) / kTokenChunk;
  const int64_t wanted = std::max<int64_t>(1, (kTasksPerThread * pool.size() + token_chunks - 1) / token_chunks);
  const int64_t row_tasks = std::min(units, wanted);
  pool.parallel_for(row_tasks * token_chunks, [&](int64_t task, int) {
    const int64_t chunk = task / row_tasks, part = task % row_tasks;
    const int64_t t0 = chunk * kTokenChunk;
    run(units * part / row_tasks, units * (part + 1) / row_tasks, t0, std::min(n_tokens, t0 + kTokenChunk));
  });
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool, MatmulScratch& scratch) {
  const MatmulTarget target{&w, y};
  matmul_many(std::span<const MatmulTarget>(&target, 1), x, n_tokens, pool, scratch);
}

void matmul_many(std::span<const MatmulTarget> targets, const float* x, int64_t n_tokens, ThreadPool& pool,
                 MatmulScratch& scratch) {
  ORCHARD_CHECK(n_tokens >= 0, "[kernels] matmul with {} tokens", n_tokens);
  if (n_tokens == 0 || targets.empty()) return;
  ORCHARD_CHECK(targets.size() <= kMaxTargets, "[kernels] {} matrices in one call, at most {}", targets.size(),
                kMaxTargets);
  int64_t shared_cols = 0;
  for (const MatmulTarget& target : targets) {
    if (!target.x) {
      ORCHARD_CHECK(x != nullptr, "[kernels] a {} x {} matrix of matmul_many has no input: x is null and its target names none",
                    target.w->rows_, target.w->cols_);
      if (shared_cols == 0) shared_cols = target.w->cols_;
      ORCHARD_CHECK(target.w->cols_ == shared_cols, "[kernels] matrices of {} and {} columns read one input",
                    shared_cols, target.w->cols_);
    }
    target.w->fill(&pool);
  }

  // Each input [n_tokens, cols] f32 -> activations [n_tokens, stride bytes], quantized once per
  // call for each kind the matrices reading it take (usually one).
  struct Input {
    const float* x;
    int64_t cols;
    Activations kind;
    size_t stride, offset;
    const uint8_t* act;
  };
  std::array<Input, kMaxTargets> inputs;
  std::array<size_t, kMaxTargets> input_of{};
  size_t n_inputs = 0, scratch_bytes = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    const WeightMatrix& w = *targets[i].w;
    const float* source = targets[i].x ? targets[i].x : x;
    const Activations kind = activations_for(w.type_);
    size_t at = 0;
    while (at < n_inputs && !(inputs[at].x == source && inputs[at].kind == kind && inputs[at].cols == w.cols_)) ++at;
    input_of[i] = at;
    if (at < n_inputs) continue;
    Input& input = inputs[n_inputs++];
    input = {source, w.cols_, kind, activation_row_bytes(kind, w.cols_), 0, nullptr};
    if (kind == Activations::kF32) continue;
    input.offset = scratch_bytes;
    scratch_bytes += input.stride * static_cast<size_t>(n_tokens);
  }
  if (scratch.activations.size() < scratch_bytes) scratch.activations.resize(scratch_bytes);
  for (size_t k = 0; k < n_inputs; ++k) {
    Input& input = inputs[k];
    if (input.kind == Activations::kF32) {
      input.act = reinterpret_cast<const uint8_t*>(input.x);
      continue;
    }
    uint8_t* out = scratch.activations.data() + input.offset;
    pool.parallel_for(n_tokens, [&](int64_t t, int) {
      quantize_activations(input.kind, input.x + t * input.cols, input.cols, out + static_cast<size_t>(t) * input.stride);
    });
    input.act = out;
  }

  // The matrices' row units laid end to end: a range of that sequence may cover parts of
  // several matrices, each run by its own kernel.
  std::array<MatmulPart, kMaxTargets> parts;
  std::array<int64_t, kMaxTargets + 1> first_unit{};
  for (size_t i = 0; i < targets.size(); ++i) {
    const WeightMatrix& w = *targets[i].w;
    const Input& input = inputs[input_of[i]];
    parts[i] = MatmulPart::of(tile_for(w.type_, w.layout_, n_tokens), w, input.act, input.stride, targets[i].y, w.rows_);
    first_unit[i + 1] = first_unit[i] + (w.rows_ + kRowUnit - 1) / kRowUnit;
  }
  split_over_pool(first_unit[targets.size()], n_tokens, pool, [&](int64_t u0, int64_t u1, int64_t t0, int64_t t1) {
    for (size_t i = 0; i < targets.size(); ++i) {
      const int64_t begin = std::max(u0, first_unit[i]) - first_unit[i];
      const int64_t end = std::min(u1, first_unit[i + 1]) - first_unit[i];
      if (begin < end) parts[i].run(begin, end, t0, t1);
    }
  });
}

void matmul_heads(std::span<const WeightMatrix> w, const float* x, int64_t x_stride, int64_t x_head_stride,
                  int64_t n_tokens, float* y, int64_t y_stride, int64_t y_head_stride, ThreadPool& pool,
                  MatmulScratch& scratch) {
  ORCHARD_CHECK(n_tokens >= 0, "[kernels] matmul with {} tokens", n_tokens);
  if (n_tokens == 0 || w.empty()) return;
  const WeightMatrix& first = w.front();
  for (const WeightMatrix& m : w) {
    ORCHARD_CHECK(m.type_ == first.type_ && m.layout_ == first.layout_ && m.rows_ == first.rows_ &&
                      m.cols_ == first.cols_,
                  "[kernels] per-head matrices of one call differ: {} {} x {} and {} {} x {}", type_name(first.type_),
                  first.rows_, first.cols_, type_name(m.type_), m.rows_, m.cols_);
    m.fill(&pool);
  }
  const auto heads = static_cast<int64_t>(w.size());
  const int64_t cols = first.cols_;
  // Each head's input quantized once, token by token: [token][head][activation row].
  const Activations kind = activations_for(first.type_);
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  size_t token_bytes = sizeof(float) * static_cast<size_t>(x_stride);
  size_t head_bytes = sizeof(float) * static_cast<size_t>(x_head_stride);
  if (kind != Activations::kF32) {
    head_bytes = activation_row_bytes(kind, cols);
    token_bytes = head_bytes * static_cast<size_t>(heads);
    if (scratch.activations.size() < token_bytes * static_cast<size_t>(n_tokens))
      scratch.activations.resize(token_bytes * static_cast<size_t>(n_tokens));
    uint8_t* out = scratch.activations.data();
    pool.parallel_for(n_tokens, [&](int64_t t, int) {
      for (int64_t h = 0; h < heads; ++h)
        quantize_activations(kind, x + t * x_stride + h * x_head_stride, cols,
                             out + static_cast<size_t>(t) * token_bytes + static_cast<size_t>(h) * head_bytes);
    });
    act = out;
  }
  const TileFn tile_fn = tile_for(first.type_, first.layout_, n_tokens);
  const int64_t units = (first.rows_ + kRowUnit - 1) / kRowUnit;
  split_over_pool(heads * units, n_tokens, pool, [&](int64_t u0, int64_t u1, int64_t t0, int64_t t1) {
    for (int64_t h = u0 / units; h * units < u1; ++h) {
      const MatmulPart part = MatmulPart::of(tile_fn, w[static_cast<size_t>(h)], act + static_cast<size_t>(h) * head_bytes,
                                             token_bytes, y + h * y_head_stride, y_stride);
      part.run(std::max(u0, h * units) - h * units, std::min(u1, (h + 1) * units) - h * units, t0, t1);
    }
  });
}

}  // namespace orchard::core

// One call of an arm64 kernel on a repacked matrix, for bench/arm64_kernel_insns.sh to count
// the instructions it executes under qemu (qemu-user measures no time; instruction counts
// are what it can tell about the kernels' cost). Not built by CMake.
//   arm64_kernel_insns QUANT MODE N SDOT   QUANT: q4_0 q8_0 q4_k q6_k, 32 x 1024; MODE 0: the
//     one-token kernel once per token, 1: the set's own kernel for N tokens, 2: its small-batch kernel
//   arm64_kernel_insns FLOAT LAYOUT N      FLOAT: f32 f16 bf16, 64 x 2048; LAYOUT 0: rows, 1: groups
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/kernels/arm/arm_sets.h"
#include "core/kernels/kernel_set.h"
#include "core/quant.h"

using namespace orchard::core;
using namespace orchard::core::kernels;

namespace {

struct Kind {
  TensorType type;
  Layout layout;
  TileFn KernelSet::*rows_fn;
  TileFn KernelSet::*group_fn;
  TileFn SmallBatchSet::*small_fn;
};

Kind kind_of(const std::string& name) {
  if (name == "q4_0") return {TensorType::Q4_0, kQ4_0x16, &KernelSet::q4_0, &KernelSet::q4_0x16, &SmallBatchSet::q4_0x16};
  if (name == "q8_0") return {TensorType::Q8_0, kQ8_0x16, &KernelSet::q8_0, &KernelSet::q8_0x16, &SmallBatchSet::q8_0x16};
  if (name == "q4_k") return {TensorType::Q4_K, kQ4_Kx16, &KernelSet::q4_k, &KernelSet::q4_kx16, &SmallBatchSet::q4_kx16};
  if (name == "q6_k") return {TensorType::Q6_K, kQ6_Kx16, &KernelSet::q6_k, &KernelSet::q6_kx16, &SmallBatchSet::q6_kx16};
  if (name == "f32") return {TensorType::F32, kF32x16, &KernelSet::f32, &KernelSet::f32x16, nullptr};
  if (name == "f16") return {TensorType::F16, kF16x16, &KernelSet::f16, &KernelSet::f16x16, nullptr};
  if (name == "bf16") return {TensorType::BF16, kBF16x16, &KernelSet::bf16, &KernelSet::bf16x16, nullptr};
  std::fprintf(stderr, "unknown type %s\n", name.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s TYPE MODE N [SDOT]\n", argv[0]);
    return 2;
  }
  const Kind kind = kind_of(argv[1]);
  const int mode = std::atoi(argv[2]);
  const int n = std::atoi(argv[3]);
  const bool sdot = argc < 5 || std::atoi(argv[4]) != 0;
  const KernelSet& set = sdot ? neon_dotprod_kernels() : neon_kernels();
  const SmallBatchSet& small = sdot ? neon_dotprod_small_batch_kernels() : neon_small_batch_kernels();
  const bool is_float = kind.small_fn == nullptr;
  const int64_t rows = is_float ? 64 : 32, cols = is_float ? 2048 : 1024;
  const int64_t n_blocks = cols / type_traits(kind.type).block_elements;

  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> row(static_cast<size_t>(cols));
  const size_t row_size = row_bytes(kind.type, cols);
  std::vector<uint8_t> w(row_size * rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = normal(rng);
    quantize_row_reference(kind.type, row.data(), w.data() + r * row_size, cols);
  }
  std::vector<uint8_t> copy(interleaved_bytes(kind.layout, rows, n_blocks));
  repack(kind.layout, w.data(), rows, n_blocks, copy.data());
  const size_t group_size = interleaved_bytes(kind.layout, kInterleave, n_blocks);

  const bool k_quant = kind.type == TensorType::Q4_K || kind.type == TensorType::Q6_K;
  const size_t x_stride = is_float ? cols * sizeof(float) : k_quant ? n_blocks * sizeof(BlockQ8_K) : n_blocks * sizeof(ActQ8_0);
  std::vector<uint8_t> act(x_stride * n);
  for (int t = 0; t < n; ++t) {
    for (auto& v : row) v = normal(rng);
    uint8_t* out = act.data() + t * x_stride;
    if (is_float) std::memcpy(out, row.data(), x_stride);
    else if (k_quant) quantize_act_q8_k(row.data(), reinterpret_cast<BlockQ8_K*>(out), n_blocks);
    else quantize_act_q8_0(row.data(), reinterpret_cast<ActQ8_0*>(out), n_blocks);
  }
  std::vector<float> y(static_cast<size_t>(rows * n));
  Tile tile{copy.data(), group_size, rows, n_blocks, act.data(), x_stride, n, y.data(), rows};
  if (is_float) {
    if (mode == 0) {
      tile.w = w.data();
      tile.w_stride = row_size;
      (set.*kind.rows_fn)(tile);
    } else {
      (set.*kind.group_fn)(tile);
    }
  } else if (mode == 0) {
    for (int t = 0; t < n; ++t) {
      Tile one = tile;
      one.x = act.data() + t * x_stride;
      one.n_tokens = 1;
      one.y = y.data() + t * rows;
      (set.*kind.group_fn)(one);
    }
  } else {
    (mode == 1 ? set.*kind.group_fn : small.*kind.small_fn)(tile);
  }
  double sum = 0;
  for (float v : y) sum += v;
  std::printf("%g\n", sum);
}

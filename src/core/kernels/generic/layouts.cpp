#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/kernels/kernel_set.h"

namespace orchard::core::kernels {
namespace {

// Bytes of one value of the float layouts; 0 for the block ones.
size_t float_bytes(Layout layout) {
  switch (layout) {
    case kF32x16: return sizeof(float);
    case kF16x16: return sizeof(Half);
    case kBF16x16: return sizeof(BHalf);
    default: return 0;
  }
}

// Bytes of one block column (one block of each of the 16 rows) and of the GGUF block.
size_t column_bytes(Layout layout) {
  if (size_t value = float_bytes(layout)) return kInterleave * value;
  switch (layout) {
    case kQ4_0x16: return kInterleave * sizeof(BlockQ4_0);
    case kQ8_0x16: return kInterleave * sizeof(BlockQ8_0);
    case kQ4_Kx16: return kQ4_KColumn;
    case kQ5_Kx16: return kQ5_KColumn;
    case kIQ4_XSx16: return kIQ4_XSColumn;
    case kQ3_Kx16: return kQ3_KColumn;
    case kQ2_Kx16: return kQ2_KColumn;
    case kQ6_Kx16: return kQ6_KColumn;
    default: break;
  }
  ORCHARD_CHECK(false, "[kernels] layout {} is not interleaved", static_cast<int>(layout));
  return 0;
}

size_t block_bytes(Layout layout) {
  if (size_t value = float_bytes(layout)) return value;
  switch (layout) {
    case kQ4_0x16: return sizeof(BlockQ4_0);
    case kQ8_0x16: return sizeof(BlockQ8_0);
    case kQ4_Kx16: return sizeof(BlockQ4_K);
    case kQ5_Kx16: return sizeof(BlockQ5_K);
    case kIQ4_XSx16: return sizeof(BlockIQ4_XS);
    case kQ3_Kx16: return sizeof(BlockQ3_K);
    case kQ2_Kx16: return sizeof(BlockQ2_K);
    case kQ6_Kx16: return sizeof(BlockQ6_K);
    default: break;
  }
  return 0;
}

// Moves `n_words` 4-byte words of one row between the GGUF block (`row`) and the column's
// [word][16 rows][4] array (`lanes`), XORing each byte with `bias`. Both directions, so repack
// and extract are inverses by construction.
void copy_words(uint8_t* row, uint8_t* lanes, size_t n_words, int64_t lane, uint8_t bias, bool to_column) {
  for (size_t k = 0; k < n_words; ++k)
    for (size_t i = 0; i < 4; ++i) {
      uint8_t& interleaved = lanes[(k * kInterleave + static_cast<size_t>(lane)) * 4 + i];
      if (to_column) interleaved = row[4 * k + i] ^ bias;
      else row[4 * k + i] = interleaved ^ bias;
    }
}

// Row `lane`'s half in a column's [16] array at `offset`, moved either way.
void move_half(Half& value, uint8_t* column, size_t offset, size_t lane, bool to_column) {
  uint8_t* slot = column + offset + lane * sizeof(Half);
  if (to_column) std::memcpy(slot, &value, sizeof(Half));
  else std::memcpy(&value, slot, sizeof(Half));
}

// Sub-block j's byte of row `lane` in a column's [pair][16 rows][2] array at `offset` (one
// vpmovzxbw/vpmovsxbw gives a row's pair of sub-blocks in each int32 lane).
uint8_t& pair_slot(uint8_t* column, size_t offset, size_t lane, size_t j) {
  return column[offset + (j / 2 * kInterleave + lane) * 2 + j % 2];
}

// Q4_0 / Q8_0: d[16] halves, then the quants; Q8_0's stored plus 128 so VNNI reads them unsigned.
void move_small_block(Layout layout, uint8_t* block, uint8_t* column, int64_t lane, bool to_column) {
  uint8_t* d = column + lane * sizeof(Half);
  if (to_column) std::memcpy(d, block, sizeof(Half));
  else std::memcpy(block, d, sizeof(Half));
  const size_t quant_words = (block_bytes(layout) - sizeof(Half)) / 4;
  copy_words(block + sizeof(Half), column + kInterleave * sizeof(Half), quant_words, lane,
             layout == kQ8_0x16 ? 0x80 : 0, to_column);
}

// Q4_K, and Q5_K's low 4 bits (its d, dmin, scales and qs mean what Q4_K's do).
template <class Block>
void move_q4_k(Block& block, uint8_t* column, int64_t lane, bool to_column) {
  const auto l = static_cast<size_t>(lane);
  move_half(block.d, column, 0, l, to_column);
  move_half(block.dmin, column, kQ4_KDmin, l, to_column);
  uint8_t sc[8], mn[8];
  if (to_column) unpack_q4_k_scales(block.scales, sc, mn);
  for (size_t j = 0; j < 8; ++j) {
    uint8_t& scale = pair_slot(column, kQ4_KScales, l, j);
    uint8_t& min = pair_slot(column, kQ4_KMins, l, j);
    if (to_column) {
      scale = sc[j];
      min = mn[j];
    } else {
      sc[j] = scale;
      mn[j] = min;
    }
  }
  if (!to_column) pack_q4_k_scales(sc, mn, block.scales);
  copy_words(block.qs, column + kQ4_KQuants, sizeof block.qs / 4, lane, 0, to_column);
}

void move_q5_k(BlockQ5_K& block, uint8_t* column, int64_t lane, bool to_column) {
  move_q4_k(block, column, lane, to_column);
  copy_words(block.qh, column + kQ5_KHigh, sizeof block.qh / 4, lane, 0, to_column);
}

void move_iq4_xs(BlockIQ4_XS& block, uint8_t* column, int64_t lane, bool to_column) {
  const auto l = static_cast<size_t>(lane);
  move_half(block.d, column, 0, l, to_column);
  if (!to_column) {
    block.scales_h = 0;
    std::memset(block.scales_l, 0, sizeof block.scales_l);
  }
  for (size_t j = 0; j < 8; ++j) {
    auto& s = reinterpret_cast<int8_t&>(pair_slot(column, kIQ4_XSScales, l, j));
    if (to_column) s = static_cast<int8_t>(iq4_xs_scale(block, static_cast<int>(j)));
    else set_iq4_xs_scale(block, static_cast<int>(j), s);
  }
  copy_words(block.qs, column + kIQ4_XSQuants, sizeof block.qs / 4, lane, 0, to_column);
}

void move_q3_k(BlockQ3_K& block, uint8_t* column, int64_t lane, bool to_column) {
  const auto l = static_cast<size_t>(lane);
  move_half(block.d, column, 0, l, to_column);
  if (!to_column) std::memset(block.scales, 0, sizeof block.scales);
  for (size_t j = 0; j < 16; ++j) {
    auto& s = reinterpret_cast<int8_t&>(pair_slot(column, kQ3_KScales, l, j));
    if (to_column) s = static_cast<int8_t>(q3_k_scale(block, static_cast<int>(j)));
    else set_q3_k_scale(block, static_cast<int>(j), s);
  }
  copy_words(block.qs, column + kQ3_KQuants, sizeof block.qs / 4, lane, 0, to_column);
  copy_words(block.hmask, column + kQ3_KHigh, sizeof block.hmask / 4, lane, 0, to_column);
}

void move_q2_k(BlockQ2_K& block, uint8_t* column, int64_t lane, bool to_column) {
  const auto l = static_cast<size_t>(lane);
  move_half(block.d, column, 0, l, to_column);
  move_half(block.dmin, column, kQ2_KDmin, l, to_column);
  for (size_t j = 0; j < 16; ++j) {
    uint8_t& s = pair_slot(column, kQ2_KScales, l, j);
    if (to_column) s = block.scales[j];
    else block.scales[j] = s;
  }
  copy_words(block.qs, column + kQ2_KQuants, sizeof block.qs / 4, lane, 0, to_column);
}

void move_q6_k(BlockQ6_K& block, uint8_t* column, int64_t lane, bool to_column) {
  const auto l = static_cast<size_t>(lane);
  float* d = reinterpret_cast<float*>(column) + l;  // a half widens to float exactly, and back
  for (size_t j = 0; j < 16; ++j) {
    auto& s = reinterpret_cast<int8_t&>(pair_slot(column, kQ6_KScales, l, j));
    if (to_column) s = block.scales[j];
    else block.scales[j] = s;
  }
  if (to_column) *d = half_to_float(block.d);
  else block.d = float_to_half(*d);
  copy_words(block.ql, column + kQ6_KLow, sizeof block.ql / 4, lane, 0, to_column);
  copy_words(block.qh, column + kQ6_KHigh, sizeof block.qh / 4, lane, 0, to_column);
}

void move_block(Layout layout, void* block, uint8_t* column, int64_t lane, bool to_column) {
  if (size_t value = float_bytes(layout)) {
    uint8_t* slot = column + static_cast<size_t>(lane) * value;
    if (to_column) std::memcpy(slot, block, value);
    else std::memcpy(block, slot, value);
    return;
  }
  switch (layout) {
    case kQ4_Kx16: move_q4_k(*static_cast<BlockQ4_K*>(block), column, lane, to_column); return;
    case kQ5_Kx16: move_q5_k(*static_cast<BlockQ5_K*>(block), column, lane, to_column); return;
    case kIQ4_XSx16: move_iq4_xs(*static_cast<BlockIQ4_XS*>(block), column, lane, to_column); return;
    case kQ3_Kx16: move_q3_k(*static_cast<BlockQ3_K*>(block), column, lane, to_column); return;
    case kQ2_Kx16: move_q2_k(*static_cast<BlockQ2_K*>(block), column, lane, to_column); return;
    case kQ6_Kx16: move_q6_k(*static_cast<BlockQ6_K*>(block), column, lane, to_column); return;
    default: move_small_block(layout, static_cast<uint8_t*>(block), column, lane, to_column); return;
  }
}

// Float layouts transpose each group's [16 rows][cols] to [cols][16]. Writing the copy in order
// (reading 16 rows side by side) ran at 8–9 GB/s; the zero padding rows exist only in the last
// group, so the copy is not cleared first (clearing fresh pages cost more than the transpose).
template <class Value>
void transpose_groups(const Value* in, int64_t rows, int64_t cols, Value* out, int64_t g0, int64_t g1) {
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t r0 = g * kInterleave, lanes = std::min<int64_t>(kInterleave, rows - r0);
    Value* group = out + r0 * cols;  // a group holds kInterleave × cols values
    if (lanes < kInterleave) std::memset(group, 0, sizeof(Value) * static_cast<size_t>(kInterleave * cols));
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t lane = 0; lane < lanes; ++lane) group[c * kInterleave + lane] = in[(r0 + lane) * cols + c];
  }
}

}  // namespace

void repack_groups(Layout layout, const void* src, int64_t rows, int64_t n_blocks, void* dst, int64_t g0, int64_t g1) {
  switch (float_bytes(layout)) {  // floats move as opaque values of their width
    case 4: transpose_groups(static_cast<const uint32_t*>(src), rows, n_blocks, static_cast<uint32_t*>(dst), g0, g1); return;
    case 2: transpose_groups(static_cast<const uint16_t*>(src), rows, n_blocks, static_cast<uint16_t*>(dst), g0, g1); return;
    default: break;
  }
  const size_t in_bytes = block_bytes(layout), out_bytes = column_bytes(layout);
  auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  const size_t group_bytes = static_cast<size_t>(n_blocks) * out_bytes;
  std::memset(out + static_cast<size_t>(g0) * group_bytes, 0, static_cast<size_t>(g1 - g0) * group_bytes);  // padding rows: d = 0
  // A copy of each block, so move_block can take it by mutable reference in both directions.
  alignas(BlockQ8_K) uint8_t block[sizeof(BlockQ6_K)];
  for (int64_t r = g0 * kInterleave; r < std::min(rows, g1 * kInterleave); ++r) {
    int64_t group = r / kInterleave, lane = r % kInterleave;
    for (int64_t b = 0; b < n_blocks; ++b) {
      std::memcpy(block, in + static_cast<size_t>(r * n_blocks + b) * in_bytes, in_bytes);
      move_block(layout, block, out + static_cast<size_t>(group * n_blocks + b) * out_bytes, lane, true);
    }
  }
}

size_t interleaved_bytes(Layout layout, int64_t rows, int64_t n_blocks) {
  int64_t groups = (rows + kInterleave - 1) / kInterleave;
  return static_cast<size_t>(groups * n_blocks) * column_bytes(layout);
}

// Repacking touches every byte of a model at load, mostly in page faults on the copy and the
// mapped file (a 2 GB F16 model took 2 s more to load on one core), and groups are independent:
// matrices above a few MiB are split over the cores.
void repack(Layout layout, const void* src, int64_t rows, int64_t n_blocks, void* dst) {
  constexpr size_t kBytesPerWorker = size_t{8} << 20;
  const int64_t groups = (rows + kInterleave - 1) / kInterleave;
  const size_t bytes = interleaved_bytes(layout, rows, n_blocks);
  const int64_t workers = std::min<int64_t>({static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())),
                                             static_cast<int64_t>(bytes / kBytesPerWorker) + 1, groups});
  if (workers <= 1) {
    repack_groups(layout, src, rows, n_blocks, dst, 0, groups);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(workers - 1));
  for (int64_t i = 1; i < workers; ++i)
    threads.emplace_back(repack_groups, layout, src, rows, n_blocks, dst, groups * i / workers, groups * (i + 1) / workers);
  repack_groups(layout, src, rows, n_blocks, dst, 0, groups / workers);
  for (auto& t : threads) t.join();
}

void extract_block(Layout layout, const void* data, int64_t n_blocks, int64_t r, int64_t b, void* block) {
  int64_t group = r / kInterleave, lane = r % kInterleave;
  // move_block only reads the column when extracting.
  auto* column = const_cast<uint8_t*>(static_cast<const uint8_t*>(data)) +
                 static_cast<size_t>(group * n_blocks + b) * column_bytes(layout);
  move_block(layout, block, column, lane, false);
}

}  // namespace orchard::core::kernels

#include <cstring>

#include "core/error.h"
#include "core/kernels/kernel_set.h"

namespace orchard::core::kernels {
namespace {

// Quant bytes per row per block: the interleaved copies keep the quants of one row and block
// together in 4-byte pieces; Q8_0's are stored plus 128 so the VNNI kernels read them unsigned.
struct Geometry {
  size_t quant_bytes;
  uint8_t bias;
};

Geometry geometry(Layout layout) {
  switch (layout) {
    case kQ4_0x16: return {16, 0};
    case kQ8_0x16: return {32, 0x80};
    case kRows: break;
  }
  ORCHARD_CHECK(false, "[kernels] layout {} is not interleaved", static_cast<int>(layout));
  return {};
}

size_t column_bytes(const Geometry& g) { return kInterleave * (sizeof(Half) + g.quant_bytes); }

}  // namespace

size_t interleaved_bytes(Layout layout, int64_t rows, int64_t n_blocks) {
  int64_t groups = (rows + kInterleave - 1) / kInterleave;
  return static_cast<size_t>(groups * n_blocks) * column_bytes(geometry(layout));
}

void repack(Layout layout, const void* src, int64_t rows, int64_t n_blocks, void* dst) {
  Geometry g = geometry(layout);
  const size_t block_bytes = sizeof(Half) + g.quant_bytes;  // the GGUF block: d then quants
  auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  std::memset(out, 0, interleaved_bytes(layout, rows, n_blocks));  // padding rows: d = 0
  for (int64_t r = 0; r < rows; ++r) {
    int64_t group = r / kInterleave, lane = r % kInterleave;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const uint8_t* block = in + static_cast<size_t>(r * n_blocks + b) * block_bytes;
      uint8_t* column = out + static_cast<size_t>(group * n_blocks + b) * column_bytes(g);
      std::memcpy(column + lane * sizeof(Half), block, sizeof(Half));
      uint8_t* quants = column + kInterleave * sizeof(Half);
      for (size_t k = 0; k < g.quant_bytes / 4; ++k)
        for (size_t i = 0; i < 4; ++i)
          quants[(k * kInterleave + static_cast<size_t>(lane)) * 4 + i] = block[sizeof(Half) + 4 * k + i] ^ g.bias;
    }
  }
}

void extract_block(Layout layout, const void* data, int64_t n_blocks, int64_t r, int64_t b, void* block) {
  Geometry g = geometry(layout);
  int64_t group = r / kInterleave, lane = r % kInterleave;
  auto* column = static_cast<const uint8_t*>(data) + static_cast<size_t>(group * n_blocks + b) * column_bytes(g);
  auto* out = static_cast<uint8_t*>(block);
  std::memcpy(out, column + lane * sizeof(Half), sizeof(Half));
  const uint8_t* quants = column + kInterleave * sizeof(Half);
  for (size_t k = 0; k < g.quant_bytes / 4; ++k)
    for (size_t i = 0; i < 4; ++i)
      out[sizeof(Half) + 4 * k + i] = quants[(k * kInterleave + static_cast<size_t>(lane)) * 4 + i] ^ g.bias;
}

}  // namespace orchard::core::kernels

#pragma once
// Shared loop structure of the row-at-a-time kernels: every ISA file provides a kernel
// `K::run<T>(tile, row, token)` computing one row against T consecutive tokens (T is a
// compile-time count so the per-token accumulators live in registers), and this walks a tile
// with the largest token counts first. Rows are the outer loop: a row's blocks are read once
// from memory and then served from L1 to every token of the tile.
#include <cstdint>

#include "core/kernels/kernel_set.h"

namespace orchard::core::kernels {

template <class K, int kMaxTokens>
void row_tile(const Tile& tile) {
  static_assert(kMaxTokens == 8 || kMaxTokens == 4);
  for (int64_t r = 0; r < tile.n_rows; ++r) {
    int64_t t = 0;
    if constexpr (kMaxTokens == 8)
      for (; t + 8 <= tile.n_tokens; t += 8) K::template run<8>(tile, r, t);
    for (; t + 4 <= tile.n_tokens; t += 4) K::template run<4>(tile, r, t);
    if (t + 2 <= tile.n_tokens) {
      K::template run<2>(tile, r, t);
      t += 2;
    }
    if (t < tile.n_tokens) K::template run<1>(tile, r, t);
  }
}

}  // namespace orchard::core::kernels

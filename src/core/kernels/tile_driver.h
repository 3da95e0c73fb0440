#pragma once
// Shared loop structure of the row-at-a-time kernels: every ISA file provides a kernel
// `K::run<T>(tile, row, token)` computing one row against T consecutive tokens (T is a
// compile-time count so the per-token accumulators live in registers), and this walks a tile
// with the largest token counts first. Rows are the outer loop: a row's blocks are read once
// from memory and then served from L1 to every token of the tile.
#include <cstdint>

#include "core/kernels/kernel_set.h"

namespace orchard::core::kernels {

// Decode on the GGUF rows (the types without an interleaved copy, and small or --no-repack
// matrices) asks for the lines 1 KiB ahead (kPrefetchAhead below). Runs alternated,
// bench_kernels gemv 5632 × 2048, AVX2, 2 threads, on a host at load 13: IQ4_XS 4.9–6.5 →
// 3.9–5.1 ms, Q5_K 5.6–6.5 → 4.6–5.2 ms (every pair faster).
constexpr size_t kRowPrefetch = 1024;

// kPrefetchAhead > 0: a one-token tile (a decode step, which streams the weights from memory
// once) asks for the lines of each row's length kPrefetchAhead bytes past the row's start before
// computing the row, so more cache misses are in flight than the out-of-order window and the
// hardware prefetcher keep (a prefetch never faults, so past the tile's end is harmless).
template <class K, int kMaxTokens, size_t kPrefetchAhead = 0>
void row_tile(const Tile& tile) {
  static_assert(kMaxTokens == 8 || kMaxTokens == 4);
  for (int64_t r = 0; r < tile.n_rows; ++r) {
    if constexpr (kPrefetchAhead > 0)
      if (tile.n_tokens == 1) {
        const uintptr_t ahead = reinterpret_cast<uintptr_t>(tile.w) + static_cast<size_t>(r) * tile.w_stride + kPrefetchAhead;
        for (size_t line = 0; line < tile.w_stride; line += 64) __builtin_prefetch(reinterpret_cast<const void*>(ahead + line));
      }
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

// Loop structure of the kernels on 16-row-group float copies: `K::run<G, T>(tile, group, token)`
// computes G consecutive groups against T consecutive tokens (compile-time counts: G·T·(vectors
// per group) accumulators in registers). Groups are the outer loop, in panels of kGroups, so a
// panel is read from memory once and served from cache to every run of kTokens tokens.
template <class K, int kGroups, int kTokens>
struct GroupTokenTiles {
  template <int G, int T = kTokens>
  static void tokens(const Tile& tile, int64_t group, int64_t t0) {
    if constexpr (T == kTokens) {
      for (; t0 + T <= tile.n_tokens; t0 += T) K::template run<G, T>(tile, group, t0);
      if (t0 < tile.n_tokens) tokens<G, T - 1>(tile, group, t0);
    } else if constexpr (T > 0) {
      if (tile.n_tokens - t0 == T) K::template run<G, T>(tile, group, t0);
      else tokens<G, T - 1>(tile, group, t0);
    }
  }

  template <int G = kGroups>
  static void groups(const Tile& tile, int64_t group, int64_t n_groups) {
    if constexpr (G == kGroups) {
      for (; group + G <= n_groups; group += G) tokens<G>(tile, group, 0);
      if (group < n_groups) groups<G - 1>(tile, group, n_groups);
    } else if constexpr (G > 0) {
      if (n_groups - group == G) tokens<G>(tile, group, 0);
      else groups<G - 1>(tile, group, n_groups);
    }
  }

  static void tile(const Tile& tile) { groups(tile, 0, (tile.n_rows + kInterleave - 1) / kInterleave); }
};

}  // namespace orchard::core::kernels

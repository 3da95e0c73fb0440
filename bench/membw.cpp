#include "membw.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "core/kernels.h"

namespace orchard::bench {

double measure_read_bandwidth(core::ThreadPool& pool, size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(uint64_t);
  // Allocated as the model's repacked weights are (2 MiB-aligned, huge pages where the system
  // gives them on request), so the probe reads memory the way a decode step does.
  core::CopyArena arena(bytes);
  std::shared_ptr<void> block = arena.allocate(n * sizeof(uint64_t));
  if (!block) throw std::bad_alloc();
  auto* data = static_cast<uint64_t*>(block.get());
  for (size_t i = 0; i < n; ++i) data[i] = i;  // touch every page before timing
  // Each thread streams its own half (or share) in order, in 1 MiB grains, taking grains from
  // the back of another's share once done: the way decode matmuls split their rows. Passes
  // alternate two ways of reading a grain: one sequential stream, and four streams (its
  // quarters) side by side with a software prefetch ahead, as the repacked kernels read their
  // interleaved rows. One stream per core leaves this host's memory idle between the hardware
  // prefetcher's requests (a decode step read up to a quarter more than that pattern), so the
  // ceiling is the better of the two.
  constexpr size_t kGrain = (size_t{1} << 20) / sizeof(uint64_t);
  constexpr size_t kStreams = 4;
  constexpr size_t kQuarter = kGrain / kStreams;
  constexpr size_t kPrefetchAhead = 512 / sizeof(uint64_t);
  const auto grains = static_cast<int64_t>((n + kGrain - 1) / kGrain);
  std::vector<uint64_t> sums(static_cast<size_t>(grains));
  double best = 0;
  for (int r = 0; r < repeats * 2; ++r) {
    const bool interleaved = r % 2 == 1;
    auto start = std::chrono::steady_clock::now();
    pool.parallel_shares(grains, 1, [&](int64_t grain, int64_t, int) {
      const uint64_t* p = data + static_cast<size_t>(grain) * kGrain;
      const uint64_t* end = data + std::min(n, static_cast<size_t>(grain + 1) * kGrain);
      // Four independent integer sums: the compiler vectorizes them and the adds never limit
      // the loads.
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      if (interleaved && end - p == static_cast<std::ptrdiff_t>(kGrain)) {
        for (size_t i = 0; i < kQuarter; i += 8) {
          for (size_t q = 0; q < kStreams; ++q) {
            const uint64_t* line = p + q * kQuarter + i;
            __builtin_prefetch(line + kPrefetchAhead);
            s0 += line[0] + line[4];
            s1 += line[1] + line[5];
            s2 += line[2] + line[6];
            s3 += line[3] + line[7];
          }
        }
        p = end;
      }
      for (; p + 4 <= end; p += 4) {
        s0 += p[0];
        s1 += p[1];
        s2 += p[2];
        s3 += p[3];
      }
      for (; p < end; ++p) s0 += *p;
      sums[static_cast<size_t>(grain)] = s0 + s1 + s2 + s3;
    });
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / seconds);
  }
  // Keep the sums observable so the loop is not optimized away.
  volatile uint64_t sink = 0;
  for (uint64_t s : sums) sink = sink + s;
  return best;
}

}  // namespace orchard::bench

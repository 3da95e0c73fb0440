#include "membw.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace orchard::bench {

double measure_read_bandwidth(core::ThreadPool& pool, size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> data(new uint64_t[n]);
  for (size_t i = 0; i < n; ++i) data[i] = i;  // touch every page before timing
  // Many tasks per thread: the threads share the buffer evenly even if one is descheduled.
  const int64_t tasks = 64 * pool.size();
  std::vector<uint64_t> sums(static_cast<size_t>(tasks));
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    pool.parallel_for(tasks, [&](int64_t task, int) {
      const uint64_t* p = data.get() + n * static_cast<size_t>(task) / static_cast<size_t>(tasks);
      const uint64_t* end = data.get() + n * static_cast<size_t>(task + 1) / static_cast<size_t>(tasks);
      // Four independent integer sums: the compiler vectorizes them and the adds never limit
      // the loads.
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (; p + 4 <= end; p += 4) {
        s0 += p[0];
        s1 += p[1];
        s2 += p[2];
        s3 += p[3];
      }
      for (; p < end; ++p) s0 += *p;
      sums[static_cast<size_t>(task)] = s0 + s1 + s2 + s3;
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

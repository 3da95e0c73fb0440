// Prints the read bandwidth on 1 and 2 threads (and all cores), or on the thread counts given
// as arguments: the ceiling for decode speed.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <thread>

#include "membw.h"

int main(int argc, char** argv) {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::set<unsigned> counts;
  for (int i = 1; i < argc; ++i) {
    const long threads = std::strtol(argv[i], nullptr, 10);
    if (threads < 1 || threads > 4096) {
      std::fprintf(stderr, "membw: thread count '%s' is not a number from 1 to 4096\n", argv[i]);
      return 2;
    }
    counts.insert(static_cast<unsigned>(threads));
  }
  if (counts.empty()) counts = {1u, std::min(2u, cores), cores};
  for (unsigned threads : counts) {
    orchard::core::ThreadPool pool(static_cast<int>(threads));
    double bw = orchard::bench::measure_read_bandwidth(pool);
    std::printf("read bandwidth, %u thread%s: %.1f GB/s\n", threads, threads == 1 ? "" : "s", bw / 1e9);
  }
  return 0;
}

// Prints the read bandwidth on 1 and 2 threads (and all cores): the ceiling for decode speed.
#include <algorithm>
#include <cstdio>
#include <set>
#include <thread>

#include "membw.h"

int main() {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned threads : std::set<unsigned>{1u, std::min(2u, cores), cores}) {
    orchard::core::ThreadPool pool(static_cast<int>(threads));
    double bw = orchard::bench::measure_read_bandwidth(pool);
    std::printf("read bandwidth, %u thread%s: %.1f GB/s\n", threads, threads == 1 ? "" : "s", bw / 1e9);
  }
  return 0;
}

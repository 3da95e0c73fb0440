#pragma once
// Read bandwidth of this machine: the ceiling of a decode step, which streams every weight once.
#include <cstddef>

#include "core/thread_pool.h"

namespace orchard::bench {

// Bytes per second summing a buffer of `bytes` (default 1 GiB) split over the pool's threads;
// the best of `repeats` passes of each of two read patterns (one stream, four streams with
// prefetch). The buffer is allocated and touched once per call.
double measure_read_bandwidth(core::ThreadPool& pool, size_t bytes = size_t{1} << 30, int repeats = 5);

}  // namespace orchard::bench

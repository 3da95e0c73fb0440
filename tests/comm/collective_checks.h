#pragma once
// The one test body run over every backend (ring, shm, mpi) and world size: each collective x
// dtype x size, against the sum computed directly from every rank's (deterministic) input.
// Runs inside a rank process; throws std::runtime_error describing the first mismatch.
#include <cstddef>
#include <vector>

#include "comm/group.h"

namespace orchard::comm::testing {

// Element counts: 1, 3, odd primes, 4K, about 1 MiB of f32 (ring path), and (world 2, f32 only)
// 64 MiB.
std::vector<size_t> test_counts(int world, DType dtype, bool with_64mib);

// Runs every collective on every dtype and count above.
void check_all_collectives(Group& group, bool with_64mib);

}  // namespace orchard::comm::testing

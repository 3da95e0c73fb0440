#pragma once
// How much memory this machine can still give a program, one definition for every module that
// sizes work by it (the cluster's machine facts, the pipeline's memory-weighted stages).
#include <cstdint>

namespace orchard::core {

// Bytes a new allocation could take without swapping: Linux's MemAvailable (free memory plus
// the page cache and other reclaimable memory, which MemFree leaves out, so a machine that has
// just read a model file is not counted as full), macOS's free + inactive + purgeable pages.
// 0 when the system does not say.
uint64_t available_memory_bytes();

}  // namespace orchard::core

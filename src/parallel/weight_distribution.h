#pragma once
// Lets the model file live on one machine only: a rank that lacks it receives, from rank 0 over
// the group, the file's header and exactly the bytes of its own shard, written into a sparse
// local file (unsent regions are holes: no disk, never read).
//
// The local file is kept in a cache keyed by the model's digest (`cache_dir/<digest>/model.gguf`,
// with `ranges`: the byte ranges already received, one "offset size" line each), so a later run
// of the same model receives only the bytes its shard needs and the cache lacks: none when the
// split is the same. The digest is cheap on any size of file: SHA-256 over the file's size, its
// header (metadata and tensor table) and 64 blocks of 64 KiB spread evenly over the tensor data.
// A file rewritten in place with the same header and size whose changes miss every sampled
// block would keep its digest; a converted or re-quantized model changes its header or size.
#include <cstdint>
#include <functional>
#include <string>

#include "comm/group.h"
#include "parallel/layout.h"

namespace orchard::parallel {

// Collective: every rank calls it with its own `path`. Returns the path this rank should open:
// `path` itself where the file exists, else a sparse copy under `cache_dir` holding this rank's
// shard. Throws Error when rank 0 has no file either. on_progress(bytes done, bytes in all)
// reports a receiving rank's transfer.
// on_note gets one line for the user from a rank that used the cache: what it received, or that
// its shard was all there.
std::string ensure_model_file(comm::Group& group, const std::string& path, const Layout& layout,
                              const std::string& cache_dir,
                              const std::function<void(size_t, size_t)>& on_progress = {},
                              const std::function<void(const std::string&)>& on_note = {});

// The cache key of a model file (see above): 32 hex digits.
std::string model_digest(const uint8_t* file, uint64_t file_size, uint64_t data_offset);

}  // namespace orchard::parallel

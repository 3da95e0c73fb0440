#pragma once
// Lets the model file live on one machine only: a rank that lacks it receives, from rank 0 over
// the group, the file's header and exactly the bytes of its own shard, written into a sparse
// local file (unsent regions are holes: no disk, never read).
#include <functional>
#include <string>

#include "comm/group.h"
#include "parallel/layout.h"

namespace orchard::parallel {

// Collective: every rank calls it with its own `path`. Returns the path this rank should open:
// `path` itself where the file exists, else a sparse copy under `cache_dir` holding this rank's
// shard. Throws Error when rank 0 has no file either. on_progress(bytes done, bytes in all)
// reports a receiving rank's transfer.
std::string ensure_model_file(comm::Group& group, const std::string& path, const Layout& layout,
                              const std::string& cache_dir,
                              const std::function<void(size_t, size_t)>& on_progress = {});

}  // namespace orchard::parallel

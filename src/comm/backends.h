#pragma once
// Entry points of the link-time-chosen backends (MLX's pattern): each exposes is_available() and
// init(); a backend built off links a stub whose init() throws.
#include <memory>

#include "comm/group.h"

namespace orchard::comm::mpi {
bool is_available();
std::shared_ptr<GroupImpl> init(const Config& config);
}  // namespace orchard::comm::mpi

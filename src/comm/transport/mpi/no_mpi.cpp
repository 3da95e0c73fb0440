// Linked when ORCHARD_WITH_MPI is off: the backend exists but says it is not built.
#include "comm/backends.h"

namespace orchard::comm::mpi {

bool is_available() { return false; }

std::shared_ptr<GroupImpl> init(const Config&) {
  throw Error(error_message("comm", "this build has no MPI backend (configure with -DORCHARD_WITH_MPI=ON)"));
}

}  // namespace orchard::comm::mpi

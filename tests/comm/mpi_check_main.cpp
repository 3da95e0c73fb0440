// The collective test body over the MPI backend; run by ctest through mpirun.
#include <cstdio>
#include <exception>

#include "collective_checks.h"

int main() {
  try {
    orchard::comm::Config config;
    config.backend = orchard::comm::Backend::Mpi;
    orchard::comm::Group group = orchard::comm::init(config);
    orchard::comm::testing::check_all_collectives(group, true);
    std::printf("rank %d of %d: all collectives match\n", group.rank(), group.size());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

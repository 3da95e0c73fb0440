// A private `orchard` with only the bench-comm subcommand, so that bench-comm can be built and
// run while the full binary depends on other modules' work in progress.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "apps/orchard/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"orchard (bench-comm only)"};
  app.require_subcommand(1);
  orchard::app::add_bench_comm_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}

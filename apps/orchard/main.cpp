#include <cstdio>
#include <exception>

#include "apps/orchard/cluster_launch.h"
#include "apps/orchard/commands.h"
#include "comm/launcher.h"
#include "core/error.h"
#include "core/kernels.h"
#include "orchard/config.h"

int main(int argc, char** argv) {
  orchard::app::remember_command_line(argc, argv);
  orchard::comm::exit_when_watched_pipe_closes();
  CLI::App app{"orchard: run large language models on one machine, a cluster, or a network"};
  app.require_subcommand(1);
  app.set_version_flag("--version", ORCHARD_VERSION);
  orchard::app::add_make_model_command(app);
  orchard::app::add_run_command(app);
  orchard::app::add_bench_command(app);
  orchard::app::add_tokenize_command(app);
  orchard::app::add_bench_comm_command(app);
  orchard::app::add_serve_command(app);
  orchard::app::add_chat_command(app);
  orchard::app::add_network_command(app);
  orchard::app::add_node_command(app);
  orchard::app::add_simulate_command(app);
  orchard::app::add_launch_command(app);
  orchard::app::add_agent_command(app);
  orchard::app::add_cluster_command(app);
  orchard::app::add_plan_command(app);
  orchard::app::add_doctor_command(app);
  try {
    // A kernel set named by ORCHARD_KERNELS that this CPU does not run is named here, before
    // any command starts threads that multiply.
    orchard::core::kernel_isa_name();
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const orchard::Error& e) {
    std::fprintf(stderr, "orchard: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "orchard: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}

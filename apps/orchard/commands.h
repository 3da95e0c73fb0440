#pragma once
// One function per subcommand; each adds its subcommand to the CLI and its handler. Thin: parse
// flags, call a library.
#include <CLI/CLI.hpp>

namespace orchard::app {

void add_make_model_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_bench_comm_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_network_command(CLI::App& app);
void add_node_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_launch_command(CLI::App& app);
void add_agent_command(CLI::App& app);
void add_cluster_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_doctor_command(CLI::App& app);

}  // namespace orchard::app

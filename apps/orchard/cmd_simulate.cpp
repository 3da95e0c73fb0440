#include <cstdio>
#include <string>

#include "apps/orchard/commands.h"
#include "core/error.h"
#include "network/catalog.h"
#include "network/simulate.h"

namespace orchard::app {
namespace {

// "10%" or "0.1" -> 0.1
double parse_fraction(const std::string& s) {
  try {
    if (!s.empty() && s.back() == '%') return std::stod(s.substr(0, s.size() - 1)) / 100;
    return std::stod(s);
  } catch (const std::exception&) {
    throw Error(error_message("simulate", "--churn '{}' is not a fraction (10% or 0.1)", s));
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<network::SimulationOptions>();
  auto churn = std::make_shared<std::string>("10%");
  auto catalog = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("simulate", "Run the network's placement and ledger on a synthetic population in virtual time");
  cmd->add_option("--nodes", o->nodes, "Machines")->capture_default_str();
  cmd->add_option("--pods", o->pods, "Pods of cabled machines (taken from --nodes)")->capture_default_str();
  cmd->add_option("--jobs-per-s", o->jobs_per_s, "Job arrivals per second")->capture_default_str();
  cmd->add_option("--churn", *churn, "Shared seats that leave per hour (10% or 0.1)")->capture_default_str();
  cmd->add_option("--hours", o->hours, "Virtual hours to run")->capture_default_str();
  cmd->add_option("--dedicated", o->dedicated_fraction, "Fraction of dedicated seats (x3 on Ultras)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed")->capture_default_str();
  cmd->add_option("--catalog", *catalog, "Hardware catalog JSON (default: the shipped one)");
  cmd->callback([o, churn, catalog] {
    o->churn = parse_fraction(*churn);
    auto hw = catalog->empty() ? network::HardwareCatalog::shipped() : network::HardwareCatalog::load(*catalog);
    auto report = network::simulate(*o, hw);
    std::fputs(report.to_text().c_str(), stdout);
    if (report.jobs_lost != 0 || report.ledger_sum != 0)
      throw Error(error_message("simulate", "{} jobs lost, ledger off by {}", report.jobs_lost, report.ledger_sum));
  });
}

}  // namespace orchard::app

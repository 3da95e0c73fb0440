#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "apps/orchard/commands.h"
#include "apps/orchard/signal_stopper.h"
#include "core/error.h"
#include "network/catalog.h"
#include "network/regions.h"
#include "network/simulate.h"
#include "network/world/world_routes.h"

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

struct WorldOptions {
  int port = -1;  // none
  std::string host = "127.0.0.1";
  double speed = 1;
};

struct Stopped {};  // SIGINT or SIGTERM while the run goes on

// The World page of a run: the simulation's machines and figures, served while it runs (virtual
// time paced to `speed` virtual seconds per second) and after it ends, until SIGINT or SIGTERM.
void simulate_with_world(network::SimulationOptions o, const network::HardwareCatalog& hw, const WorldOptions& w) {
  if (!(w.speed > 0)) throw Error(error_message("simulate", "--world-speed {} is not a positive number", w.speed));
  SignalStopper::block_signals();  // before any thread starts: every thread inherits the mask
  auto population = std::make_shared<network::world::Population>();
  o.world = population;
  for (const auto& r : nlohmann::json::parse(network::embedded_regions_json())) o.world_regions.push_back(r.at("name"));
  o.world_epoch_ms = network::world::unix_ms();

  std::mutex mu;
  nlohmann::json totals = {{"simulation", {{"virtual_s", 0}, {"speed", w.speed}, {"hours", o.hours}, {"finished", false},
                                           {"now_ms", o.world_epoch_ms}}}};
  std::deque<std::tuple<double, int64_t, int64_t>> window;  // (virtual s, jobs completed, tokens), last minute
  std::atomic<bool> stop{false};
  const auto wall0 = std::chrono::steady_clock::now();
  o.pace = [&](double virtual_s, const network::SimulationTick& t) {
    window.emplace_back(virtual_s, t.jobs_completed, t.tokens_generated);
    while (window.size() > 1 && std::get<0>(window.front()) < virtual_s - 60) window.pop_front();
    const auto& [v0, jobs0, tokens0] = window.front();
    const double span = std::max(1.0, virtual_s - v0);
    {
      std::lock_guard lock(mu);
      totals["tok_s"] = static_cast<double>(t.tokens_generated - tokens0) / span;
      totals["jobs_per_min"] = static_cast<double>(t.jobs_completed - jobs0) * 60 / span;
      totals["queue"] = t.queued;
      totals["credits_by_seat"] = t.credits_by_seat;
      totals["simulation"]["virtual_s"] = virtual_s;
      totals["simulation"]["now_ms"] = o.world_epoch_ms + static_cast<int64_t>(virtual_s * 1000);
      totals["simulation"]["running"] = t.running;
    }
    const auto due = wall0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(virtual_s / w.speed));
    while (std::chrono::steady_clock::now() < due) {
      if (stop) throw Stopped{};
      std::this_thread::sleep_until(std::min(due, std::chrono::steady_clock::now() + std::chrono::milliseconds(100)));
    }
    if (stop) throw Stopped{};
  };

  httplib::Server server;
  server.set_tcp_nodelay(true);
  auto sampler = network::world::mount_world_routes(server, population, [&] {
    std::lock_guard lock(mu);
    return totals;
  });
  const int port = w.port == 0 ? server.bind_to_any_port(w.host) : (server.bind_to_port(w.host, w.port) ? w.port : -1);
  if (port < 0) throw Error(error_message("simulate", "cannot listen on {}:{} for the World page", w.host, w.port));
  std::fprintf(stderr, "orchard simulate: World page on http://%s:%d/world (%g virtual seconds a second)\n", w.host.c_str(),
               port, w.speed);
  std::thread http([&] { server.listen_after_bind(); });
  SignalStopper stopper([&] {
    stop = true;
    server.stop();
  });
  try {
    auto report = network::simulate(o, hw);
    std::fputs(report.to_text().c_str(), stdout);
    std::fflush(stdout);
    {
      std::lock_guard lock(mu);
      totals["simulation"]["finished"] = true;
    }
    std::fprintf(stderr, "orchard simulate: the run is over; the World page stays up until SIGINT or SIGTERM\n");
    if (report.jobs_lost != 0 || report.ledger_sum != 0)
      std::fprintf(stderr, "orchard simulate: %lld jobs lost, ledger off by %lld\n", static_cast<long long>(report.jobs_lost),
                   static_cast<long long>(report.ledger_sum));
  } catch (const Stopped&) {
    std::fprintf(stderr, "orchard simulate: stopped\n");
  } catch (...) {
    server.stop();
    http.join();
    throw;
  }
  http.join();
  sampler.reset();
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
  cmd->add_option("--verify-fraction", o->verify_fraction, "Share of jobs spot-checked on a second machine")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--cheat-fraction", o->cheat_fraction, "Machines whose outputs fail every check")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--no-download-fraction", o->no_download_fraction,
                  "Machines that hand back a job whose model they lack")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--catalog", *catalog, "Hardware catalog JSON (default: the shipped one)");
  auto w = std::make_shared<WorldOptions>();
  cmd->add_option("--world-port", w->port, "Serve the run live on the World page at this port (0: any), in paced virtual time");
  cmd->add_option("--world-host", w->host, "Address of the World page")->capture_default_str();
  cmd->add_option("--world-speed", w->speed, "Virtual seconds per second on the World page")->capture_default_str();
  cmd->callback([o, churn, catalog, w] {
    o->churn = parse_fraction(*churn);
    auto hw = catalog->empty() ? network::HardwareCatalog::shipped() : network::HardwareCatalog::load(*catalog);
    if (w->port >= 0) return simulate_with_world(*o, hw, *w);
    auto report = network::simulate(*o, hw);
    std::fputs(report.to_text().c_str(), stdout);
    if (report.jobs_lost != 0 || report.ledger_sum != 0)
      throw Error(error_message("simulate", "{} jobs lost, ledger off by {}", report.jobs_lost, report.ledger_sum));
  });
}

}  // namespace orchard::app

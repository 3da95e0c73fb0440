#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "apps/orchard/commands.h"
#include "apps/orchard/signal_stopper.h"
#include "core/error.h"
#include "network/audit.h"
#include "network/coordinator.h"
#include "network/http_api.h"
#include "network/replica.h"

namespace orchard::app {
namespace {

struct NetworkOptions {
  std::string db = "sqlite://orchard-network.db";
  std::string host = "0.0.0.0";
  int port = 8700;
  network::CoordinatorOptions core;
  double lease_s = 15;
  std::string key_name;
  std::vector<std::string> vocabs;  // --vocab MODEL=FILE.gguf
  std::string advertise;  // where nodes reach this coordinator when it leads
};

// The address other replicas send nodes to: --advertise, else this one's host and port (the
// machine's name when listening on every address).
std::string advertised_url(const NetworkOptions& o, int port) {
  if (!o.advertise.empty()) return o.advertise;
  std::string host = o.host;
  if (host == "0.0.0.0" || host == "::") {
    char name[HOST_NAME_MAX + 1] = {};
    host = ::gethostname(name, sizeof name - 1) == 0 && name[0] ? name : "127.0.0.1";
  }
  return fmt::format("http://{}:{}", host, port);
}

void run_coordinator(NetworkOptions& o) {
  o.core.lease_ms = static_cast<int64_t>(o.lease_s * 1000);
  o.core.offline_after_ms = o.core.lease_ms;
  for (const auto& v : o.vocabs) o.core.vocabs.insert(network::parse_vocab_flag(v));
  // Before any thread starts, so that every thread inherits the mask.
  SignalStopper::block_signals();
  // SQLite serves one coordinator process; PostgreSQL any number of replicas, one leading.
  std::unique_ptr<network::FileLock> single;
  if (std::string path = network::sqlite_path(o.db); !path.empty())
    single = std::make_unique<network::FileLock>(path + ".coordinator");
  network::Store store = network::Store::open(o.db);
  const bool replicated = store.backend() == "postgres";
  o.core.replica = replicated;
  network::Coordinator coordinator(store, o.core);
  network::HttpApi api(coordinator);
  int port = api.bind(o.host, o.port);
  std::fprintf(stderr, "orchard network: listening on %s:%d, state in %s (%s)\n", o.host.c_str(), port, o.db.c_str(),
               std::string(store.backend()).c_str());
  std::string lost;
  std::unique_ptr<network::Replica> replica;
  if (replicated)
    replica = std::make_unique<network::Replica>(coordinator, o.db, advertised_url(o, port),
                                                 [&api, &lost](const std::string& why) {
                                                   lost = why;
                                                   api.stop();
                                                 });
  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    while (!stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      try {
        coordinator.tick();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "orchard network: tick: %s\n", e.what());
      }
    }
  });
  {
    SignalStopper stopper([&api] { api.stop(); });
    api.serve();
  }
  stop = true;
  ticker.join();
  if (replica) replica->stop();
  // A leader that lost its database session cannot tell whether it still leads: it stops, and
  // another replica (or this one, restarted) takes over.
  if (!lost.empty()) throw Error(error_message("network", "stopped leading: {}", lost));
}

}  // namespace

void add_network_command(CLI::App& app) {
  auto o = std::make_shared<NetworkOptions>();
  CLI::App* cmd = app.add_subcommand("network", "Run the network coordinator (places jobs on nodes, keeps the ledger)");
  cmd->add_option("--db", o->db, "sqlite://PATH (default) or postgresql://...")->capture_default_str();
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "Port to listen on (0: any)")->capture_default_str();
  cmd->add_option("--lease", o->lease_s, "Seconds a node holds a job without reporting")->capture_default_str();
  cmd->add_option("--verify-fraction", o->core.verify_fraction, "Share of verifiable jobs checked on a second node")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--ban-after", o->core.ban_after_mismatches, "Failed checks that ban a node")->capture_default_str();
  cmd->add_option("--vocab", o->vocabs,
                  "MODEL=FILE.gguf (repeatable): the model's vocabulary, to check every completion's token ids "
                  "against its text and count its prompt (without it: bounds from the text's bytes)");
  cmd->add_option("--advertise", o->advertise,
                  "On PostgreSQL: the URL where nodes reach this coordinator when it leads (default http://HOST:PORT)");
  auto quota = std::make_shared<int64_t>(0);
  auto rate = std::make_shared<int64_t>(0);
  CLI::App* add_key = cmd->add_subcommand("add-key", "Create an API key and print it (shown once)");
  add_key->add_option("--db", o->db, "sqlite://PATH (default) or postgresql://...")->capture_default_str();
  add_key->add_option("--name", o->key_name, "Who the key is for")->required();
  add_key->add_option("--quota-tokens", *quota, "Tokens the key may use (0: unlimited)")->capture_default_str();
  add_key->add_option("--rate", *rate, "Jobs per minute (0: unlimited)")->capture_default_str();
  add_key->callback([o, quota, rate] {
    network::Store store = network::Store::open(o->db);
    store.migrate();
    auto [key, secret] = store.create_key(o->key_name, *quota, *rate, network::wall_clock_ms());
    std::printf("%s\n", secret.c_str());
  });
  CLI::App* audit = cmd->add_subcommand(
      "audit", "Check that the ledger balances and every payment matches a job's counted tokens; print job counts "
      "(clients' jobs, and spot checks apart)");
  audit->add_option("--db", o->db, "sqlite://PATH (default) or postgresql://...")->capture_default_str();
  audit->callback([o] {
    network::Store store = network::Store::open(o->db);
    store.migrate();
    network::AuditReport report = network::audit_ledger(store);
    nlohmann::json out = {{"sum", report.sum},
                          {"consistent", report.consistent},
                          {"payments_checked", report.payments_checked},
                          {"problems", report.problems}};
    // Clients' jobs by state, and the spot checks apart.
    out["checks"] = nlohmann::json::object();
    for (auto state : {network::JobState::Queued, network::JobState::Leased, network::JobState::Completed,
                       network::JobState::Failed, network::JobState::Cancelled}) {
      out[network::job_state_name(state)] = store.count_jobs(state, "generate");
      out["checks"][network::job_state_name(state)] = store.count_jobs(state, "verify");
    }
    std::printf("%s\n", out.dump().c_str());
    if (!report.ok())
      throw Error(error_message("network", "the ledger does not hold: sum {}, {} problem(s)", report.sum,
                                report.problems.size()));
  });
  cmd->callback([o, cmd, add_key, audit] {
    if (cmd->got_subcommand(add_key) || cmd->got_subcommand(audit)) return;
    run_coordinator(*o);
  });
}

}  // namespace orchard::app

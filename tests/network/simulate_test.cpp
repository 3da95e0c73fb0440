#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "core/error.h"

#include "network/coordinator.h"
#include "network/simulate.h"

namespace orchard::network {
namespace {

TEST(Simulate, LosesNothingBalancesAndPaysUltraDedicatedMost) {
  SimulationOptions o;
  o.nodes = 5000;
  o.pods = 100;
  o.jobs_per_s = 60;
  o.hours = 1;
  o.churn = 0.3;
  auto r = simulate(o, HardwareCatalog::shipped());
  EXPECT_GT(r.jobs_completed, 100000) << r.to_text();
  EXPECT_EQ(r.jobs_lost, 0);
  EXPECT_GT(r.requeued, 0);
  EXPECT_GT(r.pod_jobs, 0);
  EXPECT_EQ(r.ledger_sum, 0);
  ASSERT_TRUE(r.earnings.count("dedicated/ultra"));
  double top = r.earnings["dedicated/ultra"].per_machine_hour();
  for (auto& [cls, e] : r.earnings) {
    if (cls != "dedicated/ultra") {
      EXPECT_GT(top, e.per_machine_hour()) << cls << "\n" << r.to_text();
    }
  }
  // Placement latency is reported (r.to_text()), not asserted: timings on a shared machine are noise.
}

// "What would my Mac mini earn?": base machines earn once demand fills the faster ones (placement
// prefers the fastest unit that fits), and the job mix holds models they can run.
TEST(Simulate, BaseMachinesEarnWhenDemandReachesThem) {
  SimulationOptions o;
  o.nodes = 2000;
  o.pods = 40;
  o.jobs_per_s = 30;
  o.hours = 0.5;
  o.churn = 0.3;
  auto r = simulate(o, HardwareCatalog::shipped());
  EXPECT_EQ(r.jobs_lost, 0);
  EXPECT_EQ(r.ledger_sum, 0);
  for (const char* cls : {"shared/base", "dedicated/base", "shared/pro", "dedicated/pro"}) {
    ASSERT_TRUE(r.earnings.count(cls)) << cls << "\n" << r.to_text();
    EXPECT_GT(r.earnings[cls].jobs, 0) << cls << "\n" << r.to_text();
    EXPECT_GT(r.earnings[cls].per_machine_hour(), 0) << cls << "\n" << r.to_text();
    EXPECT_GT(r.earnings[cls].busy_hours, 0) << cls;
  }
  // Per machine-hour, a faster class still earns more than a slower one.
  EXPECT_GT(r.earnings["shared/ultra"].per_machine_hour(), r.earnings["shared/pro"].per_machine_hour());
  EXPECT_GT(r.earnings["shared/pro"].per_machine_hour(), r.earnings["shared/base"].per_machine_hour());
}

// A network of base machines only: the models none of them can hold (32B and up, with the KV cache
// of a 4096-token context, above 12 of 16 GB) are refused when they arrive, not queued forever.
TEST(Simulate, JobsNoUnitCanHoldAreRefusedUpFront) {
  const std::string path = ::testing::TempDir() + "/base-only-catalog.json";
  std::ofstream(path) << R"({"version": 1, "chips": [{"name": "M1", "family": "M1", "tier": "base",
      "performance_cores": 4, "efficiency_cores": 4, "gpu_cores": [7, 8], "memory_bandwidth_gbs": 68,
      "memory_options_gb": [8, 16], "thunderbolt": 3, "rdma_tb5": false, "cpu_gflops_estimate": 150}]})";
  SimulationOptions o;
  o.nodes = 500;
  o.pods = 0;
  o.jobs_per_s = 5;
  o.hours = 0.25;
  auto r = simulate(o, HardwareCatalog::load(path));
  EXPECT_EQ(r.jobs_lost, 0);
  EXPECT_EQ(r.jobs_queued, 0) << r.to_text();
  EXPECT_GT(r.jobs_refused, 0);
  int64_t refused = 0;
  for (const auto& [model, n] : r.refused_by_model) refused += n;
  EXPECT_EQ(refused, r.jobs_refused);
  std::set<std::string> models;
  for (const auto& [model, n] : r.refused_by_model) models.insert(model);
  EXPECT_EQ(models, (std::set<std::string>{"qwen2.5-32b-q4_k_m", "llama-3.3-70b-q4_k_m", "llama-3.1-405b-q4_k_m"}))
      << r.to_text();
  // 32B, 70B and 405B are 10% + 7.5% + 0.5% of the mix.
  EXPECT_NEAR(static_cast<double>(r.jobs_refused) / r.jobs_submitted, 0.18, 0.02) << r.to_text();
  EXPECT_GT(r.earnings["shared/base"].per_machine_hour(), 0) << r.to_text();

  // A catalog with no Max or Ultra chip cannot form pods: an error, not a search without end.
  o.pods = 2;
  EXPECT_THROW(simulate(o, HardwareCatalog::load(path)), Error);
}

// Spot checks and hand-backs go through the same book and settlement as on the coordinator: a
// share of jobs is re-run on a second machine while its pay waits in escrow; a machine whose
// outputs are wrong is caught, refunded from, fined twice the job's pay (ledger::kFineMultiple) and
// banned after its third mismatch; a machine without a job's model hands it back once per model
// and the job runs elsewhere. Nothing is lost and the ledger sums to 0.
TEST(Simulate, SpotChecksCatchCheatsAndMachinesWithoutTheModelHandBack) {
  SimulationOptions o;
  o.nodes = 400;
  o.pods = 0;
  o.jobs_per_s = 3;
  o.hours = 0.5;
  o.churn = 0;
  o.verify_fraction = 0.5;
  o.cheat_fraction = 0.2;
  o.no_download_fraction = 0.25;
  const SimulationReport r = simulate(o, HardwareCatalog::shipped());
  EXPECT_GT(r.checks, 500) << r.to_text();
  EXPECT_GT(r.checks_caught, 0) << r.to_text();
  EXPECT_LT(r.checks_caught * 2, r.checks) << "only the cheats' outputs fail";
  EXPECT_GT(r.banned, 0) << r.to_text();
  EXPECT_GE(r.checks_caught, r.banned * o.ban_after_mismatches);
  EXPECT_GT(r.fines, 0);
  EXPECT_GT(r.hand_backs, 0);
  // Once per machine and model at most: a machine is not offered a model it handed back.
  EXPECT_LE(r.hand_backs, o.nodes * 7);
  EXPECT_GT(r.jobs_completed, r.jobs_submitted * 9 / 10) << r.to_text();
  EXPECT_EQ(r.jobs_lost, 0);
  EXPECT_EQ(r.ledger_sum, 0);
  o.cheat_fraction = 0;
  o.no_download_fraction = 0;
  const SimulationReport honest = simulate(o, HardwareCatalog::shipped());
  EXPECT_GT(honest.checks, 500);
  EXPECT_EQ(honest.checks_caught, 0);
  EXPECT_EQ(honest.fines, 0);
  EXPECT_EQ(honest.hand_backs, 0);
}

// The simulator settles through the coordinator's own job book and Settlement: replaying every job
// it paid on a real Coordinator (SQLite, a fake clock; the same chip, seat, model, counted tokens
// and time from pickup to result) pays the same node the same micro-credits, job by job, premium
// or not. Placement is not under test here: only the node the simulator paid offers its time (with
// room for any model) while its job is placed.
TEST(Simulate, PaysWhatTheCoordinatorPaysForTheSameJobs) {
  SimulationOptions o;
  o.nodes = 40;
  o.pods = 4;
  o.jobs_per_s = 0.2;
  o.hours = 0.25;
  o.churn = 0;
  o.keep_settlements = true;
  o.verify_fraction = 0;  // as the coordinator below: every job paid at once
  const SimulationReport r = simulate(o, HardwareCatalog::shipped());
  ASSERT_GT(r.settlements.size(), 50u) << r.to_text();

  Store store = Store::open(":memory:");
  int64_t now = 1'700'000'000'000;
  CoordinatorOptions co;
  co.verify_fraction = 0;  // the simulator checks nothing
  Coordinator coordinator(store, co, [&] { return now; });
  const KeyRecord key = coordinator.authenticate(coordinator.add_key("client", 0, 0));
  std::set<double> multipliers;
  std::map<std::string, int64_t> paid;
  for (const SettledJob& s : r.settlements) {
    const std::string& holder = s.nodes.front();
    // Registered with the model of this job (a node describes what it holds anew each time).
    coordinator.register_node(holder, {{"memory_bytes", int64_t{1} << 50},
                                       {"chip", s.chip},
                                       {"seat", ledger::seat_name(s.seat)},
                                       {"offering", false},
                                       {"models", {{{"name", s.model}, {"bytes", s.model_bytes}}}}});
    coordinator.heartbeat(holder, {{"offering", true}});
    const nlohmann::json job =
        coordinator.submit(key, Submission::from_json({{"model", s.model},
                                                       {"prompt", std::string(static_cast<size_t>(s.prompt_tokens), 'x')},
                                                       {"max_tokens", s.completion_tokens}}));
    const nlohmann::json offer = coordinator.poll(holder, std::chrono::steady_clock::now());
    ASSERT_TRUE(offer.is_object()) << s.job;
    ASSERT_EQ(offer["id"], job["id"]);
    now += s.elapsed_ms;
    const nlohmann::json done = coordinator.complete(
        holder, offer["id"], offer["attempt"],
        {{"text", std::string(static_cast<size_t>(s.completion_tokens), 'y')},
         {"finish_reason", "length"},
         {"prompt_ids", std::vector<int>(static_cast<size_t>(s.prompt_tokens), 1)},
         {"output_ids", std::vector<int>(static_cast<size_t>(s.completion_tokens), 2)}});
    EXPECT_EQ(done["credits"].get<int64_t>(), s.amount) << "job " << s.job << " on " << holder << " (" << s.chip << ")";
    coordinator.heartbeat(holder, {{"offering", false}});
    now += 1000;
    multipliers.insert(s.multiplier);
    paid[holder] += s.amount;
  }
  for (const auto& [node, amount] : paid) EXPECT_EQ(store.balance(ledger::node_account(node)), amount) << node;
  // Both sides of the delivery rule were exercised: a first job slowed by its model's download
  // earns no seat premium, later ones do.
  EXPECT_TRUE(multipliers.count(1.0)) << r.to_text();
  EXPECT_GE(multipliers.size(), 2u) << r.to_text();
}

}  // namespace
}  // namespace orchard::network

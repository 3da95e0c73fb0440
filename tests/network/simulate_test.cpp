#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "core/error.h"

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

}  // namespace
}  // namespace orchard::network

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace orchard::network

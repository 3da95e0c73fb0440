// The World page's coordinator figures: throughput over the last minute, credits per seat class,
// against hand-computed values.
#include <gtest/gtest.h>

#include "network/world_totals.h"

namespace orchard::network {
namespace {

TEST(WorldTotals, ThroughputIsOverTheLastMinuteAndCreditsSumPerSeat) {
  WorldTotals t;
  t.completed(0, 100);
  t.completed(30000, 50);
  t.earned("shared", 1'500'000);
  t.earned("dedicated", 2'000'000);
  t.earned("shared", -500'000);  // a fine
  auto at = t.at(59999);
  EXPECT_DOUBLE_EQ(at["tok_s"].get<double>(), 150.0 / 60);
  EXPECT_DOUBLE_EQ(at["jobs_per_min"].get<double>(), 2);
  EXPECT_DOUBLE_EQ(at["credits_by_seat"]["shared"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(at["credits_by_seat"]["dedicated"].get<double>(), 2.0);
  at = t.at(60000);  // the first job has left the window
  EXPECT_DOUBLE_EQ(at["tok_s"].get<double>(), 50.0 / 60);
  EXPECT_DOUBLE_EQ(at["jobs_per_min"].get<double>(), 1);
  EXPECT_DOUBLE_EQ(t.at(90000)["tok_s"].get<double>(), 0);
}

}  // namespace
}  // namespace orchard::network

// Every collective x dtype x size over ring and shm, worlds 1..8, ranks forked on this machine.
#include <gtest/gtest.h>

#include <tuple>

#include "collective_checks.h"
#include "comm/launcher.h"

namespace orchard::comm {
namespace {

class CollectivesTest : public ::testing::TestWithParam<std::tuple<Backend, int>> {};

TEST_P(CollectivesTest, MatchDirectSum) {
  const auto [backend, world] = GetParam();
  Config config;
  config.backend = backend;
  config.timeout = std::chrono::seconds(20);
  auto exits = spawn_local_ranks(world, config, [](Group& g) { testing::check_all_collectives(g, true); });
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << e.describe();
}

INSTANTIATE_TEST_SUITE_P(Comm, CollectivesTest,
                         ::testing::Combine(::testing::Values(Backend::Ring, Backend::Shm),
                                            ::testing::Range(1, 9)),
                         [](const auto& info) {
                           return std::string(backend_name(std::get<0>(info.param))) + "_world" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Several sockets per link (striping) and busy polling take other code paths of the ring.
TEST(CollectivesRing, StripedBusyPoll) {
  Config config;
  config.sockets_per_link = 3;
  config.busy_poll = true;
  auto exits = spawn_local_ranks(3, config, [](Group& g) { testing::check_all_collectives(g, false); });
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << e.describe();
}

}  // namespace
}  // namespace orchard::comm

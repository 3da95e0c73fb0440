// The coordinator's node registry on a fake clock: liveness, bans, what a node lacks, the
// catalog's word on chips, and the models nodes announce, against hand-computed values.
#include <gtest/gtest.h>

#include "network/node_registry.h"

namespace orchard::network {
namespace {

using nlohmann::json;

constexpr int64_t kOfflineAfterMs = 15000;

struct Fixture {
  int64_t now = 1000;
  NodeRegistry registry{[this] { return now; }, kOfflineAfterMs, /*ban_after_mismatches=*/2};
};

json description(const std::string& chip = "", double claimed_gbs = 0) {
  json d = {{"memory_bytes", 64'000'000'000}, {"models", json::array({{{"name", "m"}, {"bytes", 1000}}})}};
  if (!chip.empty()) d["chip"] = chip;
  if (claimed_gbs > 0) d["memory_bandwidth_gbs"] = claimed_gbs;
  return d;
}

TEST(NodeRegistry, ANodeGoesOfflineAfterOfflineAfterMsOfSilence) {
  Fixture f;
  f.registry.announce("a", description(), "shared", f.now);
  EXPECT_TRUE(f.registry.refresh("a"));
  EXPECT_TRUE(f.registry.get("a").visible);
  EXPECT_EQ(f.registry.get("a").online_since, 1000);
  f.now = 1000 + kOfflineAfterMs;  // silent exactly offline_after_ms: still online
  EXPECT_TRUE(f.registry.fall_silent().empty());
  f.now += 1;
  EXPECT_EQ(f.registry.fall_silent(), std::vector<std::string>{"a"});
  EXPECT_FALSE(f.registry.get("a").online);
  EXPECT_TRUE(f.registry.fall_silent().empty());  // told once
  EXPECT_TRUE(f.registry.refresh("a"));
  EXPECT_FALSE(f.registry.get("a").visible);
  EXPECT_EQ(f.registry.get("a").online_since, 0);
  // It speaks again: seen now, online again (it was offline), visible since now.
  f.now = 20000;
  f.registry.seen("a");
  EXPECT_TRUE(f.registry.online_again("a"));
  EXPECT_FALSE(f.registry.online_again("a"));
  EXPECT_TRUE(f.registry.refresh("a"));
  EXPECT_FALSE(f.registry.refresh("a"));  // no change
  EXPECT_EQ(f.registry.get("a").online_since, 20000);
  EXPECT_EQ(f.registry.get("a").last_seen, 20000);
  // A node that stops offering is hidden though online.
  f.registry.set_offering("a", false);
  EXPECT_TRUE(f.registry.refresh("a"));
  EXPECT_FALSE(f.registry.get("a").visible);
  EXPECT_TRUE(f.registry.get("a").online);
}

TEST(NodeRegistry, AStoredNodeIsOfflineUntilItSpeaks) {
  Fixture f;
  NodeRecord r;
  r.id = "b";
  r.description = description().dump();
  r.seat = "dedicated";
  r.online = true;  // as the store last had it: the agent re-registers after a restart
  r.last_seen = 900;
  r.reputation = 0.5;
  r.mismatches = 1;
  const NodeSpec spec = f.registry.load(r);
  EXPECT_EQ(spec.id, "b");
  EXPECT_EQ(spec.memory_bytes, 64'000'000'000);
  EXPECT_EQ(spec.models, std::vector<std::string>{"m"});
  EXPECT_DOUBLE_EQ(spec.reliability, 0.5);
  EXPECT_FALSE(f.registry.get("b").online);
  EXPECT_FALSE(f.registry.refresh("b"));  // never visible
  EXPECT_EQ(f.registry.get("b").seat, "dedicated");
  EXPECT_EQ(f.registry.get("b").mismatches, 1);
}

TEST(NodeRegistry, ABanHidesTheNodeAndTrustMovesByOutcome) {
  Fixture f;
  f.registry.announce("a", description(), "shared", f.now);
  f.registry.refresh("a");
  EXPECT_NEAR(f.registry.returned("a", false), 0.9, 1e-12);  // handed back: 0.9 r
  EXPECT_NEAR(f.registry.returned("a", true), 0.63, 1e-12);  // lost lease: 0.7 r
  EXPECT_EQ(f.registry.get("a").jobs_failed, 1);
  EXPECT_NEAR(f.registry.served("a"), 0.9 * 0.63 + 0.1, 1e-12);  // 0.667
  EXPECT_NEAR(f.registry.failed_check("a"), 0.3 * 0.667, 1e-12);  // 0.2001
  EXPECT_FALSE(f.registry.get("a").banned);  // one mismatch of the two that ban
  EXPECT_FALSE(f.registry.refresh("a"));
  EXPECT_NEAR(f.registry.failed_check("a"), 0.3 * 0.2001, 1e-12);  // 0.06003
  EXPECT_TRUE(f.registry.get("a").banned);
  EXPECT_EQ(f.registry.get("a").mismatches, 2);
  EXPECT_TRUE(f.registry.refresh("a"));
  EXPECT_FALSE(f.registry.get("a").visible);
  EXPECT_TRUE(f.registry.get("a").online);  // still heard from, but hidden
  EXPECT_DOUBLE_EQ(f.registry.served("unknown"), 1);  // an unknown id changes nothing
  EXPECT_EQ(f.registry.find("unknown"), nullptr);
}

TEST(NodeRegistry, AHandBackForAMissingModelIsRememberedUntilItRegistersAgain) {
  Fixture f;
  f.registry.announce("a", description(), "shared", f.now);
  f.registry.lack("a", "m");
  f.registry.lack("unknown", "m");  // ignored, not a blank node
  EXPECT_EQ(f.registry.find("unknown"), nullptr);
  EXPECT_EQ(f.registry.get("a").lacks, std::set<std::string>{"m"});
  f.now += 5000;
  f.registry.seen("a");
  f.registry.online_again("a");
  EXPECT_EQ(f.registry.get("a").lacks, std::set<std::string>{"m"});  // heartbeats do not forget it
  f.registry.announce("a", description(), "shared", f.now);
  EXPECT_TRUE(f.registry.get("a").lacks.empty());
  EXPECT_EQ(f.registry.get("a").last_seen, 6000);
}

TEST(NodeRegistry, AClaimedChipsBandwidthAndTierComeFromTheCatalog) {
  Fixture f;
  // data/hardware_catalog.json: M2 Ultra, tier ultra, 800 GB/s; the claim of 5000 is ignored.
  const NodeSpec spec = f.registry.announce("a", description("Apple M2 Ultra", 5000), "dedicated", f.now);
  EXPECT_DOUBLE_EQ(spec.bandwidth_gbs, 800);
  EXPECT_EQ(f.registry.get("a").tier, "ultra");
  const Seller seller = f.registry.seller("a");
  EXPECT_EQ(seller.seat, ledger::Seat::Dedicated);
  EXPECT_EQ(seller.tier, ledger::Tier::Ultra);
  EXPECT_DOUBLE_EQ(seller.bandwidth_gbs, 800);
  // A chip the catalog does not know: its claim, at the base tier.
  f.registry.announce("b", description("Z9 Hyper", 300), "shared", f.now);
  EXPECT_DOUBLE_EQ(f.registry.get("b").bandwidth_gbs, 300);
  EXPECT_EQ(f.registry.seller("b").tier, ledger::Tier::Base);
}

TEST(NodeRegistry, ModelsAreAsLastAnnounced) {
  Fixture f;
  json d = description();
  d["models"] = json::array({{{"name", "moe"}, {"bytes", 1000}, {"kv_bytes_per_token", 8},
                              {"active_bytes_per_token", 5000}},
                             {{"name", "dense"}, {"bytes", 700}, {"context_length", 2048}}});
  f.registry.announce("a", d, "shared", f.now);
  const AnnouncedModel& moe = f.registry.model("moe");
  EXPECT_EQ(moe.bytes, 1000);
  EXPECT_EQ(moe.kv_bytes_per_token, 8);
  EXPECT_EQ(moe.context_length, 4096);           // the default
  EXPECT_EQ(moe.active_bytes_per_token, 1000);   // never more than the whole model
  EXPECT_EQ(f.registry.model("dense").decode_bytes(), 700);  // no active bytes: all of it
  EXPECT_EQ(f.registry.model("dense").context_length, 2048);
  EXPECT_EQ(f.registry.model("absent").bytes, 0);
  EXPECT_EQ(f.registry.models().size(), 2u);  // reading an absent model does not list it
}

}  // namespace
}  // namespace orchard::network

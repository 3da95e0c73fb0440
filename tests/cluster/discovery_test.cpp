// Announcement wire format, topology arithmetic, doctor verdicts and local detection — no
// network needed.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "cluster/discovery.h"
#include "cluster/doctor.h"
#include "cluster/local_machine.h"
#include "cluster/topology.h"

namespace orchard::cluster {
namespace {

Announcement sample() {
  Announcement a;
  a.node_id = "n1";
  a.hostname = "studio";
  a.os = "macOS";
  a.os_version = "26.2";
  a.cpu_brand = "Apple M3 Ultra";
  a.chip = "M3 Ultra";
  a.cores = 32;
  a.performance_cores = 24;
  a.memory_total_bytes = 512ull << 30;
  a.memory_free_bytes = 400ull << 30;
  a.models = {"llama-70b.gguf"};
  a.interfaces = {{"bridge0", "10.0.1.1", 24, "10.0.1.255", 80}, {"en0", "192.168.1.5", 24, "192.168.1.255", 10}};
  a.links = {{"n1", "bridge0", "10.0.1.1", "n2", "bridge0", "10.0.1.2", 40, 60}};
  return a;
}

TEST(Announcement, RoundTripsAndIsSigned) {
  const std::vector<uint8_t> d = encode_announcement(sample(), "alpha", "s1");
  std::string why;
  const std::optional<Announcement> back = decode_announcement(d, "alpha", "s1", &why);
  ASSERT_TRUE(back) << why;
  EXPECT_EQ(to_json(*back), to_json(sample()));
}

TEST(Announcement, OtherClustersAndDamageAreDropped) {
  const std::vector<uint8_t> d = encode_announcement(sample(), "alpha", "s1");
  std::string why;
  EXPECT_FALSE(decode_announcement(d, "alpha", "s2", &why));
  EXPECT_NE(why.find("MAC"), std::string::npos) << why;
  EXPECT_FALSE(decode_announcement(d, "beta", "s1", &why));
  EXPECT_NE(why.find("cluster 'alpha'"), std::string::npos) << why;
  // Every truncation, and a flipped byte anywhere, is refused.
  for (size_t n = 0; n < d.size(); n += 7)
    EXPECT_FALSE(decode_announcement(std::span<const uint8_t>(d).first(n), "alpha", "s1")) << n;
  for (size_t i = 0; i < d.size(); i += 5) {
    std::vector<uint8_t> bad = d;
    bad[i] ^= 0x40;
    EXPECT_FALSE(decode_announcement(bad, "alpha", "s1")) << i;
  }
  std::vector<uint8_t> v2 = d;
  v2[4] = 2;  // version
  EXPECT_FALSE(decode_announcement(v2, "alpha", "s1", &why));
  EXPECT_NE(why.find("version 2"), std::string::npos) << why;
}

TEST(Announcement, SignedGarbageIsRefusedByTheParser) {
  // A valid MAC over a payload that is not an announcement: the JSON check names the field.
  const std::string payload = R"({"node_id": "x"})";
  AnnounceHeader h{kAnnounceMagic, kAnnounceVersion, 5, static_cast<uint32_t>(payload.size())};
  std::vector<uint8_t> d(sizeof h + 5 + payload.size());
  std::memcpy(d.data(), &h, sizeof h);
  std::memcpy(d.data() + sizeof h, "alpha", 5);
  std::memcpy(d.data() + sizeof h + 5, payload.data(), payload.size());
  const std::vector<uint8_t> mac = hmac_sha256("s1", d);
  d.insert(d.end(), mac.begin(), mac.end());
  std::string why;
  EXPECT_FALSE(decode_announcement(d, "alpha", "s1", &why));
  EXPECT_NE(why.find("'hostname'"), std::string::npos) << why;
}

TEST(Topology, TwoCablesAddBandwidthAndTakeTheBestLatency) {
  Topology t;
  t.machines = {sample(), sample()};
  t.machines[1].node_id = "n2";
  t.links = {{"n1", "b0", "10.0.1.1", "n2", "b0", "10.0.1.2", 60, 40},
             {"n2", "b0", "10.0.1.2", "n1", "b0", "10.0.1.1", 50, 38},  // the same cable, other way
             {"n1", "b1", "10.0.2.1", "n2", "b1", "10.0.2.2", 80, 39}};
  const std::optional<LinkSpec> l = pair_link(t, "n2", "n1");
  ASSERT_TRUE(l);
  EXPECT_DOUBLE_EQ(l->latency_us, 25);  // half the best round trip
  EXPECT_DOUBLE_EQ(l->gbps, 40 + 39);
  EXPECT_FALSE(pair_link(t, "n1", "n3"));
  const auto m = link_matrix(t, {300, 10});
  EXPECT_DOUBLE_EQ(m[0][1].gbps, 79);
  EXPECT_EQ(to_json(topology_from_json(to_json(t))), to_json(t));
  EXPECT_NE(format_topology(t).find("10.0.2.1"), std::string::npos);
}

TEST(Doctor, RdmaVerdicts) {
  EXPECT_TRUE(rdma_verdict("macOS", "26.2", "M4 Max", "Apple M4 Max").possible);
  EXPECT_TRUE(rdma_verdict("macOS", "27.0", "M3 Ultra", "Apple M3 Ultra").possible);
  const RdmaVerdict old_os = rdma_verdict("macOS", "26.1", "M4 Pro", "Apple M4 Pro");
  EXPECT_FALSE(old_os.possible);
  EXPECT_NE(old_os.reason.find("26.2"), std::string::npos) << old_os.reason;
  const RdmaVerdict tb4 = rdma_verdict("macOS", "26.2", "M4", "Apple M4");
  EXPECT_FALSE(tb4.possible);
  EXPECT_NE(tb4.reason.find("Thunderbolt 4"), std::string::npos) << tb4.reason;
  EXPECT_FALSE(rdma_verdict("Linux", "6.1", "", "AMD EPYC").possible);
  EXPECT_NEAR(fitting_params_billion(64, 8), 47, 1e-9);  // 64 × 0.75 − 1 GB at one byte each
}

TEST(LocalMachine, DetectsThisMachine) {
  const LocalMachine m = detect_local_machine();
  EXPECT_FALSE(m.os.empty());
  EXPECT_GT(m.cores, 0);
  EXPECT_GT(m.performance_cores, 0);
  EXPECT_GT(m.memory_total_bytes, 0u);
  EXPECT_LE(m.memory_free_bytes, m.memory_total_bytes);
  EXPECT_TRUE(same_subnet("10.0.1.1", "10.0.1.200", 24));
  EXPECT_FALSE(same_subnet("10.0.1.1", "10.0.2.1", 24));
}

}  // namespace
}  // namespace orchard::cluster

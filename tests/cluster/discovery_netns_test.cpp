// Discovery and link probes between network namespaces: three agents of one cluster (A joined
// to B by two veth pairs, to C by one) and a fourth with another secret, joined to A, that must
// be ignored. Needs root (ip netns); skips with the reason when namespaces cannot be made.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/discovery.h"

extern char** environ;

namespace orchard::cluster {
namespace {

std::string orchard_binary() {
  if (const char* b = std::getenv("ORCHARD_BIN")) return b;
  return ORCHARD_BINARY;
}

int sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

std::string capture(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), p)) > 0) out.append(buffer.data(), n);
  pclose(p);
  return out;
}

class NetnsCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    tag_ = "oc" + std::to_string(getpid() % 100000);
    if (sh("ip netns add " + ns("probe")) != 0) GTEST_SKIP() << "cannot create network namespaces (needs root and iproute2)";
    sh("ip netns del " + ns("probe"));
    for (const char* n : {"a", "b", "c", "d"}) {
      ASSERT_EQ(sh("ip netns add " + ns(n)), 0);
      made_.push_back(ns(n));
      ASSERT_EQ(sh("ip -n " + ns(n) + " link set lo up"), 0);
    }
    // A-B over two cables, A-C and A-D over one each.
    cable("a", "b", 1);
    cable("a", "b", 2);
    cable("a", "c", 3);
    cable("a", "d", 4);
    start_agent("a", "alpha", "s1");
    start_agent("b", "alpha", "s1");
    start_agent("c", "alpha", "s1");
    start_agent("d", "alpha", "not-the-secret");
  }

  void TearDown() override {
    for (pid_t pid : agents_) {
      kill(pid, SIGTERM);
      int status = 0;
      waitpid(pid, &status, 0);
    }
    for (const std::string& n : made_) sh("ip netns del " + n);
  }

  std::string ns(const std::string& name) const { return tag_ + name; }

  // veth pair "<tag><x><i>" <-> "<tag><y><i>" on 10.77.i.0/24 (x is .1, y is .2).
  void cable(const std::string& x, const std::string& y, int i) {
    const std::string vx = tag_ + x + std::to_string(i), vy = tag_ + y + std::to_string(i);
    ASSERT_EQ(sh("ip link add " + vx + " netns " + ns(x) + " type veth peer name " + vy + " netns " + ns(y)), 0);
    ASSERT_EQ(sh("ip -n " + ns(x) + " addr add 10.77." + std::to_string(i) + ".1/24 brd + dev " + vx), 0);
    ASSERT_EQ(sh("ip -n " + ns(y) + " addr add 10.77." + std::to_string(i) + ".2/24 brd + dev " + vy), 0);
    ASSERT_EQ(sh("ip -n " + ns(x) + " link set " + vx + " up"), 0);
    ASSERT_EQ(sh("ip -n " + ns(y) + " link set " + vy + " up"), 0);
  }

  void start_agent(const std::string& n, const std::string& cluster, const std::string& secret) {
    std::vector<std::string> args = {"ip", "netns", "exec", ns(n), orchard_binary(), "agent", "--cluster", cluster,
                                     "--secret", secret, "--no-measure", "--probe-every", "3", "--probe-mb", "8"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawnp(&pid, "ip", nullptr, nullptr, argv.data(), environ), 0);
    agents_.push_back(pid);
  }

  nlohmann::json cluster_json(const std::string& n, const std::string& secret, double wait_s) {
    const std::string out = capture("ip netns exec " + ns(n) + " " + orchard_binary() + " cluster --json --cluster alpha --secret " +
                                    secret + " --wait " + std::to_string(wait_s) + " 2>/dev/null");
    return nlohmann::json::parse(out, nullptr, false);
  }

  std::string tag_;
  std::vector<std::string> made_;
  std::vector<pid_t> agents_;
};

TEST_F(NetnsCluster, AgentsFindEachOtherAndMeasureEveryCable) {
  nlohmann::json t;
  // Announcements every second, each peer probed in turn: a few seconds until every link is in.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto links_from = [&](const std::string& from_ip_prefix) {
    std::set<std::string> pairs;
    for (const auto& l : t["links"])
      if (l["from_addr"].get<std::string>().rfind(from_ip_prefix, 0) == 0 && l["gbps"].get<double>() > 0)
        pairs.insert(l["from_addr"].get<std::string>() + ">" + l["to_addr"].get<std::string>());
    return pairs;
  };
  for (;;) {
    t = cluster_json("a", "s1", 2);
    const bool complete = t.is_object() && t["machines"].size() == 3 && links_from("10.77.1.1").size() == 1 &&
                          links_from("10.77.2.1").size() == 1 && links_from("10.77.3.1").size() == 1;
    if (complete || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_TRUE(t.is_object()) << "orchard cluster printed no JSON";
  // A, B, C; D signs with another secret and is ignored.
  EXPECT_EQ(t["machines"].size(), 3u) << t.dump(1);
  std::set<std::string> addresses;
  for (const auto& m : t["machines"])
    for (const auto& i : m["interfaces"]) addresses.insert(i["address"].get<std::string>());
  EXPECT_EQ(addresses.count("10.77.4.2"), 0u) << "the other cluster's agent was listed";
  // A to B: two cables, two links; A to C: one.
  EXPECT_EQ(links_from("10.77.1.1"), (std::set<std::string>{"10.77.1.1>10.77.1.2"})) << t.dump(1);
  EXPECT_EQ(links_from("10.77.2.1"), (std::set<std::string>{"10.77.2.1>10.77.2.2"})) << t.dump(1);
  EXPECT_EQ(links_from("10.77.3.1"), (std::set<std::string>{"10.77.3.1>10.77.3.2"})) << t.dump(1);
  for (const auto& l : t["links"]) {
    EXPECT_GT(l["rtt_us_p50"].get<double>(), 0);
    EXPECT_LT(l["rtt_us_p50"].get<double>(), 50000);
  }
}

TEST_F(NetnsCluster, AnotherSecretSeesOnlyItsOwnCluster) {
  // A's agent refuses the query (wrong secret), so `cluster` listens itself: only D answers.
  nlohmann::json t = cluster_json("a", "not-the-secret", 3);
  ASSERT_TRUE(t.is_object());
  ASSERT_EQ(t["machines"].size(), 1u) << t.dump(1);
  EXPECT_EQ(t["machines"][0]["interfaces"][0]["address"], "10.77.4.2");
}

}  // namespace
}  // namespace orchard::cluster

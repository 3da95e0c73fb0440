// Discovery and link probes between network namespaces: three agents of one cluster (A joined
// to B by two veth pairs, to C by one) and a fourth with another secret, joined to A, that must
// be ignored. Then `run` and `serve` placing themselves on two namespaces' machines, from a
// hostfile or from what the agents found. Needs root (ip netns); skips with the reason when
// namespaces cannot be made.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/discovery.h"
#include "cluster/netns_harness.h"

namespace orchard::cluster {
namespace {

class NetnsCluster : public Namespaces {
 protected:
  void SetUp() override {
    Namespaces::SetUp();
    if (IsSkipped()) return;
    for (const char* n : {"a", "b", "c", "d"}) make_namespace(n);
    // A-B over two cables, A-C and A-D over one each.
    cable("a", "b", 1);
    cable("a", "b", 2);
    cable("a", "c", 3);
    cable("a", "d", 4);
    start_agent("a", "alpha", "s1", {"--no-measure", "--probe-every", "3"});
    start_agent("b", "alpha", "s1", {"--no-measure", "--probe-every", "3"});
    start_agent("c", "alpha", "s1", {"--no-measure", "--probe-every", "3"});
    start_agent("d", "alpha", "not-the-secret", {"--no-measure", "--probe-every", "3"});
  }

  nlohmann::json cluster_json(const std::string& n, const std::string& secret, double wait_s) {
    return Namespaces::cluster_json(n, "alpha", secret, wait_s);
  }
};

TEST_F(NetnsCluster, AgentsFindEachOtherAndMeasureEveryCable) {
  nlohmann::json t;
  // Announcements every second, each peer probed in turn: a few seconds until every link is in.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30 * testing::timeout_factor());
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

// Machines A and B on one cable, each with a measuring agent of cluster "beta"; a model made
// here. Commands typed "on A" run in A's namespace; an ssh stand-in reaches a machine by its
// address, in its namespace.
class NetnsSplitJob : public Namespaces {
 protected:
  void SetUp() override {
    Namespaces::SetUp();
    if (IsSkipped()) return;
    make_namespace("a");
    make_namespace("b");
    cable("a", "b", 5);
    // Each link is measured once: the plans these tests compare must see the same figures (a
    // tiny model sits near the single/split boundary, where a re-measured latency could flip it).
    start_agent("a", "beta", "s2", {"--threads", "1", "--probe-every", "3600"});
    start_agent("b", "beta", "s2", {"--threads", "1", "--probe-every", "3600"});
    dir_ = std::filesystem::temp_directory_path() / ("orchard-netns-" + tag_);
    std::filesystem::create_directories(dir_);
    model_ = (dir_ / "tiny.gguf").string();
    // Float weights: a tensor split's greedy tokens then equal one rank's (test_parallel.cpp);
    // with Q8_0 a split's rounding may turn a near-tie (token 20 of 24 on AVX-512).
    ASSERT_EQ(sh(orchard_binary() + " make-model --arch llama --shape tiny --type f32 -o " + model_), 0);
    ssh_ = (dir_ / "ssh.sh").string();
    // It notes each host it is asked to reach in ssh.log.
    std::ofstream(ssh_) << "#!/bin/sh\n# ssh -o BatchMode=yes HOST COMMAND, HOST an address of a namespace\nshift 2\n"
                        << "echo \"$1\" >> " << (dir_ / "ssh.log").string() << "\n"
                        << "case \"$1\" in 10.77.5.1) ns=" << ns("a") << ";; 10.77.5.2) ns=" << ns("b")
                        << ";; *) echo \"no machine at $1\" >&2; exit 255;; esac\nexec ip netns exec \"$ns\" sh -c \"$2\"\n";
    std::filesystem::permissions(ssh_, std::filesystem::perms::owner_all);
    hostfile_ = (dir_ / "hosts.json").string();
    std::ofstream(hostfile_) << R"([{"ssh": "10.77.5.1", "ips": ["10.77.5.1"]}, {"ssh": "10.77.5.2", "ips": ["10.77.5.2"]}])";
    // Both agents measured themselves and the cable both ways.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60 * testing::timeout_factor());
    for (;;) {
      const nlohmann::json t = cluster_json("a", "beta", "s2", 2);
      size_t measured = 0, links = 0;
      if (t.is_object()) {
        for (const auto& m : t["machines"]) measured += m.value("decode_gbs", 0.0) > 0;
        for (const auto& l : t["links"]) links += l.value("gbps", 0.0) > 0;
      }
      if (measured == 2 && links >= 2) break;
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the agents did not find and measure each other: " << t.dump(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }

  void TearDown() override {
    Namespaces::TearDown();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // `orchard ARGS` as typed on A (shards a rank receives are cached in the test's folder).
  std::string on_a(const std::string& args) const {
    return "ip netns exec " + ns("a") + " env ORCHARD_CACHE_DIR=" + dir_.string() + " " + orchard_binary() + " " + args;
  }
  std::string cluster_args() const { return " --cluster beta --secret s2 --ssh " + ssh_; }

  // Greedy generation on one rank: the reference every placement must reproduce.
  nlohmann::json alone() const {
    return nlohmann::json::parse(capture(orchard_binary() + " run -m " + model_ + " -p '" + kPrompt + "' -n 24 --temp 0 --json 2>/dev/null"),
                                 nullptr, false);
  }

  static constexpr const char* kPrompt = "the orchard on the hill";
  std::filesystem::path dir_;
  std::string model_, ssh_, hostfile_;
};

TEST_F(NetnsSplitJob, RunFromHostfileSplitsOverBothMachinesLikeOneRank) {
  const nlohmann::json reference = alone();
  ASSERT_TRUE(reference.is_object());
  const std::string log = (dir_ / "run.err").string();
  const nlohmann::json split = nlohmann::json::parse(
      capture(on_a("run -m " + model_ + " -p '" + kPrompt + "' -n 24 --temp 0 --json --strategy pipeline --hostfile " + hostfile_ +
                   cluster_args() + " 2>" + log)),
      nullptr, false);
  std::ifstream err(log);
  const std::string stderr_text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(split.is_object()) << stderr_text;
  EXPECT_NE(stderr_text.find("starting 2 rank(s), pipeline: 10.77.5.1, 10.77.5.2"), std::string::npos) << stderr_text;
  EXPECT_EQ(split["tokens"], reference["tokens"]) << stderr_text;
}

// The machine the command is typed on is one of the discovered ones: its rank starts there
// without ssh (which it may not run a server for); the other is reached over ssh.
TEST_F(NetnsSplitJob, DiscoveredRunStartsThisMachinesRankWithoutSsh) {
  const std::string log = (dir_ / "discover.err").string();
  const nlohmann::json split = nlohmann::json::parse(
      capture(on_a("run -m " + model_ + " -p '" + kPrompt + "' -n 24 --temp 0 --json --strategy pipeline --discover" +
                   cluster_args() + " 2>" + log)),
      nullptr, false);
  std::ifstream err(log);
  const std::string stderr_text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(split.is_object()) << stderr_text;
  EXPECT_EQ(split["tokens"], alone()["tokens"]) << stderr_text;
  std::ifstream ssh_log(dir_ / "ssh.log");
  const std::string reached((std::istreambuf_iterator<char>(ssh_log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(reached, "10.77.5.2\n") << "ssh was asked to reach: " << reached;
}

TEST_F(NetnsSplitJob, AutoStrategyFollowsThePlanOfTheDiscoveredMachines) {
  const nlohmann::json plan = nlohmann::json::parse(capture(on_a("plan -m " + model_ + " --discover --json --cluster beta --secret s2 2>/dev/null")),
                                                    nullptr, false);
  ASSERT_TRUE(plan.is_object());
  const std::string log = (dir_ / "auto.err").string();
  const nlohmann::json run = nlohmann::json::parse(
      capture(on_a("run -m " + model_ + " -p '" + kPrompt + "' -n 24 --temp 0 --json --strategy auto --discover" + cluster_args() + " 2>" + log)),
      nullptr, false);
  std::ifstream err(log);
  const std::string stderr_text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(run.is_object()) << stderr_text;
  // Discovery lists the local machine (A, 10.77.5.1) first. A split puts A at rank 0; one
  // machine is whichever the plan found faster (the agents' own measurements, which vary here).
  const bool on_b = plan["assignment"].size() == 1 && plan["assignment"][0]["machine"] == 1;
  const std::string expected = "starting " + std::to_string(plan["assignment"].size()) + " rank(s), " +
                               plan["strategy"].get<std::string>() + ": 10.77.5." + (on_b ? "2" : "1");
  EXPECT_NE(stderr_text.find(expected), std::string::npos) << "expected '" << expected << "' in:\n" << stderr_text;
  EXPECT_EQ(run["tokens"], alone()["tokens"]) << stderr_text;
}

TEST_F(NetnsSplitJob, ServeOnDiscoveredMachinesAnswersLikeOneRank) {
  const std::string out = (dir_ / "serve.out").string(), log = (dir_ / "serve.err").string();
  const std::string command = "exec " + on_a("serve -m " + model_ + " --port 0 --parallel 1 --strategy pipeline --discover" + cluster_args()) +
                              " >" + out + " 2>" + log;
  std::vector<std::string> args = {"sh", "-c", command};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t server = 0;
  ASSERT_EQ(posix_spawnp(&server, "sh", nullptr, nullptr, argv.data(), environ), 0);
  std::string url;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60 * testing::timeout_factor());
  while (url.empty() && std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(out);
    std::string line;
    if (std::getline(in, line) && line.rfind("listening on ", 0) == 0) url = line.substr(13);
    else std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::string answer;
  if (!url.empty()) {
    const std::string body = nlohmann::json{{"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}}.dump();
    answer = capture("ip netns exec " + ns("a") + " curl -s -m 60 -H 'Content-Type: application/json' -d '" + body + "' " + url +
                     "/v1/completions");
  }
  kill(server, SIGTERM);
  int status = 0;
  waitpid(server, &status, 0);
  std::ifstream err(log);
  const std::string stderr_text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(url.empty()) << "the server did not start:\n" << stderr_text;
  EXPECT_NE(stderr_text.find("starting 2 rank(s), pipeline: 10.77.5.1, 10.77.5.2"), std::string::npos) << stderr_text;
  const nlohmann::json j = nlohmann::json::parse(answer, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("choices")) << answer << "\n" << stderr_text;
  EXPECT_EQ(j["choices"][0]["text"], alone()["text"]);
  // Every rank stopped with the server ("[s]" keeps pgrep's own shell out of the match).
  EXPECT_EQ(capture("pgrep -f '[s]erve -m " + model_ + "'"), "");
}

}  // namespace
}  // namespace orchard::cluster

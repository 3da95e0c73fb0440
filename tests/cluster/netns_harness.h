#pragma once
// Network namespaces joined by veth pairs, with `orchard agent`s in some: the machines of the
// cluster tests (discovery_netns_test, agent_netns_test). Needs root (ip netns); a test skips
// with the reason when namespaces cannot be made. Everything is removed at the end.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_process.h"

extern char** environ;

namespace orchard::cluster {

inline std::string orchard_binary() {
  if (const char* b = std::getenv("ORCHARD_BIN")) return b;
  return ORCHARD_BINARY;
}

inline int sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

inline std::string capture(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), p)) > 0) out.append(buffer.data(), n);
  pclose(p);
  return out;
}

// Namespaces joined by veth pairs, with an agent in some; everything is removed at the end.
class Namespaces : public ::testing::Test {
 protected:
  void SetUp() override {
    tag_ = "oc" + std::to_string(getpid() % 100000);
    if (sh("ip netns add " + ns("probe")) != 0) GTEST_SKIP() << "cannot create network namespaces (needs root and iproute2)";
    sh("ip netns del " + ns("probe"));
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

  void make_namespace(const std::string& n) {
    ASSERT_EQ(sh("ip netns add " + ns(n)), 0);
    made_.push_back(ns(n));
    ASSERT_EQ(sh("ip -n " + ns(n) + " link set lo up"), 0);
  }

  // veth pair "<tag><x><i>" <-> "<tag><y><i>" on 10.77.i.0/24 (x is .1, y is .2).
  void cable(const std::string& x, const std::string& y, int i) {
    const std::string vx = tag_ + x + std::to_string(i), vy = tag_ + y + std::to_string(i);
    ASSERT_EQ(sh("ip link add " + vx + " netns " + ns(x) + " type veth peer name " + vy + " netns " + ns(y)), 0);
    ASSERT_EQ(sh("ip -n " + ns(x) + " addr add 10.77." + std::to_string(i) + ".1/24 brd + dev " + vx), 0);
    ASSERT_EQ(sh("ip -n " + ns(y) + " addr add 10.77." + std::to_string(i) + ".2/24 brd + dev " + vy), 0);
    ASSERT_EQ(sh("ip -n " + ns(x) + " link set " + vx + " up"), 0);
    ASSERT_EQ(sh("ip -n " + ns(y) + " link set " + vy + " up"), 0);
  }

  void start_agent(const std::string& n, const std::string& cluster, const std::string& secret,
                   const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"ip", "netns", "exec", ns(n), orchard_binary(), "agent", "--cluster", cluster,
                                     "--secret", secret, "--probe-mb", "8"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawnp(&pid, "ip", nullptr, nullptr, argv.data(), environ), 0);
    agents_.push_back(pid);
  }

  // `orchard cluster` on machine n, listening wait_s (times the factor: under qemu-user an agent
  // just started may not have announced itself within a native wait).
  nlohmann::json cluster_json(const std::string& n, const std::string& cluster, const std::string& secret, double wait_s) {
    const std::string out = capture("ip netns exec " + ns(n) + " " + orchard_binary() + " cluster --json --cluster " + cluster +
                                    " --secret " + secret + " --wait " + std::to_string(wait_s * testing::timeout_factor()) +
                                    " 2>/dev/null");
    return nlohmann::json::parse(out, nullptr, false);
  }

  std::string tag_;
  std::vector<std::string> made_;
  std::vector<pid_t> agents_;
};

}  // namespace orchard::cluster

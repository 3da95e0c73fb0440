#pragma once
// `orchard agent`: announces this machine, listens for the others of its cluster, measures the
// link to each of them per interface pair, answers link probes and topology queries on its TCP
// port, and starts ranks of jobs on request (rank_service.h). Runs until `stop` turns true.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "cluster/discovery.h"
#include "cluster/link_probe.h"
#include "cluster/topology.h"

namespace orchard::cluster {

struct AgentOptions {
  std::string cluster = "orchard";
  std::string secret;                   // empty: an open cluster (anyone who knows the name)
  uint16_t port = kDiscoveryPort;       // UDP announcements
  uint16_t agent_port = kAgentPort;     // TCP probes and queries
  std::string models_dir;               // *.gguf files here are announced
  std::string cache_dir;                // where ranks it starts keep received shards (empty: their default)
  bool measure_machine = true;          // run probe_machine() once at start
  int probe_threads = 0;
  std::chrono::milliseconds announce_every{1000};
  std::chrono::milliseconds probe_every{30000};  // re-measure each link this often
  std::chrono::milliseconds forget_after{10000}; // a machine silent this long is gone
  int max_connections = 32;                       // read at once on the TCP port; more are closed at once
  ProbeOptions probe;
};

class Agent {
 public:
  explicit Agent(AgentOptions options);
  // Blocks until stop is true (checked at least every 200 ms).
  void run(const std::atomic<bool>& stop);
  // This machine and the live peers, with every link measured so far.
  Topology topology() const;
  const Announcement& self() const { return self_; }

 private:
  void probe_peers(const std::atomic<bool>& stop);
  Announcement announcement() const;

  struct Peer {
    Announcement announcement;
    Clock::time_point last_heard;
    Clock::time_point last_probed;
    bool probed = false;
  };

  AgentOptions options_;
  std::atomic<bool> failed_{false};  // the announce loop died: the other threads end too
  Announcement self_;
  mutable std::mutex mutex_;
  std::map<std::string, Peer> peers_;             // by node id
  std::map<std::string, LinkMeasurement> links_;  // by "peer|from_addr|to_addr"
};

// The cluster as seen from here: the local agent's topology when one answers on
// 127.0.0.1:agent_port, else the announcements heard for `wait` (links as their agents
// measured them).
Topology find_cluster(const std::string& cluster, const std::string& secret, uint16_t port, uint16_t agent_port,
                      std::chrono::milliseconds wait);

// The cluster `orchard serve` shows on its cluster page: the local agent's topology when one
// answers on 127.0.0.1:agent_port within `wait`, else this machine alone (nothing measured), so
// the page works without an agent and never keeps a request waiting on announcements.
Topology local_cluster(const std::string& cluster, const std::string& secret, uint16_t agent_port,
                       std::chrono::milliseconds wait);

}  // namespace orchard::cluster

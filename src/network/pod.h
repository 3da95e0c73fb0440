#pragma once
// Pods: machines of one owner already cabled together (Macs on Thunderbolt), lent as one unit.
// Every member's agent declares the pod: an id and the MLX-style hostfile of its machines (the
// file `orchard launch --hostfile` reads, the same file on every member). A member cannot know
// its peers' node keys, so it registers its place in the file instead; the coordinator forms
// the pod once every host of the file has registered (coordinator.cpp). The pod's jobs go to
// the file's first host, which runs each as a pipeline over the hosts: `orchard launch` starts
// one rank per host over ssh, rank 0 (on the leader) reads the model file and sends every other
// rank its shard, and rank 0's output streams back through the leader's agent.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/bootstrap.h"
#include "network/node_agent.h"
#include "network/placement.h"
#include "parallel/launch.h"

namespace orchard::network {

struct PodConfig {
  std::string id;
  std::string hostfile;  // absolute path
  std::string digest;    // SHA-256 of the hostfile's bytes: members must hold the same file
  std::vector<parallel::HostEntry> hosts;
  int rank = 0;          // this machine's host in the file; 0 leads
  uint16_t port = comm::kDefaultBasePort;  // rank r listens on port + r unless its entry says
  std::string ssh_command = "ssh";
  std::string binary;    // orchard on every host; default: this executable's path
  double comm_timeout_s = 10;
  // The cluster whose agents start the ranks of hosts marked "agent": true (orchard launch's
  // --cluster and secret).
  std::string cluster = "orchard", cluster_secret;
};

// Reads and checks the hostfile (at least two hosts). rank < 0: this machine's place, found by
// matching its IPv4 addresses and hostname against the entries. Throws Error naming the file
// and what is wrong.
PodConfig load_pod(const std::string& id, const std::string& hostfile, int rank, uint16_t port);

// The "pod" of this member's registration: {"id", "size", "rank", "hostfile": digest, "links"}.
nlohmann::json pod_registration(const PodConfig& pod);

// Runs a pod job from its leader: starts `orchard launch` over the pod's hosts with
// `orchard node pod-rank` as each rank, streams rank 0's text, and stops every rank (SIGTERM
// to the launcher, which ends the ranks it started) when on_text returns false. The model must
// be in models_dir on the leader; the other hosts need none. Cannot check jobs (nullopt).
std::unique_ptr<Engine> make_pod_engine(PodConfig pod, const std::string& models_dir, int threads,
                                        int32_t max_context, int token_delay_ms);

struct PodRankOptions {
  std::string model_path;    // read on rank 0; a rank without the file receives its shard
  std::string request_file;  // the job's request, read on rank 0 and sent to the others
  int threads = 0;
  int32_t max_context = 4096;
  int token_delay_ms = 0;
};

// One rank of a pod job, as `orchard launch` starts it (the group comes from the environment).
// Rank 0 writes one JSON object per line to stdout: {"text": piece} for each token, then
// {"result": {"text", "finish_reason", "prompt_tokens", "completion_tokens", "tok_s",
// "prompt_ids", "output_ids", "ranks": [{"rank", "pid", "host", "layers": [begin, end),
// "shard_received"}]}}. Every rank logs its part on stderr.
void run_pod_rank(const PodRankOptions& options);

}  // namespace orchard::network

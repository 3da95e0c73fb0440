#pragma once
// The node agent: keeps the machine's key, registers with the network, offers the machine while
// its owner is away (or always, for a dedicated seat), long-polls for work over outbound
// connections only (it works behind NAT), runs jobs on an engine and streams their output back.
// When the owner returns it stops offering within a second and hands its job back.
#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "network/identity.h"
#include "network/idle.h"
#include "network/verify.h"

namespace orchard::network {

struct EngineResult {
  std::string text;
  std::string finish_reason = "stop";  // "stop" | "length"
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double tok_s = 0;
  std::vector<int32_t> prompt_ids, output_ids;  // empty when the engine cannot tell (no checks)
};

// What runs a job. on_text gets each new piece of text; returning false stops the job.
class Engine {
 public:
  virtual ~Engine() = default;
  // [{"name", "bytes", "kv_bytes_per_token", "context_length", "active_bytes_per_token"}]; the last
  // (weights a decode step reads) may be left out, and then all the bytes count.
  virtual nlohmann::json models() = 0;
  virtual EngineResult run(const std::string& model, const nlohmann::json& request,
                           const std::function<bool(const std::string&)>& on_text) = 0;
  // nullopt: this engine cannot check (no logits).
  virtual std::optional<CheckResult> check(const std::string& model, const nlohmann::json& request) = 0;
};

// The built-in engine over the GGUF files in models_dir (a model's name is its file name without
// .gguf). token_delay_ms slows each token (demos and tests of jobs killed mid-way).
std::unique_ptr<Engine> make_builtin_engine(const std::string& models_dir, int threads, int32_t max_context,
                                            int token_delay_ms = 0);
// Forwards jobs to a local OpenAI-compatible server (mlx-lm, llama.cpp's server, exo). Sizes of
// its models come from models_dir when the files are there.
std::unique_ptr<Engine> make_forwarding_engine(const std::string& base_url, const std::string& models_dir);

struct NodeAgentOptions {
  std::string network_url;     // http://host:port
  std::string key_file;
  std::string name, region, chip;
  int64_t memory_bytes = 0;    // offered
  double bandwidth_gbs = 0;
  IdleOptions idle;
  int64_t heartbeat_ms = 2000;
  int64_t poll_wait_ms = 10000;
  int64_t request_timeout_ms = 10000;  // every call to the coordinator, beyond the poll's wait
  int64_t retry_for_ms = 120000;       // how long a finished job's report is retried
  nlohmann::json pod;                  // this member's pod registration (pod.h), null when none
};

// Facts about this machine an agent describes: chip name, memory, a bandwidth estimate.
std::string detect_chip();
int64_t detect_memory_bytes();

class NodeAgent {
 public:
  // pod_engine runs the jobs placed on this machine's pod (it leads the pod); without one, such
  // a job runs on `engine` alone.
  NodeAgent(NodeAgentOptions options, std::unique_ptr<Engine> engine, std::unique_ptr<Engine> pod_engine = nullptr);
  ~NodeAgent();
  // Runs until stop becomes true. Throws Error when the network refuses the node for good
  // (banned).
  void run(const std::atomic<bool>& stop);
  const std::string& node_id() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One signed request to the network; returns the JSON body. Throws ApiError-like Error with the
// status for a refusal, TimeoutError when the coordinator does not answer in time.
nlohmann::json signed_call(const NodeKey& key, const std::string& network_url, const std::string& method,
                           const std::string& path, const nlohmann::json& body, int64_t timeout_ms);

}  // namespace orchard::network

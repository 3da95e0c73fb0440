#pragma once
// The coordinator's service core: API keys with quotas and rate limits, node registration and
// liveness, jobs with leases, placement, completion with the ledger, and spot checks. No HTTP:
// http_api.cpp maps requests onto these calls (after checking node signatures), and tests call
// them directly. Thread-safe; waits (long-poll, output streaming) take deadlines.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "network/job_book.h"
#include "network/job_request.h"
#include "network/node_registry.h"
#include "network/placement.h"
#include "network/settlement.h"
#include "network/store/store.h"
#include "network/token_check.h"
#include "network/world_totals.h"

namespace orchard::network {

namespace world {
class Population;
}

// A refusal the client can act on, with the HTTP status it maps to.
class ApiError : public Error {
 public:
  ApiError(int status, const std::string& message) : Error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

struct CoordinatorOptions {
  int64_t lease_ms = 15000;          // a job's lease: renewed by the holder's progress reports
  int64_t offline_after_ms = 15000;  // a node unheard of this long is offline
  double verify_fraction = 0.05;     // share of verifiable jobs checked on a second node
  int64_t ban_after_mismatches = 3;
  int64_t default_quota_tokens = 0;  // for new keys; 0: unlimited
  int64_t default_rate_per_min = 0;
  uint64_t seed = 0;                 // 0: random (which jobs get checked)
  // Vocabularies of models by the name jobs use: a completion's ids are checked against its text
  // and its prompt counted exactly (token_check.h); other models get the byte bounds.
  std::map<std::string, ModelVocab> vocabs;
  // One of several coordinators sharing a PostgreSQL database (see Replica): starts as a
  // follower, which takes clients' jobs and leaves placement and nodes to the leader, until
  // become_leader().
  bool replica = false;
  // How long an ended job's streamed text stays in memory: long enough for a client that was
  // streaming it to read the end, and to see what a cancelled or failed job had written (a
  // completed job's text is in the store).
  int64_t ended_text_kept_ms = 10 * 60 * 1000;
};

int64_t wall_clock_ms();

// A client's job as the HTTP edge reads it (POST /v1/jobs, /v1/chat/completions): its model and
// its request, checked once, then passed to Coordinator::submit typed.
struct Submission {
  std::string model;
  JobRequest request;
  bool seeded = false;  // the client chose the seed; else the coordinator draws one
  // body: {"model", "messages" | "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed"}.
  // Throws ApiError 400 naming the field and what it must be.
  static Submission from_json(const nlohmann::json& body);
};

struct Output {
  std::string text;      // from the requested offset
  bool done = false;
  std::string state;     // job state name
  std::string finish_reason;
};

class Coordinator {
 public:
  Coordinator(Store& store, CoordinatorOptions options, Clock clock = wall_clock_ms);
  ~Coordinator();

  // Clients. authenticate throws ApiError 401; the others take the authenticated key.
  KeyRecord authenticate(const std::string& secret);
  // Returns the job as job_json. 404 unknown model, 429 quota or rate: a job reserves
  // prompt_token_bound + max_tokens of its key's quota until it settles at the counted tokens, or
  // is cancelled or fails.
  nlohmann::json submit(const KeyRecord& key, Submission submission);
  nlohmann::json job_json(const KeyRecord& key, const std::string& id);  // 404 for another key's job
  nlohmann::json cancel(const KeyRecord& key, const std::string& id);
  // The job's output from byte `offset`, waiting until there is more or it is done or the
  // deadline passes.
  Output wait_output(const KeyRecord& key, const std::string& id, size_t offset,
                     std::chrono::steady_clock::time_point deadline);
  nlohmann::json models();  // OpenAI /v1/models shape
  // Public, for the World page (docs/world.md): what only the coordinator knows, without the
  // machines: tok_s generated and jobs_per_min completed over the last minute, queue,
  // credits_by_seat earned by nodes per seat class, pods, models. Cheap: no database read.
  nlohmann::json world_totals();
  // The World's machines: every node is put into `population` now, and each change (registers,
  // starts or stops offering, falls silent, is banned, serves a job) is queued into it as it
  // happens, under the coordinator's lock (Population only queues). nullptr detaches.
  void attach_world(std::shared_ptr<world::Population> population);

  // Nodes (already authenticated by signature: node_id is the public key).
  void register_node(const std::string& node_id, const nlohmann::json& description);
  // state: {"offering": bool}. Returns {"ok": true} or 403 when banned / 404 unregistered.
  nlohmann::json heartbeat(const std::string& node_id, const nlohmann::json& state);
  // The next job for this node, or null at the deadline.
  nlohmann::json poll(const std::string& node_id, std::chrono::steady_clock::time_point deadline);
  // Streams text (bytes [offset, offset + text.size()) of the attempt's output) and renews the
  // lease. 409 when the lease is no longer this node's (it must stop).
  void progress(const std::string& node_id, const std::string& job_id, int64_t attempt, size_t offset,
                const std::string& text);
  // result: {"text", "finish_reason", "prompt_tokens", "completion_tokens", "tok_s",
  // ["prompt_ids", "output_ids"]} or for checks {"ok", "checked", "mismatch_at"}. What is billed
  // and paid is counted here: the ids sent (claimed counts must agree), at most the job's
  // max_tokens and prompt_token_bound; 400 naming the field otherwise. A failed check refunds the
  // client and fines the producer ledger::kFineMultiple times the job's credits.
  // Idempotent for the same attempt; 409 for a lost lease.
  nlohmann::json complete(const std::string& node_id, const std::string& job_id, int64_t attempt,
                          const nlohmann::json& result);
  // The node gives the job back (reason: kModelMissing, kCannotRun..., or any words). After one of
  // the first two it is not offered that job again, nor after kModelMissing any job of that model
  // (until it registers again); every hand-back costs reputation. A job that every node able to
  // hold it cannot run, or that was leased kMaxAttempts times, fails with the reasons.
  void hand_back(const std::string& node_id, const std::string& job_id, int64_t attempt,
                 const std::string& reason = "");
  nlohmann::json node_status(const std::string& node_id);  // record, balance, statement

  // Expires leases and silent nodes, and places what waits. Call about once a second. A
  // follower does nothing: its leader does this for every replica.
  void tick();

  // Replicas. Every replica keeps the nodes and their models (read from the database, refreshed
  // when the leader notices a registration) so it can take and price clients' jobs; the leader
  // alone holds the queue, the placement state and the nodes' inboxes, and serves nodes.
  bool leading() const { return leading_; }
  // Loads the queue and the leases from the database (as after a restart) and starts placing.
  void become_leader();
  // Notices replicas send each other on the database, each "kind:ID": "job" submitted on a
  // follower, "cancel", "done" (a job ended), "node" (registered). on_notices takes a payload
  // of several, separated by spaces; take_notices gives what this replica has to send (a
  // replica's only: a lone coordinator keeps none).
  void on_notices(const std::string& payload);
  std::vector<std::string> take_notices();
  std::string add_key(const std::string& name, int64_t quota_tokens, int64_t rate_per_min);
  Store& store() { return store_; }
  size_t queued() const;
  // Ends every long wait now, and each later one at once (polls answer no job, output waits
  // what there is): the server is stopping, and must not wait out its clients' and nodes' waits.
  void end_waits();
  // Jobs whose streamed text this replica holds: running ones, and ended ones for a while after.
  size_t live_jobs() const;

 private:
  struct Live {  // what clients waiting on a job see
    std::string text;
    bool done = false;
  };
  // A waiter holds its entry while it waits unlocked, so the entry outlives its removal.
  Live& live_locked(const std::string& job_id);
  std::shared_ptr<Live> live_entry_locked(const std::string& job_id);
  // Marks a job's text ended, and forgets texts that ended more than ended_text_kept_ms ago.
  void live_done_locked(const std::string& job_id);
  void recover_nodes_locked();  // nodes, models and pods from the store
  void recover_jobs_locked();   // the queue and the leases (the leader's)
  void load_node_locked(const NodeRecord& r);  // into the registry and the placement
  void cancelled_locked(const std::string& job_id);  // cancelled in the store: out of the queue and inboxes
  void finished_locked(const std::string& job_id);   // tells followers' waiting clients
  void dispatch_locked();
  // The holder's lease ends without a result (the store has requeued it): back to the book, the
  // holder's reputation lowered unless the lease was withdrawn, the job failed when the book says.
  void return_locked(const std::string& job_id, const std::string& node_id, int64_t attempt, JobBook::Return why,
                     const std::string& reason = "");
  void withdraw_inbox_locked(const std::string& node_id);  // what it has not picked up goes elsewhere
  // Some node outside ruled_out could hold the job.
  bool runnable_locked(const BookJob& job, const std::unordered_set<std::string>& ruled_out) const;
  BookJob book_job(const JobRecord& job);
  void fail_locked(const std::string& job_id, const std::string& error);
  void form_pod_locked(const nlohmann::json& pod);  // pod: as checked at registration
  void place_node_locked(const NodeSpec& spec);  // a node (re)described to the placement
  void refresh_availability_locked(const std::string& node_id);
  std::optional<Demand> demand_for(const BookJob& job) const;  // nullopt: no node announced its model
  nlohmann::json job_to_json(const JobRecord& job);
  void maybe_schedule_check_locked(const JobRecord& job, const JobRequest& request, const nlohmann::json& result);
  nlohmann::json complete_check_locked(const std::string& node_id, const JobRecord& job, int64_t attempt,
                                       const nlohmann::json& result);

  Store& store_;
  CoordinatorOptions options_;
  Clock clock_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  Placement placement_;
  NodeRegistry registry_;  // the nodes and their models, guarded by mu_
  JobBook book_;  // the queue and the leases (the leader's; no database read per dispatch)
  Settlement settlement_;
  std::unordered_map<std::string, std::shared_ptr<Live>> live_;
  std::deque<std::pair<int64_t, std::string>> ended_live_;  // (when it ended, job), oldest first
  std::atomic<bool> leading_{true};
  bool waits_ended_ = false;  // guarded by mu_
  void tell(std::string notice);
  std::mutex outbox_mu_;
  std::vector<std::string> outbox_;  // notices for the other replicas, sent in batches by Replica
  std::unordered_set<std::string> recovered_;  // queued jobs loaded on becoming leader, before their notices
  std::mt19937_64 rng_;
  std::shared_ptr<world::Population> world_;
  void describe_to_world_locked(const std::string& node_id);  // its state as the World shows it
  void put_to_world_locked(const NodeRecord& r);               // and the jobs it served
  WorldTotals totals_;
};

}  // namespace orchard::network

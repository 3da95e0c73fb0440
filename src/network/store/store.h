#pragma once
// The coordinator's durable state: API keys, nodes, jobs with leases, and the double-entry
// ledger, over SQLite or PostgreSQL with one schema and one set of migrations. Every method is
// one transaction; a job's completion and its ledger postings commit together. Thread-safe (one
// connection, serialized). Times are milliseconds since the Unix epoch, passed in by the caller
// so tests and the simulator control the clock.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "network/ledger.h"
#include "network/store/db.h"

namespace orchard::network {

struct KeyRecord {
  std::string id;
  std::string name;
  int64_t quota_tokens = 0;  // 0: unlimited
  int64_t rate_per_min = 0;  // submissions per minute; 0: unlimited
  int64_t tokens_used = 0;
  bool banned = false;
};

struct NodeRecord {
  std::string id;           // hex Ed25519 public key
  std::string description;  // the signed JSON description, as sent
  std::string seat;         // "shared" | "dedicated"
  std::string region;
  int64_t registered_at = 0;
  int64_t last_seen = 0;
  bool online = false;
  int64_t jobs_served = 0;
  int64_t jobs_failed = 0;  // leases lost
  double reputation = 1.0;  // (0, 1]: lowered by lost leases and failed checks
  int64_t mismatches = 0;
  bool banned = false;
  double tok_s = 0;         // measured generation speed, last job
};

enum class JobState { Queued, Leased, Completed, Failed, Cancelled };
const char* job_state_name(JobState s);
JobState parse_job_state(const std::string& s);

struct JobRecord {
  std::string id;
  std::string key_id;
  std::string kind = "generate";  // "generate" | "verify"
  std::string model;
  std::string request;  // JSON the node receives
  JobState state = JobState::Queued;
  std::string node_id;  // the lease holder (or the last one)
  int64_t attempt = 0;  // lease number: a stale holder's report is refused
  int64_t lease_expires = 0;
  int64_t created_at = 0;
  int64_t updated_at = 0;
  std::string result;   // JSON from the node when completed
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::string verify_of;     // verify jobs: the job being checked
  std::string verify_state;  // generate jobs: "" | "pending" | "ok" | "mismatch"
  std::string error;
};

struct Completion {
  std::string result;  // JSON
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  double tok_s = 0;
  std::vector<ledger::Txn> txns;     // posted in the same transaction
  std::string verify_state;          // set on the job ("" leaves it)
  std::string checked_state;         // a check's verdict, set on the job it checked ("" leaves it)
};

enum class CompleteOutcome { Completed, AlreadyCompleted, Refused };

struct StatementLine {
  std::string txn_id, job_id, memo;
  int64_t amount = 0;
  int64_t created_at = 0;
};

class Store {
 public:
  explicit Store(std::unique_ptr<Db> db);
  static Store open(const std::string& url) { return Store(open_db(url)); }
  Store(Store&&) noexcept;
  ~Store();

  // Applies the migrations not yet applied, each in its own transaction; returns the schema
  // version now.
  int64_t migrate();
  int64_t schema_version();
  std::string_view backend() const { return db_->backend(); }

  // Keys: the secret is returned once and stored only as its SHA-256.
  std::pair<KeyRecord, std::string> create_key(const std::string& name, int64_t quota_tokens, int64_t rate_per_min,
                                               int64_t now);
  std::optional<KeyRecord> find_key_by_secret(const std::string& secret);
  std::optional<KeyRecord> get_key(const std::string& id);
  void set_key_banned(const std::string& id, bool banned);

  // Nodes
  void upsert_node(const NodeRecord& n);  // keeps counters of a node seen before
  std::optional<NodeRecord> get_node(const std::string& id);
  std::vector<NodeRecord> list_nodes();
  void set_node_online(const std::string& id, bool online, int64_t now);
  void update_node_trust(const std::string& id, double reputation, int64_t mismatches, bool banned, int64_t jobs_failed);

  // Jobs
  void insert_job(const JobRecord& job);
  std::optional<JobRecord> get_job(const std::string& id);
  std::vector<JobRecord> jobs_in_state(JobState state, int64_t limit = 1000000);
  int64_t count_jobs(JobState state, const std::string& kind = "");  // kind "": every kind
  // queued -> leased by node; returns the new attempt number, or nullopt when not queued.
  std::optional<int64_t> lease_job(const std::string& id, const std::string& node_id, int64_t expires, int64_t now);
  bool renew_lease(const std::string& id, const std::string& node_id, int64_t attempt, int64_t expires);
  // leased -> queued when the holder hands it back or loses its lease.
  bool requeue_job(const std::string& id, const std::string& node_id, int64_t attempt, int64_t now);
  // Every lease expired at `now` goes back to the queue; returns (job, node) pairs.
  std::vector<std::pair<std::string, std::string>> expire_leases(int64_t now);
  // leased by (node, attempt) -> completed, with the ledger postings, in one transaction.
  // Repeating the call for the same node and attempt is AlreadyCompleted (the node retries when
  // the answer was lost); any other holder is Refused.
  CompleteOutcome complete_job(const std::string& id, const std::string& node_id, int64_t attempt,
                               const Completion& c, int64_t now);
  bool fail_job(const std::string& id, const std::string& error, int64_t now);  // queued|leased -> failed
  bool cancel_job(const std::string& id, int64_t now);                          // queued|leased -> cancelled

  // Ledger
  bool post(const ledger::Txn& txn, int64_t now);  // false: posted before (nothing changes)
  int64_t balance(const std::string& account);
  int64_t escrowed(const std::string& job_id);  // the amount settle:<job> put in escrow
  std::vector<StatementLine> statement(const std::string& account, int64_t limit);
  // Sum of all balances (0 when the books balance) and whether every balance equals the sum of
  // its entries.
  std::pair<int64_t, bool> audit();
  // Every transaction with its entries, in id order (the payment audit reads them all).
  std::vector<ledger::Txn> transactions();

 private:
  template <typename F>
  auto in_txn(F&& f);
  void post_locked(const ledger::Txn& txn, int64_t now);
  std::unique_ptr<Db> db_;
  std::unique_ptr<std::mutex> mu_;
};

// Lower-case hex of SHA-256 (key secrets, body hashes).
std::string sha256_hex(std::string_view data);
// n random bytes as hex (ids, secrets, nonces).
std::string random_hex(size_t n_bytes);

}  // namespace orchard::network

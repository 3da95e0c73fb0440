#pragma once
// The coordinator's durable state: API keys, nodes, jobs with leases, and the double-entry
// ledger, over SQLite or PostgreSQL with one schema and one set of migrations. Every method is
// one transaction; a job's completion and its ledger postings commit together. Thread-safe: each
// call borrows a connection from a pool (SQLite: one, as its writes are serialized anyway;
// PostgreSQL: up to kPostgresConnections, so calls from many threads run side by side). Times are
// milliseconds since the Unix epoch, passed in by the caller so tests and the simulator control
// the clock.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
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
  int64_t reserved = 0;  // of its key's quota while queued or leased: the most it may cost
};

// What submit_job decided: the job is in, or its key is over its quota or its rate, or was
// banned since it was looked up.
struct SubmitOutcome {
  enum class Kind { Accepted, OverQuota, OverRate, Banned } kind = Kind::Accepted;
  int64_t used = 0, reserved = 0;  // the key's tokens counted and reserved by unsettled jobs, for the 429
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

// Connections a PostgreSQL store opens at most (each a server process): enough for the
// coordinator's busy handler threads to reach the database side by side.
inline constexpr size_t kPostgresConnections = 16;
// Submissions written by one statement at most, and statements of submissions in flight at once
// (see submit_job): while a few commits wait on the disk, the next batch is already on its way.
inline constexpr size_t kMaxSubmissionBatch = 64;
inline constexpr size_t kSubmissionWriters = 4;
// How long a key found by its secret is taken from memory instead of the database: a ban made
// elsewhere (another replica, by hand) reaches find_key_by_secret within this, while
// submit_job refuses a banned key's job at once whatever the memory says.
inline constexpr std::chrono::milliseconds kKeyMemory{1000};

class Store {
 public:
  // One connection; `more` (when given) opens further ones, up to max_connections in all.
  explicit Store(std::unique_ptr<Db> db, std::function<std::unique_ptr<Db>()> more = nullptr,
                 size_t max_connections = 1);
  static Store open(const std::string& url);
  Store(Store&&) noexcept;
  ~Store();

  // Applies the migrations not yet applied, each in its own transaction; returns the schema
  // version now.
  int64_t migrate();
  int64_t schema_version();
  std::string_view backend() const { return backend_; }

  // Keys: the secret is returned once and stored only as its SHA-256. A key found by its secret
  // is remembered for kKeyMemory (a submission then costs no look-up of its key).
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
  // Inserts a client's job unless its key is over its quota (tokens used plus the reservations
  // of its queued and leased jobs plus job.reserved) or its rate (a token bucket of
  // key.rate_per_min submissions a minute, bursts up to the same number, kept in the key's row).
  // Checked and inserted in one transaction holding the key's row, so every coordinator sharing
  // the database sees the same quota and rate. A key with neither has nothing to count: its
  // job joins the submissions arriving meanwhile from other threads, and one statement inserts
  // them all (one commit, one disk flush, one round trip for up to kMaxSubmissionBatch jobs;
  // no waiting is added: a batch is whatever queued while kSubmissionWriters statements were in
  // flight). The key's ban is checked in that statement.
  SubmitOutcome submit_job(const JobRecord& job, const KeyRecord& key, int64_t now);
  std::optional<JobRecord> get_job(const std::string& id);
  std::vector<JobRecord> get_jobs(const std::vector<std::string>& ids);  // those that exist, in no order
  std::vector<JobRecord> jobs_in_state(JobState state, int64_t limit = 1000000);
  int64_t count_jobs(JobState state, const std::string& kind = "");  // kind "": every kind
  // queued -> leased by node; returns the new attempt number, or nullopt when not queued.
  std::optional<int64_t> lease_job(const std::string& id, const std::string& node_id, int64_t expires, int64_t now);
  bool renew_lease(const std::string& id, const std::string& node_id, int64_t attempt, int64_t expires);
  // leased -> queued when the holder hands it back or loses its lease.
  bool requeue_job(const std::string& id, const std::string& node_id, int64_t attempt, int64_t now);
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

  // Coordinators sharing one database (PostgreSQL)
  // Records a signed request's node/nonce: false when some coordinator recorded it before (a
  // replay). forget_nonces drops those timestamped before `before`.
  bool remember_nonce(const std::string& id, int64_t at);
  void forget_nonces(int64_t before);
  // Where the replica that places jobs (the leader) serves nodes; "" before any has led.
  void set_leader_url(const std::string& url, int64_t now);
  std::string leader_url();
  // Tells every coordinator listening on the database (PostgreSQL NOTIFY on kNoticeChannel, at
  // most 8000 bytes); nothing on SQLite, where one coordinator runs.
  void notify(const std::string& payload);

 private:
  class Conn;
  struct Pool;
  struct Submissions;
  struct KeyMemory;
  Conn conn();
  SubmitOutcome submit_batched(const JobRecord& job);
  template <typename F>
  auto in_txn(F&& f);
  void post_in(Db& db, const ledger::Txn& txn, int64_t now);
  std::unique_ptr<Pool> pool_;
  std::unique_ptr<Submissions> submissions_;
  std::unique_ptr<KeyMemory> keys_;
  std::string backend_;
};

// The PostgreSQL channel coordinators tell each other on (see Replica).
inline constexpr const char* kNoticeChannel = "orchard_coordinators";

// Lower-case hex of SHA-256 (key secrets, body hashes).
std::string sha256_hex(std::string_view data);
// n random bytes as hex (ids, secrets, nonces).
std::string random_hex(size_t n_bytes);

}  // namespace orchard::network

#include "network/store/store.h"

#include <fmt/format.h>
#include <sodium.h>

#include <algorithm>
#include <array>
#include <deque>
#include <unordered_map>

#include "core/error.h"
#include "network/store/migrations.h"

namespace orchard::network {

const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::Queued: return "queued";
    case JobState::Leased: return "leased";
    case JobState::Completed: return "completed";
    case JobState::Failed: return "failed";
    case JobState::Cancelled: return "cancelled";
  }
  return "?";
}

JobState parse_job_state(const std::string& s) {
  if (s == "queued") return JobState::Queued;
  if (s == "leased") return JobState::Leased;
  if (s == "completed") return JobState::Completed;
  if (s == "failed") return JobState::Failed;
  if (s == "cancelled") return JobState::Cancelled;
  throw FormatError(error_message("network", "unknown job state '{}'", s));
}

std::string sha256_hex(std::string_view data) {
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(h, reinterpret_cast<const unsigned char*>(data.data()), data.size());
  char hex[2 * sizeof h + 1];
  sodium_bin2hex(hex, sizeof hex, h, sizeof h);
  return hex;
}

std::string random_hex(size_t n_bytes) {
  ORCHARD_CHECK(sodium_init() >= 0, "libsodium failed to initialize");
  std::vector<unsigned char> b(n_bytes);
  randombytes_buf(b.data(), b.size());
  std::string hex(2 * n_bytes + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), b.data(), b.size());
  hex.pop_back();
  return hex;
}

namespace {

constexpr const char* kJobColumns =
    "id, key_id, kind, model, request, state, node_id, attempt, lease_expires, created_at, updated_at, result, "
    "prompt_tokens, completion_tokens, verify_of, verify_state, error, reserved";

JobRecord job_from(const Row& r) {
  JobRecord j;
  j.id = r.str(0);
  j.key_id = r.str(1);
  j.kind = r.str(2);
  j.model = r.str(3);
  j.request = r.str(4);
  j.state = parse_job_state(r.str(5));
  j.node_id = r.str(6);
  j.attempt = r.i64(7);
  j.lease_expires = r.i64(8);
  j.created_at = r.i64(9);
  j.updated_at = r.i64(10);
  j.result = r.str(11);
  j.prompt_tokens = r.i64(12);
  j.completion_tokens = r.i64(13);
  j.verify_of = r.str(14);
  j.verify_state = r.str(15);
  j.error = r.str(16);
  j.reserved = r.i64(17);
  return j;
}

constexpr const char* kNodeColumns =
    "id, description, seat, region, registered_at, last_seen, online, jobs_served, jobs_failed, reputation, "
    "mismatches, banned, tok_s";

NodeRecord node_from(const Row& r) {
  NodeRecord n;
  n.id = r.str(0);
  n.description = r.str(1);
  n.seat = r.str(2);
  n.region = r.str(3);
  n.registered_at = r.i64(4);
  n.last_seen = r.i64(5);
  n.online = r.i64(6) != 0;
  n.jobs_served = r.i64(7);
  n.jobs_failed = r.i64(8);
  n.reputation = r.f64(9);
  n.mismatches = r.i64(10);
  n.banned = r.i64(11) != 0;
  n.tok_s = r.f64(12);
  return n;
}

KeyRecord key_from(const Row& r) {
  return KeyRecord{r.str(0), r.str(1), r.i64(2), r.i64(3), r.i64(4), r.i64(5) != 0};
}

constexpr const char* kKeyColumns = "id, name, quota_tokens, rate_per_min, tokens_used, banned";

}  // namespace

struct Store::Pool {
  std::mutex mu;
  std::condition_variable returned;
  std::vector<std::unique_ptr<Db>> idle;
  size_t opened = 0, max = 1;
  std::function<std::unique_ptr<Db>()> more;
};

// Submissions waiting for the statement that inserts them; one thread at a time writes.
struct Store::Submissions {
  struct Waiting {
    const JobRecord* job = nullptr;
    bool done = false;
    SubmitOutcome outcome;
    std::exception_ptr error;
    // Its own, so that a written batch wakes its threads and the next writer, not every thread
    // waiting (a crowd of wake-ups, all then queueing on one mutex, cost more than the insert).
    std::condition_variable wake;
  };
  std::mutex mu;
  std::deque<Waiting*> queue;
  size_t writing = 0;  // statements in flight
};

struct Store::KeyMemory {
  std::mutex mu;
  std::unordered_map<std::string, std::pair<KeyRecord, std::chrono::steady_clock::time_point>> by_secret_sha;
};

// A connection borrowed from the pool, given back when it goes out of scope.
class Store::Conn {
 public:
  Conn(Pool& pool, std::unique_ptr<Db> db) : pool_(pool), db_(std::move(db)) {}
  Conn(const Conn&) = delete;
  ~Conn() {
    {
      std::lock_guard lock(pool_.mu);
      pool_.idle.push_back(std::move(db_));
    }
    pool_.returned.notify_one();
  }
  Db* operator->() { return db_.get(); }
  Db& operator*() { return *db_; }

 private:
  Pool& pool_;
  std::unique_ptr<Db> db_;
};

Store::Store(std::unique_ptr<Db> db, std::function<std::unique_ptr<Db>()> more, size_t max_connections)
    : pool_(std::make_unique<Pool>()),
      submissions_(std::make_unique<Submissions>()),
      keys_(std::make_unique<KeyMemory>()),
      backend_(db->backend()) {
  pool_->idle.push_back(std::move(db));
  pool_->opened = 1;
  pool_->max = more ? std::max<size_t>(1, max_connections) : 1;
  pool_->more = std::move(more);
}
Store::Store(Store&&) noexcept = default;
Store::~Store() = default;

Store Store::open(const std::string& url) {
  std::unique_ptr<Db> db = open_db(url);
  if (db->backend() != "postgres") return Store(std::move(db));
  return Store(std::move(db), [url] { return open_postgres(url); }, kPostgresConnections);
}

Store::Conn Store::conn() {
  std::unique_lock lock(pool_->mu);
  if (pool_->idle.empty() && pool_->opened < pool_->max) {
    ++pool_->opened;  // counted before connecting, so two threads cannot both pass the limit
    lock.unlock();
    try {
      return Conn(*pool_, pool_->more());
    } catch (...) {
      std::lock_guard relock(pool_->mu);
      --pool_->opened;
      throw;
    }
  }
  pool_->returned.wait(lock, [&] { return !pool_->idle.empty(); });
  std::unique_ptr<Db> db = std::move(pool_->idle.back());
  pool_->idle.pop_back();
  return Conn(*pool_, std::move(db));
}

template <typename F>
auto Store::in_txn(F&& f) {
  Conn db = conn();
  db->begin();
  try {
    if constexpr (std::is_void_v<decltype(f(*db))>) {
      f(*db);
      db->commit();
    } else {
      auto r = f(*db);
      db->commit();
      return r;
    }
  } catch (...) {
    db->rollback();
    throw;
  }
}

namespace {

// PostgreSQL advisory lock keys (any 64-bit numbers other programs on the database do not use).
constexpr int64_t kMigrationLock = 0x6f72636861726401;  // "orchard" 01

int64_t version_in(Db& db) {
  db.exec("CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)");
  auto rows = db.query("SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
  return rows.empty() ? 0 : rows[0].i64(0);
}

}  // namespace

int64_t Store::schema_version() {
  Conn db = conn();
  return version_in(*db);
}

int64_t Store::migrate() {
  Conn db = conn();
  // Coordinators starting together on one PostgreSQL database take turns: the later ones find
  // the migrations applied. (SQLite's BEGIN IMMEDIATE serializes them already.)
  const bool postgres = backend_ == "postgres";
  if (postgres) db->query("SELECT pg_advisory_lock($1)", {kMigrationLock});
  int64_t version = 0;
  try {
    version = version_in(*db);
    for (const Migration& m : migrations()) {
      if (m.version <= version) continue;
      db->begin();
      try {
        auto rows = db->query("SELECT COUNT(*) FROM schema_migrations WHERE version = $1", {m.version});
        if (rows[0].i64(0) == 0) {
          for (const std::string& sql : m.statements) db->exec(sql);
          db->exec("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)", {m.version, int64_t{0}});
        }
        db->commit();
      } catch (...) {
        db->rollback();
        throw;
      }
      version = m.version;
    }
  } catch (...) {
    if (postgres) try {
        db->query("SELECT pg_advisory_unlock($1)", {kMigrationLock});
      } catch (const Error&) {
        // The session is gone, and its lock with it.
      }
    throw;
  }
  if (postgres) db->query("SELECT pg_advisory_unlock($1)", {kMigrationLock});
  return version;
}

std::pair<KeyRecord, std::string> Store::create_key(const std::string& name, int64_t quota_tokens,
                                                    int64_t rate_per_min, int64_t now) {
  KeyRecord k{fmt::format("k{}", random_hex(8)), name, quota_tokens, rate_per_min, 0, false};
  std::string secret = fmt::format("ok-{}", random_hex(24));
  in_txn([&](Db& db) {
    db.exec("INSERT INTO api_keys (id, name, secret_sha256, created_at, quota_tokens, rate_per_min) "
              "VALUES ($1, $2, $3, $4, $5, $6)",
              {k.id, name, sha256_hex(secret), now, quota_tokens, rate_per_min});
    db.exec("INSERT INTO accounts (id, balance) VALUES ($1, 0) ON CONFLICT (id) DO NOTHING",
              {ledger::key_account(k.id)});
  });
  return {k, secret};
}

std::optional<KeyRecord> Store::find_key_by_secret(const std::string& secret) {
  // Bounded: a full memory is emptied rather than aged entry by entry (only real keys enter it).
  constexpr size_t kMaxRemembered = 4096;
  const std::string sha = sha256_hex(secret);
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(keys_->mu);
    auto it = keys_->by_secret_sha.find(sha);
    if (it != keys_->by_secret_sha.end() && now - it->second.second < kKeyMemory) return it->second.first;
  }
  Conn db = conn();
  auto rows = db->query(std::string("SELECT ") + kKeyColumns + " FROM api_keys WHERE secret_sha256 = $1", {sha});
  if (rows.empty()) return std::nullopt;  // not remembered: a key made on another replica works at once
  KeyRecord key = key_from(rows[0]);
  std::lock_guard lock(keys_->mu);
  if (keys_->by_secret_sha.size() >= kMaxRemembered) keys_->by_secret_sha.clear();
  keys_->by_secret_sha[sha] = {key, now};
  return key;
}

std::optional<KeyRecord> Store::get_key(const std::string& id) {
  Conn db = conn();
  auto rows = db->query(std::string("SELECT ") + kKeyColumns + " FROM api_keys WHERE id = $1", {id});
  if (rows.empty()) return std::nullopt;
  return key_from(rows[0]);
}

void Store::set_key_banned(const std::string& id, bool banned) {
  {
    Conn db = conn();
    db->exec("UPDATE api_keys SET banned = $2 WHERE id = $1", {id, int64_t{banned}});
  }
  std::lock_guard lock(keys_->mu);
  std::erase_if(keys_->by_secret_sha, [&](const auto& entry) { return entry.second.first.id == id; });
}

void Store::upsert_node(const NodeRecord& n) {
  in_txn([&](Db& db) {
    db.exec(
        "INSERT INTO nodes (id, description, seat, region, registered_at, last_seen, online) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET description = $2, seat = $3, "
        "region = $4, last_seen = $6, online = $7",
        {n.id, n.description, n.seat, n.region, n.registered_at, n.last_seen, int64_t{n.online}});
    db.exec("INSERT INTO accounts (id, balance) VALUES ($1, 0) ON CONFLICT (id) DO NOTHING",
              {ledger::node_account(n.id)});
  });
}

std::optional<NodeRecord> Store::get_node(const std::string& id) {
  Conn db = conn();
  auto rows = db->query(std::string("SELECT ") + kNodeColumns + " FROM nodes WHERE id = $1", {id});
  if (rows.empty()) return std::nullopt;
  return node_from(rows[0]);
}

std::vector<NodeRecord> Store::list_nodes() {
  Conn db = conn();
  std::vector<NodeRecord> out;
  for (const Row& r : db->query(std::string("SELECT ") + kNodeColumns + " FROM nodes ORDER BY registered_at, id"))
    out.push_back(node_from(r));
  return out;
}

void Store::set_node_online(const std::string& id, bool online, int64_t now) {
  Conn db = conn();
  db->exec("UPDATE nodes SET online = $2, last_seen = $3 WHERE id = $1", {id, int64_t{online}, now});
}

void Store::update_node_trust(const std::string& id, double reputation, int64_t mismatches, bool banned,
                              int64_t jobs_failed) {
  Conn db = conn();
  db->exec("UPDATE nodes SET reputation = $2, mismatches = $3, banned = $4, jobs_failed = $5 WHERE id = $1",
            {id, reputation, mismatches, int64_t{banned}, jobs_failed});
}

namespace {

void insert_job_in(Db& db, const JobRecord& j) {
  db.exec(std::string("INSERT INTO jobs (") + kJobColumns +
              ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)",
          {j.id, j.key_id, j.kind, j.model, j.request, std::string(job_state_name(j.state)), j.node_id, j.attempt,
           j.lease_expires, j.created_at, j.updated_at, j.result, j.prompt_tokens, j.completion_tokens, j.verify_of,
           j.verify_state, j.error, j.reserved});
}

}  // namespace

void Store::insert_job(const JobRecord& j) {
  Conn db = conn();
  insert_job_in(*db, j);
}

namespace {

// Inserts the jobs whose keys are not banned, in one statement; returns the ids inserted.
std::vector<std::string> insert_submissions(Db& db, const std::vector<const JobRecord*>& jobs) {
  // CAST types each parameter as its column in both databases (PostgreSQL would read an untyped
  // one in a VALUES list as text); the columns of a VALUES list are column1.. in both.
  constexpr std::array<const char*, 18> kTypes = {"TEXT",   "TEXT",   "TEXT",   "TEXT",   "TEXT",   "TEXT",
                                                  "TEXT",   "BIGINT", "BIGINT", "BIGINT", "BIGINT", "TEXT",
                                                  "BIGINT", "BIGINT", "TEXT",   "TEXT",   "TEXT",   "BIGINT"};
  std::string sql = std::string("INSERT INTO jobs (") + kJobColumns + ") SELECT ";
  for (size_t c = 0; c < kTypes.size(); ++c) sql += fmt::format("{}v.column{}", c ? ", " : "", c + 1);
  sql += " FROM (VALUES ";
  std::vector<Value> params;
  params.reserve(jobs.size() * kTypes.size());
  for (size_t r = 0; r < jobs.size(); ++r) {
    sql += r ? ", (" : "(";
    for (size_t c = 0; c < kTypes.size(); ++c)
      sql += fmt::format("{}CAST(${} AS {})", c ? ", " : "", r * kTypes.size() + c + 1, kTypes[c]);
    sql += ")";
    const JobRecord& j = *jobs[r];
    for (Value v : {Value{j.id}, Value{j.key_id}, Value{j.kind}, Value{j.model}, Value{j.request},
                    Value{std::string(job_state_name(j.state))}, Value{j.node_id}, Value{j.attempt},
                    Value{j.lease_expires}, Value{j.created_at}, Value{j.updated_at}, Value{j.result},
                    Value{j.prompt_tokens}, Value{j.completion_tokens}, Value{j.verify_of}, Value{j.verify_state},
                    Value{j.error}, Value{j.reserved}})
      params.push_back(std::move(v));
  }
  sql += ") AS v WHERE EXISTS (SELECT 1 FROM api_keys k WHERE k.id = v.column2 AND k.banned = 0) RETURNING id";
  std::vector<std::string> inserted;
  for (const Row& r : db.query(sql, params)) inserted.push_back(r.str(0));
  return inserted;
}

}  // namespace

SubmitOutcome Store::submit_batched(const JobRecord& job) {
  Submissions& s = *submissions_;
  Submissions::Waiting me;
  me.job = &job;
  std::unique_lock lock(s.mu);
  s.queue.push_back(&me);
  while (!me.done) {
    // Waits while enough statements are in flight, or others are ahead of it, or a batch took it.
    if (s.writing >= kSubmissionWriters || s.queue.empty() || s.queue.front() != &me) {
      me.wake.wait(lock);
      continue;
    }
    // A statement may start, and this thread is first in line: it writes whatever has queued,
    // its own job first.
    ++s.writing;
    const size_t n = std::min(s.queue.size(), kMaxSubmissionBatch);
    std::vector<Submissions::Waiting*> batch(s.queue.begin(), s.queue.begin() + static_cast<std::ptrdiff_t>(n));
    s.queue.erase(s.queue.begin(), s.queue.begin() + static_cast<std::ptrdiff_t>(n));
    if (!s.queue.empty() && s.writing < kSubmissionWriters) s.queue.front()->wake.notify_one();
    lock.unlock();
    std::vector<const JobRecord*> jobs;
    for (const auto* w : batch) jobs.push_back(w->job);
    std::exception_ptr error;
    std::vector<std::string> inserted;
    try {
      Conn db = conn();
      inserted = insert_submissions(*db, jobs);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    for (auto* w : batch) {
      w->error = error;
      if (!error && std::find(inserted.begin(), inserted.end(), w->job->id) == inserted.end())
        w->outcome.kind = SubmitOutcome::Kind::Banned;
      w->done = true;
      if (w != &me) w->wake.notify_one();
    }
    --s.writing;
    if (!s.queue.empty()) s.queue.front()->wake.notify_one();  // it writes the next batch
  }
  if (me.error) std::rethrow_exception(me.error);
  return me.outcome;
}

namespace {

// Holds the key's row to the end of the transaction (another coordinator's submission for this
// key waits here, then sees this one's job and bucket); false when the key is banned.
bool hold_key(Db& db, const std::string& key_id) {
  return db.exec("UPDATE api_keys SET rate_at = rate_at WHERE id = $1 AND banned = 0", {key_id}) == 1;
}

}  // namespace

SubmitOutcome Store::submit_job(const JobRecord& job, const KeyRecord& key, int64_t now) {
  if (key.quota_tokens <= 0 && key.rate_per_min <= 0) return submit_batched(job);
  return in_txn([&](Db& db) {
    SubmitOutcome out;
    if (!hold_key(db, key.id)) {
      out.kind = SubmitOutcome::Kind::Banned;
      return out;
    }
    if (key.quota_tokens > 0) {
      out.used = db.query("SELECT tokens_used FROM api_keys WHERE id = $1", {key.id}).at(0).i64(0);
      out.reserved = db.query("SELECT COALESCE(SUM(reserved), 0) FROM jobs WHERE key_id = $1 AND "
                              "state IN ('queued', 'leased')",
                              {key.id})[0]
                         .i64(0);
      if (out.used + out.reserved + job.reserved > key.quota_tokens) {
        out.kind = SubmitOutcome::Kind::OverQuota;
        return out;
      }
    }
    if (key.rate_per_min > 0) {
      Row b = db.query("SELECT rate_tokens, rate_at FROM api_keys WHERE id = $1", {key.id}).at(0);
      const double rate = static_cast<double>(key.rate_per_min);
      const int64_t at = b.i64(1);
      const double tokens =
          at == 0 ? rate : std::min(rate, b.f64(0) + static_cast<double>(std::max<int64_t>(0, now - at)) * rate / 60000.0);
      if (tokens < 1) {
        out.kind = SubmitOutcome::Kind::OverRate;
        return out;
      }
      db.exec("UPDATE api_keys SET rate_tokens = $2, rate_at = $3 WHERE id = $1", {key.id, tokens - 1, std::max(now, at)});
    }
    insert_job_in(db, job);
    return out;
  });
}

std::optional<JobRecord> Store::get_job(const std::string& id) {
  Conn db = conn();
  auto rows = db->query(std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = $1", {id});
  if (rows.empty()) return std::nullopt;
  return job_from(rows[0]);
}

std::vector<JobRecord> Store::get_jobs(const std::vector<std::string>& ids) {
  std::vector<JobRecord> out;
  if (backend_ != "postgres") {
    for (const std::string& id : ids)
      if (auto j = get_job(id)) out.push_back(std::move(*j));
    return out;
  }
  // One statement for the lot: ids are letters, digits and '-', safe in an array literal.
  std::string list = "{";
  for (const std::string& id : ids) list += (list.size() > 1 ? "," : "") + id;
  list += "}";
  Conn db = conn();
  for (const Row& r : db->query(std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id = ANY($1::text[])", {list}))
    out.push_back(job_from(r));
  return out;
}

std::vector<JobRecord> Store::jobs_in_state(JobState state, int64_t limit) {
  Conn db = conn();
  std::vector<JobRecord> out;
  for (const Row& r : db->query(std::string("SELECT ") + kJobColumns +
                                     " FROM jobs WHERE state = $1 ORDER BY created_at, id LIMIT $2",
                                 {std::string(job_state_name(state)), limit}))
    out.push_back(job_from(r));
  return out;
}

int64_t Store::count_jobs(JobState state, const std::string& kind) {
  Conn db = conn();
  return db->query("SELECT COUNT(*) FROM jobs WHERE state = $1 AND ($2 = '' OR kind = $2)",
                    {std::string(job_state_name(state)), kind})[0]
      .i64(0);
}

std::optional<int64_t> Store::lease_job(const std::string& id, const std::string& node_id, int64_t expires,
                                        int64_t now) {
  Conn db = conn();
  // The state test in the WHERE clause makes the transition atomic: of two racing leases, one
  // changes a row.
  auto rows = db->query(
      "UPDATE jobs SET state = 'leased', node_id = $2, attempt = attempt + 1, lease_expires = $3, updated_at = $4 "
      "WHERE id = $1 AND state = 'queued' RETURNING attempt",
      {id, node_id, expires, now});
  if (rows.empty()) return std::nullopt;
  return rows[0].i64(0);
}

bool Store::renew_lease(const std::string& id, const std::string& node_id, int64_t attempt, int64_t expires) {
  Conn db = conn();
  return db->exec("UPDATE jobs SET lease_expires = $4 WHERE id = $1 AND state = 'leased' AND node_id = $2 AND "
                   "attempt = $3",
                   {id, node_id, attempt, expires}) == 1;
}

bool Store::requeue_job(const std::string& id, const std::string& node_id, int64_t attempt, int64_t now) {
  Conn db = conn();
  return db->exec("UPDATE jobs SET state = 'queued', lease_expires = 0, updated_at = $4 WHERE id = $1 AND "
                   "state = 'leased' AND node_id = $2 AND attempt = $3",
                   {id, node_id, attempt, now}) == 1;
}

void Store::post_in(Db& db, const ledger::Txn& txn, int64_t now) {
  ORCHARD_CHECK(txn.balanced(), "ledger txn {} does not balance", txn.id);
  db.exec("INSERT INTO ledger_txns (id, job_id, memo, created_at) VALUES ($1, $2, $3, $4)",
            {txn.id, txn.job_id, txn.memo, now});
  for (const ledger::Entry& e : txn.entries) {
    db.exec("INSERT INTO ledger_entries (txn_id, account, amount) VALUES ($1, $2, $3)", {txn.id, e.account, e.amount});
    db.exec("INSERT INTO accounts (id, balance) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET "
              "balance = accounts.balance + $2",
              {e.account, e.amount});
  }
}

CompleteOutcome Store::complete_job(const std::string& id, const std::string& node_id, int64_t attempt,
                                    const Completion& c, int64_t now) {
  return in_txn([&](Db& db) {
    int64_t changed = db.exec(
        "UPDATE jobs SET state = 'completed', result = $4, prompt_tokens = $5, completion_tokens = $6, "
        "updated_at = $7, lease_expires = 0, verify_state = CASE WHEN $8 = '' THEN verify_state ELSE $8 END "
        "WHERE id = $1 AND state = 'leased' AND node_id = $2 AND attempt = $3",
        {id, node_id, attempt, c.result, c.prompt_tokens, c.completion_tokens, now, c.verify_state});
    if (changed == 0) {
      auto rows = db.query("SELECT state, node_id, attempt FROM jobs WHERE id = $1", {id});
      bool same = !rows.empty() && rows[0].str(0) == "completed" && rows[0].str(1) == node_id &&
                  rows[0].i64(2) == attempt;
      return same ? CompleteOutcome::AlreadyCompleted : CompleteOutcome::Refused;
    }
    for (const ledger::Txn& t : c.txns) post_in(db, t, now);
    // With the release, refund or fine it explains: an audit never sees one without the other.
    if (!c.checked_state.empty())
      db.exec("UPDATE jobs SET verify_state = $2 WHERE id = (SELECT verify_of FROM jobs WHERE id = $1)",
                {id, c.checked_state});
    auto job = db.query("SELECT key_id, kind FROM jobs WHERE id = $1", {id});
    if (job[0].str(1) == "generate")
      db.exec("UPDATE api_keys SET tokens_used = tokens_used + $2 WHERE id = $1",
                {job[0].str(0), c.prompt_tokens + c.completion_tokens});
    db.exec("UPDATE nodes SET jobs_served = jobs_served + 1, tok_s = $2 WHERE id = $1", {node_id, c.tok_s});
    return CompleteOutcome::Completed;
  });
}

bool Store::fail_job(const std::string& id, const std::string& error, int64_t now) {
  Conn db = conn();
  return db->exec("UPDATE jobs SET state = 'failed', error = $2, updated_at = $3, lease_expires = 0 WHERE id = $1 "
                   "AND state IN ('queued', 'leased')",
                   {id, error, now}) == 1;
}

bool Store::cancel_job(const std::string& id, int64_t now) {
  Conn db = conn();
  return db->exec("UPDATE jobs SET state = 'cancelled', updated_at = $2, lease_expires = 0 WHERE id = $1 AND "
                   "state IN ('queued', 'leased')",
                   {id, now}) == 1;
}

bool Store::post(const ledger::Txn& txn, int64_t now) {
  return in_txn([&](Db& db) {
    if (!db.query("SELECT id FROM ledger_txns WHERE id = $1", {txn.id}).empty()) return false;
    post_in(db, txn, now);
    return true;
  });
}

int64_t Store::balance(const std::string& account) {
  Conn db = conn();
  auto rows = db->query("SELECT balance FROM accounts WHERE id = $1", {account});
  return rows.empty() ? 0 : rows[0].i64(0);
}

int64_t Store::escrowed(const std::string& job_id) {
  Conn db = conn();
  auto rows = db->query("SELECT amount FROM ledger_entries WHERE txn_id = $1 AND account = $2",
                         {"settle:" + job_id, std::string(ledger::kEscrow)});
  return rows.empty() ? 0 : rows[0].i64(0);
}

std::vector<StatementLine> Store::statement(const std::string& account, int64_t limit) {
  Conn db = conn();
  std::vector<StatementLine> out;
  for (const Row& r : db->query("SELECT t.id, t.job_id, t.memo, e.amount, t.created_at FROM ledger_entries e "
                                 "JOIN ledger_txns t ON t.id = e.txn_id WHERE e.account = $1 "
                                 "ORDER BY t.created_at DESC, t.id LIMIT $2",
                                 {account, limit}))
    out.push_back({r.str(0), r.str(1), r.str(2), r.i64(3), r.i64(4)});
  return out;
}

std::pair<int64_t, bool> Store::audit() {
  Conn db = conn();
  int64_t sum = db->query("SELECT COALESCE(SUM(balance), 0) FROM accounts")[0].i64(0);
  int64_t mismatched = db->query(
      "SELECT COUNT(*) FROM accounts a WHERE a.balance <> "
      "(SELECT COALESCE(SUM(e.amount), 0) FROM ledger_entries e WHERE e.account = a.id)")[0].i64(0);
  int64_t unbalanced =
      db->query("SELECT COUNT(*) FROM (SELECT txn_id FROM ledger_entries GROUP BY txn_id HAVING SUM(amount) <> 0) u")[0]
          .i64(0);
  return {sum, mismatched == 0 && unbalanced == 0};
}

std::vector<ledger::Txn> Store::transactions() {
  Conn db = conn();
  std::vector<ledger::Txn> out;
  for (const Row& r : db->query("SELECT t.id, t.job_id, t.memo, e.account, e.amount FROM ledger_txns t "
                                 "JOIN ledger_entries e ON e.txn_id = t.id ORDER BY t.id, e.account")) {
    if (out.empty() || out.back().id != r.str(0)) out.push_back(ledger::Txn{r.str(0), r.str(1), r.str(2), {}});
    out.back().entries.push_back({r.str(3), r.i64(4)});
  }
  return out;
}

bool Store::remember_nonce(const std::string& id, int64_t at) {
  Conn db = conn();
  return db->exec("INSERT INTO node_nonces (id, at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING", {id, at}) == 1;
}

void Store::forget_nonces(int64_t before) {
  Conn db = conn();
  db->exec("DELETE FROM node_nonces WHERE at < $1", {before});
}

void Store::set_leader_url(const std::string& url, int64_t now) {
  Conn db = conn();
  db->exec("INSERT INTO coordinator_leader (id, url, since) VALUES (1, $1, $2) ON CONFLICT (id) DO UPDATE SET "
           "url = $1, since = $2",
           {url, now});
}

std::string Store::leader_url() {
  Conn db = conn();
  auto rows = db->query("SELECT url FROM coordinator_leader WHERE id = 1");
  return rows.empty() ? "" : rows[0].str(0);
}

void Store::notify(const std::string& payload) {
  if (backend_ != "postgres") return;
  Conn db = conn();
  db->query("SELECT pg_notify($1, $2)", {std::string(kNoticeChannel), payload});
}

}  // namespace orchard::network

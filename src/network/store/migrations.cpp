#include "network/store/migrations.h"

namespace orchard::network {

const std::vector<Migration>& migrations() {
  static const std::vector<Migration> kMigrations = {
      {1,
       {
           "CREATE TABLE api_keys (id TEXT PRIMARY KEY, name TEXT NOT NULL, secret_sha256 TEXT NOT NULL UNIQUE, "
           "created_at BIGINT NOT NULL, quota_tokens BIGINT NOT NULL, rate_per_min BIGINT NOT NULL, "
           "tokens_used BIGINT NOT NULL DEFAULT 0, banned BIGINT NOT NULL DEFAULT 0)",
           "CREATE TABLE nodes (id TEXT PRIMARY KEY, description TEXT NOT NULL, seat TEXT NOT NULL, "
           "region TEXT NOT NULL, registered_at BIGINT NOT NULL, last_seen BIGINT NOT NULL, "
           "online BIGINT NOT NULL DEFAULT 0, jobs_served BIGINT NOT NULL DEFAULT 0, "
           "jobs_failed BIGINT NOT NULL DEFAULT 0, reputation DOUBLE PRECISION NOT NULL DEFAULT 1, "
           "mismatches BIGINT NOT NULL DEFAULT 0, banned BIGINT NOT NULL DEFAULT 0, "
           "tok_s DOUBLE PRECISION NOT NULL DEFAULT 0)",
           "CREATE TABLE jobs (id TEXT PRIMARY KEY, key_id TEXT NOT NULL, kind TEXT NOT NULL, model TEXT NOT NULL, "
           "request TEXT NOT NULL, state TEXT NOT NULL, node_id TEXT NOT NULL DEFAULT '', "
           "attempt BIGINT NOT NULL DEFAULT 0, lease_expires BIGINT NOT NULL DEFAULT 0, "
           "created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL, result TEXT NOT NULL DEFAULT '', "
           "prompt_tokens BIGINT NOT NULL DEFAULT 0, completion_tokens BIGINT NOT NULL DEFAULT 0, "
           "verify_of TEXT NOT NULL DEFAULT '', verify_state TEXT NOT NULL DEFAULT '', "
           "error TEXT NOT NULL DEFAULT '')",
           "CREATE INDEX jobs_by_state ON jobs (state, created_at)",
           "CREATE TABLE accounts (id TEXT PRIMARY KEY, balance BIGINT NOT NULL DEFAULT 0)",
           // The primary key is what makes each posting happen exactly once.
           "CREATE TABLE ledger_txns (id TEXT PRIMARY KEY, job_id TEXT NOT NULL, memo TEXT NOT NULL, "
           "created_at BIGINT NOT NULL)",
           "CREATE TABLE ledger_entries (txn_id TEXT NOT NULL REFERENCES ledger_txns (id), account TEXT NOT NULL, "
           "amount BIGINT NOT NULL, PRIMARY KEY (txn_id, account))",
           "CREATE INDEX ledger_entries_by_account ON ledger_entries (account)",
       }},
      // Coordinators sharing one database: what each must see of the others' work.
      {2,
       {
           // A key's rate bucket, and each unsettled job's reservation of its quota.
           "ALTER TABLE api_keys ADD COLUMN rate_tokens DOUBLE PRECISION NOT NULL DEFAULT 0",
           "ALTER TABLE api_keys ADD COLUMN rate_at BIGINT NOT NULL DEFAULT 0",
           "ALTER TABLE jobs ADD COLUMN reserved BIGINT NOT NULL DEFAULT 0",
           "CREATE INDEX jobs_by_key ON jobs (key_id, state)",
           // The replay guard's memory of signed requests (node/nonce), by timestamp.
           "CREATE TABLE node_nonces (id TEXT PRIMARY KEY, at BIGINT NOT NULL)",
           "CREATE INDEX node_nonces_by_time ON node_nonces (at)",
           "CREATE TABLE coordinator_leader (id BIGINT PRIMARY KEY, url TEXT NOT NULL, since BIGINT NOT NULL)",
       }},
  };
  return kMigrations;
}

}  // namespace orchard::network

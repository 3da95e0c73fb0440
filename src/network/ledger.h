#pragma once
// Credits and the double-entry book. Amounts are integer micro-credits (1e-6 credit) so sums are
// exact. Every transaction's entries sum to zero; a transaction's id is derived from the job and
// its purpose ("settle:<job>"), so the database's primary key makes each posting happen once.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace orchard::network::ledger {

enum class Seat { Shared, Dedicated };
enum class Tier { Base, Pro, Max, Ultra };

Seat parse_seat(const std::string& s);  // "shared" | "dedicated"; anything else: Shared
Tier parse_tier(const std::string& s);  // "base" | "pro" | "max" | "ultra"; anything else: Base
const char* seat_name(Seat s);
const char* tier_name(Tier t);

// Shared seats earn 1x whatever the chip; a dedicated seat (committed always-on availability)
// earns more, most on Ultra-class machines.
double seat_multiplier(Seat seat, Tier tier);
// Bigger models cost more per token: credits per token per GB of weights, floored so tiny models
// still earn something.
double model_size_factor(int64_t model_bytes);
// tokens served (prompt + generated) x size factor x seat multiplier, in micro-credits.
int64_t job_credits(int64_t tokens, int64_t model_bytes, Seat seat, Tier tier);
int64_t job_credits(int64_t tokens, int64_t model_bytes, double multiplier);
// Whether `m` is a multiplier seat_multiplier gives for some seat and tier (the audit's check).
bool is_seat_multiplier(double m);
// A verification pass is one prompt-processing pass: paid at this fraction of a job's rate.
inline constexpr double kVerifyRate = 0.1;
int64_t verifier_pay(int64_t job_tokens, int64_t model_bytes, double multiplier);
// A node whose job fails its check never gets that job's credits (they go back to the client) and
// is fined this many times them on top, paid to the trust fund that pays checkers: a caught job
// costs its node three times what it would have earned (and strikes lead to a ban).
inline constexpr int64_t kFineMultiple = 2;

inline constexpr const char* kEscrow = "escrow";          // credits held until a check passes
inline constexpr const char* kTrustFund = "network:trust";  // pays the verifying nodes
std::string key_account(const std::string& key_id);
std::string node_account(const std::string& node_id);

struct Entry {
  std::string account;
  int64_t amount = 0;  // > 0 credits the account, < 0 debits it
};

struct Txn {
  std::string id;      // unique per purpose and job: exactly once
  std::string job_id;
  std::string memo;
  std::vector<Entry> entries;
  bool balanced() const;
};

// The client's key pays the node's owner; with `hold`, the credit waits in escrow for a check.
Txn settle_job(const std::string& job_id, const std::string& key_id, const std::string& node_id, int64_t amount,
               bool hold);
Txn release_escrow(const std::string& job_id, const std::string& node_id, int64_t amount);
Txn refund_escrow(const std::string& job_id, const std::string& key_id, int64_t amount);
Txn pay_verifier(const std::string& verify_job_id, const std::string& node_id, int64_t amount);
Txn fine_node(const std::string& job_id, const std::string& node_id, int64_t amount);

// An in-memory book with the same rules as the store's (simulation, tests).
class Book {
 public:
  // Throws InvariantError when unbalanced; returns false (and changes nothing) for a txn id seen
  // before.
  bool post(const Txn& txn);
  int64_t balance(const std::string& account) const;
  int64_t sum() const;  // always 0
  const std::map<std::string, int64_t>& balances() const { return balances_; }

 private:
  std::map<std::string, int64_t> balances_;
  std::map<std::string, bool> posted_;
};

}  // namespace orchard::network::ledger

#include "network/ledger.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace orchard::network::ledger {

Seat parse_seat(const std::string& s) { return s == "dedicated" ? Seat::Dedicated : Seat::Shared; }

Tier parse_tier(const std::string& s) {
  if (s == "ultra") return Tier::Ultra;
  if (s == "max") return Tier::Max;
  if (s == "pro") return Tier::Pro;
  return Tier::Base;
}

const char* seat_name(Seat s) { return s == Seat::Dedicated ? "dedicated" : "shared"; }

const char* tier_name(Tier t) {
  switch (t) {
    case Tier::Ultra: return "ultra";
    case Tier::Max: return "max";
    case Tier::Pro: return "pro";
    default: return "base";
  }
}

double seat_multiplier(Seat seat, Tier tier) {
  if (seat == Seat::Shared) return 1.0;
  // A dedicated seat promises availability; an Ultra promises the most memory and bandwidth
  // with it (it can hold the models nothing else can), so its commitment is worth the most.
  switch (tier) {
    case Tier::Ultra: return 2.0;
    case Tier::Max: return 1.5;
    case Tier::Pro: return 1.3;
    default: return 1.2;
  }
}

double model_size_factor(int64_t model_bytes) { return std::max(0.05, static_cast<double>(model_bytes) / 1e9); }

int64_t job_credits(int64_t tokens, int64_t model_bytes, Seat seat, Tier tier) {
  return job_credits(tokens, model_bytes, seat_multiplier(seat, tier));
}

int64_t job_credits(int64_t tokens, int64_t model_bytes, double multiplier) {
  return std::llround(static_cast<double>(tokens) * model_size_factor(model_bytes) * multiplier * 1e6 /
                      1000.0);  // 1 credit per 1000 tokens of a 1 GB model
}

int64_t verifier_pay(int64_t job_tokens, int64_t model_bytes, double multiplier) {
  return static_cast<int64_t>(static_cast<double>(job_credits(job_tokens, model_bytes, multiplier)) * kVerifyRate);
}

bool is_seat_multiplier(double m) {
  for (Seat s : {Seat::Shared, Seat::Dedicated})
    for (Tier t : {Tier::Base, Tier::Pro, Tier::Max, Tier::Ultra})
      if (seat_multiplier(s, t) == m) return true;
  return false;
}

std::string key_account(const std::string& key_id) { return "key:" + key_id; }
std::string node_account(const std::string& node_id) { return "node:" + node_id; }

bool Txn::balanced() const {
  int64_t s = 0;
  for (const Entry& e : entries) s += e.amount;
  return s == 0 && !entries.empty();
}

Txn settle_job(const std::string& job_id, const std::string& key_id, const std::string& node_id, int64_t amount,
               bool hold) {
  return Txn{"settle:" + job_id, job_id, hold ? "job served, held for a check" : "job served",
             {{key_account(key_id), -amount}, {hold ? kEscrow : node_account(node_id), amount}}};
}

Txn release_escrow(const std::string& job_id, const std::string& node_id, int64_t amount) {
  return Txn{"release:" + job_id, job_id, "check passed", {{kEscrow, -amount}, {node_account(node_id), amount}}};
}

Txn refund_escrow(const std::string& job_id, const std::string& key_id, int64_t amount) {
  return Txn{"refund:" + job_id, job_id, "check failed: refunded", {{kEscrow, -amount}, {key_account(key_id), amount}}};
}

Txn pay_verifier(const std::string& verify_job_id, const std::string& node_id, int64_t amount) {
  return Txn{"settle:" + verify_job_id, verify_job_id, "verification pass",
             {{kTrustFund, -amount}, {node_account(node_id), amount}}};
}

Txn fine_node(const std::string& job_id, const std::string& node_id, int64_t amount) {
  return Txn{"fine:" + job_id, job_id, "check failed: fined", {{node_account(node_id), -amount}, {kTrustFund, amount}}};
}

bool Book::post(const Txn& txn) {
  ORCHARD_CHECK(txn.balanced(), "ledger txn {} does not balance", txn.id);
  if (!posted_.emplace(txn.id, true).second) return false;
  for (const Entry& e : txn.entries) balances_[e.account] += e.amount;
  return true;
}

int64_t Book::balance(const std::string& account) const {
  auto it = balances_.find(account);
  return it == balances_.end() ? 0 : it->second;
}

int64_t Book::sum() const {
  int64_t s = 0;
  for (auto& [a, b] : balances_) s += b;
  return s;
}

}  // namespace orchard::network::ledger

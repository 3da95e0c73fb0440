#pragma once
// `orchard network audit`: the books balance, and every payment is one the rules allow for work
// the coordinator counted. Reads the store only; the coordinator need not run.
#include <cstdint>
#include <string>
#include <vector>

#include "network/store/store.h"

namespace orchard::network {

struct AuditReport {
  int64_t sum = 0;          // of all balances: 0 when the books balance
  bool consistent = false;  // every balance is the sum of its entries; every transaction sums to 0
  int64_t payments_checked = 0;
  std::vector<std::string> problems;  // one line each, naming the transaction or job
  bool ok() const { return sum == 0 && consistent && problems.empty(); }
};

// Checks, beyond the sums: each settlement of a job debits its client exactly the credits of the
// tokens the job's record counts (completed; at most its max_tokens generated and its prompt's
// bound) at the model size and a seat multiplier the rules have, and credits the job's node (or
// escrow); each release, refund and fine moves what its job's escrow held (a fine
// ledger::kFineMultiple times it) after a check that said so; each checker is paid its rate of the
// checked job; and every completed job was settled.
AuditReport audit_ledger(Store& store);

}  // namespace orchard::network

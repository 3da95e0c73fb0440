#include "network/audit.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "network/coordinator.h"
#include "network/job_request.h"
#include "network/ledger.h"

namespace orchard::network {

using nlohmann::json;

namespace {

int64_t entry(const ledger::Txn& t, const std::string& account) {
  for (const ledger::Entry& e : t.entries)
    if (e.account == account) return e.amount;
  return 0;
}

// The rate a completed job's result records: (model bytes, seat multiplier), or why it can't be read.
std::optional<std::pair<int64_t, double>> recorded_rate(const JobRecord& job) {
  json r = json::parse(job.result, nullptr, false);
  if (!r.is_object() || !r.contains("model_bytes") || !r["model_bytes"].is_number_integer() ||
      !r.contains("multiplier") || !r["multiplier"].is_number())
    return std::nullopt;
  return std::make_pair(r["model_bytes"].get<int64_t>(), r["multiplier"].get<double>());
}

// A generation job's request as its row holds it; nullopt when the row holds none that reads.
std::optional<JobRequest> stored_request(const JobRecord& job) {
  try {
    return JobRequest::from_json(json::parse(job.request, nullptr, false));
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

AuditReport audit_ledger(Store& store) {
  AuditReport report;
  std::tie(report.sum, report.consistent) = store.audit();
  auto problem = [&](std::string line) { report.problems.push_back(std::move(line)); };
  std::map<std::string, std::optional<JobRecord>> jobs;
  auto job = [&](const std::string& id) -> const std::optional<JobRecord>& {
    auto it = jobs.find(id);
    if (it == jobs.end()) it = jobs.emplace(id, store.get_job(id)).first;
    return it->second;
  };
  // Read while the coordinator runs: completed jobs first, so each has its settlement in the
  // transactions read next (a job completes in the transaction that settles it), and jobs only
  // move forward.
  const std::vector<JobRecord> completed = store.jobs_in_state(JobState::Completed);
  std::map<std::string, int64_t> escrowed;  // job -> what its settlement put in escrow
  std::map<std::string, ledger::Txn> by_id;
  for (ledger::Txn& t : store.transactions()) by_id.emplace(t.id, std::move(t));
  for (const auto& [id, t] : by_id)
    if (id.starts_with("settle:")) escrowed[t.job_id] = entry(t, ledger::kEscrow);

  for (const auto& [id, t] : by_id) {
    ++report.payments_checked;
    const auto& j = job(t.job_id);
    if (!j) {
      problem(fmt::format("{}: no job {}", id, t.job_id));
      continue;
    }
    if (j->state != JobState::Completed) {
      problem(fmt::format("{}: job {} is {}, not completed", id, j->id, job_state_name(j->state)));
      continue;
    }
    const auto rate = recorded_rate(*j);
    if (!rate || !ledger::is_seat_multiplier(rate->second)) {
      problem(fmt::format("{}: job {} records no rate the rules allow", id, j->id));
      continue;
    }
    const auto [model_bytes, multiplier] = *rate;
    if (id == "settle:" + j->id && j->kind == "generate") {
      const auto request = stored_request(*j);
      if (!request) {
        problem(fmt::format("{}: job {} has no request the coordinator could have stored", id, j->id));
        continue;
      }
      if (j->completion_tokens < 0 || j->completion_tokens > request->max_tokens)
        problem(fmt::format("{}: {} generated tokens counted for a job of max_tokens {}", id, j->completion_tokens,
                            request->max_tokens));
      if (j->prompt_tokens < 0 || j->prompt_tokens > prompt_token_bound(*request))
        problem(fmt::format("{}: {} prompt tokens counted, more than the prompt's bound {}", id, j->prompt_tokens,
                            prompt_token_bound(*request)));
      const int64_t due = ledger::job_credits(j->prompt_tokens + j->completion_tokens, model_bytes, multiplier);
      const int64_t paid = entry(t, ledger::node_account(j->node_id)) + entry(t, ledger::kEscrow);
      if (entry(t, ledger::key_account(j->key_id)) != -due || paid != due || t.entries.size() != 2)
        problem(fmt::format("{}: moved {} from key {} to node {}/escrow; {} tokens at this rate are {}", id,
                            -entry(t, ledger::key_account(j->key_id)), j->key_id, paid,
                            j->prompt_tokens + j->completion_tokens, due));
    } else if (id == "settle:" + j->id && j->kind == "verify") {
      const auto& original = job(j->verify_of);
      const int64_t due = original ? ledger::verifier_pay(original->prompt_tokens + original->completion_tokens,
                                                          model_bytes, multiplier)
                                   : 0;
      if (!original || entry(t, ledger::node_account(j->node_id)) != due || entry(t, ledger::kTrustFund) != -due)
        problem(fmt::format("{}: the checker of {} was paid {}, its rate is {}", id, j->verify_of,
                            entry(t, ledger::node_account(j->node_id)), due));
    } else {
      const int64_t held = escrowed.count(j->id) ? escrowed[j->id] : 0;
      const bool release = id == "release:" + j->id, refund = id == "refund:" + j->id, fine = id == "fine:" + j->id;
      const std::string want = release ? "ok" : "mismatch";
      if (!release && !refund && !fine)
        problem(fmt::format("{}: not a transaction the rules make", id));
      else if (j->verify_state != want)
        problem(fmt::format("{}: job {}'s check says '{}'", id, j->id, j->verify_state));
      else if (release && entry(t, ledger::node_account(j->node_id)) != held)
        problem(fmt::format("{}: released {}, escrow held {}", id, entry(t, ledger::node_account(j->node_id)), held));
      else if (refund && entry(t, ledger::key_account(j->key_id)) != held)
        problem(fmt::format("{}: refunded {}, escrow held {}", id, entry(t, ledger::key_account(j->key_id)), held));
      else if (fine && entry(t, ledger::node_account(j->node_id)) != -ledger::kFineMultiple * held)
        problem(fmt::format("{}: fined {}, the rule is {} x {}", id, -entry(t, ledger::node_account(j->node_id)),
                            ledger::kFineMultiple, held));
    }
  }
  for (const JobRecord& j : completed)
    if (!by_id.count("settle:" + j.id)) problem(fmt::format("job {} completed without a settlement", j.id));
  return report;
}

}  // namespace orchard::network

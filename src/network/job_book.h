#pragma once
// The leader's book of jobs waiting and running: the queue (oldest first), each lease with its
// holder, attempt, unit and deadline, the offers waiting in each node's inbox, and what each
// job's hand-backs rule out. It decides what happens to a job that comes back (to the front of
// the queue, or failed with its reasons once attempts run out or no node is left that could run
// it). No database, no HTTP, no threads: the coordinator records each step in its store (which
// has the last word on attempts) and locks around it; `orchard simulate` drives the same book in
// virtual time, so both requeue, bound and rule out the same way. Times come from the clock it is
// given.
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "network/placement.h"

namespace orchard::network {

using Clock = std::function<int64_t()>;  // milliseconds (since the epoch, or virtual)

// Leases a job gets before it fails: enough for nodes that vanish or are called back by their
// owners, few enough that a job nothing can run ends with a reason instead of circling.
inline constexpr int64_t kMaxAttempts = 8;

// Hand-back reasons that say the node cannot run the job (it is not offered it again): it does
// not have the job's model; or any other reason that starts "cannot_run" (too little memory, an
// engine that cannot check). Other reasons (the owner came back, a failure) may pass.
inline constexpr const char* kModelMissing = "model_missing";
inline constexpr const char* kCannotRun = "cannot_run";

// What the book keeps of a job: enough to place it and hand it to its holder.
struct BookJob {
  std::string id;
  std::string kind = "generate";  // "generate" | "verify" (a check: never failed for its attempts)
  std::string model;
  std::string request;  // what the holder receives (JSON text)
  int64_t attempt = 0;  // leases so far
  std::string avoid;    // a node that must not take it (a check's producer)
  int64_t context_tokens = 0;  // the most context it can take (prompt and output)
};

// A lease as the holder sees it: picked up from its inbox, or leased and expired.
struct Lease {
  BookJob job;
  std::string holder;
  std::vector<std::string> nodes;  // the machines that run it (one, or a pod's members, holder first)
  int64_t picked_up_at = 0;        // 0: not yet (or before a restart)
  double expected_tok_s = 0;       // placement's estimate for its unit (0 after a restart)
  bool on_disk = false;            // the unit had the model when it was placed
};

class JobBook {
 public:
  // demand: what a job needs, worked out once per stay in the queue, or nullopt while no node
  // has announced its model (it waits). runnable: whether any node outside `ruled_out` could ever
  // hold the job's model (false fails a returned job instead of queueing it for nobody).
  using DemandFn = std::function<std::optional<Demand>(const BookJob&)>;
  using RunnableFn = std::function<bool(const BookJob&, const std::unordered_set<std::string>& ruled_out)>;
  // record: a lease was decided (the holder, the attempt it would be): returns the attempt as
  // recorded, or nullopt when the job is gone (cancelled meanwhile): the book drops it.
  using RecordFn = std::function<std::optional<int64_t>(const BookJob&, const std::string& holder, int64_t attempt)>;

  JobBook(Placement& placement, Clock clock, int64_t lease_ms, DemandFn demand, RunnableFn runnable);

  // A new job (or one loaded after a restart) joins the back of the queue.
  void add(BookJob job);
  // A lease found in the store after a restart: its holder may still finish it.
  void add_leased(BookJob job, const std::string& holder, const std::string& unit, int64_t lease_until);
  // Places what waits, each on the best unit free now, and puts it in its holder's inbox.
  // Returns how many were leased.
  size_t dispatch(const RecordFn& record);

  bool has_offer(const std::string& node) const;
  // The next job in the node's inbox: its lease counts from now (time in the inbox is not the
  // node's, nor is it in the speed the node is paid by).
  std::optional<Lease> take(const std::string& node);
  // The holder's lease on (job, attempt) runs lease_ms from now; false when it is not its lease.
  bool renew(const std::string& job_id, const std::string& node, int64_t attempt);
  // The lease on job_id when `node` holds it at `attempt`.
  std::optional<Lease> lease(const std::string& job_id, const std::string& node, int64_t attempt) const;
  // Leases past their deadline (their holders went silent), left in place: the owner returns
  // each with give_back(..., LeaseLost).
  std::vector<Lease> expired() const;
  // The lease on job_id when it is past its deadline (a driver that knows which holder fell
  // silent: the simulator).
  std::optional<Lease> expired(const std::string& job_id) const;
  // What waits in a node's inbox (its owner came back, it was banned).
  std::vector<Lease> inbox(const std::string& node) const;

  // Why a lease ends without a result: withdrawn before pickup (the owner came back, the node
  // was banned); the node cannot run it (not offered it again); it gave it up for a passing
  // reason; it went silent.
  enum class Return { Withdrawn, Refused, HandedBack, LeaseLost };
  struct Returned {
    bool held = false;     // (node, attempt) held it: the rest applies
    bool requeued = false;
    std::string failure;   // when it failed instead: why, with every hand-back's reason
  };
  // The holder's lease ends; the job goes back to the front of the queue (it has waited longest)
  // unless a generation job has had kMaxAttempts leases or no node outside those that refused it
  // could run it: then it leaves the book and `failure` says why.
  Returned give_back(const std::string& job_id, const std::string& node, int64_t attempt, Return why,
                     const std::string& reason = "");
  // The job completed, was cancelled or failed: it leaves the queue, its inbox and its unit.
  void finish(const std::string& job_id);

  size_t queued() const { return queue_.size(); }
  size_t leases() const { return entries_.size() - queue_.size(); }
  std::map<std::string, int64_t> queued_by_model() const;
  bool leased(const std::string& job_id) const;
  int64_t lease_ms() const { return lease_ms_; }

 private:
  struct Entry {
    BookJob job;
    std::optional<Demand> demand;  // while queued, once known
    bool leased = false;
    std::string holder, unit;
    std::vector<std::string> nodes;
    double expected_tok_s = 0;
    bool on_disk = false;
    int64_t lease_until = 0, picked_up_at = 0;
    bool in_inbox = false;
    std::unordered_set<std::string> refused_by;  // nodes that cannot run it
    std::vector<std::string> hand_backs;         // "node: reason", for the failure
  };
  static Lease lease_of(const Entry& e) { return {e.job, e.holder, e.nodes, e.picked_up_at, e.expected_tok_s, e.on_disk}; }
  void end_lease(Entry& e);
  std::string failure_of(const Entry& e, const std::string& why) const;

  Placement& placement_;
  Clock clock_;
  int64_t lease_ms_;
  DemandFn demand_;
  RunnableFn runnable_;
  std::unordered_map<std::string, Entry> entries_;
  // Oldest first; the entries (stable in an unordered_map) themselves, as a long queue behind a
  // full network is walked on every dispatch, each with the memory it needs when that is all that
  // decides whether it can be placed (its demand known, no node to avoid; else -1), so that the
  // walk past jobs too large for what is free reads the queue alone, not each entry.
  struct Queued {
    Entry* entry;
    int64_t plain_need = -1;
  };
  std::deque<Queued> queue_;
  std::unordered_map<std::string, std::deque<std::string>> inboxes_;  // node -> leased job ids, not picked up
};

}  // namespace orchard::network

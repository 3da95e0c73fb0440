#include "network/job_book.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <fmt/format.h>

namespace orchard::network {

JobBook::JobBook(Placement& placement, Clock clock, int64_t lease_ms, DemandFn demand, RunnableFn runnable)
    : placement_(placement),
      clock_(std::move(clock)),
      lease_ms_(lease_ms),
      demand_(std::move(demand)),
      runnable_(std::move(runnable)) {}

void JobBook::add(BookJob job) {
  const std::string id = job.id;
  Entry& e = entries_[id];
  e.job = std::move(job);
  queue_.push_back({&e});
}

void JobBook::add_leased(BookJob job, const std::string& holder, const std::string& unit, int64_t lease_until) {
  const std::string id = job.id;
  Entry& e = entries_[id];
  e.job = std::move(job);
  e.leased = true;
  e.holder = holder;
  e.unit = unit;
  e.nodes = {holder};
  e.lease_until = lease_until;
  placement_.job_started(unit);
}

size_t JobBook::dispatch(const RecordFn& record) {
  const int64_t now = clock_();
  size_t leased = 0;
  // Whether a job finds a place depends only on the memory it needs (and on the nodes it must
  // avoid): once a plain job finds none, no larger plain job can, so a long queue behind a full
  // network costs one comparison per job, not one placement.
  int64_t smallest_unplaced = std::numeric_limits<int64_t>::max();
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->plain_need >= smallest_unplaced) {
      ++it;
      continue;
    }
    Entry& e = *it->entry;
    if (!e.demand) {
      e.demand = demand_(e.job);
      if (!e.demand) {
        ++it;
        continue;
      }
      e.demand->exclude.insert(e.refused_by.begin(), e.refused_by.end());
      if (!e.job.avoid.empty()) e.demand->exclude.insert(e.job.avoid);
      it->plain_need = e.demand->exclude.empty() ? e.demand->need_bytes : -1;
    }
    const bool plain = it->plain_need >= 0;
    if (plain && e.demand->need_bytes >= smallest_unplaced) {
      ++it;
      continue;
    }
    auto choice = placement_.place(*e.demand);
    if (!choice) {
      if (plain) smallest_unplaced = e.demand->need_bytes;
      ++it;
      continue;
    }
    // A pod's job goes to its first member, which runs it across the pod.
    const std::string& holder = choice->nodes.front();
    const auto attempt = record(e.job, holder, e.job.attempt + 1);
    if (!attempt) {  // gone meanwhile
      const std::string id = e.job.id;
      it = queue_.erase(it);
      entries_.erase(id);
      continue;
    }
    e.job.attempt = *attempt;
    e.demand.reset();
    e.leased = true;
    e.holder = holder;
    e.unit = choice->unit;
    e.nodes = choice->nodes;
    e.expected_tok_s = choice->expected_tok_s;
    e.on_disk = choice->on_disk;
    e.lease_until = now + lease_ms_;
    e.picked_up_at = 0;
    e.in_inbox = true;
    placement_.job_started(e.unit);
    inboxes_[holder].push_back(e.job.id);
    it = queue_.erase(it);
    ++leased;
  }
  return leased;
}

bool JobBook::leased(const std::string& job_id) const {
  auto it = entries_.find(job_id);
  return it != entries_.end() && it->second.leased;
}

bool JobBook::has_offer(const std::string& node) const {
  auto it = inboxes_.find(node);
  return it != inboxes_.end() && !it->second.empty();
}

std::optional<Lease> JobBook::take(const std::string& node) {
  auto box = inboxes_.find(node);
  if (box == inboxes_.end() || box->second.empty()) return std::nullopt;
  Entry& e = entries_.at(box->second.front());
  box->second.pop_front();
  if (box->second.empty()) inboxes_.erase(box);
  e.in_inbox = false;
  e.picked_up_at = clock_();
  e.lease_until = e.picked_up_at + lease_ms_;
  return lease_of(e);
}

bool JobBook::renew(const std::string& job_id, const std::string& node, int64_t attempt) {
  auto it = entries_.find(job_id);
  if (it == entries_.end() || !it->second.leased || it->second.holder != node || it->second.job.attempt != attempt)
    return false;
  it->second.lease_until = clock_() + lease_ms_;
  return true;
}

std::optional<Lease> JobBook::lease(const std::string& job_id, const std::string& node, int64_t attempt) const {
  auto it = entries_.find(job_id);
  if (it == entries_.end() || !it->second.leased || it->second.holder != node || it->second.job.attempt != attempt)
    return std::nullopt;
  const Entry& e = it->second;
  return lease_of(e);
}

std::vector<Lease> JobBook::expired() const {
  const int64_t now = clock_();
  std::vector<Lease> out;
  for (const auto& [id, e] : entries_)
    if (e.leased && e.lease_until <= now) out.push_back(lease_of(e));
  return out;
}

std::optional<Lease> JobBook::expired(const std::string& job_id) const {
  auto it = entries_.find(job_id);
  if (it == entries_.end() || !it->second.leased || it->second.lease_until > clock_()) return std::nullopt;
  const Entry& e = it->second;
  return lease_of(e);
}

std::map<std::string, int64_t> JobBook::queued_by_model() const {
  std::map<std::string, int64_t> out;
  for (const Queued& q : queue_) out[q.entry->job.model]++;
  return out;
}

std::vector<Lease> JobBook::inbox(const std::string& node) const {
  std::vector<Lease> out;
  if (auto box = inboxes_.find(node); box != inboxes_.end())
    for (const std::string& id : box->second) {
      const Entry& e = entries_.at(id);
      out.push_back(lease_of(e));
    }
  return out;
}

void JobBook::end_lease(Entry& e) {
  if (!e.leased) return;
  placement_.job_finished(e.unit);
  if (e.in_inbox) {
    auto box = inboxes_.find(e.holder);
    if (box != inboxes_.end()) {
      box->second.erase(std::remove(box->second.begin(), box->second.end(), e.job.id), box->second.end());
      if (box->second.empty()) inboxes_.erase(box);
    }
  }
  e.leased = e.in_inbox = false;
  e.unit.clear();
  e.nodes.clear();
}

std::string JobBook::failure_of(const Entry& e, const std::string& why) const {
  std::string reasons;
  for (const std::string& h : e.hand_backs) reasons += (reasons.empty() ? "" : "; ") + h;
  return fmt::format("[network] {} (hand-backs: {})", why, reasons.empty() ? "none" : reasons);
}

JobBook::Returned JobBook::give_back(const std::string& job_id, const std::string& node, int64_t attempt, Return why,
                                    const std::string& reason) {
  auto it = entries_.find(job_id);
  if (it == entries_.end() || !it->second.leased || it->second.holder != node || it->second.job.attempt != attempt)
    return {};
  Entry& e = it->second;
  end_lease(e);
  // A node that cannot run a job is not offered it again (the next attempt goes elsewhere); one
  // that gave it up for a passing reason (its owner came back, a pod rank died) may get it again.
  if (why == Return::Refused) e.refused_by.insert(node);
  if (why == Return::Refused || why == Return::HandedBack)
    e.hand_backs.push_back(fmt::format("{}: {}", node.substr(0, 12), reason.empty() ? "no reason" : reason));
  Returned out{true, false, ""};
  if (e.job.kind == "generate") {
    if (e.job.attempt >= kMaxAttempts)
      out.failure = failure_of(e, fmt::format("gave up after {} attempts", e.job.attempt));
    else if (!runnable_(e.job, e.refused_by))
      out.failure = failure_of(
          e, fmt::format("no node can run it: every node that could hold model '{}' handed it back", e.job.model));
  }
  if (!out.failure.empty()) {
    entries_.erase(it);
    return out;
  }
  e.demand.reset();
  queue_.push_front({&e});
  out.requeued = true;
  return out;
}

void JobBook::finish(const std::string& job_id) {
  auto it = entries_.find(job_id);
  if (it == entries_.end()) return;
  if (it->second.leased) end_lease(it->second);
  else
    queue_.erase(std::remove_if(queue_.begin(), queue_.end(), [&](const Queued& q) { return q.entry == &it->second; }),
                 queue_.end());
  entries_.erase(it);
}

}  // namespace orchard::network

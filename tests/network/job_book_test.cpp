// The job book on a fake clock: leases expire at lease_ms after their last renewal, a returned
// job goes back to the front, attempts are bounded, and a node that cannot run a job is not
// offered it again.
#include <gtest/gtest.h>

#include "network/job_book.h"

namespace orchard::network {
namespace {

constexpr int64_t kGB = 1000LL * 1000 * 1000;
constexpr int64_t kLeaseMs = 1000;

struct Book {
  int64_t now = 1'000'000;
  Placement placement;
  std::unordered_set<std::string> can_run = {"a", "b"};  // nodes that could ever hold the model
  JobBook book{placement, [this] { return now; }, kLeaseMs,
               [](const BookJob& j) { return std::optional<Demand>(Demand{j.model, 4 * kGB, 8 * kGB, {}}); },
               [this](const BookJob&, const std::unordered_set<std::string>& ruled_out) {
                 for (const auto& n : can_run)
                   if (!ruled_out.count(n)) return true;
                 return false;
               }};
  std::vector<std::pair<std::string, std::string>> leases;  // (job, holder), as recorded

  explicit Book(std::vector<std::pair<std::string, double>> nodes = {{"a", 800}, {"b", 400}}) {
    for (const auto& [id, bw] : nodes) {
      placement.add_node(NodeSpec{id, 64 * kGB, bw, {"m"}, 1.0});
      placement.set_available(id, true);
    }
  }
  size_t dispatch() {
    return book.dispatch([this](const BookJob& j, const std::string& holder, int64_t attempt) {
      leases.emplace_back(j.id, holder);
      return std::optional<int64_t>(attempt);
    });
  }
};

TEST(JobBook, LeaseExpiresLeaseMsAfterPickupOrLastRenewal) {
  Book b;
  b.book.add({"j1", "generate", "m", "{}", 0, ""});
  ASSERT_EQ(b.dispatch(), 1u);
  EXPECT_EQ(b.leases.back(), (std::pair<std::string, std::string>{"j1", "a"}));  // the faster node
  EXPECT_EQ(b.book.queued(), 0u);
  b.now += 500;  // time in the inbox is not the node's
  auto lease = b.book.take("a");
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->job.attempt, 1);
  EXPECT_EQ(lease->picked_up_at, b.now);
  EXPECT_FALSE(b.book.take("a"));
  b.now += kLeaseMs - 1;
  EXPECT_TRUE(b.book.expired().empty());
  EXPECT_TRUE(b.book.renew("j1", "a", 1));
  EXPECT_FALSE(b.book.renew("j1", "a", 2));  // not its attempt
  EXPECT_FALSE(b.book.renew("j1", "b", 1));  // not its lease
  b.now += kLeaseMs - 1;
  EXPECT_TRUE(b.book.expired().empty());
  b.now += 1;
  auto expired = b.book.expired();
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].job.id, "j1");
  EXPECT_EQ(expired[0].holder, "a");
  EXPECT_EQ(expired[0].job.attempt, 1);
}

TEST(JobBook, ReturnedJobGoesToTheFrontAndRunsAgain) {
  Book b({{"a", 800}});
  b.book.add({"j1", "generate", "m", "{}", 0, ""});
  b.book.add({"j2", "generate", "m", "{}", 0, ""});
  b.book.add({"j3", "generate", "m", "{}", 0, ""});
  // Placement lets a unit queue two jobs: j1 and j2 go to a, j3 waits.
  ASSERT_EQ(b.dispatch(), 2u);
  EXPECT_EQ(b.book.queued(), 1u);
  b.now += kLeaseMs;
  ASSERT_EQ(b.book.expired().size(), 2u);
  auto r = b.book.give_back("j1", "a", 1, JobBook::Return::LeaseLost);
  EXPECT_TRUE(r.held);
  EXPECT_TRUE(r.requeued);
  EXPECT_TRUE(r.failure.empty());
  EXPECT_FALSE(b.book.give_back("j1", "a", 1, JobBook::Return::LeaseLost).held);  // once only
  // j1 waited longest: it takes the slot its lease freed, ahead of j3, on its second attempt.
  ASSERT_EQ(b.dispatch(), 1u);
  EXPECT_EQ(b.leases.back().first, "j1");
  EXPECT_TRUE(b.book.lease("j1", "a", 2));
  EXPECT_FALSE(b.book.lease("j1", "a", 1));
  b.book.finish("j2");
  ASSERT_EQ(b.dispatch(), 1u);
  EXPECT_EQ(b.leases.back().first, "j3");
}

TEST(JobBook, AttemptsAreBoundedWithTheReasons) {
  Book b({{"a", 800}});
  b.book.add({"j1", "generate", "m", "{}", 0, ""});
  JobBook::Returned r;
  for (int64_t attempt = 1; attempt <= kMaxAttempts; ++attempt) {
    ASSERT_EQ(b.dispatch(), 1u) << attempt;
    ASSERT_TRUE(b.book.take("a"));
    r = b.book.give_back("j1", "a", attempt, JobBook::Return::HandedBack, "owner_back");
    ASSERT_TRUE(r.held);
    if (attempt < kMaxAttempts) {
      EXPECT_TRUE(r.requeued) << attempt;
    }
  }
  EXPECT_FALSE(r.requeued);
  EXPECT_EQ(r.failure.find("[network] gave up after 8 attempts"), 0u) << r.failure;
  EXPECT_NE(r.failure.find("a: owner_back"), std::string::npos) << r.failure;
  EXPECT_EQ(b.book.queued(), 0u);
  EXPECT_EQ(b.dispatch(), 0u);  // it left the book
  // A check is not failed for its attempts: its job's escrow waits on it.
  b.book.add({"c1", "verify", "m", "{}", kMaxAttempts, "b"});
  ASSERT_EQ(b.dispatch(), 1u);
  EXPECT_TRUE(b.book.give_back("c1", "a", kMaxAttempts + 1, JobBook::Return::HandedBack).requeued);
}

TEST(JobBook, RefusedJobIsNotOfferedToTheSameNodeAgain) {
  Book b;
  b.book.add({"j1", "generate", "m", "{}", 0, ""});
  ASSERT_EQ(b.dispatch(), 1u);
  EXPECT_EQ(b.leases.back().second, "a");
  ASSERT_TRUE(b.book.take("a"));
  EXPECT_TRUE(b.book.give_back("j1", "a", 1, JobBook::Return::Refused, "model_missing").requeued);
  ASSERT_EQ(b.dispatch(), 1u);
  EXPECT_EQ(b.leases.back().second, "b");  // a is faster, but refused it
  ASSERT_TRUE(b.book.take("b"));
  // A passing reason does not rule b out: it may get the job again.
  EXPECT_TRUE(b.book.give_back("j1", "b", 2, JobBook::Return::HandedBack, "owner_back").requeued);
  ASSERT_EQ(b.dispatch(), 1u);
  EXPECT_EQ(b.leases.back().second, "b");
  // Once every node that could run it refused it, it fails with each reason, not circling on.
  auto r = b.book.give_back("j1", "b", 3, JobBook::Return::Refused, "cannot_run: too little memory");
  EXPECT_FALSE(r.requeued);
  EXPECT_EQ(r.failure.find("[network] no node can run it"), 0u) << r.failure;
  EXPECT_NE(r.failure.find("a: model_missing; b: owner_back; b: cannot_run: too little memory"), std::string::npos)
      << r.failure;
  EXPECT_EQ(b.dispatch(), 0u);
}

TEST(JobBook, WithdrawnInboxAndAvoidedNode) {
  Book b;
  // A check never goes to the node it checks.
  b.book.add({"c1", "verify", "m", "{}", 0, "a"});
  b.book.add({"j1", "generate", "m", "{}", 0, ""});
  ASSERT_EQ(b.dispatch(), 2u);
  EXPECT_EQ(b.leases[0], (std::pair<std::string, std::string>{"c1", "b"}));
  EXPECT_EQ(b.leases[1], (std::pair<std::string, std::string>{"j1", "a"}));
  // Its owner came back before pickup: what waits in a's inbox is withdrawn, and may come back to a.
  auto inbox = b.book.inbox("a");
  ASSERT_EQ(inbox.size(), 1u);
  EXPECT_TRUE(b.book.give_back("j1", "a", 1, JobBook::Return::Withdrawn).requeued);
  EXPECT_FALSE(b.book.has_offer("a"));
  b.book.finish("c1");
  ASSERT_EQ(b.dispatch(), 1u);
  EXPECT_EQ(b.leases.back().second, "a");
  // A job cancelled while queued leaves the book; one the store no longer has is dropped.
  b.book.add({"j2", "generate", "m", "{}", 0, ""});
  b.book.finish("j2");
  b.book.add({"j3", "generate", "m", "{}", 0, ""});
  EXPECT_EQ(b.book.dispatch([](const BookJob&, const std::string&, int64_t) { return std::optional<int64_t>(); }), 0u);
  EXPECT_EQ(b.book.queued(), 0u);
}

}  // namespace
}  // namespace orchard::network

// The store over every database this binary links (SQLite, or a PostgreSQL server it starts):
// migrations, keys, nodes, leases, and completion with its ledger postings in one transaction.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <atomic>
#include <thread>

#include "core/error.h"
#include "network/store/migrations.h"
#include "network/store/store.h"
#include "network/store_backends.h"

namespace orchard::network {
namespace {

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string skip;
    url_ = testing::fresh_database(GetParam(), &skip);
    if (url_.empty()) GTEST_SKIP() << skip;
    store_ = std::make_unique<Store>(Store::open(url_));
    store_->migrate();
  }

  JobRecord queued_job(const std::string& id, const std::string& key_id) {
    JobRecord j;
    j.id = id;
    j.key_id = key_id;
    j.model = "tiny";
    j.request = R"({"prompt":"hi"})";
    j.created_at = j.updated_at = 1000;
    store_->insert_job(j);
    return j;
  }

  Completion paid(const std::string& job, const std::string& key, const std::string& node, int64_t amount) {
    Completion c;
    c.result = R"({"text":"ok"})";
    c.prompt_tokens = 3;
    c.completion_tokens = 5;
    c.txns = {ledger::settle_job(job, key, node, amount, false)};
    return c;
  }

  std::string url_;
  std::unique_ptr<Store> store_;
};

TEST_P(StoreTest, MigrationsApplyOnceAndReopenCleanly) {
  EXPECT_EQ(store_->schema_version(), migrations().back().version);
  EXPECT_EQ(store_->migrate(), migrations().back().version);
  Store again = Store::open(url_);
  EXPECT_EQ(again.migrate(), migrations().back().version);
  EXPECT_EQ(again.backend(), GetParam());
}

TEST_P(StoreTest, KeysAreFoundBySecretOnly) {
  auto [key, secret] = store_->create_key("alice", 1000, 60, 1);
  auto found = store_->find_key_by_secret(secret);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->id, key.id);
  EXPECT_EQ(found->name, "alice");
  EXPECT_EQ(found->quota_tokens, 1000);
  EXPECT_EQ(found->rate_per_min, 60);
  EXPECT_FALSE(store_->find_key_by_secret(secret + "x"));
  EXPECT_FALSE(store_->find_key_by_secret(key.id));
  store_->set_key_banned(key.id, true);
  EXPECT_TRUE(store_->get_key(key.id)->banned);
}

TEST_P(StoreTest, NodeUpsertKeepsCounters) {
  NodeRecord n{"n1", R"({"chip":"M2 Ultra"})", "dedicated", "Zurich", 10, 10, true};
  store_->upsert_node(n);
  store_->update_node_trust("n1", 0.5, 2, false, 1);
  n.description = R"({"chip":"M2 Ultra","memory_bytes":1})";
  n.last_seen = 20;
  store_->upsert_node(n);
  auto got = store_->get_node("n1");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->description, n.description);
  EXPECT_DOUBLE_EQ(got->reputation, 0.5);
  EXPECT_EQ(got->mismatches, 2);
  EXPECT_EQ(got->registered_at, 10);
  EXPECT_EQ(got->last_seen, 20);
  store_->set_node_online("n1", false, 30);
  EXPECT_FALSE(store_->get_node("n1")->online);
  EXPECT_EQ(store_->list_nodes().size(), 1u);
}

TEST_P(StoreTest, LeasesAreExclusiveAndExpire) {
  auto [key, secret] = store_->create_key("k", 0, 0, 1);
  queued_job("j1", key.id);
  auto a1 = store_->lease_job("j1", "n1", 5000, 1000);
  ASSERT_TRUE(a1);
  EXPECT_EQ(*a1, 1);
  EXPECT_FALSE(store_->lease_job("j1", "n2", 5000, 1000));
  EXPECT_TRUE(store_->renew_lease("j1", "n1", 1, 9000));
  EXPECT_FALSE(store_->renew_lease("j1", "n2", 1, 9000));
  // The job book decides a lease has expired; the store requeues only the holder's attempt.
  EXPECT_FALSE(store_->requeue_job("j1", "n2", 1, 9001));
  EXPECT_FALSE(store_->requeue_job("j1", "n1", 2, 9001));
  EXPECT_TRUE(store_->requeue_job("j1", "n1", 1, 9001));
  EXPECT_EQ(store_->get_job("j1")->state, JobState::Queued);
  auto a2 = store_->lease_job("j1", "n2", 20000, 9001);
  ASSERT_TRUE(a2);
  EXPECT_EQ(*a2, 2);
  // The node that lost its lease finishes late: refused, nothing is paid.
  EXPECT_EQ(store_->complete_job("j1", "n1", 1, paid("j1", key.id, "n1", 100), 9500), CompleteOutcome::Refused);
  EXPECT_EQ(store_->balance(ledger::node_account("n1")), 0);
  EXPECT_EQ(store_->complete_job("j1", "n2", 2, paid("j1", key.id, "n2", 100), 9600), CompleteOutcome::Completed);
  EXPECT_EQ(store_->balance(ledger::node_account("n2")), 100);
  EXPECT_EQ(store_->balance(ledger::key_account(key.id)), -100);
}

TEST_P(StoreTest, HandBackRequeuesOnlyForTheHolder) {
  auto [key, secret] = store_->create_key("k", 0, 0, 1);
  queued_job("j1", key.id);
  ASSERT_TRUE(store_->lease_job("j1", "n1", 5000, 1000));
  EXPECT_FALSE(store_->requeue_job("j1", "n2", 1, 1100));
  EXPECT_FALSE(store_->requeue_job("j1", "n1", 2, 1100));
  EXPECT_TRUE(store_->requeue_job("j1", "n1", 1, 1100));
  EXPECT_EQ(store_->jobs_in_state(JobState::Queued).size(), 1u);
  EXPECT_EQ(store_->count_jobs(JobState::Leased), 0);
}

TEST_P(StoreTest, CompletionPaysExactlyOnce) {
  auto [key, secret] = store_->create_key("k", 0, 0, 1);
  queued_job("j1", key.id);
  auto attempt = store_->lease_job("j1", "n1", 5000, 1000);
  Completion c = paid("j1", key.id, "n1", 250);
  EXPECT_EQ(store_->complete_job("j1", "n1", *attempt, c, 1200), CompleteOutcome::Completed);
  // The node's retry after a lost answer: same outcome, no second payment.
  EXPECT_EQ(store_->complete_job("j1", "n1", *attempt, c, 1300), CompleteOutcome::AlreadyCompleted);
  EXPECT_FALSE(store_->post(c.txns[0], 1400));
  EXPECT_EQ(store_->balance(ledger::node_account("n1")), 250);
  EXPECT_EQ(store_->get_key(key.id)->tokens_used, 8);
  auto job = store_->get_job("j1");
  EXPECT_EQ(job->state, JobState::Completed);
  EXPECT_EQ(job->result, c.result);
  EXPECT_EQ(job->completion_tokens, 5);
  auto st = store_->statement(ledger::node_account("n1"), 10);
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].amount, 250);
  EXPECT_EQ(st[0].job_id, "j1");
  auto [sum, consistent] = store_->audit();
  EXPECT_EQ(sum, 0);
  EXPECT_TRUE(consistent);
}

TEST_P(StoreTest, AFailedPostingLeavesTheJobLeased) {
  auto [key, secret] = store_->create_key("k", 0, 0, 1);
  queued_job("j1", key.id);
  auto attempt = store_->lease_job("j1", "n1", 5000, 1000);
  Completion c = paid("j1", key.id, "n1", 10);
  c.txns[0].entries[0].amount = -9;  // unbalanced: the whole transaction must roll back
  EXPECT_THROW(store_->complete_job("j1", "n1", *attempt, c, 1100), InvariantError);
  EXPECT_EQ(store_->get_job("j1")->state, JobState::Leased);
  EXPECT_EQ(store_->balance(ledger::node_account("n1")), 0);
  EXPECT_EQ(store_->get_key(key.id)->tokens_used, 0);
}

TEST_P(StoreTest, EscrowIsReleasedOrRefundedOnce) {
  auto [key, secret] = store_->create_key("k", 0, 0, 1);
  for (const char* id : {"j1", "j2"}) {
    queued_job(id, key.id);
    auto attempt = store_->lease_job(id, "n1", 5000, 1000);
    Completion c = paid(id, key.id, "n1", 40);
    c.txns = {ledger::settle_job(id, key.id, "n1", 40, true)};
    c.verify_state = "pending";
    ASSERT_EQ(store_->complete_job(id, "n1", *attempt, c, 1100), CompleteOutcome::Completed);
    EXPECT_EQ(store_->escrowed(id), 40);
  }
  EXPECT_EQ(store_->balance(ledger::kEscrow), 80);
  EXPECT_EQ(store_->get_job("j1")->verify_state, "pending");
  EXPECT_TRUE(store_->post(ledger::release_escrow("j1", "n1", 40), 1200));
  EXPECT_FALSE(store_->post(ledger::release_escrow("j1", "n1", 40), 1201));
  EXPECT_TRUE(store_->post(ledger::refund_escrow("j2", key.id, 40), 1202));
  EXPECT_EQ(store_->balance(ledger::kEscrow), 0);
  EXPECT_EQ(store_->balance(ledger::node_account("n1")), 40);
  EXPECT_EQ(store_->balance(ledger::key_account(key.id)), -40);
  EXPECT_EQ(store_->audit().first, 0);
}

TEST_P(StoreTest, RacingCompletionsPayOnce) {
  auto [key, secret] = store_->create_key("k", 0, 0, 1);
  queued_job("j1", key.id);
  auto attempt = store_->lease_job("j1", "n1", 5000, 1000);
  std::atomic<int> completed{0}, already{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      auto r = store_->complete_job("j1", "n1", *attempt, paid("j1", key.id, "n1", 7), 1100);
      (r == CompleteOutcome::Completed ? completed : already)++;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(completed.load(), 1);
  EXPECT_EQ(already.load(), 7);
  EXPECT_EQ(store_->balance(ledger::node_account("n1")), 7);
}

TEST_P(StoreTest, CancelAndFailOnlyUnfinishedJobs) {
  auto [key, secret] = store_->create_key("k", 0, 0, 1);
  queued_job("j1", key.id);
  queued_job("j2", key.id);
  EXPECT_TRUE(store_->cancel_job("j1", 1100));
  EXPECT_FALSE(store_->cancel_job("j1", 1101));
  EXPECT_FALSE(store_->lease_job("j1", "n1", 5000, 1102));
  EXPECT_TRUE(store_->fail_job("j2", "no node can hold the model", 1103));
  EXPECT_EQ(store_->get_job("j2")->error, "no node can hold the model");
  EXPECT_EQ(store_->get_job("j1")->state, JobState::Cancelled);
}

// Submissions from many threads at once share statements (submit_job batches those of keys
// with nothing to count): every job arrives once with every field as sent, whichever batch
// carried it, and a banned key's jobs in the same flood are refused, not inserted.
TEST_P(StoreTest, ConcurrentSubmissionsEachArriveOnceAndBannedKeysNone) {
  auto [key, secret] = store_->create_key("open", 0, 0, 1);
  auto [banned, banned_secret] = store_->create_key("banned", 0, 0, 1);
  store_->set_key_banned(banned.id, true);
  constexpr int kThreads = 16, kEach = 25;
  std::atomic<int> accepted{0}, refused{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        JobRecord j;
        const bool bad = (t + i) % 5 == 0;
        j.id = fmt::format("t{}-{}", t, i);
        j.key_id = bad ? banned.id : key.id;
        j.model = "tiny";
        j.request = fmt::format(R"({{"prompt":"job {} of {}"}})", i, t);
        j.created_at = j.updated_at = 1000 + i;
        j.reserved = 100 * t + i;
        const SubmitOutcome o = store_->submit_job(j, bad ? banned : key, 1000 + i);
        if (o.kind == SubmitOutcome::Kind::Accepted && !bad) ++accepted;
        else if (o.kind == SubmitOutcome::Kind::Banned && bad) ++refused;
        else ++other;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(accepted.load(), kThreads * kEach * 4 / 5);
  EXPECT_EQ(refused.load(), kThreads * kEach / 5);
  EXPECT_EQ(store_->count_jobs(JobState::Queued), accepted.load());
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kEach; ++i) {
      auto j = store_->get_job(fmt::format("t{}-{}", t, i));
      if ((t + i) % 5 == 0) {
        EXPECT_FALSE(j) << "a banned key's job was inserted";
        continue;
      }
      ASSERT_TRUE(j);
      EXPECT_EQ(j->key_id, key.id);
      EXPECT_EQ(j->request, fmt::format(R"({{"prompt":"job {} of {}"}})", i, t));
      EXPECT_EQ(j->state, JobState::Queued);
      EXPECT_EQ(j->created_at, 1000 + i);
      EXPECT_EQ(j->reserved, 100 * t + i);
    }
}

// A key is remembered for a moment after it is found by its secret; a ban made meanwhile
// through another connection (another replica) still stops its next job, with or without a quota.
TEST_P(StoreTest, ABanElsewhereStopsTheNextJobOfARememberedKey) {
  for (int64_t quota : {int64_t{0}, int64_t{100000}}) {
    auto [key, secret] = store_->create_key("k", quota, 0, 1);
    ASSERT_TRUE(store_->find_key_by_secret(secret));
    Store::open(url_).set_key_banned(key.id, true);
    auto remembered = store_->find_key_by_secret(secret);
    ASSERT_TRUE(remembered);
    JobRecord j;
    j.id = fmt::format("after-ban-{}", quota);
    j.key_id = key.id;
    j.model = "tiny";
    j.request = "{}";
    j.reserved = 10;
    EXPECT_EQ(store_->submit_job(j, *remembered, 1000).kind, SubmitOutcome::Kind::Banned) << "quota " << quota;
    EXPECT_FALSE(store_->get_job(j.id));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreTest, ::testing::ValuesIn(testing::store_backends()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace orchard::network

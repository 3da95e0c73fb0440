// Two coordinators on one PostgreSQL database (the test starts the server), each with its own
// store and connections, as two `orchard network` processes would be: one leads, the other
// takes clients' jobs and sends nodes to it. Jobs submitted to both are each placed once, none is
// lost and none paid twice (the payment audit holds); quotas, rates and nonces hold across both;
// when the leader goes, the other takes over the queue. SQLite refuses a second coordinator.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <thread>

#include "network/audit.h"
#include "network/coordinator.h"
#include "network/http_api.h"
#include "network/identity.h"
#include "network/node_agent.h"
#include "network/pg_server.h"
#include "network/replica.h"

namespace orchard::network {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Writes "ok" once per token asked for; token i is id i, so a spot check confirms it.
class CountingEngine : public Engine {
 public:
  explicit CountingEngine(std::chrono::milliseconds per_token = 0ms) : per_token_(per_token) {}
  json models() override {
    return json::array({{{"name", "counter"}, {"bytes", 1'000'000'000}, {"kv_bytes_per_token", 1000}, {"context_length", 512}}});
  }
  EngineResult run(const std::string&, const json& request, const std::function<bool(const std::string&)>& on_text) override {
    EngineResult r;
    r.prompt_ids = {1, 2};
    r.prompt_tokens = 2;
    for (int i = 0; i < request.value("max_tokens", 1); ++i) {
      std::this_thread::sleep_for(per_token_);
      r.text += "ok";
      if (!on_text("ok")) break;
      r.output_ids.push_back(i);
      r.completion_tokens++;
    }
    r.finish_reason = "length";
    return r;
  }
  std::optional<CheckResult> check(const std::string&, const json& request) override {
    CheckResult c;
    c.checked = static_cast<int64_t>(request["output_ids"].size());
    return c;
  }

 private:
  std::chrono::milliseconds per_token_;
};

// One coordinator process: its own store (connection pool), HTTP server and replica thread.
struct Process {
  Process(const std::string& db, uint64_t seed) : store(Store::open(db)) {
    CoordinatorOptions o;
    o.replica = true;
    o.seed = seed;
    o.verify_fraction = 0.25;  // some payments go through escrow and a check
    coordinator = std::make_unique<Coordinator>(store, o);
    api = std::make_unique<HttpApi>(*coordinator);
    port = api->bind("127.0.0.1", 0);
    url = "http://127.0.0.1:" + std::to_string(port);
    server = std::thread([this] { api->serve(); });
    replica = std::make_unique<Replica>(*coordinator, db, url, nullptr);
    ticker = std::thread([this] {
      while (!stop) {
        coordinator->tick();
        std::this_thread::sleep_for(100ms);
      }
    });
  }
  ~Process() { shut(); }
  // As the process dying would: its session (and the leader lock with it) ends.
  void shut() {
    if (stop.exchange(true)) return;
    replica->stop();
    api->stop();
    server.join();
    ticker.join();
  }

  Store store;
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<HttpApi> api;
  std::unique_ptr<Replica> replica;
  int port = 0;
  std::string url;
  std::thread server, ticker;
  std::atomic<bool> stop{false};
};

class ReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string skip;
    testing::PgServer* pg = testing::PgServer::shared(&skip);
    if (!pg) GTEST_SKIP() << skip;
    db_ = pg->new_database();
    a_ = std::make_unique<Process>(db_, 1);
    b_ = std::make_unique<Process>(db_, 2);
    ASSERT_TRUE(until([&] { return a_->coordinator->leading() || b_->coordinator->leading(); }));
    // The lock is one: the other never leads while the first holds it.
    std::this_thread::sleep_for(1500ms);
    ASSERT_NE(a_->coordinator->leading(), b_->coordinator->leading());
    secret_ = a_->coordinator->add_key("tester", 0, 0);
  }
  void TearDown() override {
    stop_agents_ = true;
    for (auto& t : agents_) t.join();
  }

  Process& leader() { return a_->coordinator->leading() ? *a_ : *b_; }
  Process& follower() { return a_->coordinator->leading() ? *b_ : *a_; }

  template <typename F>
  static bool until(F done, std::chrono::milliseconds limit = 20s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(50ms);
    }
    return true;
  }

  // A node agent told of `url` (a follower sends it on to the leader).
  void start_agent(const std::string& url, bool offering = true, std::chrono::milliseconds per_token = 0ms) {
    char tmpl[] = "/tmp/orchard-key-XXXXXX";
    ::close(::mkstemp(tmpl));
    ::unlink(tmpl);
    NodeAgentOptions o;
    o.network_url = url;
    o.key_file = tmpl;
    o.chip = "M2 Max";
    o.memory_bytes = 64'000'000'000;
    o.idle.dedicated = offering;
    o.poll_wait_ms = 500;
    agents_.emplace_back([this, o, per_token] {
      NodeAgent agent(o, std::make_unique<CountingEngine>(per_token));
      try {
        agent.run(stop_agents_);
      } catch (const Error&) {
      }
    });
  }

  // POST /v1/jobs to a replica: the job's id, or "" when refused (the status in *status).
  std::string submit(const Process& p, const std::string& secret, int* status = nullptr) {
    httplib::Client c("127.0.0.1", p.port);
    c.set_read_timeout(30);
    c.set_bearer_token_auth(secret.c_str());
    auto res = c.Post("/v1/jobs", R"({"model": "counter", "prompt": "hi", "max_tokens": 3})", "application/json");
    if (status) *status = res ? res->status : 0;
    if (!res || res->status != 201) return "";
    return json::parse(res->body)["id"];
  }

  bool knows_model(Process& p) { return p.coordinator->models()["data"].size() == 1; }

  std::string db_;
  std::unique_ptr<Process> a_, b_;
  std::string secret_;
  std::atomic<bool> stop_agents_{false};
  std::vector<std::thread> agents_;
};

TEST_F(ReplicaTest, JobsFromBothArePlacedOncePaidOnceAndNoneLost) {
  // Both agents are told of the follower: it sends them to the leader.
  start_agent(follower().url);
  start_agent(follower().url);
  ASSERT_TRUE(until([&] { return knows_model(*a_) && knows_model(*b_); }));

  constexpr int kThreads = 4, kEach = 25;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t)
    clients.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) ids[t].push_back(submit((t + i) % 2 ? *a_ : *b_, secret_));
    });
  for (auto& c : clients) c.join();
  std::set<std::string> all;
  for (const auto& v : ids)
    for (const std::string& id : v) {
      ASSERT_FALSE(id.empty());
      all.insert(id);
    }
  ASSERT_EQ(all.size(), size_t{kThreads * kEach});

  Store& store = a_->store;
  ASSERT_TRUE(until([&] {
    return store.count_jobs(JobState::Completed, "generate") == kThreads * kEach &&
           store.count_jobs(JobState::Queued) + store.count_jobs(JobState::Leased) == 0;
  }, 60s)) << store.count_jobs(JobState::Completed, "generate") << " completed";

  int64_t checks = 0;
  for (const std::string& id : all) {
    auto job = store.get_job(id);
    ASSERT_TRUE(job);
    EXPECT_EQ(job->state, JobState::Completed) << id;
    EXPECT_EQ(job->attempt, 1) << id << " was leased more than once";
    EXPECT_EQ(job->completion_tokens, 3);
    checks += job->verify_state == "ok";
  }
  // Every job settled once (a settlement's id is "settle:<job>"), every check released its escrow
  // once and its checker was paid once ("settle:<check>").
  std::map<std::string, int> txns;
  for (const ledger::Txn& t : store.transactions()) txns[t.id]++;
  int64_t settled = 0, released = 0, checkers_paid = 0;
  for (const auto& [id, n] : txns) {
    settled += id.starts_with("settle:job-");
    checkers_paid += id.starts_with("settle:chk-");
    released += id.starts_with("release:");
  }
  EXPECT_EQ(settled, kThreads * kEach);
  EXPECT_EQ(released, checks);
  EXPECT_EQ(checkers_paid, store.count_jobs(JobState::Completed, "verify"));
  int64_t served = 0;
  for (const NodeRecord& n : store.list_nodes()) served += n.jobs_served;
  EXPECT_EQ(served, kThreads * kEach + store.count_jobs(JobState::Completed, "verify"));
  AuditReport audit = audit_ledger(store);
  EXPECT_TRUE(audit.ok()) << (audit.problems.empty() ? "sum " + std::to_string(audit.sum) : audit.problems[0]);

  // A client reads its job from either replica, whichever took it.
  httplib::Client c("127.0.0.1", follower().port);
  c.set_bearer_token_auth(secret_.c_str());
  auto res = c.Get(("/v1/jobs/" + *all.begin()).c_str());
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["text"], "okokok");
}

// A client streaming from the follower that took its job sees the text as the node produces it
// (the leader passes it on), not only at the end.
TEST_F(ReplicaTest, AFollowerStreamsTextAsItComes) {
  start_agent(follower().url, true, 250ms);
  ASSERT_TRUE(until([&] { return knows_model(*a_) && knows_model(*b_); }));
  httplib::Client c("127.0.0.1", follower().port);
  c.set_read_timeout(60);
  c.set_bearer_token_auth(secret_.c_str());
  auto res = c.Post("/v1/jobs", R"({"model": "counter", "prompt": "hi", "max_tokens": 16})", "application/json");
  ASSERT_TRUE(res && res->status == 201) << (res ? res->body : "no answer");
  const std::string id = json::parse(res->body)["id"];
  std::string body;
  bool text_before_end = false;
  auto streamed = c.Get(("/v1/jobs/" + id + "/stream").c_str(), [&](const char* data, size_t n) {
    body.append(data, n);
    // The first "ok" arrives while the job (16 tokens, 4 s) still runs.
    if (!text_before_end && body.find("ok") != std::string::npos) {
      auto job = follower().store.get_job(id);
      text_before_end = job && job->state != JobState::Completed;
    }
    return true;
  });
  ASSERT_TRUE(streamed) << httplib::to_string(streamed.error());
  EXPECT_TRUE(text_before_end) << body;
  std::string text;
  for (size_t at = 0; (at = body.find("data: ", at)) != std::string::npos; at += 6) {
    const std::string line = body.substr(at + 6, body.find('\n', at) - at - 6);
    json frame = json::parse(line, nullptr, false);
    if (frame.is_object() && frame.contains("text")) text += frame["text"].get<std::string>();
  }
  std::string expected;
  for (int i = 0; i < 16; ++i) expected += "ok";
  EXPECT_EQ(text, expected) << body;
}

TEST_F(ReplicaTest, QuotaAndRateHoldAcrossReplicas) {
  // A node that registers but offers nothing: jobs wait, holding their reservations.
  start_agent(leader().url, false);
  ASSERT_TRUE(until([&] { return knows_model(*a_) && knows_model(*b_); }));
  // Each job reserves its prompt's bound (2 bytes + 4 markers) plus max_tokens 3: 9 tokens.
  const std::string quota = a_->coordinator->add_key("quota", 45, 0);
  const std::string rate = b_->coordinator->add_key("rate", 0, 4);
  for (const std::string& secret : {quota, rate}) {
    std::atomic<int> accepted{0}, refused{0};
    std::vector<std::thread> clients;
    for (int t = 0; t < 10; ++t)
      clients.emplace_back([&, t] {
        int status = 0;
        if (!submit(t % 2 ? *a_ : *b_, secret, &status).empty()) accepted++;
        else if (status == 429) refused++;
      });
    for (auto& c : clients) c.join();
    EXPECT_EQ(accepted, secret == quota ? 5 : 4) << (secret == quota ? "quota" : "rate");
    EXPECT_EQ(accepted + refused, 10);
  }
}

TEST_F(ReplicaTest, ANonceSeenByOneIsAReplayToTheOther) {
  RequestGuard one(60000, 0), other(60000, 0);
  one.share([&](const std::string& id, int64_t ts) { return a_->store.remember_nonce(id, ts); });
  other.share([&](const std::string& id, int64_t ts) { return b_->store.remember_nonce(id, ts); });
  NodeKey key = NodeKey::generate();
  const int64_t now = wall_clock_ms();
  SignedHeaders h = sign_request(key, "POST", "/v1/nodes/heartbeat", "{}", now);
  SignedHeaders again = h;
  EXPECT_EQ(one.check(h, "POST", "/v1/nodes/heartbeat", "{}", now), "");
  EXPECT_EQ(other.check(again, "POST", "/v1/nodes/heartbeat", "{}", now), "replayed request");
  a_->store.forget_nonces(now + 1);
  EXPECT_TRUE(b_->store.remember_nonce(h.node + "/" + h.nonce, now));
}

TEST_F(ReplicaTest, WhenTheLeaderGoesTheOtherPlacesItsQueue) {
  Process& first = leader();
  Process& second = follower();
  // Jobs wait on the follower while no node offers anything.
  start_agent(first.url, false);
  ASSERT_TRUE(until([&] { return knows_model(second); }));
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(submit(second, secret_));
  first.shut();
  ASSERT_TRUE(until([&] { return second.coordinator->leading(); }, 10s));
  EXPECT_EQ(second.store.leader_url(), second.url);
  start_agent(second.url);
  ASSERT_TRUE(until([&] { return second.store.count_jobs(JobState::Completed, "generate") == 5; }, 30s));
  for (const std::string& id : ids) EXPECT_EQ(second.store.get_job(id)->attempt, 1) << id;
  EXPECT_TRUE(audit_ledger(second.store).ok());
}

TEST(SingleCoordinator, SqliteRefusesASecondCoordinator) {
  char tmpl[] = "/tmp/orchard-lock-XXXXXX";
  ::close(::mkstemp(tmpl));
  const std::string path = tmpl;
  {
    FileLock first(path);
    try {
      FileLock second(path);
      FAIL() << "a second coordinator on one SQLite database was not refused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("another coordinator already runs"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("PostgreSQL"), std::string::npos) << e.what();
    }
  }
  FileLock after(path);  // released with its holder
  std::filesystem::remove(path);
  EXPECT_EQ(sqlite_path("sqlite:///tmp/x.db"), "/tmp/x.db");
  EXPECT_EQ(sqlite_path(":memory:"), "");
  EXPECT_EQ(sqlite_path("postgresql://u@h/db"), "");
}

}  // namespace
}  // namespace orchard::network

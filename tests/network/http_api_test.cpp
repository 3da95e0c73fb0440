// The coordinator over real HTTP on loopback: signed node requests (forged, replayed, stale and
// unsigned ones refused), a job from submission through a node agent to the ledger, the
// OpenAI-compatible endpoints, and a spot check that catches a lying node.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <future>
#include <thread>

#include "model/tokenizer/vocab_builder.h"
#include "network/audit.h"
#include "network/coordinator.h"
#include "network/http_api.h"
#include "network/identity.h"
#include "network/job_request.h"
#include "network/node_agent.h"
#include "serve/slow_clients.h"

namespace orchard::network {
namespace {

using nlohmann::json;

// Echo engine: "generates" the prompt back max_tokens times; token i is id i. A lying engine
// reports other ids (as a node that ran a cheaper model would); its checks stay honest.
class EchoEngine : public Engine {
 public:
  explicit EchoEngine(bool honest = true) : honest_(honest) {}
  json models() override {
    // 40 GB: the speed a dedicated M2 Ultra owes for its premium (see docs/network.md) is then 6
    // tok/s, which the echo reaches on a loaded test machine.
    return json::array({{{"name", "echo"}, {"bytes", 40'000'000'000}, {"kv_bytes_per_token", 1000}, {"context_length", 512}}});
  }
  EngineResult run(const std::string&, const json& request, const std::function<bool(const std::string&)>& on_text) override {
    std::string prompt = request.contains("prompt") ? request["prompt"].get<std::string>()
                                                    : request["messages"].back()["content"].get<std::string>();
    EngineResult r;
    r.prompt_tokens = 3;
    for (int i = 0; i < request.value("max_tokens", 4); ++i) {
      std::string piece = i == 0 ? prompt : " " + prompt;
      r.text += piece;
      if (!on_text(piece)) break;
      r.output_ids.push_back(honest_ ? i : i + 100);
      r.completion_tokens++;
    }
    r.prompt_ids = {1, 2, 3};
    r.finish_reason = "length";
    return r;
  }
  std::optional<CheckResult> check(const std::string&, const json& request) override {
    CheckResult c;
    auto ids = request["output_ids"].get<std::vector<int>>();
    for (size_t i = 0; i < ids.size() && c.ok; ++i) {
      c.ok = ids[i] == static_cast<int>(i);
      c.checked = static_cast<int64_t>(i) + c.ok;
      if (!c.ok) c.mismatch_at = static_cast<int64_t>(i);
    }
    return c;
  }

 private:
  bool honest_;
};

// A machine without models: every job it is given fails here.
class EmptyEngine : public Engine {
 public:
  json models() override { return json::array(); }
  EngineResult run(const std::string& model, const json&, const std::function<bool(const std::string&)>&) override {
    throw Error("no model " + model + " here");
  }
  std::optional<CheckResult> check(const std::string&, const json&) override { return std::nullopt; }
};

class HttpApiTest : public ::testing::Test {
 protected:
  void keep_answering_through(orchard::testing::SlowLoris& loris, int port);
  // A node's completion as the coordinator answers it: {200, ""} or the refusal's {status, message}.
  std::pair<int, std::string> try_complete(const NodeKey& node, const std::string& job_id, const json& attempt, const json& result) {
    try {
      signed_call(node, url_, "POST", "/v1/nodes/complete", {{"job", job_id}, {"attempt", attempt}, {"result", result}}, 5000);
      return {200, ""};
    } catch (const ApiError& e) {
      return {e.status(), e.what()};
    }
  }

  void SetUp() override {
    store_ = std::make_unique<Store>(Store::open(":memory:"));
    coordinator_ = std::make_unique<Coordinator>(*store_, options());
    api_ = std::make_unique<HttpApi>(*coordinator_);
    port_ = api_->bind("127.0.0.1", 0);
    server_ = std::thread([this] { api_->serve(); });
    url_ = "http://127.0.0.1:" + std::to_string(port_);
    secret_ = coordinator_->add_key("tester", 0, 0);
  }
  virtual CoordinatorOptions options() {
    CoordinatorOptions o;
    o.seed = 1;
    o.verify_fraction = 0;  // the default checks one job in twenty: these tests count credits paid at once
    return o;
  }
  void TearDown() override {
    stop_ = true;
    for (auto& t : agents_) t.join();
    api_->stop();
    server_.join();
  }

  void start_agent(bool honest = true) { start_agent(std::make_shared<EchoEngine>(honest)); }
  void start_agent(std::shared_ptr<Engine> engine, const std::string& chip = "M2 Ultra") {
    char tmpl[] = "/tmp/orchard-key-XXXXXX";
    int fd = ::mkstemp(tmpl);
    ::close(fd);
    ::unlink(tmpl);
    NodeAgentOptions o;
    o.network_url = url_;
    o.key_file = tmpl;
    o.chip = chip;
    o.memory_bytes = 64'000'000'000;
    o.idle.dedicated = true;
    o.poll_wait_ms = 1000;
    agents_.emplace_back([this, o, e = std::move(engine)]() mutable {
      struct Shared : Engine {
        std::shared_ptr<Engine> e;
        json models() override { return e->models(); }
        EngineResult run(const std::string& m, const json& r, const std::function<bool(const std::string&)>& f) override {
          return e->run(m, r, f);
        }
        std::optional<CheckResult> check(const std::string& m, const json& r) override { return e->check(m, r); }
      };
      auto s = std::make_unique<Shared>();
      s->e = e;
      NodeAgent agent(o, std::move(s));
      try {
        agent.run(stop_);
      } catch (const Error&) {
        // banned: the test checks the coordinator's side
      }
    });
  }

  httplib::Client client() {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30);
    c.set_bearer_token_auth(secret_.c_str());
    return c;
  }

  json wait_done(const std::string& id) {
    auto c = client();
    for (int i = 0; i < 200; ++i) {
      auto res = c.Get(("/v1/jobs/" + id).c_str());
      json j = json::parse(res->body);
      if (j["state"] == "completed" || j["state"] == "failed") return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return nullptr;
  }

  std::unique_ptr<Store> store_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<HttpApi> api_;
  std::thread server_;
  std::vector<std::thread> agents_;
  std::atomic<bool> stop_{false};
  int port_ = 0;
  std::string url_, secret_;
};

TEST_F(HttpApiTest, RefusesUnsignedForgedReplayedAndStaleNodeRequests) {
  NodeKey key = NodeKey::generate(), other = NodeKey::generate();
  httplib::Client c("127.0.0.1", port_);
  std::string body = R"({"wait_ms":0})";
  auto post = [&](const SignedHeaders& h, const std::string& b) {
    httplib::Headers headers = {{kNodeHeader, h.node}, {kTimestampHeader, h.timestamp}, {kNonceHeader, h.nonce},
                                {kSignatureHeader, h.signature}};
    return c.Post("/v1/nodes/heartbeat", headers, b, "application/json")->status;
  };
  EXPECT_EQ(c.Post("/v1/nodes/heartbeat", body, "application/json")->status, 401);  // unsigned
  SignedHeaders good = sign_request(key, "POST", "/v1/nodes/heartbeat", body, wall_clock_ms());
  EXPECT_EQ(post(good, R"({"wait_ms":1})"), 401);  // body changed after signing
  SignedHeaders forged = good;
  forged.signature = other.sign_hex(canonical_request("POST", "/v1/nodes/heartbeat", std::stoll(good.timestamp),
                                                      good.nonce, body));
  EXPECT_EQ(post(forged, body), 401);  // signed by another key
  EXPECT_EQ(post(good, body), 404);   // accepted, but this node never registered
  EXPECT_EQ(post(good, body), 401);   // the same request again: a replay
  SignedHeaders stale = sign_request(key, "POST", "/v1/nodes/heartbeat", body, wall_clock_ms() - 10 * 60 * 1000);
  EXPECT_EQ(post(stale, body), 401);
  SignedHeaders moved = sign_request(key, "POST", "/v1/nodes/poll", body, wall_clock_ms());
  EXPECT_EQ(post(moved, body), 401);  // signed for another path
}

// A captured signed request sent again with the node id upper-cased (the hex decoder takes either
// case, so its signature still verifies) is the same request: refused as a replay.
TEST_F(HttpApiTest, AnUpperCasedReplayIsRefused) {
  NodeKey key = NodeKey::generate();
  signed_call(key, url_, "POST", "/v1/nodes/register",
              json{{"memory_bytes", 1'000'000'000}, {"models", json::array()}}, 5000);
  httplib::Client c("127.0.0.1", port_);
  const std::string body = R"({"offering":true})";
  SignedHeaders h = sign_request(key, "POST", "/v1/nodes/heartbeat", body, wall_clock_ms());
  auto post = [&](const std::string& node) {
    httplib::Headers headers = {{kNodeHeader, node}, {kTimestampHeader, h.timestamp}, {kNonceHeader, h.nonce},
                                {kSignatureHeader, h.signature}};
    return c.Post("/v1/nodes/heartbeat", headers, body, "application/json");
  };
  std::string upper = h.node;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  ASSERT_NE(upper, h.node);
  EXPECT_EQ(post(h.node)->status, 200);
  auto replay = post(upper);
  EXPECT_EQ(replay->status, 401);
  EXPECT_NE(replay->body.find("replayed"), std::string::npos) << replay->body;
  // Signed fresh with an upper-cased id, a request is this node's, not a stranger's.
  SignedHeaders fresh = sign_request(key, "GET", "/v1/ledger", "", wall_clock_ms());
  auto ledger = c.Get("/v1/ledger", {{kNodeHeader, upper}, {kTimestampHeader, fresh.timestamp},
                                     {kNonceHeader, fresh.nonce}, {kSignatureHeader, fresh.signature}});
  ASSERT_EQ(ledger->status, 200) << ledger->body;
  EXPECT_EQ(json::parse(ledger->body)["id"], key.public_hex());
  // A pod's members named by upper-cased keys are the same nodes.
  NodeKey other = NodeKey::generate();
  std::string other_upper = other.public_hex();
  for (char& ch : other_upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const json pod = {{"id", "duo"}, {"members", {upper, other_upper}}};
  for (const NodeKey* k : {&key, &other})
    signed_call(*k, url_, "POST", "/v1/nodes/register",
                json{{"memory_bytes", 1'000'000'000}, {"models", json::array()}, {"pod", pod}}, 5000);
  EXPECT_EQ(json::parse(client().Get("/v1/world")->body)["totals"]["pods"], 1);
}

// `orchard node --pod` members name their places in a shared hostfile, not each other's keys:
// the pod forms from the places, in their order, and only among members holding the same file.
TEST_F(HttpApiTest, APodFormsFromItsMembersPlacesInOneHostfile) {
  NodeKey lead = NodeKey::generate(), member = NodeKey::generate(), stranger = NodeKey::generate();
  auto describe = [](const json& pod) {
    return json{{"memory_bytes", 64'000'000'000},
                {"models",
                 {{{"name", "big"}, {"bytes", 100'000'000'000}, {"kv_bytes_per_token", 0}},
                  {{"name", "small"}, {"bytes", 1'000'000'000}, {"kv_bytes_per_token", 0}}}},
                {"pod", pod}};
  };
  auto place = [](int rank, const std::string& digest) {
    return json{{"id", "rack"}, {"size", 2}, {"rank", rank}, {"hostfile", digest}, {"links", json::array()}};
  };
  auto pods = [&] { return client().Get("/v1/world") ? json::parse(client().Get("/v1/world")->body)["totals"]["pods"] : json(); };
  for (const json& bad : {json{{"id", "rack"}, {"size", 1}, {"rank", 0}, {"hostfile", "f"}},
                          json{{"id", "rack"}, {"size", 2}, {"rank", 2}, {"hostfile", "f"}},
                          json{{"id", "rack"}, {"size", "2"}, {"rank", 0}, {"hostfile", "f"}},
                          json{{"id", ""}, {"members", {"a", "b"}}}, json{{"id", "rack"}, {"members", "a"}}}) {
    try {
      signed_call(stranger, url_, "POST", "/v1/nodes/register", describe(bad), 5000);
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << bad.dump();
    }
  }
  signed_call(lead, url_, "POST", "/v1/nodes/register", describe(place(0, "file")), 5000);
  signed_call(stranger, url_, "POST", "/v1/nodes/register", describe(place(1, "another file")), 5000);
  EXPECT_EQ(pods(), 0);
  signed_call(member, url_, "POST", "/v1/nodes/register", describe(place(1, "file")), 5000);
  EXPECT_EQ(pods(), 1);
  // Only the pod holds the model: its job goes to the leader, naming both machines in order.
  auto res = client().Post("/v1/jobs", R"({"model": "big", "prompt": "hi", "max_tokens": 1})", "application/json");
  ASSERT_EQ(res->status, 201) << res->body;
  json job = coordinator_->poll(lead.public_hex(), std::chrono::steady_clock::now() + std::chrono::seconds(5));
  ASSERT_TRUE(job.is_object());
  EXPECT_EQ(job["nodes"], (json{lead.public_hex(), member.public_hex()}));
  // A coordinator restarted over the same store still counts the pod busy with that job (the
  // store names only the leader): its member, back online, takes no job of its own meanwhile.
  Coordinator restarted(*store_, options());
  restarted.register_node(member.public_hex(), describe(place(1, "file")));
  restarted.submit(restarted.authenticate(secret_),
                   Submission::from_json(json{{"model", "small"}, {"prompt", "hi"}, {"max_tokens", 1}}));
  EXPECT_FALSE(restarted.poll(member.public_hex(), std::chrono::steady_clock::now() + std::chrono::milliseconds(500)).is_object());
}

TEST_F(HttpApiTest, JobsTooLargeForEveryMachineWaitWithoutHoldingBackSmallerOnes) {
  NodeKey node = NodeKey::generate();
  signed_call(node, url_, "POST", "/v1/nodes/register",
              json{{"memory_bytes", 64'000'000'000},
                   {"models", {{{"name", "big"}, {"bytes", 100'000'000'000}, {"kv_bytes_per_token", 0}},
                               {{"name", "small"}, {"bytes", 1'000'000'000}, {"kv_bytes_per_token", 0}}}}},
              5000);
  auto submit = [&](const std::string& model) {
    auto res = client().Post("/v1/jobs", json{{"model", model}, {"prompt", "hi"}, {"max_tokens", 1}}.dump(), "application/json");
    EXPECT_EQ(res->status, 201) << res->body;
    return json::parse(res->body)["id"].get<std::string>();
  };
  submit("big");
  const std::string first = submit("small");
  submit("big");
  const std::string second = submit("small");
  const auto deadline = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(2); };
  std::vector<std::string> received;
  for (json job = coordinator_->poll(node.public_hex(), deadline()); job.is_object();
       job = coordinator_->poll(node.public_hex(), deadline()))
    received.push_back(job["id"]);
  EXPECT_EQ(received, (std::vector<std::string>{first, second}));
  EXPECT_EQ(json::parse(client().Get("/v1/world")->body)["totals"]["queue"], 2);
}

TEST_F(HttpApiTest, ClientsNeedAKey) {
  httplib::Client c("127.0.0.1", port_);
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  c.set_bearer_token_auth("ok-wrong");
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  EXPECT_EQ(c.Get("/v1/world")->status, 200);  // public
}

TEST_F(HttpApiTest, AJobRunsOnANodeAndIsPaidOnce) {
  start_agent();
  auto c = client();
  json models;
  for (int i = 0; i < 100; ++i) {
    models = json::parse(c.Get("/v1/models")->body);
    if (!models["data"].empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(models["data"][0]["id"], "echo");
  auto res = c.Post("/v1/jobs", R"({"model":"echo","prompt":"hello","max_tokens":3})", "application/json");
  ASSERT_EQ(res->status, 201) << res->body;
  json job = wait_done(json::parse(res->body)["id"]);
  ASSERT_FALSE(job.is_null());
  EXPECT_EQ(job["text"], "hello hello hello");
  EXPECT_EQ(job["usage"]["completion_tokens"], 3);
  EXPECT_EQ(c.Post("/v1/jobs", R"({"model":"nope","prompt":"x"})", "application/json")->status, 404);
  EXPECT_EQ(c.Post("/v1/jobs", R"({"model":"echo"})", "application/json")->status, 400);

  json world = json::parse(httplib::Client("127.0.0.1", port_).Get("/v1/world/machines?online=any")->body);
  ASSERT_EQ(world["machines"].size(), 1u);
  EXPECT_EQ(world["machines"][0]["chip"], "M2 Ultra");
  EXPECT_EQ(world["machines"][0]["jobs_served"], 1);
  EXPECT_EQ(json::parse(httplib::Client("127.0.0.1", port_).Get("/v1/world")->body)["totals"]["jobs_served"], 1);
  auto [sum, consistent] = store_->audit();
  EXPECT_EQ(sum, 0);
  EXPECT_TRUE(consistent);
  std::string node = world["machines"][0]["id"];
  // 6 tokens x 40 GB x dedicated Ultra (2x) = 0.48 credits
  EXPECT_EQ(store_->balance(ledger::node_account(node)), 480000);
}

// The coordinator forgets an ended job's streamed text once it has been kept long enough (the
// result is in the store): a long-running coordinator does not keep every job's text.
class EndedTextTest : public HttpApiTest {
 protected:
  CoordinatorOptions options() override {
    CoordinatorOptions o = HttpApiTest::options();
    o.ended_text_kept_ms = 0;
    return o;
  }
};

TEST_F(EndedTextTest, EndedJobsTextIsForgottenAndTheirResultStaysReadable) {
  start_agent();
  auto c = client();
  for (int i = 0; i < 100 && json::parse(c.Get("/v1/models")->body)["data"].empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    auto res = c.Post("/v1/jobs", R"({"model":"echo","prompt":"hi","max_tokens":2})", "application/json");
    ASSERT_EQ(res->status, 201) << res->body;
    ids.push_back(json::parse(res->body)["id"]);
    ASSERT_FALSE(wait_done(ids.back()).is_null());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the next job ends a later millisecond
  }
  // Each end forgets the texts that ended before it: the last job's alone is left.
  EXPECT_EQ(coordinator_->live_jobs(), 1u);
  for (const std::string& id : ids) EXPECT_EQ(json::parse(c.Get("/v1/jobs/" + id)->body)["text"], "hi hi");
}

TEST_F(HttpApiTest, EndedJobsTextIsKeptForAWhile) {
  start_agent();
  auto c = client();
  for (int i = 0; i < 100 && json::parse(c.Get("/v1/models")->body)["data"].empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int i = 0; i < 3; ++i) {
    auto res = c.Post("/v1/jobs", R"({"model":"echo","prompt":"hi","max_tokens":2})", "application/json");
    ASSERT_EQ(res->status, 201) << res->body;
    ASSERT_FALSE(wait_done(json::parse(res->body)["id"]).is_null());
  }
  EXPECT_EQ(coordinator_->live_jobs(), 3u);
}

// A node's long poll ends as soon as the node withdraws (so a node that is told to stop leaves
// at once, not after its poll), and every long wait ends when the server stops.
TEST_F(HttpApiTest, LongPollsEndWhenTheNodeWithdrawsOrTheServerStops) {
  NodeKey key = NodeKey::generate();
  signed_call(key, url_, "POST", "/v1/nodes/register",
              json{{"memory_bytes", 1'000'000'000}, {"models", json::array()}, {"offering", true}}, 5000);
  auto poll_seconds = [&](const std::function<void()>& meanwhile) {
    const auto start = std::chrono::steady_clock::now();
    auto answer = std::async(std::launch::async, [&] {
      return signed_call(key, url_, "POST", "/v1/nodes/poll", {{"wait_ms", 20000}}, 30000);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    meanwhile();
    const json r = answer.get();
    EXPECT_TRUE(r["job"].is_null()) << r.dump();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  EXPECT_LT(poll_seconds([&] { signed_call(key, url_, "POST", "/v1/nodes/heartbeat", {{"offering", false}}, 5000); }),
            10.0);
  signed_call(key, url_, "POST", "/v1/nodes/heartbeat", {{"offering", true}}, 5000);
  EXPECT_LT(poll_seconds([&] { coordinator_->end_waits(); }), 10.0);
}

TEST_F(HttpApiTest, ChatCompletionsSpeakOpenAI) {
  start_agent();
  auto c = client();
  for (int i = 0; i < 100 && json::parse(c.Get("/v1/models")->body)["data"].empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto res = c.Post("/v1/chat/completions",
                    R"({"model":"echo","messages":[{"role":"user","content":"hi"}],"max_tokens":2})", "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  json r = json::parse(res->body);
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "hi hi");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["total_tokens"], 5);

  auto s = c.Post("/v1/chat/completions",
                  R"({"model":"echo","messages":[{"role":"user","content":"yo"}],"max_tokens":2,"stream":true})",
                  "application/json");
  ASSERT_EQ(s->status, 200);
  EXPECT_NE(s->body.find("chat.completion.chunk"), std::string::npos);
  EXPECT_NE(s->body.find("\"role\":\"assistant\""), std::string::npos);
  EXPECT_NE(s->body.find("data: [DONE]"), std::string::npos);
  std::string content;
  for (size_t p = 0; (p = s->body.find("data: {", p)) != std::string::npos; ++p) {
    json chunk = json::parse(s->body.substr(p + 6, s->body.find("\n\n", p) - p - 6));
    content += chunk["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(content, "yo yo");
}

// Every job is checked on a second node.
class CheckedHttpApiTest : public HttpApiTest {
  CoordinatorOptions options() override {
    CoordinatorOptions o = HttpApiTest::options();
    o.verify_fraction = 1.0;
    o.ban_after_mismatches = 2;
    o.lease_ms = 1000;  // a banned node's leases come back fast (the loop below ticks)
    return o;
  }
};

TEST_F(CheckedHttpApiTest, ALyingNodeLosesItsCreditsAndIsBanned) {
  start_agent(/*honest*/ false);
  start_agent(true);
  start_agent(true);  // two honest nodes: checks of each other's jobs still run after the ban
  auto c = client();
  for (int i = 0; i < 100 && json::parse(c.Get("/v1/world")->body)["totals"]["online"] != 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Every job is checked on another node: the liar's jobs fail their checks (refunded, the
  // liar banned after two), the honest node's pass (released to it).
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) {
    auto res = c.Post("/v1/jobs", R"({"model":"echo","prompt":"x","max_tokens":2})", "application/json");
    ASSERT_EQ(res->status, 201) << res->body;
    ids.push_back(json::parse(res->body)["id"]);
  }
  int ok = 0, mismatch = 0;
  for (int i = 0; i < 300 && ok + mismatch < 8; ++i) {
    ok = mismatch = 0;
    for (auto& id : ids) {
      json j = json::parse(c.Get(("/v1/jobs/" + id).c_str())->body);
      ok += j.value("check", "") == "ok";
      mismatch += j.value("check", "") == "mismatch";
    }
    coordinator_->tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(ok + mismatch, 8);
  EXPECT_GE(mismatch, 1);
  int banned = 0;
  for (const NodeRecord& n : store_->list_nodes()) {
    if (n.banned) {
      ++banned;
      EXPECT_GE(n.mismatches, 2);  // jobs it held when banned are checked too
      // It earned only check fees, never a job's credits, and paid a fine of twice each caught
      // job's credits: its balance is below what its checks earned.
      int64_t fees = 0, fines = 0;
      for (const StatementLine& l : store_->statement(ledger::node_account(n.id), 100)) {
        EXPECT_TRUE(l.txn_id.starts_with("settle:chk-") || l.txn_id.starts_with("fine:job-")) << l.txn_id;
        (l.txn_id.starts_with("fine:") ? fines : fees) += l.amount;
        if (l.txn_id.starts_with("fine:")) {
          const std::string job = l.txn_id.substr(5);
          EXPECT_EQ(-l.amount, ledger::kFineMultiple * store_->escrowed(job)) << job;
          EXPECT_EQ(store_->get_job(job)->verify_state, "mismatch");
        }
      }
      EXPECT_LT(fines, 0);
      EXPECT_EQ(store_->balance(ledger::node_account(n.id)), fees + fines);
    }
  }
  EXPECT_EQ(banned, mismatch >= 2 ? 1 : 0);
  EXPECT_EQ(store_->balance(ledger::kEscrow), 0);
  AuditReport audit = audit_ledger(*store_);
  EXPECT_TRUE(audit.ok()) << audit.sum << " " << (audit.problems.empty() ? "" : audit.problems[0]);
}

// An attacker's node, signing as any stranger's would, completes a job with made-up counts: what
// is billed and paid is what the coordinator counts (the token ids it was sent, within the job's
// max_tokens and its prompt's bound), and every made-up count is refused with 400 naming it.
TEST_F(HttpApiTest, PayFollowsCountedTokensNotClaims) {
  EXPECT_EQ(CoordinatorOptions{}.verify_fraction, 0.05);  // spot checks are on unless turned off
  NodeKey attacker = NodeKey::generate();
  signed_call(attacker, url_, "POST", "/v1/nodes/register",
              json{{"memory_bytes", 64'000'000'000}, {"chip", "M2 Ultra"}, {"seat", "dedicated"},
                   {"models", {{{"name", "echo"}, {"bytes", 40'000'000'000}, {"kv_bytes_per_token", 0}}}}},
              5000);
  auto res = client().Post("/v1/jobs", R"({"model":"echo","prompt":"hello","max_tokens":4})", "application/json");
  ASSERT_EQ(res->status, 201) << res->body;
  const std::string id = json::parse(res->body)["id"];
  json job = signed_call(attacker, url_, "POST", "/v1/nodes/poll", {{"wait_ms", 2000}}, 5000)["job"];
  ASSERT_TRUE(job.is_object());
  auto complete = [&](const json& result) { return try_complete(attacker, id, job["attempt"], result); };
  const json ids3 = {1, 2, 3}, ids4 = {5, 6, 7, 8};
  struct Lie {
    json result;
    const char* names;
  };
  for (const Lie& lie : std::vector<Lie>{
           {{{"text", "x"}, {"prompt_tokens", 3}, {"completion_tokens", 1'000'000'000'000}}, "completion_tokens"},
           {{{"text", "x"}, {"prompt_tokens", -5}, {"completion_tokens", 2}}, "prompt_tokens"},
           {{{"text", "x"}, {"prompt_tokens", 3}, {"completion_tokens", "9"}}, "completion_tokens"},
           {{{"text", "x"}, {"prompt_tokens", 3}, {"completion_tokens", 1e300}}, "completion_tokens"},
           {{{"text", "x"}, {"prompt_ids", ids3}, {"output_ids", {1, 2, 3, 4, 5}}}, "output_ids"},
           {{{"text", "x"}, {"prompt_ids", ids3}, {"output_ids", ids4}, {"completion_tokens", 40}}, "completion_tokens"},
           {{{"text", "hello"}, {"prompt_ids", json(std::vector<int>(100, 7))}, {"output_ids", ids4}}, "prompt_ids"},
           {{{"text", "x"}, {"prompt_ids", ids3}, {"output_ids", {1, -2}}}, "output_ids"},
           {{{"text", "x"}, {"output_ids", ids4}}, "prompt_ids"},
           {{{"text", "hello"}, {"prompt_tokens", 400}, {"completion_tokens", 4}}, "prompt_tokens"},
           // Without the model's vocabulary: each generated token shows at least a byte of text
           // (one end token and one bare leading space aside), so 4 ids cannot be 1 byte.
           {{{"text", "x"}, {"prompt_ids", ids3}, {"output_ids", ids4}}, "bytes of \"text\""},
       }) {
    auto [status, message] = complete(lie.result);
    EXPECT_EQ(status, 400) << lie.result.dump();
    EXPECT_NE(message.find(lie.names), std::string::npos) << message;
  }
  // Still leased: the honest report is accepted and billed at the counted 3 + 4 tokens.
  ASSERT_EQ(complete({{"text", "hello"}, {"prompt_ids", ids3}, {"output_ids", ids4}, {"prompt_tokens", 3}}).first, 200);
  json done = wait_done(id);
  EXPECT_EQ(done["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(done["usage"]["completion_tokens"], 4);
  // 7 tokens x 40 GB x dedicated Ultra (2x) = 0.56 credits
  EXPECT_EQ(store_->balance(ledger::node_account(attacker.public_hex())), 560000);
  EXPECT_EQ(store_->get_key(store_->get_job(id)->key_id)->tokens_used, 7);
  AuditReport audit = audit_ledger(*store_);
  EXPECT_TRUE(audit.ok()) << (audit.problems.empty() ? "" : audit.problems[0]);
  EXPECT_EQ(audit.payments_checked, 1);

  // A payment the rules do not make (as a tampered database would hold) is found although the
  // books still sum to zero.
  auto queued = client().Post("/v1/jobs", R"({"model":"echo","prompt":"hi","max_tokens":1})", "application/json");
  const std::string queued_id = json::parse(queued->body)["id"];
  const std::string key_id = store_->get_job(id)->key_id;
  store_->post(ledger::settle_job(queued_id, key_id, attacker.public_hex(), 1'000'000'000, false), 0);
  store_->post(ledger::settle_job("job-none", key_id, attacker.public_hex(), 5, false), 0);
  audit = audit_ledger(*store_);
  EXPECT_EQ(audit.sum, 0);
  EXPECT_TRUE(audit.consistent);
  ASSERT_EQ(audit.problems.size(), 2u);
  const std::string problems = audit.problems[0] + "\n" + audit.problems[1];
  EXPECT_NE(problems.find("settle:job-none: no job job-none"), std::string::npos) << problems;
  EXPECT_NE(problems.find("settle:" + queued_id + ": job " + queued_id + " is"), std::string::npos) << problems;
}

// Ten submissions at once against a 30-token quota: each reserves its prompt's bound ("hi": 2
// bytes + 4 markers) plus max_tokens 4 = 10 tokens, so three are accepted and seven refused.
// The reservation is released at a cancel and settled at the counted tokens at completion.
TEST_F(HttpApiTest, ConcurrentSubmissionsCannotRunPastTheQuota) {
  NodeKey node = NodeKey::generate();
  signed_call(node, url_, "POST", "/v1/nodes/register",
              json{{"memory_bytes", 64'000'000'000},
                   {"models", {{{"name", "echo"}, {"bytes", 1'000'000'000}, {"kv_bytes_per_token", 0}}}}},
              5000);
  const std::string secret = coordinator_->add_key("small", 30, 0);
  auto submit = [&](const std::string& body) {
    httplib::Client c("127.0.0.1", port_);
    c.set_bearer_token_auth(secret.c_str());
    auto res = c.Post("/v1/jobs", body, "application/json");
    return std::make_pair(res ? res->status : 0, res ? res->body : std::string());
  };
  std::vector<std::thread> threads;
  std::mutex mu;
  std::vector<std::string> accepted;
  int refused = 0;
  for (int i = 0; i < 10; ++i)
    threads.emplace_back([&] {
      auto [status, body] = submit(R"({"model":"echo","prompt":"hi","max_tokens":4})");
      std::lock_guard lock(mu);
      if (status == 201) accepted.push_back(json::parse(body)["id"]);
      refused += status == 429;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(accepted.size(), 3u);
  EXPECT_EQ(refused, 7);
  auto over = submit(R"({"model":"echo","prompt":"hi","max_tokens":4})");
  EXPECT_EQ(over.first, 429);
  EXPECT_NE(over.second.find("0 of its quota of 30 tokens left (0 used, 30 reserved"), std::string::npos) << over.second;

  // A cancel gives its reservation back.
  httplib::Client owner("127.0.0.1", port_);
  owner.set_bearer_token_auth(secret.c_str());
  ASSERT_EQ(owner.Delete(("/v1/jobs/" + accepted[0]).c_str())->status, 200);
  EXPECT_EQ(submit(R"({"model":"echo","prompt":"hi","max_tokens":4})").first, 201);
  EXPECT_EQ(submit(R"({"model":"echo","prompt":"hi","max_tokens":4})").first, 429);

  // A completion settles at what was counted: 3 prompt + 2 generated tokens of the 10 reserved,
  // which leaves 5 tokens: a job needing 5 (empty prompt: 4 markers, max_tokens 1) fits, 6 do not.
  json job = signed_call(node, url_, "POST", "/v1/nodes/poll", {{"wait_ms", 2000}}, 5000)["job"];
  ASSERT_TRUE(job.is_object());
  signed_call(node, url_, "POST", "/v1/nodes/complete",
              {{"job", job["id"]}, {"attempt", job["attempt"]},
               {"result", {{"text", "hi hi"}, {"prompt_ids", {1, 2, 3}}, {"output_ids", {0, 1}}}}},
              5000);
  EXPECT_EQ(submit(R"({"model":"echo","prompt":"x","max_tokens":1})").first, 429);
  EXPECT_EQ(submit(R"({"model":"echo","prompt":"","max_tokens":1})").first, 201);
}

// Two nodes, one without the model (placement may still pick it: a model not on disk only halves
// a unit's score): all four jobs finish, and the node without it hands back at most the jobs it
// was given before its first hand-back said it lacks the model (its queue holds two).
TEST_F(HttpApiTest, PlacementNeverPingPongsAJobANodeCannotRun) {
  start_agent();
  start_agent(std::make_shared<EmptyEngine>());
  auto c = client();
  for (int i = 0; i < 100 && json::parse(c.Get("/v1/world")->body)["totals"]["online"] != 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    auto res = c.Post("/v1/jobs", R"({"model":"echo","prompt":"x","max_tokens":2})", "application/json");
    ASSERT_EQ(res->status, 201) << res->body;
    ids.push_back(json::parse(res->body)["id"]);
  }
  int64_t attempts = 0;
  for (const std::string& id : ids) {
    json j = wait_done(id);
    ASSERT_FALSE(j.is_null());
    EXPECT_EQ(j["state"], "completed") << j.dump();
    attempts += j["attempts"].get<int64_t>();
  }
  const int64_t hand_backs = attempts - 4;
  EXPECT_LE(hand_backs, 2);
  for (const NodeRecord& n : store_->list_nodes()) {
    if (n.jobs_served == 0 && hand_backs > 0) {
      EXPECT_LT(n.reputation, 1.0);  // the node without the model
    }
  }
}

// A job the only node that could hold its model cannot run fails at once with the reasons, and
// gives its quota reservation back; each hand-back costs the node reputation.
TEST_F(HttpApiTest, AJobNoNodeCanRunFailsWithAReason) {
  NodeKey node = NodeKey::generate();
  signed_call(node, url_, "POST", "/v1/nodes/register",
              json{{"memory_bytes", 64'000'000'000},
                   {"models", {{{"name", "solo"}, {"bytes", 1'000'000'000}, {"kv_bytes_per_token", 0}}}}},
              5000);
  const std::string secret = coordinator_->add_key("q", 20, 0);
  httplib::Client c("127.0.0.1", port_);
  c.set_bearer_token_auth(secret.c_str());
  auto res = c.Post("/v1/jobs", R"({"model":"solo","prompt":"hello","max_tokens":8})", "application/json");
  ASSERT_EQ(res->status, 201) << res->body;  // reserves 5 + 4 + 8 = 17 of 20
  EXPECT_EQ(c.Post("/v1/jobs", R"({"model":"solo","prompt":"hello","max_tokens":8})", "application/json")->status, 429);
  const std::string id = json::parse(res->body)["id"];
  json job = signed_call(node, url_, "POST", "/v1/nodes/poll", {{"wait_ms", 2000}}, 5000)["job"];
  ASSERT_TRUE(job.is_object());
  // Given up for a passing reason, the job may come back to the same node.
  signed_call(node, url_, "POST", "/v1/nodes/hand-back",
              {{"job", id}, {"attempt", job["attempt"]}, {"reason", "the owner came back"}}, 5000);
  job = signed_call(node, url_, "POST", "/v1/nodes/poll", {{"wait_ms", 2000}}, 5000)["job"];
  ASSERT_TRUE(job.is_object());
  EXPECT_EQ(job["id"], id);
  EXPECT_EQ(job["attempt"], 2);
  signed_call(node, url_, "POST", "/v1/nodes/hand-back",
              {{"job", id}, {"attempt", job["attempt"]}, {"reason", kModelMissing}}, 5000);
  json failed = json::parse(c.Get(("/v1/jobs/" + id).c_str())->body);
  EXPECT_EQ(failed["state"], "failed");
  EXPECT_NE(failed.value("error", "").find("no node can run it"), std::string::npos) << failed.dump();
  EXPECT_NE(failed.value("error", "").find(kModelMissing), std::string::npos) << failed.dump();
  EXPECT_NE(failed.value("error", "").find("the owner came back"), std::string::npos) << failed.dump();
  EXPECT_DOUBLE_EQ(store_->get_node(node.public_hex())->reputation, 0.9 * 0.9);
  EXPECT_EQ(c.Post("/v1/jobs", R"({"model":"solo","prompt":"hello","max_tokens":8})", "application/json")->status, 201);
}

// A node that claims a dedicated "Apple M3 Ultra" (the top multiplier, 2x) registers `model`
// (named "echo"), serves one four-token job taking `work`, and goes away; its balance after.
int64_t serve_one_as_ultra(const std::string& url, Store& store, httplib::Client client, const NodeKey& node,
                           const json& model, std::chrono::milliseconds work) {
  signed_call(node, url, "POST", "/v1/nodes/register",
              json{{"memory_bytes", 64'000'000'000}, {"chip", "Apple M3 Ultra"}, {"seat", "dedicated"},
                   {"models", json::array({model})}},
              5000);
  auto res = client.Post("/v1/jobs", R"({"model":"echo","prompt":"hello","max_tokens":4})", "application/json");
  EXPECT_EQ(res->status, 201) << res->body;
  json job = signed_call(node, url, "POST", "/v1/nodes/poll", {{"wait_ms", 2000}}, 5000)["job"];
  EXPECT_TRUE(job.is_object());
  std::this_thread::sleep_for(work);
  // Its own claims of speed count for nothing.
  signed_call(node, url, "POST", "/v1/nodes/complete",
              {{"job", job["id"]}, {"attempt", job["attempt"]},
               {"result", {{"text", "hello"}, {"prompt_ids", {1, 2, 3}}, {"output_ids", {5, 6, 7, 8}}, {"tok_s", 1e6}}}},
              5000);
  // Gone, so the next job goes to the next node.
  signed_call(node, url, "POST", "/v1/nodes/heartbeat", {{"offering", false}}, 5000);
  return store.balance(ledger::node_account(node.public_hex()));
}

// Two nodes claim an M3 Ultra. The one that takes a second over four tokens of a 40 GB model
// (4 tok/s; the chip would give 819 GB/s x 0.6 / 40 GB = 12 tok/s, and the premium needs half of
// that) is paid the shared rate; the one that delivers at once is paid the premium.
TEST_F(HttpApiTest, TheSeatPremiumFollowsMeasuredDelivery) {
  const json echo = {{"name", "echo"}, {"bytes", 40'000'000'000}, {"kv_bytes_per_token", 0}};
  NodeKey slow = NodeKey::generate(), fast = NodeKey::generate();
  // 7 tokens x 40 GB at 1x = 0.28 credits; at 2x = 0.56.
  EXPECT_EQ(serve_one_as_ultra(url_, *store_, client(), slow, echo, std::chrono::milliseconds(1000)), 280000);
  EXPECT_EQ(serve_one_as_ultra(url_, *store_, client(), fast, echo, std::chrono::milliseconds(0)), 560000);
  EXPECT_LT(store_->get_node(slow.public_hex())->tok_s, 4.1);  // the World shows the measured speed
  AuditReport audit = audit_ledger(*store_);
  EXPECT_TRUE(audit.ok()) << (audit.problems.empty() ? "" : audit.problems[0]);
}

// The speed a chip owes follows the bytes a decode step reads. Four tokens in 200 ms (at most
// 20 tok/s) are enough for a dense 40 GB model (owed 12.3, floor 6.1) but not for a mixture of
// experts of the same size that reads 4 GB a token (owed 819 x 0.6 / 4 = 122.9, floor 61.4).
// Credits still follow the model's size (both 40 GB): 0.56 at 2x, 0.28 at 1x.
TEST_F(HttpApiTest, TheSeatPremiumOfAMixtureOfExpertsFollowsItsActiveBytes) {
  const json dense = {{"name", "echo"}, {"bytes", 40'000'000'000}, {"kv_bytes_per_token", 0}};
  json moe = dense;
  moe["active_bytes_per_token"] = 4'000'000'000;
  NodeKey a = NodeKey::generate(), b = NodeKey::generate();
  EXPECT_EQ(serve_one_as_ultra(url_, *store_, client(), a, dense, std::chrono::milliseconds(200)), 560000);
  EXPECT_EQ(serve_one_as_ultra(url_, *store_, client(), b, moe, std::chrono::milliseconds(200)), 280000);
}

// Every bad input is a 4xx with a message in the error shape `orchard serve` answers with
// ({"error": {"message", "type", "param", "code"}}, string codes), never a 500; a body is judged by
// its content, not its Content-Type.
TEST_F(HttpApiTest, BadInputGetsA4xxInOneErrorShape) {
  NodeKey node = NodeKey::generate();
  signed_call(node, url_, "POST", "/v1/nodes/register",
              json{{"memory_bytes", 64'000'000'000},
                   {"models", {{{"name", "echo"}, {"bytes", 1'000'000'000}, {"kv_bytes_per_token", 0}}}}},
              5000);
  auto c = client();
  auto expect_error = [](const httplib::Result& res, int status, const std::string& words) {
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, status) << res->body;
    json e = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << res->body;
    EXPECT_TRUE(e["error"]["type"].is_string()) << res->body;
    EXPECT_TRUE(e["error"]["code"].is_string()) << res->body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(words), std::string::npos) << res->body;
  };
  for (auto [body, words] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model":"echo","prompt":"x","max_tokens":"9"})", "max_tokens"},
           {R"({"model":"echo","prompt":"x","max_tokens":9.5})", "max_tokens"},
           {R"({"model":"echo","prompt":"x","max_tokens":0})", "max_tokens"},
           {R"({"model":"echo","prompt":"x","temperature":1e999})", "not JSON"},
           {R"({"model":"echo","prompt":"x","temperature":"hot"})", "temperature"},
           {R"({"model":"echo","prompt":"x","top_k":-1})", "top_k"},
           {R"({"model":"echo","prompt":"x","seed":"s"})", "seed"},
           {R"([1, 2])", "object"},
       })
    expect_error(c.Post("/v1/jobs", body, "application/json"), 400, words);
  expect_error(c.Post("/v1/chat/completions", R"({"model":"echo","messages":[{"role":"user","content":"x"}],"stream":"yes"})",
                      "application/json"),
               400, "bad request");
  expect_error(c.Get("/v1/nowhere"), 404, "no route");
  httplib::Client stranger("127.0.0.1", port_);
  stranger.set_bearer_token_auth("ok-wrong");
  auto unknown = stranger.Get("/v1/models");
  expect_error(unknown, 401, "unknown API key");
  EXPECT_EQ(json::parse(unknown->body)["error"]["code"], "invalid_api_key");
  // 8 KiB of JSON sent as a form (as curl -d does) is judged by its content.
  const json big = {{"model", "echo"}, {"prompt", std::string(8192, 'a')}, {"max_tokens", 1}};
  auto form = c.Post("/v1/jobs", big.dump(), "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 201) << form->body;
  // Nodes' requests too: fields missing or of the wrong type are named.
  for (auto [path, body, words] : std::vector<std::tuple<std::string, json, std::string>>{
           {"/v1/nodes/complete", json{{"attempt", 1}, {"result", json::object()}}, "\"job\""},
           {"/v1/nodes/complete", json{{"job", "j"}, {"attempt", "1"}, {"result", json::object()}}, "\"attempt\""},
           {"/v1/nodes/complete", json{{"job", "j"}, {"attempt", 1}, {"result", "done"}}, "\"result\""},
           {"/v1/nodes/progress", json{{"job", "j"}, {"attempt", 1}, {"offset", -1}}, "\"offset\""},
           {"/v1/nodes/hand-back", json{{"job", 7}, {"attempt", 1}}, "\"job\""},
           {"/v1/nodes/poll", json{{"wait_ms", "soon"}}, "\"wait_ms\""},
           {"/v1/nodes/heartbeat", json{{"offering", "yes"}}, "offering"},
           {"/v1/nodes/register", json{{"memory_bytes", 1}, {"models", json::array()}, {"seat", 2}}, "seat"},
           {"/v1/nodes/register",
            json{{"memory_bytes", 1},
                 {"models", json::array({json{{"name", "m"}, {"bytes", 1}, {"active_bytes_per_token", "few"}}})}},
            "active_bytes_per_token"},
       }) {
    try {
      signed_call(node, url_, "POST", path, body, 5000);
      ADD_FAILURE() << path << " accepted " << body.dump();
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << path << " " << body.dump() << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  }
}

// For three seconds of trickling by `loris`: /health and a client's request are answered within a
// second each time; then every trickler has been closed by the server.
void HttpApiTest::keep_answering_through(orchard::testing::SlowLoris& loris, int port) {
  for (int second = 0; second < 3; ++second) {
    auto health = orchard::testing::timed_get("127.0.0.1", port, "/health", 5);
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    EXPECT_LT(health->seconds, 1.0);
    httplib::Client client("127.0.0.1", port);
    client.set_bearer_token_auth(secret_.c_str());
    const auto start = std::chrono::steady_clock::now();
    auto models = client.Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 200);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    loris.trickle();
  }
  EXPECT_EQ(loris.closed_by_server(), 200);
}

// The coordinator under a slow-loris: 200 sockets trickling headers (more than a small server's
// 16 handler threads) wait in its poller, so /health and a client's request are answered at once
// all along, and each trickler is closed when its head is not in after head_timeout. A second
// coordinator on the same port does not start.
TEST_F(HttpApiTest, SlowClientsStarveNoOneAndAPortInUseIsAnError) {
  serve::http::GuardOptions connections = HttpApi::default_connections();
  connections.threads = 16;
  connections.head_timeout = std::chrono::milliseconds(1500);
  connections.max_per_address = 1000;
  HttpApi api(*coordinator_, 60000, connections);
  const int port = api.bind("127.0.0.1", 0);
  std::thread serving([&] { api.serve(); });
  {
    orchard::testing::SlowLoris loris(port, 200);
    keep_answering_through(loris, port);
  }
  HttpApi second(*coordinator_);
  EXPECT_THROW(second.bind("127.0.0.1", port), Error);
  api.stop();
  serving.join();
}

// A coordinator given the model's vocabulary checks every completion's ids against its text and
// counts the prompt itself, so a node cannot pad its count with ids it did not generate.
class VocabHttpApiTest : public HttpApiTest {
 protected:
  static std::shared_ptr<const model::Tokenizer> tokenizer() {
    static const auto tok = std::make_shared<const model::Tokenizer>(
        model::Tokenizer::from_vocab(model::build_vocab(model::VocabStyle::Qwen2Bpe, 600)));
    return tok;
  }
  CoordinatorOptions options() override {
    CoordinatorOptions o = HttpApiTest::options();
    o.vocabs["echo"] = ModelVocab{tokenizer(), "qwen2"};
    return o;
  }
};

TEST_F(VocabHttpApiTest, PaddedOutputIdsAreRefusedOnEveryJob) {
  NodeKey attacker = NodeKey::generate();
  signed_call(attacker, url_, "POST", "/v1/nodes/register",
              json{{"memory_bytes", 64'000'000'000}, {"chip", "M2 Ultra"}, {"seat", "shared"},
                   {"models", {{{"name", "echo"}, {"bytes", 1'000'000'000}, {"kv_bytes_per_token", 0}}}}},
              5000);
  const json request = {{"model", "echo"}, {"prompt", "hello there"}, {"max_tokens", 32}};
  auto res = client().Post("/v1/jobs", request.dump(), "application/json");
  ASSERT_EQ(res->status, 201) << res->body;
  const std::string id = json::parse(res->body)["id"];
  json job = signed_call(attacker, url_, "POST", "/v1/nodes/poll", {{"wait_ms", 2000}}, 5000)["job"];
  ASSERT_TRUE(job.is_object());
  auto complete = [&](const json& result) { return try_complete(attacker, id, job["attempt"], result); };
  const model::Tokenizer& tok = *tokenizer();
  // What a node running the model would report: the prompt as the engine reads it (the same
  // function every engine uses), and ids whose decoding is the text it streamed.
  const auto prompt = prompt_tokens(tok, "qwen2", JobRequest::from_json(request));
  const std::string text = "general kenobi";
  std::vector<model::TokenId> ids = tok.encode(text, false, false);
  ASSERT_EQ(tok.decode(ids), text);
  ASSERT_LE(ids.size() + 4, 16u);  // padded, still within max_tokens
  const model::TokenId eos = tok.eos(), im_start = static_cast<model::TokenId>(tok.encode("<|im_start|>", false)[0]);
  ASSERT_EQ(tok.token_kind(im_start), model::TokenKind::Control);
  auto with = [&](std::vector<model::TokenId> more) {
    std::vector<model::TokenId> out = ids;
    out.insert(out.end(), more.begin(), more.end());
    return json(out);
  };
  const std::vector<model::TokenId> padding = tok.encode(" and more", false, false);
  struct Lie {
    json output_ids;
    json prompt_ids;
    const char* names;
  };
  std::vector<model::TokenId> other_prompt = prompt;
  other_prompt.back() = other_prompt.back() == 100 ? 101 : 100;
  std::vector<model::TokenId> longer_prompt = prompt;
  longer_prompt.push_back(100);
  for (const Lie& lie : std::vector<Lie>{
           {with(padding), prompt, "decode to its \"text\""},              // ids the text does not show
           {with({eos, eos, eos}), prompt, "end-of-generation"},              // end tokens as filler
           {with({eos, ids[0]}), prompt, "end-of-generation"},               // ids after the end
           {with({599999}), prompt, "vocabulary"},
           {json(ids), other_prompt, "the request's own"},                   // not the request's prompt
           {json(ids), longer_prompt, "the request's own"},
       }) {
    auto [status, message] = complete({{"text", text}, {"prompt_ids", lie.prompt_ids}, {"output_ids", lie.output_ids}});
    EXPECT_EQ(status, 400) << lie.output_ids.dump();
    EXPECT_NE(message.find(lie.names), std::string::npos) << message;
  }
  // Counts without ids (an engine that cannot tell them): the prompt is counted by the
  // coordinator, the output bounded by the text.
  auto [status, message] = complete({{"text", text}, {"prompt_tokens", prompt.size() + 1}, {"completion_tokens", 3}});
  EXPECT_EQ(status, 400);
  EXPECT_NE(message.find("the prompt's own count"), std::string::npos) << message;
  std::tie(status, message) = complete({{"text", "ok"}, {"prompt_tokens", prompt.size()}, {"completion_tokens", 9}});
  EXPECT_EQ(status, 400);
  EXPECT_NE(message.find("bytes of \"text\""), std::string::npos) << message;
  EXPECT_EQ(store_->balance(ledger::node_account(attacker.public_hex())), 0);  // nothing paid for any of them
  // Accepted, and billed at the ids that show in the text and its end token: control tokens
  // (which show nothing) as filler earn nothing.
  ASSERT_EQ(complete({{"text", text}, {"prompt_ids", prompt}, {"output_ids", with({im_start, im_start, im_start, eos})}}).first,
            200);
  json done = wait_done(id);
  EXPECT_EQ(done["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(done["usage"]["completion_tokens"], ids.size() + 1);
  EXPECT_EQ(store_->get_key(store_->get_job(id)->key_id)->tokens_used, static_cast<int64_t>(prompt.size() + ids.size() + 1));
  EXPECT_GT(store_->balance(ledger::node_account(attacker.public_hex())), 0);
}

// The coordinator reads bodies before a handler thread is taken too: 200 sockets trickling a body
// stop no one and are closed once behind the minimum rate, while a client submitting a 64 KiB job
// body over 3 s (twice body_timeout, above the rate) gets its job accepted.
TEST_F(HttpApiTest, SlowBodiesStarveNoOneAndASlowLargeBodyIsRead) {
  start_agent();
  auto c = client();
  for (int i = 0; i < 100 && json::parse(c.Get("/v1/models")->body)["data"].empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  serve::http::GuardOptions connections = HttpApi::default_connections();
  connections.threads = 16;
  connections.body_timeout = std::chrono::milliseconds(1500);
  connections.max_per_address = 1000;
  HttpApi api(*coordinator_, 60000, connections);
  const int port = api.bind("127.0.0.1", 0);
  std::thread serving([&] { api.serve(); });
  const std::string job = R"({"model":"echo","prompt":"hello","max_tokens":3})" + std::string(64 << 10, ' ');
  auto submitted = std::async(std::launch::async, [&] {
    return orchard::testing::paced_request(port,
                                           "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + secret_ +
                                               "\r\nContent-Type: application/json\r\nConnection: close\r\n"
                                               "Content-Length: " + std::to_string(job.size()) + "\r\n\r\n",
                                           job, 10, std::chrono::milliseconds(330), 8);
  });
  {
    orchard::testing::SlowLoris loris(port, 200, orchard::testing::SlowLoris::Part::kBody);
    keep_answering_through(loris, port);
  }
  const std::string got = submitted.get();
  EXPECT_TRUE(got.starts_with("HTTP/1.1 201 ")) << got;
  api.stop();
  serving.join();
}

}  // namespace
}  // namespace orchard::network

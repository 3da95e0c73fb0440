// The HTTP layer end to end with httplib's client: a real synthetic model for what the answers
// hold, and the fake engine (slowed down) for disconnects and a full queue.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "cluster/cluster_page.h"
#include "cluster/topology.h"
#include "model/model_files.h"
#include "serve/chat_page.h"
#include "serve/fake_engine.h"
#include "serve/local_engine.h"
#include "serve/openai/routes.h"
#include "serve/slow_clients.h"

namespace orchard::serve {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// The whole server stack on a free port of 127.0.0.1.
class TestServer {
 public:
  TestServer(Engine& engine, SchedulerOptions scheduler_options = {}, std::vector<std::string> api_keys = {},
             http::GuardOptions connections = {}, std::function<cluster::Topology()> cluster_topology = {})
      : scheduler_(engine, metrics_, scheduler_options),
        service_(engine, scheduler_, metrics_,
                 pick_chat_family(engine.info().chat_template, engine.tokenizer(), engine.info().architecture)),
        http_(service_, metrics_,
              {.threads = 16,
               .max_body_bytes = 1 << 20,
               .probe_interval = 50ms,
               .api_keys = std::move(api_keys),
               .connections = connections,
               .cluster_topology = std::move(cluster_topology)}) {
    port_ = http_.bind("127.0.0.1", 0);
    scheduler_.start();
    thread_ = std::thread([this] { http_.listen(); });
  }
  ~TestServer() {
    http_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    return c;
  }
  const Scheduler& scheduler() const { return scheduler_; }
  const Metrics& metrics() const { return metrics_; }
  const openai::Service& service() const { return service_; }

 private:
  Metrics metrics_;
  Scheduler scheduler_;
  openai::Service service_;
  openai::HttpServer http_;
  int port_ = 0;
  std::thread thread_;
};

json post(const TestServer& server, const std::string& path, const json& body, int expected_status = 200) {
  auto res = server.client().Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(res);
  if (!res) return {};
  EXPECT_EQ(res->status, expected_status) << res->body;
  return json::parse(res->body);
}

// The data of each server-sent event ("[DONE]" as a string), keep-alive comments skipped.
std::vector<json> sse_events(const std::string& body) {
  std::vector<json> out;
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find("\n\n", at);
    if (end == std::string::npos) break;
    std::string e = body.substr(at, end - at);
    at = end + 2;
    if (e.starts_with(":")) continue;
    EXPECT_TRUE(e.starts_with("data: ")) << e;
    std::string data = e.substr(6);
    out.push_back(data == "[DONE]" ? json("[DONE]") : json::parse(data));
  }
  return out;
}

class RealModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    LocalEngineOptions o;
    o.model_path = orchard::testing::synthetic_model("llama", "tiny", "q8_0");
    o.alias = "tiny";
    o.n_slots = 3;
    o.threads = 1;  // a kernel pool on a busy 2-core machine mostly waits for time slices
    engine_ = new LocalEngine(o);
    server_ = new TestServer(*engine_);
  }
  static void TearDownTestSuite() {
    delete server_;
    delete engine_;
  }
  static LocalEngine* engine_;
  static TestServer* server_;
};
LocalEngine* RealModel::engine_ = nullptr;
TestServer* RealModel::server_ = nullptr;

const json kChat = {{"model", "tiny"},
                    {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Tell me a story."}}}},
                    {"max_tokens", 24},
                    {"temperature", 0}};

TEST_F(RealModel, ModelsHealthAndMetrics) {
  auto c = server_->client();
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  json h = json::parse(health->body);
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(h["slots"], 3);
  EXPECT_EQ(h["chat_template"], "llama2");  // SentencePiece llama without template metadata
  post(*server_, "/v1/chat/completions", kChat);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  for (const char* name : {"orchard_tokens_generated_total ", "orchard_prompt_tokens_total ", "orchard_requests_total{status=\"200\"} ",
                           "orchard_queue_depth 0", "orchard_generation_tokens_per_second ", "orchard_rank_forward_seconds_total{rank=\"0\"} "})
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name;
}

TEST_F(RealModel, ChatAnswerMatchesItsStreamAndCountsTokens) {
  json whole = post(*server_, "/v1/chat/completions", kChat);
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["model"], "tiny");
  const std::string content = whole["choices"][0]["message"]["content"];
  const openai::ApiRequest parsed = openai::parse_request(openai::Endpoint::ChatCompletions, kChat.dump());
  EXPECT_EQ(whole["usage"]["prompt_tokens"], server_->service().prompt_tokens(parsed).size());
  const int completion_tokens = whole["usage"]["completion_tokens"];
  EXPECT_GT(completion_tokens, 0);
  EXPECT_LE(completion_tokens, 24);
  EXPECT_EQ(whole["choices"][0]["finish_reason"], completion_tokens == 24 ? "length" : "stop");

  json streamed_request = kChat;
  streamed_request["stream"] = true;
  streamed_request["stream_options"] = {{"include_usage", true}};
  auto res = server_->client().Post("/v1/chat/completions", streamed_request.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  auto events = sse_events(res->body);
  ASSERT_GE(events.size(), 3u);
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    EXPECT_EQ(events[i]["object"], "chat.completion.chunk");
    EXPECT_EQ(events[i]["id"], events[0]["id"]);
    text += events[i]["choices"][0]["delta"].value("content", "");
  }
  EXPECT_EQ(text, content);
  EXPECT_EQ(events[events.size() - 3]["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"]);
  // The same prompt again: a free slot holds all of it but the last position (prompt caching).
  json streamed_usage = events[events.size() - 2]["usage"];
  EXPECT_EQ(streamed_usage["prompt_tokens_details"]["cached_tokens"], whole["usage"]["prompt_tokens"].get<int>() - 1);
  streamed_usage["prompt_tokens_details"] = whole["usage"]["prompt_tokens_details"];
  EXPECT_EQ(streamed_usage, whole["usage"]);
  EXPECT_EQ(events.back(), "[DONE]");
}

TEST_F(RealModel, CompletionWithStopAndSeed) {
  json request = {{"prompt", "Once upon a time"}, {"max_tokens", 30}, {"temperature", 0}};
  json plain = post(*server_, "/v1/completions", request);
  EXPECT_EQ(plain["object"], "text_completion");
  const std::string text = plain["choices"][0]["text"];
  ASSERT_GE(text.size(), 4u);
  // Stopping at a piece of the greedy text cuts it just before that piece.
  request["stop"] = text.substr(text.size() / 2, 2);
  json stopped = post(*server_, "/v1/completions", request);
  const std::string cut = stopped["choices"][0]["text"];
  EXPECT_EQ(cut, text.substr(0, text.find(request["stop"].get<std::string>())));
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");

  json sampled = {{"prompt", "Once upon a time"}, {"max_tokens", 20}, {"temperature", 1.0}, {"seed", 1234}};
  EXPECT_EQ(post(*server_, "/v1/completions", sampled)["choices"][0]["text"],
            post(*server_, "/v1/completions", sampled)["choices"][0]["text"]);
}

TEST_F(RealModel, ConcurrentRequestsGetWhatTheyWouldGetAlone) {
  constexpr int kClients = 6;
  auto request = [](int i) {
    return json{{"prompt", "Story number " + std::to_string(i) + " begins"}, {"max_tokens", 12 + i}, {"temperature", 0}};
  };
  std::vector<std::string> alone(kClients), together(kClients);
  for (int i = 0; i < kClients; ++i) alone[i] = post(*server_, "/v1/completions", request(i))["choices"][0]["text"];
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] { together[i] = post(*server_, "/v1/completions", request(i))["choices"][0]["text"]; });
  for (auto& t : threads) t.join();
  EXPECT_EQ(together, alone);
}

// Prompt caching: a request sharing a 300-token prefix with an earlier one computes only the
// rest, says so in usage.prompt_tokens_details.cached_tokens, and answers exactly as a server
// that computed everything; concurrent requests sharing the prefix (4 on 3 slots: reused,
// copied from a busy slot, found in a freed one) answer as they would uncached.
TEST_F(RealModel, ASharedPrefixIsComputedOnceAndAnswersAsUncached) {
  std::vector<int> prefix;
  for (int i = 0; i < 300; ++i) prefix.push_back(900 + (i * 37) % 100);  // starts unlike any other test's prompt
  auto request = [&](int tail) {
    std::vector<int> prompt = prefix;
    for (int i = 0; i < 5; ++i) prompt.push_back(10 + tail * 7 + i);
    return json{{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}};
  };
  // Uncached answers: a one-slot server that answers an unrelated prompt before each, so its
  // slot never holds the prefix.
  LocalEngineOptions o;
  o.model_path = orchard::testing::synthetic_model("llama", "tiny", "q8_0");
  o.alias = "tiny";
  o.n_slots = 1;
  o.threads = 1;
  LocalEngine fresh_engine(o);
  TestServer fresh(fresh_engine);
  std::vector<std::string> uncached;
  for (int tail = 0; tail < 5; ++tail) {
    post(fresh, "/v1/completions", {{"prompt", {5, 6, 7}}, {"max_tokens", 1}});
    json answer = post(fresh, "/v1/completions", request(tail));
    EXPECT_EQ(answer["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    uncached.push_back(answer["choices"][0]["text"]);
  }

  json first = post(*server_, "/v1/completions", request(0));
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(first["choices"][0]["text"], uncached[0]);
  json second = post(*server_, "/v1/completions", request(1));
  EXPECT_EQ(second["usage"]["prompt_tokens"], 305);
  EXPECT_EQ(second["usage"]["prompt_tokens_details"]["cached_tokens"], 300);
  EXPECT_EQ(second["choices"][0]["text"], uncached[1]);

  std::vector<std::string> together(4);
  std::vector<int> cached(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      json answer = post(*server_, "/v1/completions", request(i + 1));
      together[i] = answer["choices"][0]["text"];
      cached[i] = answer["usage"]["prompt_tokens_details"]["cached_tokens"];
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(together, std::vector<std::string>(uncached.begin() + 1, uncached.end()));
  // One slot held the prefix: the first admitted reuses it, those admitted beside it copy it
  // from that busy slot, and one admitted later finds it in the slot it takes.
  for (int n : cached) EXPECT_GE(n, 300);
}

TEST_F(RealModel, BadRequestsGetOpenAIErrors) {
  auto c = server_->client();
  auto bad_json = c.Post("/v1/chat/completions", "{not json", "application/json");
  ASSERT_TRUE(bad_json);
  EXPECT_EQ(bad_json->status, 400);
  EXPECT_EQ(json::parse(bad_json->body)["error"]["type"], "invalid_request_error");

  json e = post(*server_, "/v1/chat/completions", {{"model", "gpt-4"}, {"messages", kChat["messages"]}}, 404);
  EXPECT_EQ(e["error"]["code"], "model_not_found");

  e = post(*server_, "/v1/completions", {{"prompt", [] { std::string s; for (int i = 0; i < 300; ++i) s += "The quick brown fox. "; return s; }()}}, 400);
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
  e = post(*server_, "/v1/completions", {{"prompt", "short"}, {"max_tokens", 100000}}, 400);
  EXPECT_EQ(e["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(e["error"]["param"], "max_tokens");
  e = post(*server_, "/v1/completions", {{"prompt", {5, 99999}}}, 400);
  EXPECT_EQ(e["error"]["param"], "prompt");

  auto unknown = c.Get("/v1/engines");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(json::parse(unknown->body)["error"]["type"], "invalid_request_error");
  auto too_big = c.Post("/v1/completions", std::string(2 << 20, ' '), "application/json");
  ASSERT_TRUE(too_big);
  EXPECT_EQ(too_big->status, 413);
  // The server is still fine.
  EXPECT_EQ(post(*server_, "/v1/completions", {{"prompt", "ok"}, {"max_tokens", 2}})["object"], "text_completion");
}

// Ollama's NDJSON lines (a line may start with the spaces the server writes to probe the client).
std::vector<json> ndjson_lines(const std::string& body) {
  std::vector<json> out;
  size_t at = 0;
  for (size_t end; (end = body.find('\n', at)) != std::string::npos; at = end + 1) out.push_back(json::parse(body.substr(at, end - at)));
  EXPECT_EQ(at, body.size()) << "the last line ends in a newline";
  return out;
}

TEST_F(RealModel, OllamaAnswersEqualOpenAIsAndStreamAsNdjson) {
  // Greedy, and no repetition penalty (Ollama's default is 1.1, OpenAI's none).
  const json options = {{"temperature", 0}, {"num_predict", 24}, {"repeat_penalty", 1}, {"seed", 7}};
  const json openai_chat = post(*server_, "/v1/chat/completions", kChat);
  const std::string expected = openai_chat["choices"][0]["message"]["content"];

  const json chat = {{"model", "tiny:latest"}, {"messages", kChat["messages"]}, {"options", options}};
  json whole = chat;
  whole["stream"] = false;
  const json answer = post(*server_, "/api/chat", whole);
  EXPECT_EQ(answer["model"], "tiny:latest");
  EXPECT_EQ(answer["message"]["role"], "assistant");
  EXPECT_EQ(answer["message"]["content"], expected);
  EXPECT_EQ(answer["done"], true);
  EXPECT_EQ(answer["done_reason"], openai_chat["choices"][0]["finish_reason"]);
  EXPECT_EQ(answer["prompt_eval_count"], openai_chat["usage"]["prompt_tokens"]);
  EXPECT_EQ(answer["eval_count"], openai_chat["usage"]["completion_tokens"]);
  const int64_t total = answer["total_duration"], prompt = answer["prompt_eval_duration"], eval = answer["eval_duration"];
  EXPECT_GT(prompt, 0);
  EXPECT_GT(eval, 0);
  EXPECT_GE(total, prompt + eval);  // the request's whole time covers both
  EXPECT_LT(total, 30'000'000'000);  // nanoseconds, not some other unit

  auto res = server_->client().Post("/api/chat", chat.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/x-ndjson");
  const std::vector<json> lines = ndjson_lines(res->body);
  ASSERT_GE(lines.size(), 2u);
  std::string streamed;
  for (size_t i = 0; i + 1 < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["done"], false);
    streamed += lines[i]["message"]["content"].get<std::string>();
  }
  EXPECT_EQ(streamed, expected);
  EXPECT_EQ(lines.back()["done"], true);
  EXPECT_EQ(lines.back()["message"]["content"], "");
  EXPECT_EQ(lines.back()["eval_count"], answer["eval_count"]);

  // A raw prompt is a text completion; num_predict beyond the context is cut by it, not refused.
  const json completion = post(*server_, "/v1/completions", {{"prompt", "The orchard"}, {"max_tokens", 24}, {"temperature", 0}});
  const json generated = post(*server_, "/api/generate",
                              {{"model", "tiny"}, {"prompt", "The orchard"}, {"raw", true}, {"stream", false}, {"options", options}});
  EXPECT_EQ(generated["response"], completion["choices"][0]["text"]);
  json unlimited = options;
  unlimited["num_predict"] = 100000;
  const json long_one =
      post(*server_, "/api/generate", {{"model", "tiny"}, {"prompt", "The orchard"}, {"stream", false}, {"options", unlimited}});
  EXPECT_EQ(long_one["done"], true);
  EXPECT_LE(long_one["prompt_eval_count"].get<int>() + long_one["eval_count"].get<int>(), server_->scheduler().n_ctx() + 1);
}

TEST_F(RealModel, OllamaDescribesTheModelAndErrorsTakeItsShape) {
  auto c = server_->client();
  auto tags = c.Get("/api/tags");
  ASSERT_TRUE(tags);
  const json models = json::parse(tags->body)["models"];
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0]["name"], "tiny:latest");
  EXPECT_EQ(models[0]["details"]["quantization_level"], "Q8_0");
  const json show = post(*server_, "/api/show", {{"model", "tiny"}});
  EXPECT_EQ(show["model_info"]["general.architecture"], "llama");
  EXPECT_EQ(show["details"]["family"], "llama");
  EXPECT_EQ(json::parse(c.Get("/api/version")->body)["version"].is_string(), true);
  EXPECT_EQ(json::parse(c.Get("/api/ps")->body)["models"][0]["model"], "tiny:latest");
  const json load = post(*server_, "/api/generate", {{"model", "tiny"}});
  EXPECT_EQ(load["done_reason"], "load");

  // {"error": "message"} and nothing else, with the status the OpenAI routes give.
  auto expect_error = [&](const httplib::Result& r, int status, const std::string& part) {
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, status) << r->body;
    const json body = json::parse(r->body);
    ASSERT_TRUE(body.is_object() && body.size() == 1 && body["error"].is_string()) << r->body;
    EXPECT_NE(body["error"].get<std::string>().find(part), std::string::npos) << r->body;
  };
  expect_error(c.Post("/api/chat", "{not json", "application/json"), 400, "not valid JSON");
  expect_error(c.Post("/api/chat", R"({"model": "tiny", "messages": [{"role": "user", "content": 1}]})", "application/json"), 400,
               "'messages[0].content' must be a string");
  expect_error(c.Post("/api/generate", R"({"model": "tiny", "prompt": "x", "options": {"temperature": "hot"}})", "application/json"), 400,
               "'options.temperature' must be a number");
  expect_error(c.Post("/api/chat", R"({"model": "llama3", "messages": [{"role": "user", "content": "x"}]})", "application/json"), 404,
               "'llama3' does not exist");
  expect_error(c.Post("/api/show", R"({"model": "llama3"})", "application/json"), 404, "does not exist");
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "The quick brown fox. ";
  expect_error(c.Post("/api/generate", json({{"model", "tiny"}, {"prompt", long_prompt}}).dump(), "application/json"), 400,
               "maximum context length");
  expect_error(c.Get("/api/pull"), 404, "no route GET /api/pull");
}

TEST(HttpFake, TheChatPageIsServedAtTheRoot) {
  testing::FakeEngine engine(1, 4096, 512, testing::next_letter);
  TestServer server(engine);
  auto c = server.client();
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  EXPECT_NE(page->body.find("Orchard chat"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("connect-src 'self'"), std::string::npos);
  EXPECT_EQ(c.Get("/chat")->body, page->body);
  EXPECT_EQ(c.Head("/")->status, 200);  // Ollama clients' liveness check
  httplib::Headers again = {{"If-None-Match", page->get_header_value("ETag")}};
  EXPECT_EQ(c.Get("/", again)->status, 304);
  // Every asset the page names is served (when the page was built; the placeholder names none).
  for (size_t at = 0; (at = page->body.find("/chat/assets/", at)) != std::string::npos; ++at) {
    const std::string path = page->body.substr(at, page->body.find('"', at) - at);
    auto asset = c.Get(path.c_str());
    ASSERT_TRUE(asset);
    EXPECT_EQ(asset->status, 200) << path;
    EXPECT_NE(asset->get_header_value("Cache-Control").find("immutable"), std::string::npos) << path;
  }
}

// Page files go out in the best encoding the request accepts, and decode to the same bytes.
TEST(HttpFake, PageFilesAreSentInTheEncodingTheClientAccepts) {
  if (!kChatPageBuilt) GTEST_SKIP() << "built without the chat page (no node/npm): the placeholder is sent as it is";
  testing::FakeEngine engine(1, 4096, 512, testing::next_letter);
  TestServer server(engine);
  auto c = server.client();
  c.set_decompress(false);
  auto get = [&](const char* accept) {
    auto r = c.Get("/", httplib::Headers{{"Accept-Encoding", accept}});
    EXPECT_TRUE(r);
    EXPECT_EQ(r->status, 200) << accept;
    EXPECT_EQ(r->get_header_value("Vary"), "Accept-Encoding");
    return std::make_pair(r->get_header_value("Content-Encoding"), r->body);
  };
  const auto [plain_encoding, plain] = get("identity");
  EXPECT_EQ(plain_encoding, "");
  ASSERT_NE(plain.find("<html"), std::string::npos);
  const auto [gzip_encoding, gzipped] = get("br;q=0, gzip");
  EXPECT_EQ(gzip_encoding, "gzip");
  EXPECT_LT(gzipped.size(), plain.size());
  const auto [br_encoding, brotli] = get("gzip, deflate, br");
  EXPECT_EQ(br_encoding, "br");
  EXPECT_LT(brotli.size(), plain.size());
  EXPECT_EQ(get("gzip;q=0, br;q=0.0").first, "");
  EXPECT_EQ(get("br").second, brotli);
  // What a decompressing client reads is each file itself (compressed at build time).
  c.set_decompress(true);
  for (const core::EmbeddedFile& file : chat_page_files()) {
    const std::string path = file.path == "index.html" ? "/" : "/chat/" + std::string(file.path);
    for (const char* accept : {"gzip", "br"}) {
      auto r = c.Get(path, httplib::Headers{{"Accept-Encoding", accept}});
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 200) << path;
      EXPECT_EQ(r->body, file.bytes) << path << " " << accept;
    }
  }
}

// The cluster page beside the chat page (/cluster.html, its assets under /assets) and its JSON at
// /cluster: the topology it is given, a plan for ?model=PRESET, 400 for another query. The page
// needs no API key; its JSON, which names the machines, wants one when the server has keys.
TEST(HttpFake, TheClusterPageIsServedBesideTheChatPage) {
  testing::FakeEngine engine(1, 4096, 512, testing::next_letter);
  auto one_mac = [] {
    cluster::Announcement a;
    a.node_id = "n1";
    a.hostname = "studio-1";
    a.chip = "M4 Max";
    a.memory_total_bytes = 64ull << 30;
    a.memory_free_bytes = 60ull << 30;
    a.decode_gbs = 300;
    return cluster::topology_from_announcements({a});
  };
  TestServer server(engine, {}, {}, {}, one_mac);
  auto c = server.client();
  auto page = c.Get("/cluster.html");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->get_header_value("Content-Type").find("text/html"), std::string::npos);
  EXPECT_NE(page->body.find("<title>Orchard cluster</title>"), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("connect-src 'self'"), std::string::npos);
  EXPECT_EQ(c.Get("/")->body.find("<title>Orchard cluster</title>"), std::string::npos) << "/ stays the chat page";
  // Every asset the page names, byte for byte as embedded (the placeholder names none).
  for (size_t at = 0; (at = page->body.find("\"/assets/", at)) != std::string::npos; ++at) {
    const std::string path = page->body.substr(at + 1, page->body.find('"', at + 1) - at - 1);
    auto asset = c.Get(path.c_str());
    ASSERT_TRUE(asset);
    EXPECT_EQ(asset->status, 200) << path;
    const core::EmbeddedFile* file = core::find_embedded_file(cluster::cluster_page_files(), path.substr(1));
    ASSERT_NE(file, nullptr) << path;
    EXPECT_EQ(asset->body, file->bytes) << path;
  }
  EXPECT_EQ(c.Get("/assets/nothing-here.js")->status, 404);
  auto status = c.Get("/cluster");
  ASSERT_EQ(status->status, 200) << status->body;
  const json machines = json::parse(status->body)["machines"];
  ASSERT_EQ(machines.size(), 1u);
  EXPECT_EQ(machines[0]["hostname"], "studio-1");
  EXPECT_EQ(machines[0]["chip"], "M4 Max");
  auto planned = c.Get("/cluster?model=tinyllama-1.1b:q4_0");
  ASSERT_EQ(planned->status, 200);
  EXPECT_TRUE(json::parse(planned->body)["plan"].contains("strategy")) << planned->body;
  auto bad = c.Get("/cluster?model=%24(reboot)");
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(json::parse(bad->body)["error"].get<std::string>().find("model=PRESET"), std::string::npos);

  TestServer without(engine);
  EXPECT_EQ(without.client().Get("/cluster.html")->status, 404) << "mounted only when asked for";

  TestServer with_keys(engine, {}, {"sk-one"}, {}, one_mac);
  auto k = with_keys.client();
  EXPECT_EQ(k.Get("/cluster.html")->status, 200);
  EXPECT_EQ(k.Get("/cluster")->status, 401);
  k.set_bearer_token_auth("sk-one");
  EXPECT_EQ(k.Get("/cluster")->status, 200);
}

// Opens a connection, sends a POST and reads until `want` bytes of response came (or the end).
class RawClient {
 public:
  RawClient(int port, const std::string& path, const std::string& body) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string request = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body;
    EXPECT_EQ(send(fd_, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  }
  ~RawClient() { close(); }
  std::string read_some(size_t want) {
    std::string got;
    char buf[4096];
    while (got.size() < want) {
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// A slow fake model: 5 ms per pass.
model::TokenId slow_next(model::TokenId last, int32_t pos) {
  std::this_thread::sleep_for(5ms);
  return testing::next_letter(last, pos);
}

bool eventually(const std::function<bool()>& condition) {
  for (int i = 0; i < 200; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(25ms);
  }
  return false;
}

TEST(HttpFake, DisconnectingClientsFreeTheirSlot) {
  testing::FakeEngine engine(1, 4096, 512, slow_next);
  TestServer server(engine, {.max_queue = 0, .prompt_chunk = 64});
  for (bool stream : {true, false}) {
    json body = {{"prompt", {3, 4, 5}}, {"max_tokens", 4000}, {"temperature", 0}, {"stream", stream}};
    {
      RawClient client(server.port(), "/v1/completions", body.dump());
      if (stream) {
        EXPECT_NE(client.read_some(400).find("data: "), std::string::npos);
      }
      ASSERT_TRUE(eventually([&] { return server.scheduler().active_slots() == 1; }));
      // With the only slot busy and no queue, another request is refused.
      json e = post(server, "/v1/completions", body, 429);
      EXPECT_EQ(e["error"]["code"], "queue_full");
    }
    // The client hung up long before 4000 tokens (20 s) could be made.
    EXPECT_TRUE(eventually([&] { return server.scheduler().active_slots() == 0; })) << "stream " << stream;
  }
  EXPECT_EQ(server.metrics().requests_with_status(429), 2);
  json done = post(server, "/v1/completions", {{"prompt", {3}}, {"max_tokens", 3}, {"temperature", 0}});
  EXPECT_EQ(done["choices"][0]["text"], "bcd");
}

// Every bad input is a 4xx with a message, never a 500; a body is judged by its content (JSON),
// not by its Content-Type (curl -d sends JSON as a form, which httplib alone caps at 8 KiB).
TEST(HttpFake, BadInputIsA4xxAndBodiesAreJudgedByTheirContent) {
  testing::FakeEngine engine(1, 4096, 512, testing::next_letter);
  TestServer server(engine);
  auto c = server.client();
  auto overflow = c.Post("/v1/completions", R"({"prompt":[3],"max_tokens":2,"temperature":1e999})", "application/json");
  ASSERT_TRUE(overflow);
  EXPECT_EQ(overflow->status, 400) << overflow->body;
  EXPECT_EQ(json::parse(overflow->body)["error"]["code"], "invalid_json");
  const json body = {{"prompt", {3}}, {"max_tokens", 2}, {"temperature", 0}, {"user", std::string(8192, 'u')}};
  auto form = c.Post("/v1/completions", body.dump(), "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  ASSERT_EQ(form->status, 200) << form->body;
  EXPECT_EQ(json::parse(form->body)["choices"][0]["text"], "bc");
  auto multipart = c.Post("/v1/completions", "--x\r\n", "multipart/form-data; boundary=x");
  ASSERT_TRUE(multipart);
  EXPECT_EQ(multipart->status, 415);
  EXPECT_EQ(json::parse(multipart->body)["error"]["code"], "unsupported_media_type");
}

// `orchard serve --api-key`: every route but /health wants an OpenAI-style bearer key.
TEST(HttpFake, AnApiKeyIsRequiredWhenOneIsSet) {
  testing::FakeEngine engine(1, 4096, 512, testing::next_letter);
  TestServer server(engine, {}, {"sk-one", "sk-two"});
  const std::string body = R"({"prompt":[3],"max_tokens":2,"temperature":0})";
  auto c = server.client();
  auto none = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer");
  json e = json::parse(none->body);
  EXPECT_EQ(e["error"]["type"], "authentication_error");
  EXPECT_EQ(e["error"]["code"], "invalid_api_key");
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  EXPECT_EQ(c.Get("/api/tags")->status, 401);
  EXPECT_EQ(json::parse(c.Get("/api/tags")->body)["error"], "this server wants an API key: Authorization: Bearer KEY");
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_EQ(c.Get("/")->status, 200) << "the chat page asks for the key itself";
  EXPECT_EQ(c.Get("/chat/assets/none.js")->status, 404);
  c.set_bearer_token_auth("sk-on");
  EXPECT_EQ(c.Post("/v1/completions", body, "application/json")->status, 401);
  c.set_bearer_token_auth("sk-one-more");
  EXPECT_EQ(c.Post("/v1/completions", body, "application/json")->status, 401);
  c.set_bearer_token_auth("sk-two");
  auto ok = c.Post("/v1/completions", body, "application/json");
  ASSERT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["text"], "bc");
  EXPECT_EQ(c.Get("/v1/models")->status, 200);
}

// 200 sockets trickle a request's headers a byte at a time (more than the server's 16 handler
// threads): they wait in the server's poller, not in its threads, so /health is answered at once
// all along; each is answered 408 and closed when its head is not in after head_timeout.
TEST(HttpFake, SlowClientsStarveNoOne) {
  testing::FakeEngine engine(1, 4096, 512, testing::next_letter);
  TestServer server(engine, {}, {}, {.head_timeout = 1500ms, .max_per_address = 1000});
  orchard::testing::SlowLoris loris(server.port(), 200);
  for (int second = 0; second < 3; ++second) {
    auto health = orchard::testing::timed_get("127.0.0.1", server.port(), "/health", 5);
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    EXPECT_LT(health->seconds, 1.0);
    if (second == 0) {
      EXPECT_EQ(loris.closed_by_server(), 0);
    }
    std::this_thread::sleep_for(1s);
    loris.trickle();
  }
  EXPECT_EQ(loris.closed_by_server(), 200);  // past head_timeout: all answered 408 and closed
}

// Bodies are read before a handler thread is taken: 200 sockets trickling a body a byte a second
// stop no one, and are answered 408 once they fall behind the minimum rate; a large body sent
// slowly but above that rate (over twice body_timeout, in pieces; once asking for a go-ahead, once
// chunked) is read and answered, as is a request behind it on the same socket; a body declared
// over the payload limit is refused before it is sent.
TEST(HttpFake, SlowBodiesStarveNoOneAndSlowLargeBodiesAreRead) {
  testing::FakeEngine engine(1, 4096, 512, testing::next_letter);
  TestServer server(engine, {}, {},
                    {.head_timeout = 1500ms, .body_timeout = 1500ms, .min_body_rate = 8192, .max_per_address = 1000});
  const std::string chat = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})" + std::string(96 << 10, ' ');
  const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Connection: close\r\n";
  // 96 KiB in 12 pieces 300 ms apart: 3.3 s in all, about 30 KiB/s.
  auto with_length = std::async(std::launch::async, [&] {
    return orchard::testing::paced_request(
        server.port(), head + "Expect: 100-continue\r\nContent-Length: " + std::to_string(chat.size()) + "\r\n\r\n",
        chat, 12, 300ms, 8);
  });
  std::string chunked_body;
  for (size_t at = 0; at < chat.size(); at += 8192) {
    const std::string part = chat.substr(at, 8192);
    char size[16];
    std::snprintf(size, sizeof size, "%zx", part.size());
    chunked_body += std::string(size) + "\r\n" + part + "\r\n";
  }
  chunked_body += "0\r\n\r\n";
  auto chunked = std::async(std::launch::async, [&] {
    return orchard::testing::paced_request(server.port(), head + "Transfer-Encoding: chunked\r\n\r\n", chunked_body,
                                           12, 300ms, 8);
  });
  {
    orchard::testing::SlowLoris loris(server.port(), 200, orchard::testing::SlowLoris::Part::kBody);
    for (int second = 0; second < 3; ++second) {
      auto health = orchard::testing::timed_get("127.0.0.1", server.port(), "/health", 5);
      ASSERT_TRUE(health);
      EXPECT_EQ(health->status, 200);
      EXPECT_LT(health->seconds, 1.0);
      const auto start = std::chrono::steady_clock::now();
      auto res = server.client().Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})",
                                      "application/json");
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 200);
      EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
      if (second == 0) {
        EXPECT_EQ(loris.closed_by_server(), 0);
      }
      std::this_thread::sleep_for(1s);
      loris.trickle();
    }
    EXPECT_EQ(loris.closed_by_server(), 200);  // past body_timeout at under 8 KiB/s: 408 and closed
  }
  const std::string got = with_length.get();
  EXPECT_TRUE(got.starts_with("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 ")) << got.substr(0, 200);
  EXPECT_EQ(got.find("100 Continue", 10), std::string::npos) << "one go-ahead, not two";
  EXPECT_NE(got.find("\"completion_tokens\":2"), std::string::npos) << got;
  const std::string got_chunked = chunked.get();
  EXPECT_TRUE(got_chunked.starts_with("HTTP/1.1 200 ")) << got_chunked.substr(0, 200);

  // Two requests in one write: the second waits in the buffer behind the first body.
  const std::string small = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1})";
  const std::string one = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                          std::to_string(small.size()) + "\r\n\r\n" + small;
  const std::string two = orchard::testing::paced_request(server.port(), one + one.substr(0, one.find("\r\n") + 2) +
                                                              "Connection: close\r\n" + one.substr(one.find("\r\n") + 2),
                                                          "", 1, 0ms, 3);
  size_t answers = 0;
  for (size_t at = two.find("HTTP/1.1 200 "); at != std::string::npos; at = two.find("HTTP/1.1 200 ", at + 1)) ++answers;
  EXPECT_EQ(answers, 2u) << two;

  const auto start = std::chrono::steady_clock::now();
  const std::string big = orchard::testing::paced_request(
      server.port(), "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n", "{", 1, 0ms, 3);
  EXPECT_TRUE(big.starts_with("HTTP/1.1 413 ")) << big;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
}

// One address may hold max_per_address connections; more are refused at once (503), while
// another address is still served.
TEST(HttpFake, ConnectionsPerAddressAreCapped) {
  testing::FakeEngine engine(1, 4096, 512, testing::next_letter);
  TestServer server(engine, {}, {}, {.max_per_address = 8});
  orchard::testing::SlowLoris loris(server.port(), 20);
  EXPECT_TRUE(eventually([&] { return loris.closed_by_server() == 12; }));
  auto other = orchard::testing::timed_get("127.0.0.2", server.port(), "/health", 5);
  if (!other) GTEST_SKIP() << "127.0.0.2 is not a local address here (macOS without an alias)";
  EXPECT_EQ(other->status, 200);
}

// Bodies wait in the server's memory while they arrive: all connections together may hold
// max_buffered_bytes (a body counted at its declared length from its head on). Two 100 KB bodies
// that stop halfway hold 200 KB of 256 KiB: a third gets 503 saying why before it sends its body,
// while /health and a small request are still answered; once the two finish, a 100 KB body is read
// and answered again.
TEST(HttpFake, RequestBytesHeldForAllConnectionsAreCapped) {
  testing::FakeEngine engine(1, 4096, 512, testing::next_letter);
  TestServer server(engine, {}, {}, {.max_buffered_bytes = 256 << 10});
  const std::string chat = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1})";
  const std::string body = chat + std::string(100000 - chat.size(), ' ');
  const std::string head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Connection: close\r\nContent-Length: 100000\r\n\r\n";
  std::vector<int> halfway;
  for (int i = 0; i < 2; ++i) {
    const int fd = orchard::testing::connect_loopback(server.port());
    ASSERT_GE(fd, 0);
    const std::string first = head + body.substr(0, 50000);
    ASSERT_EQ(::send(fd, first.data(), first.size(), 0), static_cast<ssize_t>(first.size()));
    halfway.push_back(fd);
  }
  std::this_thread::sleep_for(300ms);  // both heads judged: 200 KB held
  const std::string refused = orchard::testing::paced_request(server.port(), head, "", 1, 0ms, 3);
  EXPECT_TRUE(refused.starts_with("HTTP/1.1 503 ")) << refused;
  EXPECT_NE(refused.find("request bytes"), std::string::npos) << refused;
  auto health = orchard::testing::timed_get("127.0.0.1", server.port(), "/health", 5);
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  post(server, "/v1/chat/completions", json::parse(chat));
  for (int fd : halfway) {
    ASSERT_EQ(::send(fd, body.data() + 50000, 50000, 0), 50000);
    std::string got;
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) got.append(buf, static_cast<size_t>(n));
    ::close(fd);
    EXPECT_TRUE(got.starts_with("HTTP/1.1 200 ")) << got.substr(0, 200);
  }
  const std::string later = orchard::testing::paced_request(server.port(), head, body, 1, 0ms, 5);
  EXPECT_TRUE(later.starts_with("HTTP/1.1 200 ")) << later.substr(0, 200);
}

// httplib sets SO_REUSEPORT by default, with which a second server on a port starts and takes half
// the requests: binding a port in use must fail.
TEST(HttpFake, APortInUseIsAnErrorAtStart) {
  testing::FakeEngine engine(1, 4096, 512, testing::next_letter);
  TestServer first(engine);
  Metrics metrics;
  Scheduler scheduler(engine, metrics, {});
  openai::Service service(engine, scheduler, metrics, ChatFamily::ChatML);
  openai::HttpServer second(service, metrics, {});
  EXPECT_THROW(second.bind("127.0.0.1", first.port()), Error);
}

}  // namespace
}  // namespace orchard::serve

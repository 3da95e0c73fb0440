#include "network/node_agent.h"

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <spdlog/spdlog.h>
#include <thread>

#include "cluster/cost_model.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/generate.h"
#include "model/gguf/reader.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weights.h"
#include "network/coordinator.h"
#include "network/job_request.h"

namespace orchard::network {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// An F16 cache, as `orchard run` and `serve` keep by default: a job's text is what they give.
constexpr model::KvType kCacheType = model::KvType::F16;
// Positions a forward pass of the built-in engine takes at most.
constexpr int32_t engine_batch(int32_t ctx) { return std::min(512, ctx); }

class BuiltinEngine final : public Engine {
 public:
  BuiltinEngine(std::string dir, int threads, int32_t max_context, int token_delay_ms)
      : dir_(std::move(dir)), pool_(threads), max_context_(max_context), token_delay_ms_(token_delay_ms) {}

  json models() override {
    json out = json::array();
    if (!fs::is_directory(dir_)) return out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().extension() != ".gguf") continue;
      try {
        auto file = model::gguf::Reader::open(e.path().string());
        const auto facts = cluster::ModelFacts::from_gguf(file);
        const model::ModelConfig& config = facts.config;
        int32_t ctx = std::min(config.context_length, max_context_);
        // The cache this agent makes at ctx, per position: sliding layers (gpt-oss) keep a ring
        // of their window whatever the context, so the coordinator's bytes + ctx × this is what
        // it reserves.
        double kv_slots = 0;
        for (int32_t l = 0; l < config.n_layers; ++l) kv_slots += static_cast<double>(config.kv_slots(l, ctx, engine_batch(ctx)));
        const double kv_bytes_per_token =
            kv_slots / ctx * static_cast<double>(config.kv_cache_floats(config.n_kv_heads)) * model::kv_value_bytes(kCacheType);
        out.push_back({{"name", e.path().stem().string()},
                       {"bytes", static_cast<int64_t>(e.file_size())},
                       {"kv_bytes_per_token", static_cast<int64_t>(std::ceil(kv_bytes_per_token))},
                       {"context_length", ctx},
                       {"active_bytes_per_token", std::llround(facts.active_bytes())}});
      } catch (const Error& err) {
        spdlog::warn("[network] skipping {}: {}", e.path().string(), err.what());
      }
    }
    return out;
  }

  EngineResult run(const std::string& name, const json& request,
                   const std::function<bool(const std::string&)>& on_text) override {
    Loaded& m = load(name);
    const JobRequest job = JobRequest::from_json(request);
    std::vector<model::TokenId> prompt = prompt_tokens(m.tokenizer, m.config.arch_name, job);
    model::GenerationOptions gen = generation_options(job, m.forward->n_ctx(), prompt.size());
    model::LocalModel local(*m.forward);
    auto r = model::generate(local, m.tokenizer, prompt, gen, [&](model::TokenId, const std::string& text) {
      if (token_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(token_delay_ms_));
      return on_text(text);
    });
    EngineResult out;
    out.text = r.text;
    out.finish_reason = r.stopped_at_end ? "stop" : "length";
    out.prompt_tokens = r.prompt_tokens;
    out.completion_tokens = static_cast<int64_t>(r.tokens.size());
    out.tok_s = r.gen_tok_s();
    out.prompt_ids = prompt;
    out.output_ids = r.tokens;
    return out;
  }

  std::optional<CheckResult> check(const std::string& name, const json& request) override {
    Loaded& m = load(name);
    auto prompt = request.at("prompt_ids").get<std::vector<model::TokenId>>();
    auto output = request.at("output_ids").get<std::vector<model::TokenId>>();
    return check_output(*m.forward, prompt, output, sampling_from(JobRequest::from_json(request)));
  }

 private:
  struct Loaded {
    std::string name;
    model::gguf::Reader file;
    model::ModelConfig config;
    model::Tokenizer tokenizer;
    std::unique_ptr<model::ModelWeights> weights;
    std::unique_ptr<model::Forward> forward;
  };

  Loaded& load(const std::string& name) {
    if (loaded_ && loaded_->name == name) return *loaded_;
    const std::string path = model_path(dir_, name);
    if (!fs::exists(path)) throw Error(error_message("network", "model '{}' is not in {}", name, dir_));
    loaded_.reset();  // one model in memory at a time
    auto file = model::gguf::Reader::open(path);
    auto config = model::ModelConfig::from_gguf(file);
    auto tokenizer = model::Tokenizer::from_gguf(file);
    loaded_ = std::make_unique<Loaded>(Loaded{name, std::move(file), config, std::move(tokenizer), nullptr, nullptr});
    loaded_->weights = std::make_unique<model::ModelWeights>(loaded_->file, loaded_->config,
                                                             model::Shard::whole(loaded_->config), model::LoadOptions{});
    int32_t ctx = std::min(loaded_->config.context_length, max_context_);
    loaded_->forward = std::make_unique<model::Forward>(*loaded_->weights, ctx, engine_batch(ctx), pool_, nullptr, 1, kCacheType);
    return *loaded_;
  }

  std::string dir_;
  core::ThreadPool pool_;
  int32_t max_context_;
  int token_delay_ms_;
  std::unique_ptr<Loaded> loaded_;
};

// Splits "http://host:port/prefix" into the scheme+host+port httplib wants and a path prefix.
std::pair<std::string, std::string> split_url(const std::string& url) {
  auto scheme = url.find("://");
  auto slash = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (slash == std::string::npos) return {url, ""};
  std::string prefix = url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return {url.substr(0, slash), prefix};
}

class ForwardingEngine final : public Engine {
 public:
  ForwardingEngine(const std::string& url, std::string models_dir) : models_dir_(std::move(models_dir)) {
    std::tie(host_, prefix_) = split_url(url);
    if (prefix_.ends_with("/v1")) prefix_.resize(prefix_.size() - 3);
  }

  json models() override {
    httplib::Client cli(host_);
    cli.set_connection_timeout(5);
    cli.set_read_timeout(10);
    auto res = cli.Get(prefix_ + "/v1/models");
    json out = json::array();
    if (!res || res->status != 200) {
      spdlog::warn("[network] the local engine at {} does not answer /v1/models", host_);
      return out;
    }
    for (const auto& m : json::parse(res->body, nullptr, false).value("data", json::array())) {
      std::string id = m.value("id", "");
      std::string name = fs::path(id).stem().string();
      fs::path file = fs::path(models_dir_) / (name + ".gguf");
      const bool have_file = !models_dir_.empty() && fs::exists(file);
      int64_t bytes = have_file ? static_cast<int64_t>(fs::file_size(file)) : 1;
      json entry = {{"name", name}, {"engine_id", id}, {"bytes", bytes}, {"kv_bytes_per_token", 0}, {"context_length", 4096}};
      if (have_file) {
        try {
          auto reader = model::gguf::Reader::open(file.string());
          entry["active_bytes_per_token"] = std::llround(cluster::ModelFacts::from_gguf(reader).active_bytes());
        } catch (const Error&) {
          // A file Orchard cannot read (the engine may run what Orchard does not): speed by size.
        }
      }
      out.push_back(std::move(entry));
      ids_[name] = id;
    }
    return out;
  }

  EngineResult run(const std::string& name, const json& request,
                   const std::function<bool(const std::string&)>& on_text) override {
    httplib::Client cli(host_);
    cli.set_connection_timeout(5);
    cli.set_read_timeout(600);  // a whole generation
    json body = {{"model", ids_.count(name) ? ids_[name] : name},
                 {"max_tokens", request.value("max_tokens", 256)},
                 {"temperature", request.value("temperature", 1.0)},
                 {"top_p", request.value("top_p", 1.0)},
                 {"seed", request.value("seed", uint64_t{0})},
                 {"stream", false}};
    body["messages"] = request.contains("messages")
                           ? request["messages"]
                           : json::array({{{"role", "user"}, {"content", request.value("prompt", "")}}});
    auto t0 = std::chrono::steady_clock::now();
    auto res = cli.Post(prefix_ + "/v1/chat/completions", body.dump(), "application/json");
    if (!res) throw TimeoutError(error_message("network", "the local engine at {} did not answer", host_));
    if (res->status != 200)
      throw Error(error_message("network", "the local engine at {} answered {}: {}", host_, res->status, res->body));
    json r = json::parse(res->body);
    EngineResult out;
    out.text = r["choices"][0]["message"].value("content", "");
    out.finish_reason = r["choices"][0].value("finish_reason", "stop");
    if (r.contains("usage")) {
      out.prompt_tokens = r["usage"].value("prompt_tokens", int64_t{0});
      out.completion_tokens = r["usage"].value("completion_tokens", int64_t{0});
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.tok_s = s > 0 ? static_cast<double>(out.completion_tokens) / s : 0;
    on_text(out.text);
    return out;
  }

  std::optional<CheckResult> check(const std::string&, const json&) override { return std::nullopt; }

 private:
  std::string host_, prefix_, models_dir_;
  std::map<std::string, std::string> ids_;
};

std::string read_command(const char* cmd) {
  FILE* p = ::popen(cmd, "r");
  if (!p) return "";
  char buf[256];
  std::string out;
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

std::unique_ptr<Engine> make_builtin_engine(const std::string& models_dir, int threads, int32_t max_context,
                                            int token_delay_ms) {
  return std::make_unique<BuiltinEngine>(models_dir, threads, max_context, token_delay_ms);
}

std::unique_ptr<Engine> make_forwarding_engine(const std::string& base_url, const std::string& models_dir) {
  return std::make_unique<ForwardingEngine>(base_url, models_dir);
}

std::string detect_chip() {
  // macOS names the chip ("Apple M2 Ultra"); Linux names the CPU model.
  std::string chip = ::access("/usr/sbin/sysctl", X_OK) == 0 ? read_command("/usr/sbin/sysctl -n machdep.cpu.brand_string 2>/dev/null") : "";
  if (!chip.empty()) return chip;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  return "unknown";
}

int64_t detect_memory_bytes() {
  return static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

json signed_call(const NodeKey& key, const std::string& network_url, const std::string& method,
                 const std::string& path, const json& body, int64_t timeout_ms) {
  auto [host, prefix] = split_url(network_url);
  std::string full = prefix + path;
  std::string text = method == "GET" ? "" : body.dump(-1, ' ', false, json::error_handler_t::replace);
  // A coordinator that does not lead (one of several on one database) sends nodes to the one
  // that does: followed once, signed anew for the address it names.
  for (int hop = 0;; ++hop) {
    httplib::Client cli(host);
    cli.set_connection_timeout(std::chrono::milliseconds(std::min<int64_t>(timeout_ms, 5000)));
    cli.set_read_timeout(std::chrono::milliseconds(timeout_ms));
    cli.set_write_timeout(std::chrono::milliseconds(timeout_ms));
    SignedHeaders h = sign_request(key, method, full, text, wall_clock_ms());
    httplib::Headers headers = {{kNodeHeader, h.node}, {kTimestampHeader, h.timestamp}, {kNonceHeader, h.nonce},
                                {kSignatureHeader, h.signature}};
    auto res = method == "GET" ? cli.Get(full, headers) : cli.Post(full, headers, text, "application/json");
    if (!res) throw TimeoutError(error_message("network", "{} {} to {}: {}", method, path, host, httplib::to_string(res.error())));
    if (res->status == 307 && hop == 0 && res->has_header("Location")) {
      std::tie(host, full) = split_url(res->get_header_value("Location"));
      continue;
    }
    json j = json::parse(res->body, nullptr, false);
    if (res->status >= 300) {
      std::string msg = j.is_object() && j.contains("error") ? j["error"].value("message", res->body) : res->body;
      throw ApiError(res->status, msg);
    }
    return j;
  }
}

struct NodeAgent::Impl {
  NodeAgentOptions o;
  std::unique_ptr<Engine> engine, pod_engine;
  NodeKey key;
  IdleMonitor idle;
  std::atomic<bool> offering{false};
  json description;

  Impl(NodeAgentOptions options, std::unique_ptr<Engine> e, std::unique_ptr<Engine> pod)
      : o(std::move(options)),
        engine(std::move(e)),
        pod_engine(std::move(pod)),
        key(NodeKey::load_or_create(o.key_file)),
        idle(o.idle) {}

  json call(const std::string& path, const json& body, int64_t extra_ms = 0) {
    return signed_call(key, o.network_url, "POST", path, body, o.request_timeout_ms + extra_ms);
  }

  void register_node() {
    description = {{"name", o.name},
                   {"chip", o.chip},
                   {"memory_bytes", o.memory_bytes},
                   {"memory_bandwidth_gbs", o.bandwidth_gbs},
                   {"region", o.region},
                   {"seat", o.idle.dedicated ? "dedicated" : "shared"},
                   {"models", engine->models()},
                   {"offering", idle.offering()}};
    if (!o.pod.is_null()) description["pod"] = o.pod;
    call("/v1/nodes/register", description);
    spdlog::info("[network] registered as {} with {} model(s)", key.public_hex().substr(0, 16),
                 description["models"].size());
  }

  // Retries a report until it lands or the coordinator says no: a coordinator restart must not
  // lose a finished job.
  json report(const std::string& path, const json& body, const std::atomic<bool>& stop) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.retry_for_ms);
    for (;;) {
      try {
        return call(path, body);
      } catch (const ApiError&) {
        throw;
      } catch (const Error& e) {
        if (std::chrono::steady_clock::now() > deadline || stop) throw;
        spdlog::warn("[network] {}: {}; retrying", path, e.what());
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
      }
    }
  }

  void run_job(const json& job, const std::atomic<bool>& stop) {
    const std::string id = job["id"];
    const int64_t attempt = job["attempt"];
    const std::string model = job["model"];
    const json& request = job["request"];
    auto hand_back = [&](const std::string& reason) {
      try {
        call("/v1/nodes/hand-back", {{"job", id}, {"attempt", attempt}, {"reason", reason.substr(0, 200)}});
      } catch (const Error& e) {
        spdlog::warn("[network] hand-back of {}: {} (its lease will expire)", id, e.what());
      }
    };
    // Said at once, so the coordinator offers this machine no more jobs of that model.
    bool have_model = false;
    for (const auto& m : description.value("models", json::array())) have_model = have_model || m.value("name", "") == model;
    if (!have_model) {
      spdlog::warn("[network] job {} needs model '{}', which is not here; handing it back", id, model);
      hand_back(kModelMissing);
      return;
    }
    if (job.value("kind", "generate") == "verify") {
      auto r = engine->check(model, request);
      if (!r) {
        hand_back(std::string(kCannotRun) + ": this engine cannot check");
        return;
      }
      report("/v1/nodes/complete",
             {{"job", id}, {"attempt", attempt},
              {"result", {{"ok", r->ok}, {"checked", r->checked}, {"mismatch_at", r->mismatch_at}}}},
             stop);
      return;
    }
    std::string pending;
    size_t sent = 0;
    bool lost = false, withdrawn = false;
    auto last = std::chrono::steady_clock::now();
    // renew: report even with no new text, so the lease holds while an engine is silent (a pod
    // sending shards to its ranks before the first token).
    auto flush = [&](bool renew) {
      if (pending.empty() && !renew) return;
      try {
        call("/v1/nodes/progress", {{"job", id}, {"attempt", attempt}, {"offset", sent}, {"text", pending}});
        sent += pending.size();
        pending.clear();
      } catch (const ApiError& e) {
        if (e.status() == 409) lost = true;  // someone else has it now: stop
      } catch (const Error& e) {
        spdlog::warn("[network] progress of {}: {}", id, e.what());  // kept; sent with the next flush
      }
      last = std::chrono::steady_clock::now();
    };
    // The coordinator names every machine of the unit it chose: more than one is this pod.
    const bool on_pod = pod_engine && job.contains("nodes") && job["nodes"].size() > 1;
    EngineResult r;
    std::string failure;
    try {
      r = (on_pod ? *pod_engine : *engine).run(model, request, [&](const std::string& text) {
        pending += text;
        const auto since = std::chrono::steady_clock::now() - last;
        if ((!pending.empty() && since > std::chrono::milliseconds(200)) ||
            since > std::chrono::milliseconds(o.heartbeat_ms))
          flush(true);
        if (!offering || stop) withdrawn = true;
        return !lost && !withdrawn;
      });
    } catch (const Error& e) {
      spdlog::error("[network] job {} failed here: {}; handing it back", id, e.what());
      failure = std::string("failed here: ") + e.what();
    }
    if (lost) return;
    if (withdrawn || !failure.empty()) {
      // The owner came back, or this machine could not run it: the job goes to another machine.
      hand_back(!failure.empty() ? failure : stop ? "the agent is stopping" : "the owner came back");
      return;
    }
    flush(false);
    json result = {{"text", r.text},
                   {"finish_reason", r.finish_reason},
                   {"prompt_tokens", r.prompt_tokens},
                   {"completion_tokens", r.completion_tokens},
                   {"tok_s", r.tok_s}};
    if (!r.output_ids.empty()) {
      result["prompt_ids"] = r.prompt_ids;
      result["output_ids"] = r.output_ids;
    }
    try {
      report("/v1/nodes/complete", {{"job", id}, {"attempt", attempt}, {"result", result}}, stop);
    } catch (const Error& e) {
      spdlog::warn("[network] completion of {} refused: {}", id, e.what());
    }
  }

  // Leaving: stop offering now, so nothing more is placed here and the machine leaves the World at
  // once rather than when the coordinator's silence timeout (the lease, 15 s) runs out.
  void withdraw() {
    try {
      call("/v1/nodes/heartbeat", {{"offering", false}});
    } catch (const Error& e) {
      spdlog::warn("[network] withdrawing: {}", e.what());
    }
  }

  // Samples the owner's activity every 250 ms, so a returning owner is noticed within a second,
  // and tells the coordinator at every change and every heartbeat_ms.
  void heartbeat_loop(const std::function<bool()>& stopped) {
    auto last_sent = std::chrono::steady_clock::time_point{};
    bool last_state = !offering;
    while (!stopped()) {
      offering = idle.offering();
      if (offering != last_state ||
          std::chrono::steady_clock::now() - last_sent > std::chrono::milliseconds(o.heartbeat_ms)) {
        try {
          call("/v1/nodes/heartbeat", {{"offering", offering.load()}});
          last_state = offering;
          last_sent = std::chrono::steady_clock::now();
        } catch (const ApiError& e) {
          if (e.status() == 404) register_node();  // the coordinator lost us: describe again
        } catch (const Error& e) {
          spdlog::warn("[network] heartbeat: {}", e.what());
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  }
};

NodeAgent::NodeAgent(NodeAgentOptions options, std::unique_ptr<Engine> engine, std::unique_ptr<Engine> pod_engine)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(engine), std::move(pod_engine))) {}
NodeAgent::~NodeAgent() = default;
const std::string& NodeAgent::node_id() const { return impl_->key.public_hex(); }

void NodeAgent::run(const std::atomic<bool>& stop) {
  Impl& m = *impl_;
  while (!stop) {
    try {
      m.register_node();
      break;
    } catch (const ApiError& e) {
      throw Error(error_message("network", "the network refused this node: {}", e.what()));
    } catch (const Error& e) {
      spdlog::warn("[network] cannot register yet: {}", e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  m.offering = m.idle.offering();
  std::atomic<bool> banned{false};
  auto stopped = [&] { return stop.load() || banned.load(); };
  std::thread beat([&] {
    try {
      m.heartbeat_loop(stopped);
    } catch (const Error& e) {
      spdlog::error("[network] heartbeat: {}", e.what());
      banned = true;
    }
    // From this thread: the main one may be in a long poll for a while yet.
    if (stop && !banned) m.withdraw();
  });
  while (!stopped()) {
    if (!m.offering) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      continue;
    }
    try {
      json r = m.call("/v1/nodes/poll", {{"wait_ms", m.o.poll_wait_ms}}, m.o.poll_wait_ms);
      if (r.contains("job") && !r["job"].is_null()) m.run_job(r["job"], stop);
    } catch (const ApiError& e) {
      if (e.status() == 403) banned = true;
      else spdlog::warn("[network] poll: {}", e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    } catch (const Error& e) {
      spdlog::warn("[network] poll: {}", e.what());
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  beat.join();
  if (banned && !stop) throw Error(error_message("network", "the network refused this node (banned or unknown)"));
}

}  // namespace orchard::network

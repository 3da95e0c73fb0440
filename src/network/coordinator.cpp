#include "network/coordinator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <fmt/format.h>

#include "network/identity.h"
#include "network/ledger.h"
#include "network/regions.h"
#include "network/world/population.h"

namespace orchard::network {

using nlohmann::json;

int64_t wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

constexpr int64_t kMaxMaxTokens = 32768;
constexpr auto kFollowerRecheck = std::chrono::seconds(1);

// A job's context estimate: the most its prompt can be plus max_tokens.
int64_t context_tokens(const JobRequest& request) { return prompt_token_bound(request) + request.max_tokens; }

// Streamed text goes to the other replicas in notices of at most this many bytes (hex: twice that),
// within a NOTIFY payload's 8000 with the job id and offset.
constexpr size_t kTextNoticeBytes = 3000;

std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

// nullopt unless `hex` is pairs of hex digits.
std::optional<std::string> from_hex(std::string_view hex) {
  auto digit = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  if (hex.size() % 2) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

ApiError bad_result(const std::string& what) { return ApiError(400, "[network] a job's result needs " + what); }

bool non_negative(const json& v) { return v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0); }

// A count a node reports: absent (nullopt) or a non-negative integer below any real job's size.
std::optional<int64_t> reported_count(const json& result, const char* name) {
  if (!result.contains(name)) return std::nullopt;
  const json& v = result[name];
  if (!non_negative(v) || v.get<uint64_t>() > static_cast<uint64_t>(kMaxMaxTokens) * 1024)
    throw bad_result(fmt::format("\"{}\" as a non-negative integer of sane size, not {}", name, v.dump()));
  return v.get<int64_t>();
}

// Token ids a node reports: absent (nullopt) or a list of non-negative 32-bit integers.
std::optional<size_t> reported_ids(const json& result, const char* name) {
  if (!result.contains(name)) return std::nullopt;
  const json& v = result[name];
  if (!v.is_array()) throw bad_result(fmt::format("\"{}\" as a list of token ids", name));
  for (const json& id : v)
    if (!non_negative(id) || id.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
      throw bad_result(fmt::format("\"{}\" as a list of token ids (non-negative integers), not {}", name, id.dump()));
  return v.size();
}

struct Counted {
  int64_t prompt = 0, completion = 0;
  bool verifiable = false;  // token ids came with it: a check can confirm every counted token
};

// What the coordinator bills and pays for a completion: the number of token ids the node sent
// (claimed counts must agree with them), never more than the job asked for (max_tokens) and its
// prompt could be (prompt_token_bound, or the prompt's own count with the model's vocabulary), nor
// than its text shows (check_reported_tokens). A completion without ids (an engine that cannot
// tell) is counted by its claims under the same bounds. Throws ApiError 400 naming the field.
Counted count_tokens(const JobRequest& request, const json& result, const ModelVocab* vocab) {
  if (!result.is_object()) throw bad_result("to be an object");
  if (result.contains("text") && !result["text"].is_string()) throw bad_result("\"text\" as a string");
  if (result.contains("finish_reason") &&
      (!result["finish_reason"].is_string() || (result["finish_reason"] != "stop" && result["finish_reason"] != "length")))
    throw bad_result("\"finish_reason\" of \"stop\" or \"length\"");
  if (result.contains("tok_s") && (!result["tok_s"].is_number() || !(result["tok_s"].get<double>() >= 0) ||
                                   !std::isfinite(result["tok_s"].get<double>())))
    throw bad_result("\"tok_s\" as a non-negative number");
  const auto prompt_claim = reported_count(result, "prompt_tokens");
  const auto completion_claim = reported_count(result, "completion_tokens");
  const auto prompt_ids = reported_ids(result, "prompt_ids");
  const auto output_ids = reported_ids(result, "output_ids");
  if (prompt_ids.has_value() != output_ids.has_value()) throw bad_result("both \"prompt_ids\" and \"output_ids\", or neither");
  Counted c;
  c.verifiable = output_ids.has_value();
  c.prompt = prompt_ids ? static_cast<int64_t>(*prompt_ids) : prompt_claim.value_or(0);
  c.completion = output_ids ? static_cast<int64_t>(*output_ids) : completion_claim.value_or(0);
  if (prompt_ids && prompt_claim && *prompt_claim != c.prompt)
    throw bad_result(fmt::format("\"prompt_tokens\" equal to the {} \"prompt_ids\" sent, not {}", c.prompt, *prompt_claim));
  if (output_ids && completion_claim && *completion_claim != c.completion)
    throw bad_result(fmt::format("\"completion_tokens\" equal to the {} \"output_ids\" sent, not {}", c.completion,
                                 *completion_claim));
  const int64_t max_tokens = request.max_tokens;
  if (c.completion > max_tokens)
    throw bad_result(fmt::format("at most the job's max_tokens ({}) generated tokens in \"{}\", not {}", max_tokens,
                                 output_ids ? "output_ids" : "completion_tokens", c.completion));
  const CheckedTokens checked = check_reported_tokens(request, result, vocab);
  c.completion = checked.completion;
  const int64_t prompt_bound = checked.prompt.value_or(prompt_token_bound(request));
  if (c.prompt > prompt_bound)
    throw bad_result(fmt::format("at most {} prompt tokens in \"{}\" ({}), not {}", prompt_bound,
                                 prompt_ids ? "prompt_ids" : "prompt_tokens",
                                 checked.prompt ? "the prompt's own count" : "the prompt's bytes and template", c.prompt));
  return c;
}

// Throws ApiError 400 unless `pod` is {"id", "members": [node ids]} or {"id", "size", "rank",
// "hostfile"}, with optional "links": [{"latency_us"}].
void check_pod(const json& pod) {
  auto bad = [](const std::string& what) { return ApiError(400, "[network] a pod needs " + what); };
  if (!pod.is_object() || !pod.contains("id") || !pod["id"].is_string() || pod["id"].get<std::string>().empty() ||
      pod["id"].get<std::string>().size() > kMaxPodIdLength)
    throw bad(fmt::format("an \"id\" of 1 to {} characters", kMaxPodIdLength));
  if (pod.contains("links")) {
    if (!pod["links"].is_array()) throw bad("\"links\" as a list");
    for (const auto& l : pod["links"])
      if (!l.is_object() || (l.contains("latency_us") && !l["latency_us"].is_number()))
        throw bad("links with a numeric \"latency_us\"");
  }
  if (pod.contains("members")) {
    if (!pod["members"].is_array()) throw bad("\"members\" as a list of node ids");
    for (const auto& m : pod["members"])
      if (!m.is_string()) throw bad("\"members\" as a list of node ids");
    return;
  }
  if (!pod.contains("size") || !pod["size"].is_number_integer() || pod["size"].get<int64_t>() < 2 ||
      pod["size"].get<int64_t>() > kMaxPodSize)
    throw bad(fmt::format("\"members\", or a \"size\" of 2 to {} hosts", kMaxPodSize));
  if (!pod.contains("rank") || !pod["rank"].is_number_integer() || pod["rank"].get<int64_t>() < 0 ||
      pod["rank"].get<int64_t>() >= pod["size"].get<int64_t>())
    throw bad("a \"rank\" inside its size");
  if (!pod.contains("hostfile") || !pod["hostfile"].is_string() || pod["hostfile"].get<std::string>().empty())
    throw bad("the \"hostfile\" digest its members share");
}

bool valid_pod(const json& pod) {
  try {
    check_pod(pod);
    return true;
  } catch (const ApiError&) {
    return false;
  }
}

}  // namespace

Coordinator::Coordinator(Store& store, CoordinatorOptions options, Clock clock)
    : store_(store),
      options_(options),
      clock_(std::move(clock)),
      registry_(clock_, options_.offline_after_ms, options_.ban_after_mismatches),
      book_(
          placement_, clock_, options_.lease_ms, [this](const BookJob& job) { return demand_for(job); },
          [this](const BookJob& job, const std::unordered_set<std::string>& ruled_out) {
            return runnable_locked(job, ruled_out);
          }),
      settlement_(options_.verify_fraction, options_.seed),
      rng_(options.seed ? options.seed : std::random_device{}()) {
  store_.migrate();
  leading_ = !options_.replica;
  std::lock_guard lock(mu_);
  recover_nodes_locked();
  if (leading_) recover_jobs_locked();
}

Coordinator::~Coordinator() = default;

void Coordinator::load_node_locked(const NodeRecord& r) { place_node_locked(registry_.load(r)); }

void Coordinator::recover_nodes_locked() {
  for (const NodeRecord& r : store_.list_nodes()) {
    // Credits survive a restart in the book; the seat they count for is the node's current one.
    totals_.earned(r.seat, store_.balance(ledger::node_account(r.id)));
    load_node_locked(r);
  }
  // Agents do not register again after a restart (their heartbeats are still known): pods form
  // from the stored descriptions.
  for (const auto& [id, n] : registry_.nodes())
    if (n.description.is_object() && n.description.contains("pod") && valid_pod(n.description["pod"]))
      form_pod_locked(n.description["pod"]);
}

void Coordinator::recover_jobs_locked() {
  for (JobRecord& j : store_.jobs_in_state(JobState::Queued)) {
    recovered_.insert(j.id);
    book_.add(book_job(j));
  }
  for (JobRecord& j : store_.jobs_in_state(JobState::Leased)) {
    // Its holder may still finish it; if not, the lease expires and the job returns. A job that
    // its holder alone cannot hold runs on the pod the holder leads, which stays busy with it.
    BookJob job = book_job(j);
    const auto demand = demand_for(job);
    book_.add_leased(std::move(job), j.node_id, placement_.unit_led_by(j.node_id, demand ? demand->need_bytes : 0),
                     j.lease_expires);
  }
}

BookJob Coordinator::book_job(const JobRecord& j) {
  BookJob job{j.id, j.kind, j.model, j.request, j.attempt, "", 0};
  const json request = json::parse(j.request, nullptr, false);
  if (j.kind == "verify") {
    // A check re-reads the prompt and the output it was given.
    for (const char* ids : {"prompt_ids", "output_ids"})
      if (request.contains(ids) && request[ids].is_array()) job.context_tokens += static_cast<int64_t>(request[ids].size());
  } else {
    job.context_tokens = context_tokens(JobRequest::from_json(request));
  }
  if (!j.verify_of.empty())
    if (auto original = store_.get_job(j.verify_of)) job.avoid = original->node_id;
  return job;
}

void Coordinator::become_leader() {
  std::lock_guard lock(mu_);
  if (leading_) return;
  // The nodes may have changed since this replica read them: the previous leader kept their
  // trust in the store.
  for (const NodeRecord& r : store_.list_nodes()) {
    load_node_locked(r);
    put_to_world_locked(r);  // with the jobs it served for the previous leader
  }
  recover_jobs_locked();
  leading_ = true;
  dispatch_locked();
}

void Coordinator::on_notices(const std::string& payload) {
  std::vector<std::string> submitted;
  bool cancelled = false;
  std::lock_guard lock(mu_);
  for (size_t at = 0; at < payload.size();) {
    size_t end = payload.find(' ', at);
    if (end == std::string::npos) end = payload.size();
    const std::string notice = payload.substr(at, end - at);
    at = end + 1;
    const auto colon = notice.find(':');
    if (colon == std::string::npos) continue;
    const std::string what = notice.substr(0, colon), id = notice.substr(colon + 1);
    if (what == "node") {
      if (leading_) continue;  // it registered here
      if (auto r = store_.get_node(id)) load_node_locked(*r);
    } else if (what == "text") {
      // "text:JOB:OFFSET:HEX", streamed on the leader: clients waiting here see it as it comes.
      if (leading_) continue;
      const auto a = id.find(':'), b = id.find(':', a == std::string::npos ? a : a + 1);
      if (b == std::string::npos) continue;
      const auto text = from_hex(std::string_view(id).substr(b + 1));
      size_t offset = 0;
      try {
        offset = std::stoull(id.substr(a + 1, b - a - 1));
      } catch (const std::exception&) {
        continue;
      }
      if (!text) continue;
      Live& live = live_locked(id.substr(0, a));
      if (offset <= live.text.size() && offset + text->size() > live.text.size())
        live.text += text->substr(live.text.size() - offset);
      changed_.notify_all();
    } else if (what == "done") {
      if (live_.count(id)) {
        live_done_locked(id);
        changed_.notify_all();
      }
    } else if (!leading_) {
      continue;  // jobs are the leader's
    } else if (what == "job") {
      if (!recovered_.erase(id)) submitted.push_back(id);  // else loaded with the queue already
    } else if (what == "cancel") {
      cancelled_locked(id);
      cancelled = true;
    }
  }
  if (!leading_ || (submitted.empty() && !cancelled)) return;
  if (!submitted.empty()) {
    std::vector<JobRecord> jobs = store_.get_jobs(submitted);
    std::sort(jobs.begin(), jobs.end(), [](const JobRecord& a, const JobRecord& b) { return a.created_at < b.created_at; });
    for (const JobRecord& job : jobs)
      if (job.state == JobState::Queued) book_.add(book_job(job));
  }
  dispatch_locked();
}

void Coordinator::tell(std::string notice) {
  if (!options_.replica) return;
  std::lock_guard lock(outbox_mu_);
  outbox_.push_back(std::move(notice));
}

std::vector<std::string> Coordinator::take_notices() {
  std::lock_guard lock(outbox_mu_);
  return std::exchange(outbox_, {});
}

KeyRecord Coordinator::authenticate(const std::string& secret) {
  auto key = store_.find_key_by_secret(secret);
  if (!key) throw ApiError(401, "[network] unknown API key");
  if (key->banned) throw ApiError(403, "[network] this API key is banned");
  return *key;
}

std::string Coordinator::add_key(const std::string& name, int64_t quota_tokens, int64_t rate_per_min) {
  return store_.create_key(name, quota_tokens, rate_per_min, clock_()).second;
}

Submission Submission::from_json(const json& body) {
  if (!body.is_object() || !body.contains("model") || !body["model"].is_string())
    throw ApiError(400, "[network] a job needs a \"model\"");
  bool has_messages = body.contains("messages") && body["messages"].is_array() && !body["messages"].empty();
  bool has_prompt = body.contains("prompt") && body["prompt"].is_string();
  if (has_messages == has_prompt) throw ApiError(400, "[network] a job needs \"messages\" or \"prompt\" (one of them)");
  Submission s;
  s.model = body["model"].get<std::string>();
  JobRequest& r = s.request;
  if (has_prompt) r.prompt = body["prompt"].get<std::string>();
  else
    for (const auto& m : body["messages"]) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
          !m["content"].is_string())
        throw ApiError(400, "[network] each message needs a string \"role\" and \"content\"");
      r.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
  // Absent or null: the default. Anything else must be a number in range.
  auto number = [&](const char* name, double fallback, double lo, double hi, bool integer) {
    if (!body.contains(name) || body[name].is_null()) return fallback;
    const json& v = body[name];
    if (!v.is_number() || (integer && !v.is_number_integer()) || !(v.get<double>() >= lo && v.get<double>() <= hi))
      throw ApiError(400, fmt::format("[network] \"{}\" must be {} in [{}, {}], not {}", name,
                                      integer ? "an integer" : "a number", lo, hi, v.dump()));
    return v.get<double>();
  };
  r.max_tokens = static_cast<int64_t>(number("max_tokens", kDefaultMaxTokens, 1, kMaxMaxTokens, true));
  r.temperature = number("temperature", 1.0, 0, 2, false);
  r.top_p = number("top_p", 1.0, 0, 1, false);
  r.top_k = static_cast<int64_t>(number("top_k", 0, 0, std::numeric_limits<int32_t>::max(), true));
  if (body.contains("seed") && !body["seed"].is_null()) {
    if (!body["seed"].is_number_integer()) throw ApiError(400, "[network] \"seed\" must be an integer");
    // Any 64-bit integer, negative ones as their two's complement (as `orchard serve` takes them).
    r.seed = body["seed"].is_number_unsigned() ? body["seed"].get<uint64_t>() : static_cast<uint64_t>(body["seed"].get<int64_t>());
    s.seeded = true;
  }
  return s;
}

json Coordinator::submit(const KeyRecord& key, Submission submission) {
  if (!submission.seeded) {
    // A fixed seed makes a re-run after a lost lease produce the same text.
    std::lock_guard lock(mu_);
    submission.request.seed = rng_() >> 1;
  }
  const JobRequest& request = submission.request;
  const int64_t max_tokens = request.max_tokens;
  const std::string& model = submission.model;
  {
    std::lock_guard lock(mu_);
    if (!registry_.models().count(model))
      throw ApiError(404, fmt::format("[network] no node serves model '{}'", model));
  }
  // The job reserves the most it can cost (its prompt's bound and max_tokens) until it settles at
  // what was counted, or is cancelled or fails: jobs submitted at once cannot run past the quota.
  JobRecord job;
  job.id = fmt::format("job-{}", random_hex(12));
  job.key_id = key.id;
  job.model = model;
  job.request = request.to_json().dump();
  job.created_at = job.updated_at = clock_();
  job.reserved = prompt_token_bound(request) + max_tokens;
  // Counted and inserted by the store, outside the lock: submissions run side by side, on every
  // replica, and all of them see one quota and one rate per key.
  const bool leading = leading_;
  const SubmitOutcome outcome = store_.submit_job(job, key, job.created_at);
  if (outcome.kind == SubmitOutcome::Kind::OverQuota)
    throw ApiError(429, fmt::format("[network] key '{}' has {} of its quota of {} tokens left ({} used, {} reserved "
                                    "by its jobs in flight); this job may take {}",
                                    key.name, std::max<int64_t>(0, key.quota_tokens - outcome.used - outcome.reserved),
                                    key.quota_tokens, outcome.used, outcome.reserved, job.reserved));
  if (outcome.kind == SubmitOutcome::Kind::OverRate)
    throw ApiError(429, fmt::format("[network] key '{}' is over {} jobs a minute", key.name, key.rate_per_min));
  if (outcome.kind == SubmitOutcome::Kind::Banned) throw ApiError(403, "[network] this API key is banned");
  std::lock_guard lock(mu_);
  if (leading) {
    book_.add({job.id, job.kind, job.model, job.request, 0, "", context_tokens(request)});
    dispatch_locked();
    // Placed at once when a node was free: its first lease.
    if (book_.leased(job.id)) {
      job.state = JobState::Leased;
      job.attempt = 1;
    }
  } else {
    tell("job:" + job.id);  // the leader's to place
  }
  return job_to_json(job);
}

json Coordinator::job_to_json(const JobRecord& j) {
  json out = {{"id", j.id},
              {"object", "job"},
              {"model", j.model},
              {"state", job_state_name(j.state)},
              {"created", j.created_at / 1000},
              {"attempts", j.attempt}};
  if (j.state == JobState::Completed) {
    json r = json::parse(j.result, nullptr, false);
    out["text"] = r.value("text", "");
    out["finish_reason"] = r.value("finish_reason", "stop");
    out["usage"] = {{"prompt_tokens", j.prompt_tokens},
                    {"completion_tokens", j.completion_tokens},
                    {"total_tokens", j.prompt_tokens + j.completion_tokens}};
    if (!j.verify_state.empty()) out["check"] = j.verify_state;
  } else if (auto it = live_.find(j.id); it != live_.end()) {
    out["text"] = it->second->text;
  }
  if (!j.error.empty()) out["error"] = j.error;
  return out;
}

json Coordinator::job_json(const KeyRecord& key, const std::string& id) {
  auto job = store_.get_job(id);
  if (!job || job->key_id != key.id || job->kind != "generate") throw ApiError(404, "[network] no such job");
  std::lock_guard lock(mu_);
  return job_to_json(*job);
}

json Coordinator::cancel(const KeyRecord& key, const std::string& id) {
  auto job = store_.get_job(id);
  if (!job || job->key_id != key.id || job->kind != "generate") throw ApiError(404, "[network] no such job");
  std::lock_guard lock(mu_);
  if (store_.cancel_job(id, clock_())) {
    cancelled_locked(id);
    if (leading_) dispatch_locked();
    else tell("cancel:" + id);  // the leader takes it out of its queue or a node's inbox
  }
  return job_to_json(*store_.get_job(id));
}

void Coordinator::cancelled_locked(const std::string& id) {
  book_.finish(id);
  live_done_locked(id);
  changed_.notify_all();
  if (leading_) finished_locked(id);
}

void Coordinator::finished_locked(const std::string& id) { tell("done:" + id); }

Output Coordinator::wait_output(const KeyRecord& key, const std::string& id, size_t offset,
                                std::chrono::steady_clock::time_point deadline) {
  auto job = store_.get_job(id);
  if (!job || job->key_id != key.id) throw ApiError(404, "[network] no such job");
  auto finished = [&](const JobRecord& j) {
    json r = json::parse(j.result, nullptr, false);
    std::string text = j.state == JobState::Completed ? r.value("text", "") : "";
    return Output{offset < text.size() ? text.substr(offset) : "", true, job_state_name(j.state),
                  j.state == JobState::Completed ? r.value("finish_reason", "stop") : job_state_name(j.state)};
  };
  if (job->state == JobState::Completed || job->state == JobState::Failed || job->state == JobState::Cancelled)
    return finished(*job);
  std::unique_lock lock(mu_);
  const std::shared_ptr<Live> entry = live_entry_locked(id);
  const Live& live = *entry;
  // A follower streams the text the leader tells it of, and hears of the end by a notice, which
  // may come before this wait: it looks at the store again every so often.
  const bool follower = !leading_;
  const auto until = follower ? std::min(deadline, std::chrono::steady_clock::now() + kFollowerRecheck) : deadline;
  changed_.wait_until(lock, until, [&] { return live.done || live.text.size() > offset || waits_ended_; });
  if (live.done || (follower && live.text.size() <= offset)) {
    lock.unlock();
    auto now = store_.get_job(id);
    if (now && (now->state == JobState::Completed || now->state == JobState::Failed ||
                now->state == JobState::Cancelled))
      return finished(*now);
    return Output{"", false, "running", ""};
  }
  return Output{offset < live.text.size() ? live.text.substr(offset) : "", false, "running", ""};
}

json Coordinator::models() {
  std::lock_guard lock(mu_);
  json data = json::array();
  for (const auto& [name, m] : registry_.models())
    data.push_back({{"id", name}, {"object", "model"}, {"created", 0}, {"owned_by", "orchard-network"},
                    {"size_bytes", m.bytes}, {"context_length", m.context_length}});
  return {{"object", "list"}, {"data", data}};
}

json Coordinator::world_totals() {
  std::lock_guard lock(mu_);
  json out = totals_.at(clock_());
  out["queue"] = book_.queued();
  out["pods"] = placement_.pod_count();
  out["models"] = registry_.models().size();
  return out;
}

void Coordinator::attach_world(std::shared_ptr<world::Population> population) {
  std::vector<NodeRecord> records = population ? store_.list_nodes() : std::vector<NodeRecord>{};
  std::lock_guard lock(mu_);
  world_ = std::move(population);
  for (const NodeRecord& r : records) put_to_world_locked(r);
}

void Coordinator::put_to_world_locked(const NodeRecord& r) {
  if (!world_) return;
  const NodeState& n = registry_.get(r.id);
  const json& d = n.description;
  const bool on = n.online && n.offering && !n.banned;
  world_->put({r.id, d.value("chip", ""), r.region, r.seat,
               d.contains("pod") && d["pod"].is_object() ? d["pod"].value("id", "") : "",
               d.value("memory_bytes", int64_t{0}), on, r.jobs_served, r.tok_s, on ? n.online_since : 0});
}

void Coordinator::describe_to_world_locked(const std::string& node_id) {
  if (!world_) return;
  const NodeState& n = registry_.get(node_id);
  const json& d = n.description;
  const bool on = n.online && n.offering && !n.banned;
  world_->describe({node_id, d.value("chip", ""), listed_region(d.value("region", "")), n.seat,
                    d.contains("pod") && d["pod"].is_object() ? d["pod"].value("id", "") : "",
                    d.value("memory_bytes", int64_t{0}), on, 0, 0, on ? n.online_since : 0});
}

void Coordinator::register_node(const std::string& node_id, const json& description) {
  json d = description;
  // Members named by key are ids as the signature check makes them: lower-case hex.
  if (d.is_object() && d.contains("pod") && d["pod"].is_object() && d["pod"].contains("members") &&
      d["pod"]["members"].is_array())
    for (json& m : d["pod"]["members"])
      if (m.is_string()) m = canonical_node_id(m.get<std::string>());
  if (!d.is_object() || !d.contains("memory_bytes") || !d["memory_bytes"].is_number_integer() ||
      !d.contains("models") || !d["models"].is_array())
    throw ApiError(400, "[network] a node description needs memory_bytes and models");
  for (const auto& m : d["models"])
    if (!m.is_object() || !m.contains("name") || !m["name"].is_string() || !m.contains("bytes") ||
        !m["bytes"].is_number_integer() || (m.contains("kv_bytes_per_token") && !m["kv_bytes_per_token"].is_number_integer()) ||
        (m.contains("context_length") && !m["context_length"].is_number_integer()) ||
        (m.contains("active_bytes_per_token") && !m["active_bytes_per_token"].is_number_integer()))
      throw ApiError(400, "[network] each model needs a string name and integer bytes (and kv_bytes_per_token, "
                          "context_length, active_bytes_per_token, when given)");
  for (const char* name : {"chip", "seat", "region", "name"})
    if (d.contains(name) && !d[name].is_string())
      throw ApiError(400, fmt::format("[network] a node description's \"{}\" must be a string", name));
  if ((d.contains("memory_bandwidth_gbs") && !d["memory_bandwidth_gbs"].is_number()) ||
      (d.contains("offering") && !d["offering"].is_boolean()))
    throw ApiError(400, "[network] a node description needs memory_bandwidth_gbs as a number and offering as a boolean");
  if (d.contains("pod")) check_pod(d["pod"]);
  const int64_t now = clock_();
  std::string seat = d.value("seat", "shared") == "dedicated" ? "dedicated" : "shared";
  {
    auto existing = store_.get_node(node_id);
    NodeRecord r = existing ? *existing : NodeRecord{};
    r.id = node_id;
    r.description = d.dump();
    r.seat = seat;
    // Only a place on Orchard's list is kept: a node cannot publish anything finer.
    r.region = listed_region(d.value("region", ""));
    if (!existing) r.registered_at = now;
    r.last_seen = now;
    r.online = true;
    store_.upsert_node(r);
  }
  std::lock_guard lock(mu_);
  place_node_locked(registry_.announce(node_id, d, seat, now));
  describe_to_world_locked(node_id);  // a new chip, memory, region or pod, still online
  if (d.contains("pod")) form_pod_locked(d["pod"]);
  changed_.notify_all();
  dispatch_locked();
  tell("node:" + node_id);  // followers learn its models
}

// A pod forms once all its members have registered naming it. The members are named either in
// the registration ("members": node ids, from a client that knows its peers' keys) or by their
// places in one hostfile ("size" hosts, this one at "rank", the file's SHA-256 as "hostfile"):
// `orchard node --pod` cannot know its peers' keys, so the coordinator matches the places up,
// ordered by rank, so the leader (the first member) is the file's first host, where the ranks
// start from. A place claimed by two keys (a machine whose key was replaced) goes to the one
// heard from last. The first pod formed under an id keeps it.
void Coordinator::form_pod_locked(const json& pod) {
  const std::string pod_id = pod.value("id", "");
  if (pod_id.empty() || placement_.has_node("pod:" + pod_id)) return;
  // Descriptions stored before pods were checked may hold anything: those are no member.
  auto same_pod = [&](const NodeState& n) {
    return n.description.is_object() && n.description.contains("pod") && valid_pod(n.description["pod"]) &&
           n.description["pod"]["id"] == pod_id;
  };
  std::vector<std::string> members;
  if (pod.contains("members")) {
    members = pod["members"].get<std::vector<std::string>>();
    if (members.size() < 2) return;
    for (const std::string& m : members) {
      const NodeState* n = registry_.find(m);
      if (!n || !same_pod(*n)) return;
    }
  } else {
    const int64_t size = pod["size"].get<int64_t>();
    const std::string digest = pod["hostfile"].get<std::string>();
    std::vector<std::pair<int64_t, std::string>> places(static_cast<size_t>(size), {-1, ""});  // (last seen, node)
    for (const auto& [id, n] : registry_.nodes()) {
      if (!same_pod(n)) continue;
      const json& p = n.description["pod"];
      if (p.contains("members") || p["size"] != size || p["hostfile"] != digest) continue;
      auto& place = places[p["rank"].get<size_t>()];
      if (n.last_seen > place.first) place = {n.last_seen, id};
    }
    for (const auto& [seen, id] : places) {
      if (id.empty()) return;
      members.push_back(id);
    }
  }
  double latency = 10;
  if (pod.contains("links"))
    for (const auto& l : pod["links"]) latency = std::max(latency, l.value("latency_us", 10.0));
  try {
    placement_.add_pod(PodSpec{"pod:" + pod_id, members, latency});
    for (const std::string& m : members) refresh_availability_locked(m);
  } catch (const Error&) {
    // A member already in another pod: the pod stays unformed until the members agree.
  }
}

void Coordinator::place_node_locked(const NodeSpec& spec) {
  placement_.add_node(spec);
  refresh_availability_locked(spec.id);
}

void Coordinator::refresh_availability_locked(const std::string& node_id) {
  const bool changed = registry_.refresh(node_id);
  placement_.set_available(node_id, registry_.get(node_id).visible);
  if (changed) describe_to_world_locked(node_id);
}

json Coordinator::heartbeat(const std::string& node_id, const json& state) {
  std::lock_guard lock(mu_);
  const NodeState* found = registry_.find(node_id);
  if (!found) throw ApiError(404, "[network] unknown node: register first");
  const NodeState& n = *found;
  if (n.banned) throw ApiError(403, "[network] this node is banned");
  if (!state.is_object() || (state.contains("offering") && !state["offering"].is_boolean()))
    throw ApiError(400, "[network] a heartbeat needs \"offering\" as a boolean");
  const bool came_online = registry_.online_again(node_id);
  registry_.seen(node_id);
  registry_.set_offering(node_id, state.value("offering", true));
  if (came_online) store_.set_node_online(node_id, true, n.last_seen);
  if (!n.offering) {
    withdraw_inbox_locked(node_id);  // the owner is back: work not yet picked up goes elsewhere
    changed_.notify_all();           // and its long poll ends
  }
  refresh_availability_locked(node_id);
  dispatch_locked();
  return {{"ok", true}, {"online", n.online}, {"offering", n.offering}};
}

json Coordinator::poll(const std::string& node_id, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  const NodeState* found = registry_.find(node_id);
  if (!found) throw ApiError(404, "[network] unknown node: register first");
  if (found->banned) throw ApiError(403, "[network] this node is banned");
  registry_.seen(node_id);
  if (registry_.online_again(node_id)) {
    refresh_availability_locked(node_id);
    dispatch_locked();
  }
  // Nodes are never removed, and the registry's map keeps its entries in place: n stays valid.
  const NodeState& n = *found;
  // A node that withdraws (its owner came back, or it is leaving) is answered at once, so that
  // it can stop without waiting out its poll.
  const bool was_offering = n.offering;
  changed_.wait_until(lock, deadline, [&] {
    return book_.has_offer(node_id) || n.banned || (was_offering && !n.offering) || waits_ended_;
  });
  registry_.seen(node_id);
  if (n.banned) return nullptr;
  auto lease = book_.take(node_id);
  if (!lease) return nullptr;
  // The lease counts from pickup: time spent in the inbox is not the node's (nor is it in the
  // speed the node is paid by).
  store_.renew_lease(lease->job.id, node_id, lease->job.attempt, lease->picked_up_at + options_.lease_ms);
  return {{"id", lease->job.id},
          {"attempt", lease->job.attempt},
          {"kind", lease->job.kind},
          {"model", lease->job.model},
          {"request", json::parse(lease->job.request)},
          {"nodes", lease->nodes}};
}

void Coordinator::progress(const std::string& node_id, const std::string& job_id, int64_t attempt, size_t offset,
                           const std::string& text) {
  if (!store_.renew_lease(job_id, node_id, attempt, clock_() + options_.lease_ms))
    throw ApiError(409, "[network] the lease on this job is not yours any more");
  std::lock_guard lock(mu_);
  registry_.seen(node_id);
  book_.renew(job_id, node_id, attempt);
  Live& live = live_locked(job_id);
  // A re-run after a lost lease repeats what clients already saw (same seed): only new bytes go out.
  if (offset + text.size() > live.text.size() && offset <= live.text.size()) {
    const size_t from = live.text.size();
    live.text += text.substr(from - offset);
    // Clients may wait on another replica (which took the job): it streams what the leader hears.
    for (size_t at = from; at < live.text.size(); at += kTextNoticeBytes)
      tell(fmt::format("text:{}:{}:{}", job_id, at, to_hex(std::string_view(live.text).substr(at, kTextNoticeBytes))));
  }
  changed_.notify_all();
}

json Coordinator::complete(const std::string& node_id, const std::string& job_id, int64_t attempt,
                           const json& result) {
  auto job = store_.get_job(job_id);
  if (!job) throw ApiError(404, "[network] no such job");
  std::lock_guard lock(mu_);
  if (job->kind == "verify") return complete_check_locked(node_id, *job, attempt, result);
  const NodeState* node = registry_.find(node_id);
  if (!node) throw ApiError(404, "[network] unknown node");
  const auto vocab = options_.vocabs.find(job->model);
  const JobRequest request = JobRequest::from_json(json::parse(job->request, nullptr, false));
  const Counted counted = count_tokens(request, result, vocab == options_.vocabs.end() ? nullptr : &vocab->second);
  Completion c;
  c.prompt_tokens = counted.prompt;
  c.completion_tokens = counted.completion;
  const AnnouncedModel& model = registry_.model(job->model);
  // Delivery as the coordinator saw it: counted tokens over the time from pickup to this report.
  const auto lease = book_.lease(job_id, node_id, attempt);
  const int64_t picked_up_at = lease ? lease->picked_up_at : 0;
  const CountedJob counted_job{counted.prompt, counted.completion, model.bytes, model.decode_bytes(),
                               picked_up_at > 0 ? std::max<int64_t>(1, clock_() - picked_up_at) : 0,
                               counted.verifiable};
  const Price price = settlement_.price(node_id, registry_.seller(node_id), counted_job);
  c.tok_s = price.tok_s;
  // The rate goes with the result, so `orchard network audit` can recompute every payment.
  c.result = json{{"text", result.value("text", "")},
                  {"finish_reason", result.value("finish_reason", "stop")},
                  {"model_bytes", model.bytes},
                  {"multiplier", price.multiplier}}
                 .dump();
  const int64_t amount = price.amount;
  const bool check = price.check;
  c.txns = {ledger::settle_job(job_id, job->key_id, node_id, amount, check)};
  if (check) c.verify_state = "pending";
  CompleteOutcome outcome = store_.complete_job(job_id, node_id, attempt, c, clock_());
  if (outcome == CompleteOutcome::Refused)
    throw ApiError(409, "[network] the lease on this job is not yours any more");
  if (outcome == CompleteOutcome::Completed) {
    settlement_.settled(node_id, counted_job);
    book_.finish(job_id);
    live_locked(job_id).text = result.value("text", "");
    live_done_locked(job_id);
    totals_.completed(clock_(), c.completion_tokens);
    if (!check) totals_.earned(node->seat, amount);  // else when the check passes
    if (world_) world_->job_served(node_id, c.tok_s);
    placement_.set_reliability(node_id, registry_.served(node_id));
    if (check) maybe_schedule_check_locked(*store_.get_job(job_id), request, result);
    changed_.notify_all();
    finished_locked(job_id);
    dispatch_locked();
  }
  return {{"ok", true}, {"credits", amount}, {"check", check}};
}

void Coordinator::maybe_schedule_check_locked(const JobRecord& job, const JobRequest& request, const json& result) {
  JobRecord check;
  check.id = fmt::format("chk-{}", random_hex(12));
  check.key_id = job.key_id;
  check.kind = "verify";
  check.model = job.model;
  check.request = json{{"prompt_ids", result["prompt_ids"]},
                       {"output_ids", result["output_ids"]},
                       {"temperature", request.temperature},
                       {"top_p", request.top_p},
                       {"top_k", request.top_k}}
                      .dump();
  check.verify_of = job.id;
  check.created_at = check.updated_at = clock_();
  store_.insert_job(check);
  book_.add({check.id, check.kind, check.model, check.request, 0, job.node_id,
             static_cast<int64_t>(result["prompt_ids"].size() + result["output_ids"].size())});
}

json Coordinator::complete_check_locked(const std::string& node_id, const JobRecord& check, int64_t attempt,
                                        const json& result) {
  auto original = store_.get_job(check.verify_of);
  const NodeState* verifier = registry_.find(node_id);
  if (!original || !verifier) throw ApiError(404, "[network] no such job");
  if (!result.is_object() || !result.contains("ok") || !result["ok"].is_boolean())
    throw ApiError(400, "[network] a check's result needs \"ok\" as a boolean");
  auto integer = [&](const char* name, int64_t fallback) {
    return result.contains(name) && result[name].is_number_integer() ? result[name].get<int64_t>() : fallback;
  };
  bool ok = result["ok"].get<bool>();
  const AnnouncedModel& model = registry_.model(check.model);
  int64_t held = store_.escrowed(original->id);
  const Seller seller = registry_.seller(node_id);
  const double multiplier = ledger::seat_multiplier(seller.seat, seller.tier);
  const int64_t pay =
      Settlement::verifier_pay(original->prompt_tokens + original->completion_tokens, model.bytes, seller);
  Completion c;
  c.result = json{{"ok", ok},
                  {"checked", integer("checked", 0)},
                  {"mismatch_at", integer("mismatch_at", -1)},
                  {"model_bytes", model.bytes},
                  {"multiplier", multiplier}}
                 .dump();
  c.prompt_tokens = original->prompt_tokens + original->completion_tokens;
  c.txns = {ledger::pay_verifier(check.id, node_id, pay),
            ok ? ledger::release_escrow(original->id, original->node_id, held)
               : ledger::refund_escrow(original->id, original->key_id, held)};
  if (!ok) c.txns.push_back(ledger::fine_node(original->id, original->node_id, ledger::kFineMultiple * held));
  c.checked_state = ok ? "ok" : "mismatch";
  CompleteOutcome outcome = store_.complete_job(check.id, node_id, attempt, c, clock_());
  if (outcome == CompleteOutcome::Refused)
    throw ApiError(409, "[network] the lease on this check is not yours any more");
  if (outcome == CompleteOutcome::Completed) {
    if (world_) world_->job_served(node_id, c.tok_s);  // the store counts checks as jobs served
    totals_.earned(verifier->seat, pay);
    if (ok) totals_.earned(registry_.get(original->node_id).seat, held);
    book_.finish(check.id);
    live_.erase(check.id);
    if (!ok) {
      totals_.earned(registry_.get(original->node_id).seat, -ledger::kFineMultiple * held);
      const double reliability = registry_.failed_check(original->node_id);
      const NodeState& producer = registry_.get(original->node_id);
      store_.update_node_trust(original->node_id, reliability, producer.mismatches, producer.banned,
                               producer.jobs_failed);
      placement_.set_reliability(original->node_id, reliability);
      refresh_availability_locked(original->node_id);
      // A banned node gets nothing more: what waits in its inbox goes to others now.
      if (producer.banned) withdraw_inbox_locked(original->node_id);
    }
    changed_.notify_all();
    dispatch_locked();
  }
  return {{"ok", true}, {"credits", pay}};
}

void Coordinator::hand_back(const std::string& node_id, const std::string& job_id, int64_t attempt,
                            const std::string& reason) {
  std::lock_guard lock(mu_);
  if (!store_.requeue_job(job_id, node_id, attempt, clock_())) return;
  if (reason == kModelMissing)
    if (auto lease = book_.lease(job_id, node_id, attempt)) registry_.lack(node_id, lease->job.model);
  const bool cannot = reason == kModelMissing || reason.starts_with(kCannotRun);
  return_locked(job_id, node_id, attempt, cannot ? JobBook::Return::Refused : JobBook::Return::HandedBack, reason);
  dispatch_locked();
}

void Coordinator::withdraw_inbox_locked(const std::string& node_id) {
  for (const Lease& l : book_.inbox(node_id))
    if (store_.requeue_job(l.job.id, node_id, l.job.attempt, clock_()))
      return_locked(l.job.id, node_id, l.job.attempt, JobBook::Return::Withdrawn);
}

void Coordinator::return_locked(const std::string& job_id, const std::string& node_id, int64_t attempt,
                                JobBook::Return why, const std::string& reason) {
  const JobBook::Returned returned = book_.give_back(job_id, node_id, attempt, why, reason);
  if (why != JobBook::Return::Withdrawn && registry_.find(node_id)) {
    const double reliability = registry_.returned(node_id, why == JobBook::Return::LeaseLost);
    const NodeState& n = registry_.get(node_id);
    store_.update_node_trust(node_id, reliability, n.mismatches, n.banned, n.jobs_failed);
    placement_.set_reliability(node_id, reliability);
  }
  if (!returned.failure.empty()) fail_locked(job_id, returned.failure);
}

bool Coordinator::runnable_locked(const BookJob& job, const std::unordered_set<std::string>& ruled_out) const {
  const auto demand = demand_for(job);
  if (!demand) return false;
  for (const auto& [id, n] : registry_.nodes()) {
    if (n.banned || n.lacks.count(job.model) || ruled_out.count(id)) continue;
    // A pod's member may run it with its pod, whatever its own memory.
    if (n.description.value("memory_bytes", int64_t{0}) >= demand->need_bytes || n.description.contains("pod"))
      return true;
  }
  return false;
}

void Coordinator::fail_locked(const std::string& job_id, const std::string& error) {
  book_.finish(job_id);
  if (!store_.fail_job(job_id, error, clock_())) return;
  live_done_locked(job_id);
  changed_.notify_all();
  finished_locked(job_id);
}

std::optional<Demand> Coordinator::demand_for(const BookJob& job) const {
  auto model = registry_.models().find(job.model);
  if (model == registry_.models().end()) return std::nullopt;
  const AnnouncedModel& m = model->second;
  const int64_t context = std::min<int64_t>(std::max<int64_t>(m.context_length, 1), job.context_tokens);
  Demand d{job.model, m.bytes, m.bytes + m.kv_bytes_per_token * context, {}, m.active_bytes_per_token};
  for (const auto& [id, n] : registry_.nodes())
    if (n.lacks.count(job.model)) d.exclude.insert(id);
  return d;
}

void Coordinator::dispatch_locked() {
  const int64_t now = clock_();
  book_.dispatch([&](const BookJob& job, const std::string& holder, int64_t) {
    return store_.lease_job(job.id, holder, now + options_.lease_ms, now);
  });
  changed_.notify_all();
}

void Coordinator::tick() {
  std::lock_guard lock(mu_);
  if (!leading_) return;
  const int64_t now = clock_();
  for (const Lease& l : book_.expired()) {
    if (store_.requeue_job(l.job.id, l.holder, l.job.attempt, now))
      return_locked(l.job.id, l.holder, l.job.attempt, JobBook::Return::LeaseLost);
    else
      book_.finish(l.job.id);  // it ended in the store meanwhile (completed, cancelled, failed)
  }
  for (const std::string& id : registry_.fall_silent()) {
    store_.set_node_online(id, false, registry_.get(id).last_seen);
    refresh_availability_locked(id);
  }
  dispatch_locked();
}

json Coordinator::node_status(const std::string& node_id) {
  auto r = store_.get_node(node_id);
  if (!r) throw ApiError(404, "[network] unknown node: register first");
  json lines = json::array();
  for (const StatementLine& l : store_.statement(ledger::node_account(node_id), 50))
    lines.push_back({{"txn", l.txn_id}, {"job", l.job_id}, {"memo", l.memo}, {"amount", l.amount},
                     {"at", l.created_at}});
  std::lock_guard lock(mu_);
  const NodeState& n = registry_.get(node_id);
  return {{"id", node_id},
          {"online", n.online},
          {"offering", n.offering},
          {"banned", n.banned},
          {"seat", r->seat},
          {"tier", n.tier},
          {"jobs_served", r->jobs_served},
          {"jobs_failed", r->jobs_failed},
          {"reputation", r->reputation},
          {"mismatches", r->mismatches},
          {"balance", store_.balance(ledger::node_account(node_id))},
          {"statement", lines}};
}

size_t Coordinator::queued() const {
  std::lock_guard lock(mu_);
  return book_.queued();
}

void Coordinator::end_waits() {
  std::lock_guard lock(mu_);
  waits_ended_ = true;
  changed_.notify_all();
}

size_t Coordinator::live_jobs() const {
  std::lock_guard lock(mu_);
  return live_.size();
}

std::shared_ptr<Coordinator::Live> Coordinator::live_entry_locked(const std::string& job_id) {
  std::shared_ptr<Live>& entry = live_[job_id];
  if (!entry) entry = std::make_shared<Live>();
  return entry;
}

Coordinator::Live& Coordinator::live_locked(const std::string& job_id) { return *live_entry_locked(job_id); }

void Coordinator::live_done_locked(const std::string& job_id) {
  Live& live = live_locked(job_id);
  const int64_t now = clock_();
  if (!live.done) ended_live_.emplace_back(now, job_id);
  live.done = true;
  while (!ended_live_.empty() && now - ended_live_.front().first > options_.ended_text_kept_ms) {
    live_.erase(ended_live_.front().second);
    ended_live_.pop_front();
  }
}

}  // namespace orchard::network

#include "network/pod.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sstream>
#include <string_view>
#include <thread>
#include <utility>

#include "cluster/local_machine.h"
#include "comm/launcher.h"
#include "comm/transport/tcp/socket.h"
#include "core/error.h"
#include "model/config.h"
#include "model/gguf/reader.h"
#include "network/job_request.h"
#include "network/store/store.h"
#include "parallel/engine.h"
#include "parallel/split_run.h"

extern char** environ;

namespace orchard::network {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string short_name(std::string name) {
  if (auto at = name.find('@'); at != std::string::npos) name = name.substr(at + 1);
  return name.substr(0, name.find('.'));
}

std::string this_hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// The host of the file this machine is: the one entry whose address is one of ours, else whose
// ssh name is our hostname.
int find_own_rank(const PodConfig& pod) {
  std::vector<std::string> mine;
  for (const auto& i : cluster::list_interfaces()) mine.push_back(i.address);
  auto ours = [&](const parallel::HostEntry& h) {
    for (const auto& e : h.endpoints)
      if (std::find(mine.begin(), mine.end(), comm::tcp::parse_endpoint(e).host) != mine.end()) return true;
    return false;
  };
  std::vector<int> matches;
  for (size_t r = 0; r < pod.hosts.size(); ++r)
    if (ours(pod.hosts[r])) matches.push_back(static_cast<int>(r));
  if (matches.empty()) {
    const std::string host = short_name(this_hostname());
    for (size_t r = 0; r < pod.hosts.size(); ++r)
      if (!host.empty() && short_name(pod.hosts[r].ssh) == host) matches.push_back(static_cast<int>(r));
  }
  if (matches.size() == 1) return matches.front();
  std::string addresses;
  for (const auto& a : mine) addresses += (addresses.empty() ? "" : ", ") + a;
  throw Error(error_message("node",
                            "cannot tell which host of the pod hostfile {} this machine is: {} entries match its "
                            "addresses ({}) and hostname '{}'; give --pod-rank",
                            pod.hostfile, matches.size(), addresses.empty() ? "none" : addresses, this_hostname()));
}

// A file only this user can read, removed when the job is over.
class PrivateFile {
 public:
  explicit PrivateFile(const std::string& text) {
    std::string pattern = (fs::temp_directory_path() / "orchard-pod-job-XXXXXX").string();
    int fd = ::mkstemp(pattern.data());
    if (fd < 0) throw Error(error_message("network", "cannot create a file in {} for a pod job", fs::temp_directory_path().string()));
    path_ = pattern;
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    if (!ok) throw Error(error_message("network", "cannot write {}", path_));
  }
  ~PrivateFile() { ::unlink(path_.c_str()); }
  PrivateFile(const PrivateFile&) = delete;
  PrivateFile& operator=(const PrivateFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class PodEngine final : public Engine {
 public:
  PodEngine(PodConfig pod, std::string models_dir, int threads, int32_t max_context, int token_delay_ms)
      : pod_(std::move(pod)), models_dir_(std::move(models_dir)), threads_(threads), max_context_(max_context),
        token_delay_ms_(token_delay_ms) {}

  json models() override { return json::array(); }  // the built-in engine describes the leader's files

  EngineResult run(const std::string& name, const json& request,
                   const std::function<bool(const std::string&)>& on_text) override {
    const std::string model = fs::absolute(model_path(models_dir_, name)).string();
    if (!fs::exists(model))
      throw Error(error_message("network", "pod {}: model '{}' is not in {} on the leader, which reads it for the pod",
                                pod_.id, name, models_dir_));
    PrivateFile request_file(request.dump());
    const std::vector<std::string> argv = {
        comm::current_executable(), "launch", "--hostfile", pod_.hostfile, "--ssh", pod_.ssh_command,
        "--port", std::to_string(pod_.port), "--backend", "ring", "--comm-timeout", fmt::format("{}", pod_.comm_timeout_s),
        "--", pod_.binary, "node", "pod-rank", "--model", model, "--request-file", request_file.path(),
        "--max-context", std::to_string(max_context_), "--threads", std::to_string(threads_),
        "--token-delay-ms", std::to_string(token_delay_ms_)};
    // The agents' cluster and secret go in launch's environment, not on its command line, which
    // `ps` shows to every user of the machine.
    Launcher launcher(argv, {{"ORCHARD_CLUSTER", pod_.cluster}, {"ORCHARD_CLUSTER_SECRET", pod_.cluster_secret}});

    json result;
    bool stopping = false;
    auto stop = [&] {
      if (stopping) return;
      stopping = true;
      launcher.terminate();
    };
    std::string lines;
    auto handle = [&](const std::string& line) {
      json event = json::parse(line, nullptr, false);
      if (event.is_object() && event.contains("text") && event["text"].is_string()) {
        if (!stopping && !on_text(event["text"].get<std::string>())) stop();
      } else if (event.is_object() && event.contains("result") && event["result"].is_object()) {
        result = event["result"];
      } else {
        std::fprintf(stderr, "%s\n", line.c_str());  // something else a rank printed
      }
    };
    while (launcher.read_some(lines, std::chrono::milliseconds(250))) {
      for (size_t nl; (nl = lines.find('\n')) != std::string::npos; lines.erase(0, nl + 1)) handle(lines.substr(0, nl));
      // Between tokens (a long load, a shard on its way) the agent may still want the job stopped.
      if (!stopping && !on_text("")) stop();
      if (stopping && launcher.overdue()) break;
    }
    const int code = launcher.wait();
    EngineResult out;
    if (stopping) return out;  // the agent gave the job up: nothing to report
    if (code != 0 || result.is_null())
      throw Error(error_message("network", "pod {}: the job's ranks failed (orchard launch exited with {}); see this "
                                "agent's log", pod_.id, code));
    out.text = result.value("text", "");
    out.finish_reason = result.value("finish_reason", "stop");
    out.prompt_tokens = result.value("prompt_tokens", int64_t{0});
    out.completion_tokens = result.value("completion_tokens", int64_t{0});
    out.tok_s = result.value("tok_s", 0.0);
    out.prompt_ids = result.value("prompt_ids", std::vector<int32_t>{});
    out.output_ids = result.value("output_ids", std::vector<int32_t>{});
    std::string ranks;
    for (const auto& r : result.value("ranks", json::array()))
      ranks += fmt::format("{}rank {} (pid {} on {}, layers {}-{}{})", ranks.empty() ? "" : "; ", r.value("rank", 0),
                           r.value("pid", 0), r.value("host", ""), r["layers"][0].get<int>(), r["layers"][1].get<int>() - 1,
                           r.value("shard_received", false) ? ", shard received from rank 0" : "");
    spdlog::info("[network] pod {} ran a job over {} ranks: {}", pod_.id, result.value("ranks", json::array()).size(),
                 ranks);
    return out;
  }

  std::optional<CheckResult> check(const std::string&, const json&) override { return std::nullopt; }

 private:
  // `orchard launch` as a child whose stdout is a pipe to us, with this process's environment
  // but for the variables `env` sets. Its own process group: a terminal's Ctrl-C reaches the
  // agent alone, and the agent decides. On Linux it also gets SIGTERM if the agent dies (then it
  // ends its ranks); elsewhere rank 0's next write into the closed pipe ends rank 0, and the
  // launcher the rest.
  class Launcher {
   public:
    Launcher(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env) {
      // Built before the fork: the child may not allocate.
      std::vector<std::string> variables;
      for (char** e = environ; *e; ++e) {
        const std::string_view v(*e);
        const bool replaced = std::any_of(env.begin(), env.end(), [&](const auto& kv) {
          return v.size() > kv.first.size() && v.compare(0, kv.first.size(), kv.first) == 0 && v[kv.first.size()] == '=';
        });
        if (!replaced) variables.emplace_back(v);
      }
      for (const auto& [key, value] : env) variables.push_back(key + "=" + value);
      std::vector<char*> envp;
      for (std::string& v : variables) envp.push_back(v.data());
      envp.push_back(nullptr);
      int fds[2];
      if (::pipe(fds) != 0) throw Error(error_message("network", "cannot create a pipe for a pod job"));
      ::fcntl(fds[0], F_SETFD, FD_CLOEXEC);
      ::fcntl(fds[1], F_SETFD, FD_CLOEXEC);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      const pid_t parent = ::getpid();
      pid_ = ::fork();
      if (pid_ < 0) {
        ::close(fds[0]);
        ::close(fds[1]);
        throw Error(error_message("network", "fork failed for a pod job"));
      }
      if (pid_ == 0) {  // only async-signal-safe calls until exec: the agent has threads
        ::setpgid(0, 0);
#ifdef __linux__
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(1);
#endif
        ::dup2(fds[1], STDOUT_FILENO);
        // Remote ranks cd to the launcher's directory: "/" is on every host.
        if (::chdir("/") != 0) ::_exit(127);
        ::execve(args[0], args.data(), envp.data());
        ::_exit(127);
      }
      ::close(fds[1]);
      fd_ = fds[0];
    }
    // Left early (an exception): the launcher still gets to end its ranks before it is killed.
    ~Launcher() {
      if (pid_ > 0) {
        ::kill(pid_, SIGTERM);
        for (int i = 0; i < 100 && ::waitpid(pid_, nullptr, WNOHANG) == 0; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
      }
      if (fd_ >= 0) ::close(fd_);
    }
    Launcher(const Launcher&) = delete;
    Launcher& operator=(const Launcher&) = delete;

    // Appends what arrived within `wait`; false at end of output (every rank and the launcher
    // have closed it).
    bool read_some(std::string& out, std::chrono::milliseconds wait) {
      if (fd_ < 0) return false;
      pollfd p{fd_, POLLIN, 0};
      int n = ::poll(&p, 1, static_cast<int>(wait.count()));
      if (n <= 0) return true;
      char chunk[4096];
      ssize_t got = ::read(fd_, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) return true;
      if (got <= 0) return false;
      out.append(chunk, static_cast<size_t>(got));
      return true;
    }

    // The launcher ends its ranks on SIGTERM (SIGKILL after 3 s).
    void terminate() {
      ::kill(pid_, SIGTERM);
      terminated_at_ = std::chrono::steady_clock::now();
    }
    // Stopped long ago and still not done: kill it and close our end, so a rank it could not
    // reach dies at its next write.
    bool overdue() {
      if (std::chrono::steady_clock::now() - terminated_at_ < std::chrono::seconds(10)) return false;
      ::kill(pid_, SIGKILL);
      ::close(fd_);
      fd_ = -1;
      return true;
    }

    int wait() {
      if (pid_ <= 0) return code_;
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
      code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return code_;
    }

   private:
    pid_t pid_ = -1;
    int fd_ = -1;
    int code_ = 0;
    std::chrono::steady_clock::time_point terminated_at_ = std::chrono::steady_clock::time_point::max();
  };

  PodConfig pod_;
  std::string models_dir_;
  int threads_;
  int32_t max_context_;
  int token_delay_ms_;
};

// What each rank says about its part, gathered on rank 0. Wire format: packed, fixed size.
struct RankInfo {
  int32_t rank, pid, layer_begin, layer_end, shard_received;
  char host[64];
};
static_assert(sizeof(RankInfo) == 84);

// Rank 0's events: one JSON object a line. A closed pipe means the agent is gone: stop.
void emit(const json& event) {
  std::string line = event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), stdout) != line.size() || std::fflush(stdout) != 0)
    throw Error(error_message("network", "pod rank 0: its agent stopped reading (the job is over)"));
}

}  // namespace

PodConfig load_pod(const std::string& id, const std::string& hostfile, int rank, uint16_t port) {
  if (id.empty() || id.size() > kMaxPodIdLength)
    throw Error(error_message("node", "--pod needs an id of 1 to {} characters, not '{}'", kMaxPodIdLength, id));
  PodConfig pod;
  pod.id = id;
  pod.port = port;
  pod.hostfile = fs::absolute(hostfile).string();
  std::ifstream in(hostfile, std::ios::binary);
  if (!in) throw Error(error_message("node", "cannot read the pod hostfile {}", hostfile));
  std::stringstream text;
  text << in.rdbuf();
  pod.digest = sha256_hex(text.str());
  try {
    pod.hosts = parallel::read_hostfile(pod.hostfile, port);
  } catch (const Error& e) {
    throw Error(error_message("node", "pod hostfile {}: {}", hostfile, e.what()));
  }
  const int size = static_cast<int>(pod.hosts.size());
  if (size < 2 || size > kMaxPodSize)
    throw Error(error_message("node", "pod hostfile {} lists {} host(s); a pod has 2 to {}", hostfile, size, kMaxPodSize));
  if (rank >= size)
    throw Error(error_message("node", "--pod-rank {} is outside the {} hosts of {}", rank, size, hostfile));
  pod.rank = rank >= 0 ? rank : find_own_rank(pod);
  pod.binary = comm::current_executable();
  return pod;
}

json pod_registration(const PodConfig& pod) {
  return {{"id", pod.id},
          {"size", pod.hosts.size()},
          {"rank", pod.rank},
          {"hostfile", pod.digest},
          {"links", json::array()}};
}

std::unique_ptr<Engine> make_pod_engine(PodConfig pod, const std::string& models_dir, int threads,
                                        int32_t max_context, int token_delay_ms) {
  return std::make_unique<PodEngine>(std::move(pod), models_dir, threads, max_context, token_delay_ms);
}

void run_pod_rank(const PodRankOptions& o) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("pod-rank"));  // stdout carries rank 0's events
  parallel::SplitOptions split;
  split.strategy = "pipeline";
  parallel::run_split(split, [&](comm::Group* group, const parallel::Layout& layout) {
    const int rank = group ? group->rank() : 0;
    const int world = group ? group->size() : 1;
    // Only the leader has the request (and the file that bounds its context): rank 0 sends both.
    std::string job;
    if (rank == 0) {
      std::ifstream in(o.request_file);
      std::stringstream text;
      text << in.rdbuf();
      json request = json::parse(text.str(), nullptr, false);
      if (!in || !request.is_object())
        throw Error(error_message("network", "pod rank 0: cannot read the job's request from {}", o.request_file));
      auto file = model::gguf::Reader::open(o.model_path);
      const int32_t n_ctx = std::min(model::ModelConfig::from_gguf(file).context_length, o.max_context);
      job = json{{"request", request}, {"n_ctx", n_ctx}}.dump();
    }
    if (group) {
      uint64_t bytes = job.size();
      group->broadcast(&bytes, sizeof bytes, 0);
      job.resize(bytes);
      group->broadcast(job.data(), bytes, 0);
    }
    const json parsed = json::parse(job);
    const JobRequest request = JobRequest::from_json(parsed["request"]);

    const bool has_file = fs::exists(o.model_path);
    parallel::EngineOptions options;
    options.model_path = o.model_path;
    options.layout = layout;
    options.threads = o.threads;
    options.context = parsed["n_ctx"].get<int32_t>();
    options.cache_type = model::KvType::F16;  // as a single node's engine and `orchard run`
    parallel::Engine engine(options, group);
    const auto prompt = prompt_tokens(engine.tokenizer(), engine.config().arch_name, request);
    const auto gen = generation_options(request, engine.model().n_ctx(), prompt.size());
    auto r = model::generate(engine.model(), engine.tokenizer(), prompt, gen, [&](model::TokenId, const std::string& text) {
      if (rank != 0) return true;
      if (o.token_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.token_delay_ms));
      if (!text.empty()) emit({{"text", text}});
      return true;
    });

    const model::Shard& shard = engine.weights().shard();
    RankInfo mine{rank, static_cast<int32_t>(::getpid()), shard.layer_begin, shard.layer_end, has_file ? 0 : 1, {}};
    std::snprintf(mine.host, sizeof mine.host, "%s", this_hostname().c_str());
    std::vector<RankInfo> all(static_cast<size_t>(world));
    if (group) group->all_gather(&mine, all.data(), sizeof mine);
    else all[0] = mine;
    std::fprintf(stderr, "[network] pod rank %d of %d (pid %d on %s): layers %d-%d, %s\n", rank, world, mine.pid,
                 mine.host, mine.layer_begin, mine.layer_end - 1,
                 has_file ? "read the model file" : "shard received from rank 0");
    if (rank != 0) return;
    json ranks = json::array();
    for (const RankInfo& info : all)
      ranks.push_back({{"rank", info.rank},
                       {"pid", info.pid},
                       {"host", std::string(info.host, strnlen(info.host, sizeof info.host))},
                       {"layers", {info.layer_begin, info.layer_end}},
                       {"shard_received", info.shard_received != 0}});
    emit({{"result",
           {{"text", r.text},
            {"finish_reason", r.stopped_at_end ? "stop" : "length"},
            {"prompt_tokens", r.prompt_tokens},
            {"completion_tokens", r.tokens.size()},
            {"tok_s", r.gen_tok_s()},
            {"prompt_ids", prompt},
            {"output_ids", r.tokens},
            {"ranks", ranks}}}});
  });
}

}  // namespace orchard::network

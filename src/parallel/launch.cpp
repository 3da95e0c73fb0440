#include "parallel/launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "comm/bootstrap.h"
#include "comm/launcher.h"
#include "core/error.h"

namespace orchard::parallel {
namespace {

// Single-quotes a word for a POSIX shell on the remote side.
std::string shell_quote(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string host_of(const std::string& endpoint) {
  if (!endpoint.empty() && endpoint.front() == '[') return endpoint.substr(1, endpoint.find(']') - 1);
  return endpoint.substr(0, endpoint.rfind(':'));
}

volatile sig_atomic_t g_interrupted = 0;
void on_interrupt(int) { g_interrupted = 1; }

// A rank that is a child process of the launcher (ssh, or a shell on this machine).
class ChildRank : public RankProcess {
 public:
  explicit ChildRank(pid_t pid) : pid_(pid) {}
  std::optional<RankEnd> poll() override {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
    if (WIFEXITED(status)) return RankEnd{WEXITSTATUS(status), fmt::format("exited with code {}", WEXITSTATUS(status))};
    return RankEnd{128 + WTERMSIG(status), fmt::format("exited with signal {}", WTERMSIG(status))};
  }
  void terminate() override { ::kill(pid_, SIGTERM); }
  void kill() override { ::kill(pid_, SIGKILL); }

 private:
  pid_t pid_;
};

// Says which rank failed and how; `ssh_host`: the host its ssh was to reach (empty: none).
void report_failure(const std::string& name, const RankEnd& end, const std::string& ssh_host) {
  std::fprintf(stderr, "orchard launch: %s %s; stopping the other ranks\n", name.c_str(), end.detail.c_str());
  // ssh exits 255 for its own errors (the rank never ran); orchard never exits 255.
  if (end.code == 255 && !ssh_host.empty())
    std::fprintf(stderr,
                 "orchard launch: ssh could not reach %s: check that it runs an ssh server that this user can "
                 "log into without a password (try: ssh -o BatchMode=yes %s true), or run `orchard agent` "
                 "there and let it start the rank (--discover does; in a hostfile: \"agent\": true)\n",
                 ssh_host.c_str(), ssh_host.c_str());
}

// The ranks a supervisor waits for: which have ended, and, once they are told to stop, when
// those still running get SIGKILL (3 s after SIGTERM).
class RankWaits {
 public:
  explicit RankWaits(const std::vector<std::unique_ptr<RankProcess>>& ranks)
      : ranks_(ranks), ended_(ranks.size(), false), remaining_(ranks.size()) {}
  bool any_running() const { return remaining_ > 0; }
  // Polls each running rank once; on_end(i, end) for each that has ended. True if any had.
  template <typename OnEnd>
  bool reap(OnEnd on_end) {
    bool reaped = false;
    for (size_t i = 0; i < ranks_.size(); ++i) {
      if (ended_[i]) continue;
      const std::optional<RankEnd> end = ranks_[i]->poll();
      if (!end) continue;
      ended_[i] = true;
      reaped = true;
      --remaining_;
      on_end(i, *end);
    }
    return reaped;
  }
  void terminate_running(std::chrono::steady_clock::time_point now) {
    for (size_t i = 0; i < ranks_.size(); ++i)
      if (!ended_[i]) ranks_[i]->terminate();
    kill_at_ = now + std::chrono::seconds(3);
  }
  void kill_when_due(std::chrono::steady_clock::time_point now) {
    if (now < kill_at_) return;
    for (size_t i = 0; i < ranks_.size(); ++i)
      if (!ended_[i]) ranks_[i]->kill();
    kill_at_ = std::chrono::steady_clock::time_point::max();
  }

 private:
  const std::vector<std::unique_ptr<RankProcess>>& ranks_;
  std::vector<bool> ended_;
  size_t remaining_;
  std::chrono::steady_clock::time_point kill_at_ = std::chrono::steady_clock::time_point::max();
};

// Waits for every rank; after the first failure or an interrupt, stops the rest (SIGTERM,
// then SIGKILL after a grace period).
int supervise(const std::vector<std::unique_ptr<RankProcess>>& ranks, const std::vector<std::string>& names,
              const std::vector<std::string>& ssh_hosts = {}) {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  RankWaits waits(ranks);
  int result = 0;
  bool terminated = false;
  while (waits.any_running()) {
    const bool reaped = waits.reap([&](size_t i, const RankEnd& end) {
      if (end.code != 0 && result == 0 && !terminated) {
        report_failure(names[i], end, i < ssh_hosts.size() ? ssh_hosts[i] : std::string());
        result = end.code;
      }
    });
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const bool failed = result != 0 || g_interrupted;
    if (failed && !terminated) {
      terminated = true;
      if (g_interrupted && result == 0) result = 130;
      waits.terminate_running(std::chrono::steady_clock::now());
    }
    waits.kill_when_due(std::chrono::steady_clock::now());
  }
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  return result;
}

// no_input: the child reads /dev/null, not this process's stdin (which a terminal's user types
// into for this process).
std::unique_ptr<RankProcess> spawn(const std::vector<std::string>& argv, bool no_input = false) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw Error(error_message("launch", "fork failed"));
  if (pid == 0) {
    // Its own process group, so a terminal's Ctrl-C reaches the launcher alone and the
    // launcher ends the ranks in order.
    setpgid(0, 0);
    if (no_input) {
      const int null = open("/dev/null", O_RDONLY);
      if (null >= 0) dup2(null, STDIN_FILENO);
    }
    execvp(args[0], args.data());
    std::fprintf(stderr, "orchard launch: cannot run %s\n", args[0]);
    _exit(127);
  }
  return std::make_unique<ChildRank>(pid);
}

// The job's configuration (rank 0's; each rank's differs in its rank).
comm::Config job_config(const std::vector<HostEntry>& hosts, const LaunchOptions& options) {
  comm::Config config = options.base;
  config.world = static_cast<int>(hosts.size());
  config.endpoints.clear();
  for (const auto& h : hosts) config.endpoints.push_back(h.endpoints);
  if (config.secret.empty()) config.secret = comm::random_secret();
  config.listen_fd = -1;
  config.rank = 0;
  return config;
}

struct StartedRanks {
  std::vector<std::unique_ptr<RankProcess>> ranks;
  std::vector<std::string> names, ssh_hosts;  // per rank started; ssh_hosts: "" when not by ssh
};

// Starts ranks first..world-1 of the job `config` describes, each on its host: here, through its
// agent, or over ssh. A host that cannot be asked ends the ranks already started and throws.
StartedRanks start_ranks(const std::vector<HostEntry>& hosts, const LaunchOptions& options, comm::Config config, int first,
                         bool no_input) {
  const int world = static_cast<int>(hosts.size());
  const std::string cwd =
      options.working_directory.empty() ? std::filesystem::current_path().string() : options.working_directory;
  std::vector<std::string> command_words;
  for (const auto& w : options.command) command_words.push_back(shell_quote(w));
  for (int r = first; r < world; ++r) {
    const HostEntry& host = hosts[static_cast<size_t>(r)];
    if (!host.local && !host.agent.empty() && !options.start_by_agent)
      throw Error(error_message("launch", "{} is to be started by its agent, and this launcher was given no way to ask "
                                          "agents: give it an \"ssh\" entry instead", host.ssh));
  }
  StartedRanks started;
  try {
    for (int r = first; r < world; ++r) {
      const HostEntry& host = hosts[static_cast<size_t>(r)];
      config.rank = r;
      RankCommand rank{{}, options.command, cwd};
      std::string remote = "cd " + shell_quote(cwd) + " && exec env";
      for (const auto& [key, value] : comm::config_to_env(config)) {
        if (key == "ORCHARD_LISTEN_FD") continue;
        remote += " " + key + "=" + shell_quote(value);
        rank.env.emplace_back(key, value);
      }
      for (const auto& w : command_words) remote += " " + w;
      const bool by_agent = !host.local && !host.agent.empty();
      // The same command line either way, so a rank here sees what a remote one sees.
      if (host.local) started.ranks.push_back(spawn({"/bin/sh", "-c", remote}, no_input));
      else if (by_agent) started.ranks.push_back(options.start_by_agent(host, rank));
      else started.ranks.push_back(spawn({options.ssh_command, "-o", "BatchMode=yes", host.ssh, remote}, no_input));
      started.names.push_back("rank " + std::to_string(r) + " (" + host.ssh +
                              (host.local ? ", this machine" : by_agent ? ", by its agent" : "") + ")");
      started.ssh_hosts.push_back(host.local || by_agent ? "" : host.ssh);
    }
  } catch (...) {
    // A host that could not be asked: the ranks already started must not outlive the job.
    for (auto& rank : started.ranks) rank->kill();
    for (auto& rank : started.ranks)
      while (!rank->poll()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    throw;
  }
  return started;
}

}  // namespace

std::vector<HostEntry> read_hostfile(const std::string& path, uint16_t base_port) {
  std::ifstream in(path);
  if (!in) throw Error(error_message("launch", "cannot read hostfile {}", path));
  std::stringstream text;
  text << in.rdbuf();
  auto endpoints = comm::parse_hostfile(text.str(), base_port);
  // The ssh names: the same entries parse_hostfile read, in the same order.
  std::vector<HostEntry> hosts;
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  const nlohmann::json* list = &doc;
  if (doc.is_object() && doc.contains("hosts")) list = &doc["hosts"];
  for (size_t r = 0; r < endpoints.size(); ++r) {
    HostEntry h;
    h.endpoints = endpoints[r];
    const nlohmann::json& entry = (*list)[r];
    if (entry.is_object() && entry.contains("ssh") && entry["ssh"].is_string()) {
      h.ssh = entry["ssh"].get<std::string>();
    } else {
      h.ssh = host_of(h.endpoints.front());
    }
    // "agent": true (the agent on the host's first address, default port), or "addr[:port]".
    if (entry.is_object() && entry.contains("agent")) {
      const nlohmann::json& agent = entry["agent"];
      if (agent.is_boolean()) {
        if (agent.get<bool>()) h.agent = host_of(h.endpoints.front()) + ":0";
      } else if (agent.is_string() && !agent.get<std::string>().empty()) {
        const std::string a = agent.get<std::string>();
        h.agent = a.find(':') == std::string::npos ? a + ":0" : a;
      } else {
        throw FormatError(error_message("launch", "hostfile host {}: \"agent\" must be true, false or \"address[:port]\"", r));
      }
    }
    hosts.push_back(std::move(h));
  }
  return hosts;
}

int launch_on_hosts(const std::vector<HostEntry>& hosts, const LaunchOptions& options) {
  if (hosts.empty()) throw Error(error_message("launch", "the hostfile lists no hosts"));
  if (options.command.empty()) throw Error(error_message("launch", "no command to run after --"));
  const int world = static_cast<int>(hosts.size());
  if (options.base.backend == comm::Backend::Mpi) {
    // mpirun starts the ranks itself; they learn rank and world from it.
    std::string host_list;
    for (const auto& h : hosts) host_list += (host_list.empty() ? "" : ",") + h.ssh;
    std::vector<std::string> argv = {"mpirun", "-np", std::to_string(world), "--host", host_list, "-x", "ORCHARD_BACKEND=mpi"};
    argv.insert(argv.end(), options.command.begin(), options.command.end());
    std::vector<std::unique_ptr<RankProcess>> mpirun;
    mpirun.push_back(spawn(argv));
    return supervise(mpirun, {"mpirun"});
  }

  const comm::Config config = job_config(hosts, options);
  StartedRanks started = start_ranks(hosts, options, config, 0, false);
  return supervise(started.ranks, started.names, started.ssh_hosts);
}

struct HostedRanks::Watch {
  StartedRanks started;
  std::function<void(int)> on_lost;
  std::mutex mutex;
  bool finishing = false;  // this process's rank is done
  std::chrono::steady_clock::time_point finish_by;
  int result = 0;
  std::thread thread;

  // Like supervise, without touching the signals (Ctrl-C is the command's own) and with this
  // process's rank outside it.
  void run() {
    RankWaits waits(started.ranks);
    bool stopping = false, lost = false;
    while (waits.any_running()) {
      const bool reaped = waits.reap([&](size_t i, const RankEnd& end) {
        std::lock_guard lock(mutex);
        if (end.code != 0 && result == 0 && !stopping) {
          report_failure(started.names[i], end, started.ssh_hosts[i]);
          result = end.code;
          lost = !finishing;
        }
      });
      const auto now = std::chrono::steady_clock::now();
      bool stop = false;
      {
        std::lock_guard lock(mutex);
        stop = !stopping && (result != 0 || (finishing && now >= finish_by));
      }
      if (stop) {
        stopping = true;
        waits.terminate_running(now);
      }
      waits.kill_when_due(now);
      if (!reaped && waits.any_running()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // Only once every other rank has ended: the callback may end this process.
    if (lost && on_lost) on_lost(result);
  }
};

HostedRanks::HostedRanks(const std::vector<HostEntry>& hosts, const LaunchOptions& options, std::function<void(int)> on_lost) {
  if (hosts.empty()) throw Error(error_message("launch", "the hostfile lists no hosts"));
  if (options.command.empty()) throw Error(error_message("launch", "no command to run on the hosts"));
  if (options.base.backend == comm::Backend::Mpi)
    throw Error(error_message("launch", "mpirun starts every rank itself, this process's too: use the ring backend"));
  first_ = job_config(hosts, options);
  watch_ = std::make_unique<Watch>();
  watch_->started = start_ranks(hosts, options, first_, 1, true);
  watch_->on_lost = std::move(on_lost);
  watch_->thread = std::thread([w = watch_.get()] { w->run(); });
}

int HostedRanks::finish(std::chrono::milliseconds grace) {
  if (!watch_->thread.joinable()) return watch_->result;
  {
    std::lock_guard lock(watch_->mutex);
    if (!watch_->finishing) {
      watch_->finishing = true;
      watch_->finish_by = std::chrono::steady_clock::now() + grace;
    }
  }
  watch_->thread.join();
  return watch_->result;
}

HostedRanks::~HostedRanks() {
  if (watch_) finish(std::chrono::milliseconds(0));
}

int launch_local(int world, const LaunchOptions& options) {
  if (world < 1) throw Error(error_message("launch", "-n must be at least 1, got {}", world));
  if (options.command.empty()) throw Error(error_message("launch", "no command to run after --"));
  std::vector<std::string> argv = options.command;
  // "orchard ..." means this very binary, wherever it was started from.
  if (argv[0] == "orchard") argv[0] = comm::current_executable();
  auto exits = comm::exec_local_ranks(world, options.base, argv);
  int result = 0;
  for (const auto& e : exits) {
    if (e.ok()) continue;
    std::fprintf(stderr, "orchard launch: %s\n", e.describe().c_str());
    if (result == 0) result = e.signaled ? 128 + e.code : e.code;
  }
  return result;
}

}  // namespace orchard::parallel

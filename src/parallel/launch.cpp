#include "parallel/launch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
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

// Waits for every rank; after the first failure or an interrupt, stops the rest (SIGTERM,
// then SIGKILL after a grace period).
int supervise(const std::vector<std::unique_ptr<RankProcess>>& ranks, const std::vector<std::string>& names,
              const std::vector<std::string>& ssh_hosts = {}) {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::vector<bool> done(ranks.size(), false);
  size_t remaining = ranks.size();
  int result = 0;
  auto stop_at = std::chrono::steady_clock::time_point::max();
  bool terminated = false;
  while (remaining > 0) {
    bool reaped = false;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (done[i]) continue;
      const std::optional<RankEnd> end = ranks[i]->poll();
      if (!end) continue;
      done[i] = true;
      reaped = true;
      --remaining;
      if (end->code != 0 && result == 0 && !terminated) {
        std::fprintf(stderr, "orchard launch: %s %s; stopping the other ranks\n", names[i].c_str(), end->detail.c_str());
        // ssh exits 255 for its own errors (the rank never ran); orchard never exits 255.
        if (end->code == 255 && i < ssh_hosts.size() && !ssh_hosts[i].empty())
          std::fprintf(stderr,
                       "orchard launch: ssh could not reach %s: check that it runs an ssh server that this user can "
                       "log into without a password (try: ssh -o BatchMode=yes %s true), or run `orchard agent` "
                       "there and let it start the rank (--discover does; in a hostfile: \"agent\": true)\n",
                       ssh_hosts[i].c_str(), ssh_hosts[i].c_str());
        result = end->code;
      }
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const bool failed = result != 0 || g_interrupted;
    if (failed && !terminated) {
      terminated = true;
      if (g_interrupted && result == 0) result = 130;
      for (size_t i = 0; i < ranks.size(); ++i)
        if (!done[i]) ranks[i]->terminate();
      stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    }
    if (std::chrono::steady_clock::now() >= stop_at) {
      for (size_t i = 0; i < ranks.size(); ++i)
        if (!done[i]) ranks[i]->kill();
      stop_at = std::chrono::steady_clock::time_point::max();
    }
  }
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  return result;
}

std::unique_ptr<RankProcess> spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) throw Error(error_message("launch", "fork failed"));
  if (pid == 0) {
    // Its own process group, so a terminal's Ctrl-C reaches the launcher alone and the
    // launcher ends the ranks in order.
    setpgid(0, 0);
    execvp(args[0], args.data());
    std::fprintf(stderr, "orchard launch: cannot run %s\n", args[0]);
    _exit(127);
  }
  return std::make_unique<ChildRank>(pid);
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
  const std::string cwd =
      options.working_directory.empty() ? std::filesystem::current_path().string() : options.working_directory;

  std::vector<std::string> command_words;
  for (const auto& w : options.command) command_words.push_back(shell_quote(w));

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

  comm::Config config = options.base;
  config.world = world;
  config.endpoints.clear();
  for (const auto& h : hosts) config.endpoints.push_back(h.endpoints);
  if (config.secret.empty()) config.secret = comm::random_secret();
  config.listen_fd = -1;

  for (const HostEntry& host : hosts)
    if (!host.local && !host.agent.empty() && !options.start_by_agent)
      throw Error(error_message("launch", "{} is to be started by its agent, and this launcher was given no way to ask "
                                          "agents: give it an \"ssh\" entry instead", host.ssh));
  std::vector<std::unique_ptr<RankProcess>> ranks;
  std::vector<std::string> names, ssh_hosts;
  try {
    for (int r = 0; r < world; ++r) {
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
      if (host.local) ranks.push_back(spawn({"/bin/sh", "-c", remote}));
      else if (by_agent) ranks.push_back(options.start_by_agent(host, rank));
      else ranks.push_back(spawn({options.ssh_command, "-o", "BatchMode=yes", host.ssh, remote}));
      names.push_back("rank " + std::to_string(r) + " (" + host.ssh +
                      (host.local ? ", this machine" : by_agent ? ", by its agent" : "") + ")");
      ssh_hosts.push_back(host.local || by_agent ? "" : host.ssh);
    }
  } catch (...) {
    // A host that could not be asked: the ranks already started must not outlive the job.
    for (auto& rank : ranks) rank->kill();
    for (auto& rank : ranks)
      while (!rank->poll()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    throw;
  }
  return supervise(ranks, names, ssh_hosts);
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

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

// Waits for every child; after the first failure or an interrupt, stops the rest (SIGTERM,
// then SIGKILL after a grace period).
int supervise(const std::vector<pid_t>& pids, const std::vector<std::string>& names,
              const std::vector<std::string>& ssh_hosts = {}) {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::vector<bool> done(pids.size(), false);
  size_t remaining = pids.size();
  int result = 0;
  auto stop_at = std::chrono::steady_clock::time_point::max();
  bool terminated = false;
  while (remaining > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] != pid || done[i]) continue;
        done[i] = true;
        --remaining;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code != 0 && result == 0 && !terminated) {
          std::fprintf(stderr, "orchard launch: %s exited with %s %d; stopping the other ranks\n", names[i].c_str(),
                       WIFEXITED(status) ? "code" : "signal", WIFEXITED(status) ? code : WTERMSIG(status));
          // ssh exits 255 for its own errors (the rank never ran); orchard never exits 255.
          if (WIFEXITED(status) && code == 255 && i < ssh_hosts.size() && !ssh_hosts[i].empty())
            std::fprintf(stderr,
                         "orchard launch: ssh could not reach %s: check that it runs an ssh server that this user can "
                         "log into without a password (try: ssh -o BatchMode=yes %s true)\n",
                         ssh_hosts[i].c_str(), ssh_hosts[i].c_str());
          result = code;
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const bool failed = result != 0 || g_interrupted;
    if (failed && !terminated) {
      terminated = true;
      if (g_interrupted && result == 0) result = 130;
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) kill(pids[i], SIGTERM);
      stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    }
    if (std::chrono::steady_clock::now() >= stop_at) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (!done[i]) kill(pids[i], SIGKILL);
      stop_at = std::chrono::steady_clock::time_point::max();
    }
  }
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  return result;
}

pid_t spawn(const std::vector<std::string>& argv) {
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
  return pid;
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
    return supervise({spawn(argv)}, {"mpirun"});
  }

  comm::Config config = options.base;
  config.world = world;
  config.endpoints.clear();
  for (const auto& h : hosts) config.endpoints.push_back(h.endpoints);
  if (config.secret.empty()) config.secret = comm::random_secret();
  config.listen_fd = -1;

  std::vector<pid_t> pids;
  std::vector<std::string> names, ssh_hosts;
  for (int r = 0; r < world; ++r) {
    const HostEntry& host = hosts[static_cast<size_t>(r)];
    config.rank = r;
    std::string remote = "cd " + shell_quote(cwd) + " && exec env";
    for (const auto& [key, value] : comm::config_to_env(config)) {
      if (key == "ORCHARD_LISTEN_FD") continue;
      remote += " " + key + "=" + shell_quote(value);
    }
    for (const auto& w : command_words) remote += " " + w;
    // The same command line either way, so a rank here sees what a remote one sees.
    pids.push_back(host.local ? spawn({"/bin/sh", "-c", remote})
                              : spawn({options.ssh_command, "-o", "BatchMode=yes", host.ssh, remote}));
    names.push_back("rank " + std::to_string(r) + " (" + host.ssh + (host.local ? ", this machine" : "") + ")");
    ssh_hosts.push_back(host.local ? "" : host.ssh);
  }
  return supervise(pids, names, ssh_hosts);
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

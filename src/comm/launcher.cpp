#include "comm/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "comm/bootstrap.h"
#include "comm/transport/tcp/socket.h"

#if defined(__linux__)
#include <sched.h>
#include <sys/prctl.h>
#elif defined(__APPLE__)
#include <mach-o/dyld.h>
#endif

namespace orchard::comm {
namespace {

// Per-rank configs; ring ranks each get a listening socket on 127.0.0.1 (kept open in the
// parent until the children have inherited it).
std::vector<Config> local_configs(int world, const Config& base, std::vector<tcp::Fd>& listeners) {
  std::vector<Config> configs(static_cast<size_t>(world), base);
  const std::string secret = base.secret.empty() ? random_secret() : base.secret;
  std::vector<std::vector<std::string>> endpoints;
  if (base.backend == Backend::Ring && world > 1) {
    for (int r = 0; r < world; ++r) {
      listeners.push_back(tcp::listen_on("127.0.0.1", 0));
      endpoints.push_back({fmt::format("127.0.0.1:{}", tcp::local_port(listeners.back().get()))});
    }
  }
  for (int r = 0; r < world; ++r) {
    Config& c = configs[static_cast<size_t>(r)];
    c.rank = r;
    c.world = world;
    c.secret = secret;
    c.endpoints = endpoints;
    c.listen_fd = listeners.empty() ? -1 : listeners[static_cast<size_t>(r)].get();
  }
  return configs;
}

// In a child: keep only this rank's listening socket, die with the parent where possible.
void prepare_child(std::vector<tcp::Fd>& listeners, int rank, const LocalLaunchOptions& options) {
#if defined(__linux__)
  prctl(PR_SET_PDEATHSIG, SIGKILL);
#else
  // No parent-death signal here (macOS): a watchdog ends the rank once the launcher is gone
  // and the rank has been re-parented. (An exec'd rank loses this thread: see docs/comm.md.)
  std::thread([parent = getppid()] {
    sigset_t all;  // signals are the rank's own threads' business
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    while (getppid() == parent) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    _exit(1);
  }).detach();
#endif
  for (size_t i = 0; i < listeners.size(); ++i) {
    if (static_cast<int>(i) != rank) listeners[i].reset();
  }
  if (options.pin_cpus) pin_to_cpu(rank);
}

volatile sig_atomic_t g_forwarded_signal = 0;
void record_signal(int signal) { g_forwarded_signal = signal; }

// While the launcher waits, SIGINT/SIGTERM/SIGHUP sent to it alone (a service manager, `kill`)
// go on to the ranks, which stop in their own way; the launcher then waits for them as usual.
class SignalForwarding {
 public:
  SignalForwarding() {
    g_forwarded_signal = 0;
    struct sigaction action {};
    action.sa_handler = record_signal;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &action, &previous_[i]);
  }
  ~SignalForwarding() {
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
  }
  // The signal received since the last call, or 0.
  int take() {
    const int signal = g_forwarded_signal;
    g_forwarded_signal = 0;
    return signal;
  }

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> previous_{};
};

std::vector<RankExit> wait_all(const std::vector<pid_t>& pids, const Config& base, const LocalLaunchOptions& options) {
  SignalForwarding forwarding;
  std::vector<RankExit> exits(pids.size());
  std::vector<bool> done(pids.size(), false);
  size_t running = pids.size();
  const auto grace = options.grace.count() > 0 ? options.grace : base.timeout + std::chrono::seconds(5);
  std::chrono::steady_clock::time_point kill_at = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    if (const int signal = forwarding.take(); signal == SIGINT && options.ranks_take_interrupt) {
      // Rank 0's to handle, whether it came to the launcher alone or to the terminal's group.
      if (!done[0]) ::kill(pids[0], SIGINT);
    } else if (signal) {
      for (size_t r = 0; r < pids.size(); ++r)
        if (!done[r]) ::kill(pids[r], signal);
      if (kill_at == std::chrono::steady_clock::time_point::max()) kill_at = std::chrono::steady_clock::now() + grace;
    }
    bool reaped = false;
    for (size_t r = 0; r < pids.size(); ++r) {
      if (done[r]) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      done[r] = true;
      reaped = true;
      --running;
      exits[r].rank = static_cast<int>(r);
      exits[r].signaled = WIFSIGNALED(status);
      exits[r].code = exits[r].signaled ? WTERMSIG(status) : WEXITSTATUS(status);
      if (!exits[r].ok() && kill_at == std::chrono::steady_clock::time_point::max()) {
        kill_at = std::chrono::steady_clock::now() + grace;
      }
    }
    if (std::chrono::steady_clock::now() >= kill_at) {
      for (size_t r = 0; r < pids.size(); ++r) {
        if (!done[r]) ::kill(pids[r], SIGKILL);
      }
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return exits;
}

}  // namespace

std::string RankExit::describe() const {
  if (signaled) return fmt::format("rank {} killed by signal {}", rank, code);
  return fmt::format("rank {} exited with {}", rank, code);
}

std::vector<RankExit> spawn_local_ranks(int world, const Config& base, const std::function<void(Group&)>& fn,
                                        const LocalLaunchOptions& options) {
  ORCHARD_CHECK(base.backend != Backend::Mpi, "spawn_local_ranks cannot start MPI ranks: use mpirun");
  std::vector<tcp::Fd> listeners;
  const auto configs = local_configs(world, base, listeners);
  std::fflush(nullptr);  // or buffered output would be written once per child
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      throw Error(error_message("comm", "fork failed for rank {}", r));
    }
    if (pid == 0) {
      int code = 0;
      try {
        prepare_child(listeners, r, options);
        Group group = init(configs[static_cast<size_t>(r)]);
        fn(group);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);  // no atexit handlers of the parent (test frameworks) in the child
    }
    pids.push_back(pid);
  }
  listeners.clear();
  return wait_all(pids, base, options);
}

std::vector<RankExit> exec_local_ranks(int world, const Config& base, const std::vector<std::string>& argv,
                                       const LocalLaunchOptions& options) {
  std::vector<tcp::Fd> listeners;
  const auto configs = local_configs(world, base, listeners);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      throw Error(error_message("comm", "fork failed for rank {}", r));
    }
    if (pid == 0) {
      prepare_child(listeners, r, options);
      ::unsetenv("ORCHARD_HOSTFILE");
      for (const auto& [k, v] : config_to_env(configs[static_cast<size_t>(r)])) ::setenv(k.c_str(), v.c_str(), 1);
      // A command named without a slash is looked up on PATH, as mpirun and mlx.launch do.
      ::execvp(args[0], args.data());
      std::fprintf(stderr, "rank %d: cannot exec %s: %s\n", r, args[0], std::strerror(errno));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  listeners.clear();
  return wait_all(pids, base, options);
}

std::string current_executable() {
#if defined(__APPLE__)
  char path[4096];
  uint32_t size = sizeof path;
  if (_NSGetExecutablePath(path, &size) == 0) return path;
  return {};
#else
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
#endif
}

void exit_when_watched_pipe_closes() {
  const char* text = std::getenv("ORCHARD_WATCH_FD");
  if (!text) return;
  const int fd = std::atoi(text);
  ::unsetenv("ORCHARD_WATCH_FD");  // not for the processes this one starts
  if (fd < 3 || ::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) return;
  std::thread([fd] {
    sigset_t all;  // signals are the rank's own threads' business
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, -1) < 0 && errno == EINTR) continue;
      char byte;
      if (::read(fd, &byte, 1) > 0) continue;  // nobody writes: only the end counts
      static const char kGone[] = "orchard: the agent that started this rank is gone; exiting\n";
      [[maybe_unused]] ssize_t n = ::write(2, kGone, sizeof kGone - 1);
      ::_exit(1);
    }
  }).detach();
}

void pin_to_cpu([[maybe_unused]] int index) {
#if defined(__linux__)
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<int>(index % (cores > 0 ? cores : 1)), &set);
  sched_setaffinity(0, sizeof set, &set);
#endif
}

}  // namespace orchard::comm

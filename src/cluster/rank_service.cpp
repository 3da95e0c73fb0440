#include "cluster/rank_service.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include "cluster/discovery.h"
#include "cluster/link_probe.h"
#include "core/error.h"

#if defined(__linux__)
#include <sys/prctl.h>
#endif

extern char** environ;

namespace orchard::cluster {
namespace {

namespace tcp = comm::tcp;
using namespace std::chrono_literals;

// The subcommands a rank runs: an agent starts ranks of jobs (a split run, server or chat, whose
// rank 0 is the terminal's and the rest follow it; a network pod's member), not arbitrary
// commands.
bool is_rank_command(const std::vector<std::string>& args) {
  return args[0] == "run" || args[0] == "serve" || args[0] == "chat" ||
         (args[0] == "node" && args.size() > 1 && args[1] == "pod-rank");
}

constexpr size_t kNonceBytes = crypto_aead_xchacha20poly1305_ietf_NPUBBYTES;
constexpr size_t kTagBytes = crypto_aead_xchacha20poly1305_ietf_ABYTES;

// One key per purpose, so a sealed request can never be taken for a sealed frame or back.
std::vector<uint8_t> derive_key(const std::string& purpose, const std::string& cluster, const std::string& secret) {
  static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == kMacBytes);
  const std::string label = purpose + cluster;
  return hmac_sha256(secret, std::span(reinterpret_cast<const uint8_t*>(label.data()), label.size()));
}

std::vector<uint8_t> request_key(const std::string& cluster, const std::string& secret) {
  return derive_key("orchard start request", cluster, secret);
}

std::vector<uint8_t> associated_data(const std::string& cluster, const uint8_t (&challenge)[kChallengeBytes]) {
  std::vector<uint8_t> data(cluster.begin(), cluster.end());
  data.insert(data.end(), challenge, challenge + kChallengeBytes);
  return data;
}

void init_sodium() {
  if (sodium_init() < 0) throw Error(error_message("cluster", "libsodium failed to initialise"));
}

// The request inside `sealed`; nullopt when it was not sealed for this cluster, secret and challenge.
std::optional<std::string> open_start_request(const std::string& cluster, const std::string& secret,
                                              const uint8_t (&challenge)[kChallengeBytes], const std::vector<uint8_t>& sealed) {
  if (sealed.size() < kNonceBytes + kTagBytes) return std::nullopt;
  init_sodium();
  const std::vector<uint8_t> key = request_key(cluster, secret), ad = associated_data(cluster, challenge);
  std::string request(sealed.size() - kNonceBytes - kTagBytes, '\0');
  unsigned long long length = 0;
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(reinterpret_cast<uint8_t*>(request.data()), &length, nullptr,
                                                 sealed.data() + kNonceBytes, sealed.size() - kNonceBytes, ad.data(),
                                                 ad.size(), sealed.data(), key.data()) != 0)
    return std::nullopt;
  request.resize(length);
  return request;
}

// A frame goes out in one write: a peer that has just closed its end answers the first write
// with a reset, on which a second write of the same frame would fail while the last frames the
// peer sent (a rank's exit) still wait to be read.
void send_frame(int fd, uint32_t kind, const void* data, size_t bytes, const std::string& peer) {
  const FrameHeader h{kind, static_cast<uint32_t>(bytes)};
  std::vector<uint8_t> frame(sizeof h + bytes);
  std::memcpy(frame.data(), &h, sizeof h);
  if (bytes > 0) std::memcpy(frame.data() + sizeof h, data, bytes);
  tcp::write_exact(fd, frame.data(), frame.size(), tcp::Clock::now() + kRankSilenceLimit, peer);
}

// Frames in clear: only refusals, which the agent may send before it knows the requester holds
// the secret, and which say nothing of the job.
void send_frame(int fd, FrameKind kind, const std::string& text, const std::string& peer) {
  send_frame(fd, static_cast<uint32_t>(kind), text.data(), text.size(), peer);
}

// Every frame after an accepted request is sealed: the agent's (kStarted, output, heartbeats,
// kExit) with the output key, the requester's (heartbeats, stop) with the control key. Its
// associated data, the cluster || the challenge || kind || its number in its direction's stream,
// ties it to this connection and this place in it, so a relay can neither read the rank's output
// (which may hold the text of the job) nor forge, replay, reorder, drop or relabel frames unseen.
class FrameSealer {
 public:
  FrameSealer(const std::string& purpose, const std::string& cluster, const std::string& secret,
              const uint8_t (&challenge)[kChallengeBytes])
      : key_(derive_key(purpose, cluster, secret)), prefix_(associated_data(cluster, challenge)) {}

  std::vector<uint8_t> seal(uint32_t kind, const void* data, size_t bytes) {
    const std::vector<uint8_t> ad = next_ad(kind);
    std::vector<uint8_t> sealed(kNonceBytes + bytes + kTagBytes);
    randombytes_buf(sealed.data(), kNonceBytes);
    unsigned long long length = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(sealed.data() + kNonceBytes, &length, static_cast<const uint8_t*>(data),
                                               bytes, ad.data(), ad.size(), nullptr, sealed.data(), key_.data());
    sealed.resize(kNonceBytes + length);
    return sealed;
  }

  std::optional<std::string> open(uint32_t kind, const std::string& sealed) {
    if (sealed.size() < kNonceBytes + kTagBytes) return std::nullopt;
    const std::vector<uint8_t> ad = next_ad(kind);
    const auto* bytes = reinterpret_cast<const uint8_t*>(sealed.data());
    std::string plain(sealed.size() - kNonceBytes - kTagBytes, '\0');
    unsigned long long length = 0;
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(reinterpret_cast<uint8_t*>(plain.data()), &length, nullptr,
                                                   bytes + kNonceBytes, sealed.size() - kNonceBytes, ad.data(),
                                                   ad.size(), bytes, key_.data()) != 0)
      return std::nullopt;
    plain.resize(length);
    return plain;
  }

 private:
  std::vector<uint8_t> next_ad(uint32_t kind) {
    std::vector<uint8_t> ad = prefix_;
    const uint64_t n = count_++;
    for (int i = 0; i < 4; ++i) ad.push_back(static_cast<uint8_t>(kind >> (8 * i)));
    for (int i = 0; i < 8; ++i) ad.push_back(static_cast<uint8_t>(n >> (8 * i)));
    return ad;
  }

  std::vector<uint8_t> key_, prefix_;
  uint64_t count_ = 0;
};

FrameSealer output_sealer(const std::string& cluster, const std::string& secret, const uint8_t (&challenge)[kChallengeBytes]) {
  return FrameSealer("orchard rank output", cluster, secret, challenge);
}

FrameSealer control_sealer(const std::string& cluster, const std::string& secret, const uint8_t (&challenge)[kChallengeBytes]) {
  return FrameSealer("orchard rank control", cluster, secret, challenge);
}

void send_sealed(int fd, FrameSealer& sealer, uint32_t kind, const void* data, size_t bytes, const std::string& peer) {
  const std::vector<uint8_t> sealed = sealer.seal(kind, data, bytes);
  send_frame(fd, kind, sealed.data(), sealed.size(), peer);
}

void send_sealed(int fd, FrameSealer& sealer, FrameKind kind, const void* data, size_t bytes, const std::string& peer) {
  send_sealed(fd, sealer, static_cast<uint32_t>(kind), data, bytes, peer);
}

void send_sealed(int fd, FrameSealer& sealer, FrameKind kind, const std::string& text, const std::string& peer) {
  send_sealed(fd, sealer, kind, text.data(), text.size(), peer);
}

void send_control(int fd, FrameSealer& sealer, ControlKind kind, const std::string& peer) {
  send_sealed(fd, sealer, static_cast<uint32_t>(kind), nullptr, 0, peer);
}

// What the requester asked for, checked: a subcommand that runs a rank, comm's environment.
struct StartRequest {
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string cwd;
};

StartRequest parse_request(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("args") || !j["args"].is_array() || j["args"].empty())
    throw Error(error_message("cluster", "the start request is not a JSON object with \"args\""));
  StartRequest r;
  for (const auto& a : j["args"]) {
    if (!a.is_string()) throw Error(error_message("cluster", "the start request's args must be strings"));
    r.args.push_back(a.get<std::string>());
  }
  if (!is_rank_command(r.args))
    throw Error(error_message("cluster", "an agent starts ranks of `run`, `serve`, `chat` and `node pod-rank`, not `{}`",
                              r.args[0] + (r.args.size() > 1 && r.args[0] == "node" ? " " + r.args[1] : "")));
  if (j.contains("env")) {
    if (!j["env"].is_object()) throw Error(error_message("cluster", "the start request's env must be an object"));
    for (const auto& [key, value] : j["env"].items()) {
      // Only the job's own variables: PATH, LD_PRELOAD and the like stay the agent's.
      if (key.rfind("ORCHARD_", 0) != 0 || !value.is_string())
        throw Error(error_message("cluster", "the start request may set ORCHARD_* variables to strings, not '{}'", key));
      r.env.emplace_back(key, value.get<std::string>());
    }
  }
  if (j.contains("cwd") && j["cwd"].is_string()) r.cwd = j["cwd"].get<std::string>();
  return r;
}

struct Child {
  pid_t pid = -1;
  int out = -1, err = -1;  // read ends of its stdout and stderr
  int watch = -1;          // write end of a pipe it watches: it ends when the agent does
};

// Starts the rank. Everything is prepared before fork: the agent has threads, and a forked
// child may only make async-signal-safe calls until it execs.
Child start_child(const RankServiceOptions& options, const StartRequest& request) {
  std::vector<std::string> args = {options.executable};
  args.insert(args.end(), request.args.begin(), request.args.end());
  std::vector<std::string> env;
  std::set<std::string> replaced = {"ORCHARD_HOSTFILE", "ORCHARD_WATCH_FD"};
  for (const auto& [key, value] : request.env) replaced.insert(key);
  if (!options.cache_dir.empty()) replaced.insert("ORCHARD_CACHE_DIR");
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (!replaced.count(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [key, value] : request.env) env.push_back(key + "=" + value);
  if (!options.cache_dir.empty()) env.push_back("ORCHARD_CACHE_DIR=" + options.cache_dir);
  constexpr int kWatchFd = 3;  // where the child finds the watched pipe
  env.push_back("ORCHARD_WATCH_FD=" + std::to_string(kWatchFd));
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  // A working directory that does not exist here (the requester's) leaves the agent's: the
  // rank then receives the model it lacks from rank 0.
  std::error_code ec;
  const bool has_cwd = !request.cwd.empty() && std::filesystem::is_directory(request.cwd, ec);
  const long max_fd = std::min<long>(::sysconf(_SC_OPEN_MAX) > 0 ? ::sysconf(_SC_OPEN_MAX) : 1024, 65536);

  int out[2], err[2], watch[2];
  if (::pipe(out) != 0 || ::pipe(err) != 0 || ::pipe(watch) != 0)
    throw Error(error_message("cluster", "cannot make pipes for a rank: {}", std::strerror(errno)));
  const int dev_null = ::open("/dev/null", O_RDONLY);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(error_message("cluster", "cannot fork a rank: {}", std::strerror(errno)));
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: stopping it reaches whatever it starts
#if defined(__linux__)
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // faster than the watched pipe where the OS offers it
#endif
    // Signals the agent ignores or catches would otherwise stay so in the rank.
    ::signal(SIGPIPE, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(dev_null, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::dup2(watch[0], kWatchFd);
    for (long fd = kWatchFd + 1; fd < max_fd; ++fd) ::close(static_cast<int>(fd));
    if (has_cwd && ::chdir(request.cwd.c_str()) != 0) ::_exit(126);
    ::execve(argv[0], argv.data(), envp.data());
    static const char kCannotExec[] = "orchard agent: cannot exec the rank\n";
    [[maybe_unused]] ssize_t n = ::write(2, kCannotExec, sizeof kCannotExec - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // as the child does: a stop sent before the child ran still reaches its group
  if (dev_null >= 0) ::close(dev_null);
  ::close(out[1]);
  ::close(err[1]);
  ::close(watch[0]);
  for (int fd : {out[0], err[0], watch[1]}) ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // not into the next rank
  return Child{pid, out[0], err[0], watch[1]};
}

// Streams the child's output to the requester until it has ended; stops it when the requester
// goes away or asks, or when the agent stops. Throws Error, once the child is reaped, when the
// requester's side carried a frame that does not open with the control key at its place.
void stream_child(int sock, const std::string& peer, Child child, FrameSealer& sealer, FrameSealer& control,
                  const std::atomic<bool>& stop) {
  bool requester = true;  // still there to be written to
  bool stopping = false;
  std::string received;  // the requester's bytes not yet read as whole frames
  std::string refused;   // why its side of the connection is not to be trusted
  auto kill_at = tcp::Clock::time_point::max();
  auto last_heard = tcp::Clock::now(), next_beat = tcp::Clock::now() + 1s;
  auto stop_child = [&](const char* why) {
    if (stopping) return;
    stopping = true;
    spdlog::info("[cluster] stopping rank {} of {}: {}", child.pid, peer, why);
    ::kill(-child.pid, SIGTERM);
    kill_at = tcp::Clock::now() + 3s;
  };
  auto lose_requester = [&](const char* why) {
    requester = false;
    stop_child(why);
  };
  // A frame that does not open was forged, replayed, reordered or damaged on the way: the
  // connection no longer speaks for the requester, so the rank stops as if it had dropped, and
  // nothing the frame claims (a heartbeat, a stop) is believed.
  auto refuse = [&](std::string why) {
    refused = std::move(why);
    lose_requester("a frame on its connection failed authentication");
  };
  auto read_control = [&] {
    while (requester && received.size() >= sizeof(FrameHeader)) {
      FrameHeader h{};
      std::memcpy(&h, received.data(), sizeof h);
      if (h.bytes > kMaxControlBytes) return refuse(fmt::format("a frame of {} bytes (limit {})", h.bytes, kMaxControlBytes));
      if (received.size() < sizeof h + h.bytes) return;
      const bool opened = control.open(h.kind, received.substr(sizeof h, h.bytes)).has_value();
      received.erase(0, sizeof h + h.bytes);
      if (!opened)
        return refuse(fmt::format("a frame (kind {}) not sealed with the cluster secret for this connection: forged, "
                                  "replayed or reordered on the way",
                                  h.kind));
      last_heard = tcp::Clock::now();
      if (h.kind == static_cast<uint32_t>(ControlKind::kStop)) stop_child("the requester asked");
    }
  };
  auto forward = [&](int& fd, FrameKind kind) {
    char buffer[65536];
    static_assert(sizeof buffer + kNonceBytes + kTagBytes <= kMaxFrameBytes, "a sealed read must fit one frame");
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      ::close(fd);
      fd = -1;
      return;
    }
    if (!requester) return;
    try {
      send_sealed(sock, sealer, kind, buffer, static_cast<size_t>(n), peer);
    } catch (const Error&) {
      lose_requester("the requester stopped reading");
    }
  };
  int status = 0;
  bool exited = false;
  auto drain_until = tcp::Clock::time_point::max();
  while (child.out >= 0 || child.err >= 0 || !exited) {
    if (stop && !stopping) stop_child("the agent is stopping");
    if (tcp::Clock::now() >= kill_at) {
      ::kill(-child.pid, SIGKILL);
      kill_at = tcp::Clock::time_point::max();
    }
    if (!exited && ::waitpid(child.pid, &status, WNOHANG) == child.pid) {
      exited = true;
      drain_until = tcp::Clock::now() + 1s;  // a process of its group may hold the pipes open
    }
    if (exited && tcp::Clock::now() >= drain_until) break;
    pollfd fds[3] = {{requester ? sock : -1, POLLIN, 0}, {child.out, POLLIN, 0}, {child.err, POLLIN, 0}};
    const int ready = ::poll(fds, 3, 200);
    if (ready < 0 && errno != EINTR) throw Error(error_message("cluster", "poll while running a rank: {}", std::strerror(errno)));
    if (requester && ready > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      char bytes[256];
      const ssize_t n = ::recv(sock, bytes, sizeof bytes, 0);
      if (n <= 0) {
        lose_requester("the requester closed the connection");
      } else {
        received.append(bytes, static_cast<size_t>(n));
        read_control();
      }
    }
    if (ready > 0 && child.out >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) forward(child.out, FrameKind::kStdout);
    if (ready > 0 && child.err >= 0 && (fds[2].revents & (POLLIN | POLLHUP | POLLERR))) forward(child.err, FrameKind::kStderr);
    if (requester && tcp::Clock::now() - last_heard > kRankSilenceLimit) lose_requester("the requester fell silent");
    if (requester && tcp::Clock::now() >= next_beat) {
      try {
        send_sealed(sock, sealer, FrameKind::kHeartbeat, nullptr, 0, peer);
      } catch (const Error&) {
        lose_requester("the requester stopped reading");
      }
      next_beat = tcp::Clock::now() + 1s;
    }
  }
  for (int fd : {child.out, child.err}) if (fd >= 0) ::close(fd);
  if (!exited) {
    ::kill(-child.pid, SIGKILL);
    ::waitpid(child.pid, &status, 0);
  }
  ::close(child.watch);
  const bool signaled = WIFSIGNALED(status);
  const int code = signaled ? WTERMSIG(status) : WEXITSTATUS(status);
  spdlog::info("[cluster] rank {} of {} {} {}", child.pid, peer, signaled ? "ended by signal" : "exited with code", code);
  if (requester) send_sealed(sock, sealer, FrameKind::kExit, nlohmann::json{{"code", code}, {"signaled", signaled}}.dump(), peer);
  if (!refused.empty())
    throw Error(error_message("cluster", "{} sent {}; stopped its rank {}", peer, refused, child.pid));
}

// A rank an agent runs for this process.
class AgentRank : public parallel::RankProcess {
 public:
  AgentRank(tcp::Fd fd, std::string machine, std::string peer, FrameSealer sealer, FrameSealer control)
      : fd_(std::move(fd)), machine_(std::move(machine)), peer_(std::move(peer)), sealer_(std::move(sealer)),
        control_(std::move(control)) {
    thread_ = std::thread([this] { follow(); });
  }
  ~AgentRank() override {
    kill();
    if (thread_.joinable()) thread_.join();
  }

  std::optional<parallel::RankEnd> poll() override {
    if (!done_) return std::nullopt;
    if (thread_.joinable()) thread_.join();
    return end_;
  }
  void terminate() override { stop_requested_ = true; }
  void kill() override {
    if (killed_.exchange(true)) return;
    ::shutdown(fd_.get(), SHUT_RDWR);  // the agent sees the connection drop and ends the rank
  }

 private:
  void follow() {
    try {
      end_ = run();
    } catch (const Error& e) {
      if (killed_) end_ = {137, "was killed (its agent's connection was closed)"};
      else end_ = {1, fmt::format("lost: the agent on {} went away ({})", machine_, e.what())};
    }
    done_ = true;
  }

  parallel::RankEnd run() {
    auto last_heard = tcp::Clock::now(), next_beat = tcp::Clock::now();
    bool stop_sent = false;
    for (;;) {
      if (stop_requested_ && !stop_sent) {
        send_control(fd_.get(), control_, ControlKind::kStop, peer_);
        stop_sent = true;
      }
      if (tcp::Clock::now() >= next_beat) {
        send_control(fd_.get(), control_, ControlKind::kHeartbeat, peer_);
        next_beat = tcp::Clock::now() + 1s;
      }
      pollfd p{fd_.get(), POLLIN, 0};
      const int ready = ::poll(&p, 1, 200);
      if (ready < 0 && errno != EINTR) throw Error(error_message("cluster", "poll on {}: {}", peer_, std::strerror(errno)));
      if (ready <= 0) {
        if (tcp::Clock::now() - last_heard > kRankSilenceLimit)
          throw TimeoutError(error_message("cluster", "{} sent nothing for {} s", peer_, kRankSilenceLimit.count() / 1000));
        continue;
      }
      const auto deadline = tcp::Clock::now() + kRankSilenceLimit;
      FrameHeader h{};
      tcp::read_exact(fd_.get(), &h, sizeof h, deadline, peer_);
      if (h.bytes > kMaxFrameBytes)
        throw FormatError(error_message("cluster", "{} sent a frame of {} bytes (limit {})", peer_, h.bytes, kMaxFrameBytes));
      std::string sealed(h.bytes, '\0');
      tcp::read_exact(fd_.get(), sealed.data(), sealed.size(), deadline, peer_);
      last_heard = tcp::Clock::now();
      const std::optional<std::string> opened = sealer_.open(h.kind, sealed);
      if (!opened)
        throw FormatError(error_message("cluster", "{} sent a frame (kind {}) not sealed with the cluster secret for this "
                                        "connection: forged, replayed or reordered on the way",
                                        peer_, h.kind));
      const std::string& payload = *opened;
      switch (static_cast<FrameKind>(h.kind)) {
        case FrameKind::kStdout:
        case FrameKind::kStderr: {
          const int to = static_cast<FrameKind>(h.kind) == FrameKind::kStdout ? 1 : 2;
          for (size_t done = 0; done < payload.size();) {
            const ssize_t n = ::write(to, payload.data() + done, payload.size() - done);
            if (n <= 0 && errno != EINTR) break;  // our own output closed: the rank's is lost, not the job
            if (n > 0) done += static_cast<size_t>(n);
          }
          break;
        }
        case FrameKind::kExit: {
          const nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
          if (!j.is_object() || !j.contains("code") || !j["code"].is_number_integer())
            throw FormatError(error_message("cluster", "{} sent an exit status that is not JSON: {}", peer_, payload));
          const int code = j["code"].get<int>();
          if (j.value("signaled", false)) return {128 + code, fmt::format("exited with signal {}", code)};
          return {code, fmt::format("exited with code {}", code)};
        }
        default:
          break;  // kStarted, kHeartbeat
      }
    }
  }

  tcp::Fd fd_;
  std::string machine_, peer_;
  std::thread thread_;
  FrameSealer sealer_, control_;  // the agent's frames to us, ours to it
  std::atomic<bool> done_{false}, stop_requested_{false}, killed_{false};
  parallel::RankEnd end_;
};

}  // namespace

std::vector<uint8_t> seal_start_request(const std::string& cluster, const std::string& secret,
                                        const uint8_t (&challenge)[kChallengeBytes], const std::string& request) {
  init_sodium();
  const std::vector<uint8_t> key = request_key(cluster, secret), ad = associated_data(cluster, challenge);
  std::vector<uint8_t> sealed(kNonceBytes + request.size() + kTagBytes);
  randombytes_buf(sealed.data(), kNonceBytes);
  unsigned long long length = 0;
  crypto_aead_xchacha20poly1305_ietf_encrypt(sealed.data() + kNonceBytes, &length, reinterpret_cast<const uint8_t*>(request.data()),
                                             request.size(), ad.data(), ad.size(), nullptr, sealed.data(), key.data());
  sealed.resize(kNonceBytes + length);
  return sealed;
}

void serve_rank_start(tcp::Fd fd, const std::string& from, const RankServiceOptions& options,
                      const std::atomic<bool>& stop) {
  const std::string peer = "rank requester " + from;
  const auto deadline = tcp::Clock::now() + 5s;
  uint8_t challenge[kChallengeBytes];
  if (RAND_bytes(challenge, sizeof challenge) != 1) throw Error(error_message("cluster", "no random bytes for a challenge"));
  tcp::write_exact(fd.get(), challenge, sizeof challenge, deadline, peer);
  uint32_t length = 0;
  tcp::read_exact(fd.get(), &length, sizeof length, deadline, peer);
  if (length > kMaxStartRequestBytes) {
    send_frame(fd.get(), FrameKind::kRefused, fmt::format("a start request of {} bytes (limit {})", length, kMaxStartRequestBytes), peer);
    throw Error(error_message("cluster", "refused {}: a start request of {} bytes", peer, length));
  }
  std::vector<uint8_t> sealed(length);
  tcp::read_exact(fd.get(), sealed.data(), length, deadline, peer);
  const std::optional<std::string> request = open_start_request(options.cluster, options.secret, challenge, sealed);
  if (!request) {
    send_frame(fd.get(), FrameKind::kRefused, "the start request is not sealed with this cluster's secret", peer);
    throw Error(error_message("cluster", "refused to start a rank for {}: the request is not sealed with the cluster secret", peer));
  }
  StartRequest parsed;
  Child child;
  try {
    parsed = parse_request(*request);
    child = start_child(options, parsed);
  } catch (const Error& e) {
    send_frame(fd.get(), FrameKind::kRefused, e.what(), peer);
    throw;
  }
  spdlog::info("[cluster] started rank {} for {}: {}", child.pid, from, parsed.args[0]);
  FrameSealer sealer = output_sealer(options.cluster, options.secret, challenge);
  FrameSealer control = control_sealer(options.cluster, options.secret, challenge);
  try {
    send_sealed(fd.get(), sealer, FrameKind::kStarted, std::to_string(child.pid), peer);
  } catch (const Error&) {
    // Gone already: stream_child notices at once and stops the rank.
  }
  stream_child(fd.get(), peer, child, sealer, control, stop);
}

std::unique_ptr<parallel::RankProcess> start_rank_by_agent(const std::string& agent, const std::string& machine,
                                                           const std::string& cluster, const std::string& secret,
                                                           const parallel::RankCommand& rank) {
  const tcp::Endpoint endpoint = tcp::parse_endpoint(agent);
  const std::string peer = fmt::format("the agent on {} ({})", machine, agent);
  const auto deadline = tcp::Clock::now() + 10s;
  tcp::Fd fd = open_agent_request("", endpoint.host, endpoint.port, cluster, secret, kOpStart, 0, deadline);
  uint8_t challenge[kChallengeBytes];
  tcp::read_exact(fd.get(), challenge, sizeof challenge, deadline, peer);
  nlohmann::json request{{"args", std::vector<std::string>(rank.command.begin() + (rank.command.empty() ? 0 : 1), rank.command.end())},
                         {"env", nlohmann::json::object()},
                         {"cwd", rank.working_directory}};
  for (const auto& [key, value] : rank.env) request["env"][key] = value;
  const std::vector<uint8_t> sealed = seal_start_request(cluster, secret, challenge, request.dump());
  if (sealed.size() > kMaxStartRequestBytes)
    throw Error(error_message("cluster", "the start request for {} is {} bytes (limit {})", machine, sealed.size(), kMaxStartRequestBytes));
  const uint32_t length = static_cast<uint32_t>(sealed.size());
  tcp::write_exact(fd.get(), &length, sizeof length, deadline, peer);
  tcp::write_exact(fd.get(), sealed.data(), sealed.size(), deadline, peer);
  FrameHeader h{};
  tcp::read_exact(fd.get(), &h, sizeof h, deadline, peer);
  if (h.bytes > kMaxFrameBytes)
    throw FormatError(error_message("cluster", "{} sent a frame of {} bytes (limit {})", peer, h.bytes, kMaxFrameBytes));
  std::string payload(h.bytes, '\0');
  tcp::read_exact(fd.get(), payload.data(), payload.size(), deadline, peer);
  if (static_cast<FrameKind>(h.kind) == FrameKind::kRefused)
    throw Error(error_message("cluster", "{} refused to start the rank: {}", peer, payload));
  if (static_cast<FrameKind>(h.kind) != FrameKind::kStarted)
    throw FormatError(error_message("cluster", "{} answered a start request with frame kind {}", peer, h.kind));
  FrameSealer sealer = output_sealer(cluster, secret, challenge);
  if (!sealer.open(h.kind, payload))
    throw FormatError(error_message("cluster", "{} answered the start request with a frame not sealed with the cluster secret",
                                    peer));
  return std::make_unique<AgentRank>(std::move(fd), machine, peer, std::move(sealer), control_sealer(cluster, secret, challenge));
}

}  // namespace orchard::cluster

// An agent's rank service on a loopback port, with a shell script standing in for the orchard
// binary: what it runs, what it refuses (another secret, a replayed request, a command that is
// not a rank's, a requester's frame forged, replayed or damaged by a relay), and that a rank
// ends when its requester goes away or asks.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "cluster/discovery.h"
#include "cluster/link_probe.h"
#include "cluster/rank_service.h"
#include "core/error.h"
#include <spdlog/spdlog.h>

namespace orchard::cluster {
namespace {

namespace tcp = comm::tcp;
using namespace std::chrono_literals;

// What anything on the LAN's path between a requester and the agent can do: it forwards one
// connection both ways and records what each side sends; the test may hold the requester's bytes
// back (still recording them), so the agent hears only what the test writes to it.
class Relay {
 public:
  explicit Relay(uint16_t agent_port) : listener_(tcp::listen_on("127.0.0.1", 0)) {
    thread_ = std::thread([this, agent_port] { run(agent_port); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(tcp::local_port(listener_.get())); }
  std::string from_requester() const {
    std::lock_guard lock(mutex_);
    return from_requester_;
  }
  std::string from_agent() const {
    std::lock_guard lock(mutex_);
    return from_agent_;
  }
  // From now on the requester's bytes stop here; returns those that reached the agent.
  std::string hold_requester() {
    std::lock_guard lock(mutex_);
    held_ = true;
    return from_requester_;
  }
  void send_to_agent(const std::string& bytes) {
    std::lock_guard lock(mutex_);
    ASSERT_GE(agent_fd_, 0) << "the relay's connection to the agent is closed";
    tcp::write_exact(agent_fd_, bytes.data(), bytes.size(), tcp::Clock::now() + 5s, "agent");
  }

 private:
  void run(uint16_t agent_port) {
    std::string from;
    tcp::Fd client = tcp::accept_until(listener_.get(), tcp::Clock::now() + 10s, &from);
    if (client.get() < 0) return;
    tcp::Fd agent = tcp::connect_to({"127.0.0.1", agent_port}, tcp::Clock::now() + 5s, "agent");
    {
      std::lock_guard lock(mutex_);
      agent_fd_ = agent.get();
    }
    pollfd fds[2] = {{client.get(), POLLIN, 0}, {agent.get(), POLLIN, 0}};
    for (bool open = true; open && !stop_;) {
      if (::poll(fds, 2, 100) <= 0) continue;
      char buffer[4096];
      for (int i = 0; i < 2 && open; ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::recv(fds[i].fd, buffer, sizeof buffer, 0);
        open = n > 0;
        if (!open) break;
        std::lock_guard lock(mutex_);
        (i == 0 ? from_requester_ : from_agent_).append(buffer, static_cast<size_t>(n));
        if (i == 0 && held_) continue;
        try {
          tcp::write_exact(fds[1 - i].fd, buffer, static_cast<size_t>(n), tcp::Clock::now() + 5s, "relay");
        } catch (const Error&) {
          open = false;
        }
      }
    }
    std::lock_guard lock(mutex_);
    agent_fd_ = -1;  // both ends close as this returns
  }

  tcp::Fd listener_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::string from_requester_, from_agent_;
  bool held_ = false;
  int agent_fd_ = -1;
};

// The requester's frames after its start request (hello, u32 length, sealed request), whole.
std::vector<std::string> control_frames(const std::string& sent) {
  std::vector<std::string> frames;
  size_t at = sizeof(ProbeHello);
  if (sent.size() < at + 4) return frames;
  uint32_t length = 0;
  std::memcpy(&length, sent.data() + at, sizeof length);
  at += sizeof length + length;
  for (FrameHeader h{}; at + sizeof h <= sent.size(); at += sizeof h + h.bytes) {
    std::memcpy(&h, sent.data() + at, sizeof h);
    if (at + sizeof h + h.bytes > sent.size()) break;
    frames.push_back(sent.substr(at, sizeof h + h.bytes));
  }
  return frames;
}

uint32_t kind_of(const std::string& frame) {
  FrameHeader h{};
  std::memcpy(&h, frame.data(), sizeof h);
  return h.kind;
}

class RankService : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::set_level(spdlog::level::warn);  // the agent's log goes to stdout, which the tests read
    dir_ = std::filesystem::temp_directory_path() / ("orchard-rank-service-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
    // "$1" is the subcommand (run), "$2" what to do.
    const std::string script = (dir_ / "rank.sh").string();
    std::ofstream(script) << "#!/bin/sh\necho \"out $* $ORCHARD_RANK\"\necho \"err line\" >&2\n"
                          << "case \"$2\" in wait) echo $$ > " << (dir_ / "pid").string()
                          << "; exec sleep 30;; fail) exit 3;; esac\n";
    std::filesystem::permissions(script, std::filesystem::perms::owner_all);
    listener_ = tcp::listen_on("127.0.0.1", 0);
    port_ = tcp::local_port(listener_.get());
    agent_ = "127.0.0.1:" + std::to_string(port_);
    const RankServiceOptions options{"alpha", "s1", script, ""};
    server_ = std::thread([this, options] {
      while (!stop_) {
        std::string from;
        tcp::Fd fd = tcp::accept_until(listener_.get(), tcp::Clock::now() + 100ms, &from);
        if (fd.get() < 0) continue;
        try {
          if (serve_probe_connection(fd.get(), from, "alpha", "s1", [] { return std::string("{}"); }, 5000ms) == kOpStart)
            serve_rank_start(std::move(fd), from, options, stop_);
        } catch (const Error& e) {
          std::lock_guard lock(errors_mutex_);
          errors_.push_back(e.what());
        }
        ++served_;
      }
    });
  }

  void TearDown() override {
    stop_ = true;
    server_.join();
    std::filesystem::remove_all(dir_);
  }

  static parallel::RankCommand command(const std::vector<std::string>& args,
                                       std::vector<std::pair<std::string, std::string>> env = {{"ORCHARD_RANK", "1"}}) {
    parallel::RankCommand c;
    c.command = {"/path/of/the/requesters/orchard"};
    c.command.insert(c.command.end(), args.begin(), args.end());
    c.env = std::move(env);
    return c;
  }

  static parallel::RankEnd wait_for_end(parallel::RankProcess& rank) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto end = rank.poll()) return *end;
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << "the rank did not end";
    rank.kill();
    return {};
  }

  void wait_served(int count) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (served_ < count && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
    ASSERT_GE(served_.load(), count) << "the agent still serves the connection";
  }

  pid_t started_pid() {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    pid_t pid = 0;
    while (pid == 0 && std::chrono::steady_clock::now() < deadline) {
      std::ifstream(dir_ / "pid") >> pid;
      if (pid == 0) std::this_thread::sleep_for(20ms);
    }
    return pid;
  }

  std::filesystem::path dir_;
  tcp::Fd listener_;
  uint16_t port_ = 0;
  std::string agent_;
  std::thread server_;
  std::atomic<bool> stop_{false};
  // What serve_rank_start threw, as the agent logs it.
  std::vector<std::string> errors() {
    std::lock_guard lock(errors_mutex_);
    return errors_;
  }

  std::atomic<int> served_{0};
  std::mutex errors_mutex_;
  std::vector<std::string> errors_;
};

TEST_F(RankService, RunsTheRankAndStreamsItsOutputAndExitCode) {
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  auto rank = start_rank_by_agent(agent_, "machine-b", "alpha", "s1", command({"run", "hello"}));
  const parallel::RankEnd end = wait_for_end(*rank);
  const std::string out = testing::internal::GetCapturedStdout(), err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(end.code, 0) << end.detail;
  // The agent ran its own binary with the requester's arguments and environment.
  EXPECT_EQ(out, "out run hello 1\n");
  EXPECT_EQ(err, "err line\n");

  testing::internal::CaptureStdout();
  auto failing = start_rank_by_agent(agent_, "machine-b", "alpha", "s1", command({"run", "fail"}));
  const parallel::RankEnd failed = wait_for_end(*failing);
  testing::internal::GetCapturedStdout();
  EXPECT_EQ(failed.code, 3);
  EXPECT_EQ(failed.detail, "exited with code 3");

  // A network pod's member is a rank too (`orchard launch` of a pod asks the agents).
  testing::internal::CaptureStdout();
  auto member = start_rank_by_agent(agent_, "machine-b", "alpha", "s1", command({"node", "pod-rank", "x"}));
  const parallel::RankEnd member_end = wait_for_end(*member);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "out node pod-rank x 1\n");
  EXPECT_EQ(member_end.code, 0) << member_end.detail;

  // So is a split chat's rank past the first (`chat --discover` asks for them; rank 0 is the
  // terminal's own process).
  testing::internal::CaptureStdout();
  auto follower = start_rank_by_agent(agent_, "machine-b", "alpha", "s1", command({"chat", "-m", "x"}));
  const parallel::RankEnd follower_end = wait_for_end(*follower);
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "out chat -m x 1\n");
  EXPECT_EQ(follower_end.code, 0) << follower_end.detail;
}

TEST_F(RankService, AnotherSecretIsRefused) {
  try {
    start_rank_by_agent(agent_, "machine-b", "alpha", "not-the-secret", command({"run", "hello"}));
    FAIL() << "started a rank without the secret";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("refused the request: it belongs to another cluster or has another secret"),
              std::string::npos)
        << e.what();
  }
}

// Speaks the protocol by hand: a request sealed with another secret, and a request replayed
// from an earlier connection, are both refused; the agent starts nothing.
TEST_F(RankService, ForgedAndReplayedRequestsAreRefused) {
  auto exchange = [&](const std::string& body, const std::string& secret, const std::vector<uint8_t>* replay,
                      std::vector<uint8_t>* sealed_out) {
    const auto deadline = tcp::Clock::now() + 5s;
    tcp::Fd fd = open_agent_request("", "127.0.0.1", port_, "alpha", "s1", kOpStart, 0, deadline);
    uint8_t challenge[kChallengeBytes];
    tcp::read_exact(fd.get(), challenge, sizeof challenge, deadline, "agent");
    const std::vector<uint8_t> sealed = replay ? *replay : seal_start_request("alpha", secret, challenge, body);
    if (sealed_out) *sealed_out = sealed;
    const uint32_t length = static_cast<uint32_t>(sealed.size());
    tcp::write_exact(fd.get(), &length, sizeof length, deadline, "agent");
    tcp::write_exact(fd.get(), sealed.data(), sealed.size(), deadline, "agent");
    FrameHeader h{};
    tcp::read_exact(fd.get(), &h, sizeof h, deadline, "agent");
    std::string payload(h.bytes, '\0');
    tcp::read_exact(fd.get(), payload.data(), payload.size(), deadline, "agent");
    return std::make_pair(static_cast<FrameKind>(h.kind), payload);
  };
  const std::string body = nlohmann::json{{"args", {"run", "wait"}}}.dump();
  // Sealed with another secret (the hello alone proves nothing about the request).
  auto [kind, why] = exchange(body, "not-the-secret", nullptr, nullptr);
  EXPECT_EQ(kind, FrameKind::kRefused);
  EXPECT_NE(why.find("not sealed with this cluster's secret"), std::string::npos) << why;
  // A good request, then the same bytes replayed on a new connection: another challenge.
  const std::string harmless = nlohmann::json{{"args", {"run", "hello"}}}.dump();
  std::vector<uint8_t> recorded;
  auto [first, pid_text] = exchange(harmless, "s1", nullptr, &recorded);
  EXPECT_EQ(first, FrameKind::kStarted) << pid_text;
  auto [replayed, replay_why] = exchange(harmless, "s1", &recorded, nullptr);
  EXPECT_EQ(replayed, FrameKind::kRefused);
  EXPECT_NE(replay_why.find("not sealed"), std::string::npos) << replay_why;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "pid")) << "a refused request started a rank";
}

// What crosses the LAN: a relay between the requester and the agent records every byte each
// side sends. The job's secret (in the request's env) reaches the rank, which prints it: the
// requester's recording holds neither it nor any of the request's JSON, the agent's neither it
// nor any line of the rank's output nor its exit status.
TEST_F(RankService, TheStartRequestAndTheRanksOutputCrossTheWireEncrypted) {
  Relay relay(port_);
  const std::string job_secret = "job-secret-5e1f0c9a7b";
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  auto rank = start_rank_by_agent(relay.address(), "machine-b", "alpha", "s1",
                                  command({"run", "hello"}, {{"ORCHARD_RANK", job_secret}}));
  const parallel::RankEnd end = wait_for_end(*rank);
  const std::string out = testing::internal::GetCapturedStdout(), err = testing::internal::GetCapturedStderr();
  rank.reset();
  wait_served(1);
  const std::string captured = relay.from_requester(), answered = relay.from_agent();
  EXPECT_EQ(end.code, 0) << end.detail;
  EXPECT_EQ(out, "out run hello " + job_secret + "\n") << "the rank did not get the job's variable";
  EXPECT_EQ(err, "err line\n");
  EXPECT_GT(captured.size(), sizeof(ProbeHello) + 4 + 24 + 16);
  EXPECT_EQ(captured.find(job_secret), std::string::npos) << "the job's secret crossed the wire in clear";
  EXPECT_EQ(captured.find("ORCHARD_RANK"), std::string::npos);
  EXPECT_EQ(captured.find("\"args\""), std::string::npos);
  EXPECT_EQ(captured.find("hello"), std::string::npos);
  // After the request the requester sent sealed frames only (a heartbeat at once): an empty
  // payload's nonce and tag each, and not a byte besides.
  const std::vector<std::string> frames = control_frames(captured);
  ASSERT_FALSE(frames.empty()) << "no heartbeat went to the agent";
  size_t framed = 0;
  for (const std::string& f : frames) {
    EXPECT_EQ(kind_of(f), static_cast<uint32_t>(ControlKind::kHeartbeat));
    EXPECT_EQ(f.size(), sizeof(FrameHeader) + 24 + 16);
    framed += f.size();
  }
  uint32_t request_bytes = 0;
  std::memcpy(&request_bytes, captured.data() + sizeof(ProbeHello), sizeof request_bytes);
  EXPECT_EQ(sizeof(ProbeHello) + 4 + request_bytes + framed, captured.size());
  // Started, two lines of output and the exit status: five frames at least, each with its nonce and tag.
  EXPECT_GT(answered.size(), kChallengeBytes + 4 * (sizeof(FrameHeader) + 24 + 16));
  EXPECT_EQ(answered.find(job_secret), std::string::npos) << "the rank's output crossed the wire in clear";
  EXPECT_EQ(answered.find("out run"), std::string::npos);
  EXPECT_EQ(answered.find("err line"), std::string::npos);
  EXPECT_EQ(answered.find("\"code\""), std::string::npos);
}

// A relay that can write into the connection cannot stop a rank with a stop of its own, nor keep
// a rank alive once its requester is gone by replaying the requester's heartbeats: the agent
// takes a frame that does not open as sealed for this connection and place (forged, a
// heartbeat replayed or damaged, a stop recorded on another connection) as the connection no
// longer speaking for the requester: it stops the rank at once, tells the requester nothing more
// (a frame it could not trust may have been the relay's answer to it), and reports the frame.
// A real stop through the same relay still ends the rank with the exit status.
TEST_F(RankService, ARequestersFrameForgedReplayedOrDamagedOnTheWayIsRefused) {
  // A stop the requester sent: the rank ends by SIGTERM, and the relay keeps the frame.
  std::string recorded_stop;
  {
    Relay relay(port_);
    auto rank = start_rank_by_agent(relay.address(), "machine-b", "alpha", "s1", command({"run", "wait"}));
    const pid_t pid = started_pid();
    ASSERT_GT(pid, 0);
    rank->terminate();
    const parallel::RankEnd end = wait_for_end(*rank);
    EXPECT_EQ(end.code, 128 + SIGTERM) << end.detail;
    EXPECT_EQ(end.detail, "exited with signal 15");
    EXPECT_NE(::kill(pid, 0), 0);
    rank.reset();
    wait_served(1);
    EXPECT_TRUE(errors().empty()) << errors().front();
    for (const std::string& f : control_frames(relay.from_requester()))
      if (kind_of(f) == static_cast<uint32_t>(ControlKind::kStop)) recorded_stop = f;
    ASSERT_FALSE(recorded_stop.empty()) << "no stop frame crossed the relay";
  }

  // Each case: a rank through a relay that holds the requester's bytes back from some point
  // (to the agent the requester is gone) and writes the frame `bad` makes of the frames that
  // reached the agent or, where it waits for one, of the first it held back.
  using Make = std::function<std::string(const std::vector<std::string>& forwarded, const std::vector<std::string>& held)>;
  FrameHeader forged_stop{static_cast<uint32_t>(ControlKind::kStop), 24 + 16};
  const std::vector<std::tuple<std::string, bool, Make>> cases = {
      {"the first heartbeat again", false, [](const auto& forwarded, const auto&) { return forwarded.front(); }},
      {"the next heartbeat with one bit flipped", true,
       [](const auto&, const auto& held) {
         std::string f = held.front();
         f.back() = static_cast<char>(f.back() ^ 1);
         return f;
       }},
      {"a stop not sealed with the secret", false,
       [&](const auto&, const auto&) {
         return std::string(reinterpret_cast<const char*>(&forged_stop), sizeof forged_stop) + std::string(24 + 16, 'x');
       }},
      {"the stop of another connection", false, [&](const auto&, const auto&) { return recorded_stop; }},
  };
  for (const auto& [what, wait_for_held, bad] : cases) {
    SCOPED_TRACE(what);
    std::filesystem::remove(dir_ / "pid");
    const int served = served_;
    const size_t errors_before = errors().size();
    Relay relay(port_);
    auto rank = start_rank_by_agent(relay.address(), "machine-b", "alpha", "s1", command({"run", "wait"}));
    const pid_t pid = started_pid();
    ASSERT_GT(pid, 0);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (control_frames(relay.from_requester()).empty() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);  // the first heartbeat goes as the rank starts
    const std::vector<std::string> forwarded = control_frames(relay.hold_requester());
    ASSERT_FALSE(forwarded.empty()) << "no heartbeat reached the agent";
    std::vector<std::string> held;
    if (wait_for_held) {  // a heartbeat each second
      while ((held = control_frames(relay.from_requester())).size() <= forwarded.size() &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(20ms);
      ASSERT_GT(held.size(), forwarded.size()) << "the requester sent no heartbeat after the hold";
      held.erase(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(forwarded.size()));
    }
    const auto sent_at = std::chrono::steady_clock::now();
    relay.send_to_agent(bad(forwarded, held));
    const parallel::RankEnd end = wait_for_end(*rank);
    // Well before the 10 s a silent requester is given: the frame, not the silence, stopped it.
    EXPECT_LT(std::chrono::steady_clock::now() - sent_at, 5s);
    EXPECT_NE(::kill(pid, 0), 0) << "rank " << pid << " still runs";
    EXPECT_EQ(end.code, 1) << end.detail;
    EXPECT_NE(end.detail.find("lost: the agent on machine-b went away"), std::string::npos) << end.detail;
    rank.reset();
    wait_served(served + 1);
    const std::vector<std::string> now = errors();
    ASSERT_EQ(now.size(), errors_before + 1);
    EXPECT_NE(now.back().find("rank requester 127.0.0.1"), std::string::npos) << now.back();
    EXPECT_NE(now.back().find("not sealed with the cluster secret for this connection: forged, replayed or reordered"),
              std::string::npos)
        << now.back();
    EXPECT_NE(now.back().find("stopped its rank " + std::to_string(pid)), std::string::npos) << now.back();
  }
}

// A machine posing as the agent (it answers the hello, as anyone on the LAN of an open port
// can, but lacks the secret) and answers with a start frame in clear: the requester refuses it.
TEST_F(RankService, AFrameNotSealedWithTheSecretIsRefused) {
  tcp::Fd impostor = tcp::listen_on("127.0.0.1", 0);
  const uint16_t impostor_port = tcp::local_port(impostor.get());
  std::thread fake([&] {
    std::string from;
    tcp::Fd fd = tcp::accept_until(impostor.get(), tcp::Clock::now() + 10s, &from);
    try {
      serve_probe_connection(fd.get(), from, "alpha", "s1", [] { return std::string("{}"); }, 5000ms);
      const auto deadline = tcp::Clock::now() + 5s;
      const uint8_t challenge[kChallengeBytes] = {};
      tcp::write_exact(fd.get(), challenge, sizeof challenge, deadline, "requester");
      uint32_t length = 0;
      tcp::read_exact(fd.get(), &length, sizeof length, deadline, "requester");
      std::vector<uint8_t> request(length);
      tcp::read_exact(fd.get(), request.data(), length, deadline, "requester");
      const std::string pid = "4242";
      const FrameHeader h{static_cast<uint32_t>(FrameKind::kStarted), static_cast<uint32_t>(pid.size())};
      tcp::write_exact(fd.get(), &h, sizeof h, deadline, "requester");
      tcp::write_exact(fd.get(), pid.data(), pid.size(), deadline, "requester");
    } catch (const Error&) {
    }
  });
  try {
    start_rank_by_agent("127.0.0.1:" + std::to_string(impostor_port), "machine-b", "alpha", "s1", command({"run", "hello"}));
    ADD_FAILURE() << "took a start frame in clear";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a frame not sealed with the cluster secret"), std::string::npos) << e.what();
  }
  fake.join();
}

TEST_F(RankService, OnlyRanksOfJobsWithTheirOwnVariables) {
  for (const auto& [args, env, expected] :
       std::vector<std::tuple<std::vector<std::string>, std::vector<std::pair<std::string, std::string>>, std::string>>{
           {{"make-model", "-o", "/etc/x"}, {}, "starts ranks of `run`, `serve`, `chat` and `node pod-rank`, not `make-model`"},
           {{"node", "--network", "http://x"}, {}, "not `node --network`"},
           {{"run", "hello"}, {{"LD_PRELOAD", "/tmp/x.so"}}, "may set ORCHARD_* variables to strings, not 'LD_PRELOAD'"}}) {
    try {
      start_rank_by_agent(agent_, "machine-b", "alpha", "s1", command(args, env));
      ADD_FAILURE() << "started " << args[0];
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the agent on machine-b (" + agent_ + ") refused to start the rank"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

TEST_F(RankService, TheRankEndsWhenItsRequesterGoesAway) {
  testing::internal::CaptureStdout();
  auto rank = start_rank_by_agent(agent_, "machine-b", "alpha", "s1", command({"run", "wait"}));
  const pid_t pid = started_pid();
  ASSERT_GT(pid, 0);
  EXPECT_EQ(::kill(pid, 0), 0) << "the rank is not running";
  rank->kill();  // the connection drops, as when the requester dies
  wait_served(1);
  testing::internal::GetCapturedStdout();
  // The agent stopped and reaped it before it let the connection go.
  EXPECT_NE(::kill(pid, 0), 0) << "rank " << pid << " outlived its requester";
}

TEST_F(RankService, TheRankStopsWhenAsked) {
  testing::internal::CaptureStdout();
  auto rank = start_rank_by_agent(agent_, "machine-b", "alpha", "s1", command({"run", "wait"}));
  const pid_t pid = started_pid();
  ASSERT_GT(pid, 0);
  rank->terminate();
  const parallel::RankEnd end = wait_for_end(*rank);
  testing::internal::GetCapturedStdout();
  EXPECT_EQ(end.code, 128 + SIGTERM) << end.detail;
  EXPECT_EQ(end.detail, "exited with signal 15");
  EXPECT_NE(::kill(pid, 0), 0);
}

}  // namespace
}  // namespace orchard::cluster

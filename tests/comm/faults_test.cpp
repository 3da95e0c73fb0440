// Faults and bad input: dead or silent peers, malformed frames, foreign connections.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "comm/bootstrap.h"
#include "comm/launcher.h"
#include "comm/frame.h"
#include "comm/transport/tcp/handshake.h"
#include "comm/transport/tcp/socket.h"

namespace orchard::comm {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kTimeout = std::chrono::seconds(2);

// Survivors must throw an Error naming a rank within the timeout (plus scheduling slack).
void expect_failure_in_time(Group& g, int doomed) {
  std::vector<float> v(1 << 20, 1.0f);
  for (int i = 0; i < 1000; ++i) {
    const auto start = Clock::now();
    try {
      g.all_reduce(v.data(), v.size(), DType::F32);
    } catch (const Error& e) {
      const auto took = Clock::now() - start;
      if (took > kTimeout + std::chrono::seconds(2)) throw std::runtime_error("error came too late");
      if (std::string(e.what()).find("rank") == std::string::npos) throw std::runtime_error("error names no rank");
      if (g.rank() == 0) std::fprintf(stderr, "rank 0 saw (as expected): %s\n", e.what());
      return;
    }
  }
  throw std::runtime_error(fmt::format("rank {} never noticed that rank {} is gone", g.rank(), doomed));
}

// A rank may exit the moment its part of the last collective is done; peers still reading what it
// sent must not take its exit for a death (a shm rank once did, while world 7 ended on a barrier).
class ExitAfterLastCollectiveTest : public ::testing::TestWithParam<Backend> {};

TEST_P(ExitAfterLastCollectiveTest, IsNotAFault) {
  Config config;
  config.backend = GetParam();
  config.timeout = std::chrono::seconds(20);
  constexpr int kWorld = 8;
  constexpr int kJobs = 30;
  for (int job = 0; job < kJobs; ++job) {
    auto exits = spawn_local_ranks(kWorld, config, [](Group& g) {
      std::vector<float> v(64, 1.0f);
      g.all_reduce(v.data(), v.size(), DType::F32);
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * g.rank()));
      g.barrier();
    });
    for (const auto& e : exits) ASSERT_TRUE(e.ok()) << "job " << job << ": " << e.describe();
  }
}

INSTANTIATE_TEST_SUITE_P(Comm, ExitAfterLastCollectiveTest, ::testing::Values(Backend::Ring, Backend::Shm),
                         [](const auto& info) { return std::string(backend_name(info.param)); });

class PeerFaultTest : public ::testing::TestWithParam<std::tuple<Backend, bool>> {};

TEST_P(PeerFaultTest, SurvivorsFailInTime) {
  const auto [backend, dies] = GetParam();
  Config config;
  config.backend = backend;
  config.timeout = kTimeout;
  constexpr int kWorld = 3;
  LocalLaunchOptions options;
  options.grace = std::chrono::seconds(8);
  auto exits = spawn_local_ranks(
      kWorld, config,
      [dies = dies](Group& g) {
        if (g.rank() == kWorld - 1) {
          std::vector<float> v(1 << 20, 1.0f);
          if (dies) {
            // Die while the others are inside large all-reduces.
            std::thread([] {
              std::this_thread::sleep_for(std::chrono::milliseconds(100));
              ::_exit(3);
            }).detach();
            for (;;) g.all_reduce(v.data(), v.size(), DType::F32);
          }
          // Fall silent: take part in a few calls, then stop answering for longer than the
          // timeout while the others wait inside the next one.
          for (int i = 0; i < 3; ++i) g.all_reduce(v.data(), v.size(), DType::F32);
          std::this_thread::sleep_for(kTimeout * 2 + std::chrono::seconds(1));
          return;
        }
        expect_failure_in_time(g, kWorld - 1);
      },
      options);
  for (int r = 0; r < kWorld - 1; ++r) EXPECT_TRUE(exits[static_cast<size_t>(r)].ok()) << exits[static_cast<size_t>(r)].describe();
  if (dies) {
    EXPECT_EQ(exits[kWorld - 1].code, 3);
  }
}

INSTANTIATE_TEST_SUITE_P(Comm, PeerFaultTest,
                         ::testing::Combine(::testing::Values(Backend::Ring, Backend::Shm), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(backend_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_dies" : "_falls_silent");
                         });

// Rank 0 runs in a thread of this process; the test plays rank 1 by hand over raw sockets.
struct HandPlayedPeer {
  Config config;
  tcp::Fd listener;
  tcp::Fd socket;

  HandPlayedPeer() {
    listener = tcp::listen_on("127.0.0.1", 0);
    config.world = 2;
    config.rank = 0;
    config.secret = "test-secret";
    config.timeout = kTimeout;
    config.connect_timeout = std::chrono::seconds(10);
    config.endpoints = {{fmt::format("127.0.0.1:{}", tcp::local_port(listener.get()))}, {"127.0.0.1:1"}};
    config.listen_fd = listener.release();
  }
  tcp::Fd dial(const std::string& secret) {
    auto deadline = Clock::now() + std::chrono::seconds(5);
    tcp::Fd fd = tcp::connect_to(tcp::parse_endpoint(config.endpoints[0][0]), deadline, "rank 0");
    tcp::dial_handshake(fd.get(), secret, 1, 2, 0, 1, deadline, "rank 0");
    return fd;
  }
};

struct BadFrame {
  const char* name;
  FrameHeader header;
  const char* expect;
};

class MalformedFrameTest : public ::testing::TestWithParam<BadFrame> {};

TEST_P(MalformedFrameTest, IsAClearError) {
  HandPlayedPeer peer;
  std::string error;
  std::thread rank0([&] {
    try {
      Group g = init(peer.config);
      std::vector<float> v(4, 1.0f);
      g.all_reduce(v.data(), v.size(), DType::F32);
      error = "no error";
    } catch (const FormatError& e) {
      error = e.what();
    } catch (const std::exception& e) {
      error = std::string("wrong error type: ") + e.what();
    }
  });
  tcp::Fd fd = peer.dial(peer.config.secret);
  const FrameHeader h = GetParam().header;
  std::vector<uint8_t> bytes(sizeof h + 16, 0);
  std::memcpy(bytes.data(), &h, sizeof h);
  tcp::write_exact(fd.get(), bytes.data(), bytes.size(), Clock::now() + std::chrono::seconds(2), "rank 0");
  rank0.join();
  EXPECT_NE(error.find(GetParam().expect), std::string::npos) << error;
  EXPECT_NE(error.find("rank 1"), std::string::npos) << error;
}

INSTANTIATE_TEST_SUITE_P(
    Comm, MalformedFrameTest,
    ::testing::Values(BadFrame{"bad_magic", FrameHeader{0xdeadbeef, 1, {}, 0, 0, 16}, "magic"},
                      BadFrame{"wrong_op", make_frame_header(WireOp::AllGather, 0, 0, 16), "all_gather"},
                      BadFrame{"wrong_length", make_frame_header(WireOp::AllReduce, 0, 0, 12), "12 bytes"},
                      BadFrame{"wrong_sequence", make_frame_header(WireOp::AllReduce, 0, 5, 16), "sequence 5"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ForeignConnection, IsRefusedAndTheJobGoesOn) {
  HandPlayedPeer peer;
  std::vector<float> result(4, 0.0f);
  std::string error;
  std::thread rank0([&] {
    try {
      Group g = init(peer.config);
      result.assign(4, 1.0f);
      g.all_reduce(result.data(), result.size(), DType::F32);
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  {
    // Garbage instead of a Hello.
    auto deadline = Clock::now() + std::chrono::seconds(5);
    tcp::Fd junk = tcp::connect_to(tcp::parse_endpoint(peer.config.endpoints[0][0]), deadline, "rank 0");
    tcp::Challenge c{};
    tcp::read_exact(junk.get(), &c, sizeof c, deadline, "rank 0");
    std::vector<uint8_t> garbage(sizeof(tcp::Hello), 0x5a);
    tcp::write_exact(junk.get(), garbage.data(), garbage.size(), deadline, "rank 0");
  }
  // Right shape, wrong secret.
  EXPECT_THROW(peer.dial("not-the-secret"), Error);
  // The real rank 1.
  tcp::Fd fd = peer.dial(peer.config.secret);
  auto deadline = Clock::now() + std::chrono::seconds(5);
  std::vector<float> mine(4, 2.0f);
  const FrameHeader h = make_frame_header(WireOp::AllReduce, 0, 0, 16);
  tcp::write_exact(fd.get(), &h, sizeof h, deadline, "rank 0");
  tcp::write_exact(fd.get(), mine.data(), 16, deadline, "rank 0");
  FrameHeader back{};
  std::vector<float> theirs(4);
  tcp::read_exact(fd.get(), &back, sizeof back, deadline, "rank 0");
  tcp::read_exact(fd.get(), theirs.data(), 16, deadline, "rank 0");
  rank0.join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(result, std::vector<float>(4, 3.0f));
  EXPECT_EQ(check_frame_header(back, {WireOp::AllReduce, 0, 0, 16}), "");
}

TEST(Bootstrap, ParsesMlxHostfiles) {
  auto a = parse_hostfile(R"([{"ssh": "m1", "ips": ["10.0.0.1", "10.0.1.1"]}, {"ssh": "m2", "ips": []}])", 5000);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0], (std::vector<std::string>{"10.0.0.1:5000", "10.0.1.1:5000"}));
  EXPECT_EQ(a[1], (std::vector<std::string>{"m2:5001"}));
  auto b = parse_hostfile(R"({"backend": "ring", "hosts": [{"ssh": "a", "ips": ["fe80::1"]}, {"ssh": "b", "ips": ["10.0.0.2"]}]})", 7000);
  EXPECT_EQ(b[0], (std::vector<std::string>{"[fe80::1]:7000"}));
  auto c = parse_hostfile(R"([["127.0.0.1:5000"], ["127.0.0.1:5001"]])", 1);
  EXPECT_EQ(c[1], (std::vector<std::string>{"127.0.0.1:5001"}));
  EXPECT_THROW(parse_hostfile("{", 1), FormatError);
  EXPECT_THROW(parse_hostfile(R"([{"nope": 1}])", 1), FormatError);
}

TEST(Bootstrap, EnvironmentRoundTrip) {
  Config c;
  c.backend = Backend::Shm;
  c.rank = 2;
  c.world = 3;
  c.secret = "s";
  c.endpoints = {{"a:1", "b:1"}, {"c:2"}, {"[::1]:3"}};
  c.link.latency_us = 50;
  c.timeout = std::chrono::milliseconds(2500);
  for (const auto& [k, v] : config_to_env(c)) ::setenv(k.c_str(), v.c_str(), 1);
  Config d = config_from_env();
  EXPECT_EQ(d.backend, Backend::Shm);
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.world, 3);
  EXPECT_EQ(d.endpoints, c.endpoints);
  EXPECT_EQ(d.link.latency_us, 50);
  EXPECT_EQ(d.timeout.count(), 2500);
}

// The emulator makes a one-machine link look like a 300 us, 1 Gb/s one.
TEST(LinkEmulator, AddsLatencyAndCapsBandwidth) {
  Config config;
  config.link.latency_us = 300;
  config.link.gbps = 1;
  auto exits = spawn_local_ranks(2, config, [](Group& g) {
    std::vector<float> small(4, 1.0f), big(1 << 18, 1.0f);  // 1 MiB: 8.4 ms at 1 Gb/s
    g.all_reduce(small.data(), small.size(), DType::F32);
    auto t0 = Clock::now();
    g.all_reduce(small.data(), small.size(), DType::F32);
    auto t1 = Clock::now();
    g.all_reduce(big.data(), big.size(), DType::F32);
    auto t2 = Clock::now();
    if (t1 - t0 < std::chrono::microseconds(300)) throw std::runtime_error("no emulated latency");
    // Ring all-reduce sends 2 x (n-1)/n of the vector: 1 MiB at 1 Gb/s.
    if (t2 - t1 < std::chrono::milliseconds(8)) throw std::runtime_error("bandwidth not capped");
  });
  for (const auto& e : exits) EXPECT_TRUE(e.ok()) << e.describe();
}

}  // namespace
}  // namespace orchard::comm

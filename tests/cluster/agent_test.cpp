// `orchard agent`'s TCP port under clients that stall: each connection is read on a thread of its
// own, so a slow one keeps no other waiting, and connections over the bound are closed at once.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "cluster/agent.h"
#include "comm/transport/tcp/socket.h"

namespace orchard::cluster {
namespace {

namespace tcp = comm::tcp;
using namespace std::chrono_literals;

uint16_t free_udp_port() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

uint16_t free_tcp_port() {
  tcp::Fd listener = tcp::listen_on("127.0.0.1", 0);
  return tcp::local_port(listener.get());
}

tcp::Fd dial(uint16_t port) { return tcp::connect_to({"127.0.0.1", port}, tcp::Clock::now() + 5s, "the agent"); }

void send_text(int fd, const std::string& text) { tcp::write_exact(fd, text.data(), text.size(), tcp::Clock::now() + 5s, "the agent"); }

// Everything the agent sends until it closes the connection.
std::string read_to_end(int fd) {
  std::string reply;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) reply.append(buffer, static_cast<size_t>(n));
  return reply;
}

TEST(Agent, ASlowConnectionDoesNotHoldUpAnother) {
  AgentOptions o;
  o.cluster = "slow-clients-" + std::to_string(::getpid());
  o.secret = "s1";
  o.port = free_udp_port();
  o.agent_port = free_tcp_port();
  o.measure_machine = false;
  o.probe.timeout = 6000ms;  // how long a stalled client may keep its own connection
  o.max_connections = 3;
  Agent agent(o);
  std::atomic<bool> stop{false};
  std::thread runner([&] { agent.run(stop); });
  // Listening once a request is answered.
  std::string first;
  for (int i = 0; i < 200 && first.empty(); ++i) {
    try {
      tcp::Fd fd = dial(o.agent_port);
      send_text(fd.get(), "GET /cluster HTTP/1.1\r\n\r\n");
      first = read_to_end(fd.get());
    } catch (const std::exception&) {
      std::this_thread::sleep_for(50ms);
    }
  }
  ASSERT_EQ(first.substr(0, 15), "HTTP/1.1 200 OK") << first;

  // Two clients that stall: half an HTTP head, and two bytes of a binary hello.
  tcp::Fd half_head = dial(o.agent_port);
  send_text(half_head.get(), "GET /clus");
  tcp::Fd half_hello = dial(o.agent_port);
  send_text(half_hello.get(), "PC");
  std::this_thread::sleep_for(300ms);  // both taken by the agent before the next one comes

  const auto begin = std::chrono::steady_clock::now();
  tcp::Fd other = dial(o.agent_port);
  send_text(other.get(), "GET /cluster HTTP/1.1\r\n\r\n");
  const std::string reply = read_to_end(other.get());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  ASSERT_EQ(reply.substr(0, 15), "HTTP/1.1 200 OK") << reply;
  const nlohmann::json body = nlohmann::json::parse(reply.substr(reply.find("\r\n\r\n") + 4));
  EXPECT_EQ(body["machines"].size(), 1u);
  EXPECT_LT(seconds, 3.0) << "answered only after the stalled clients' " << o.probe.timeout.count() << " ms";

  // A third stalled client fills the bound of 3: the next connection is closed unread.
  tcp::Fd third = dial(o.agent_port);
  send_text(third.get(), "GE");
  std::this_thread::sleep_for(300ms);
  const auto refused_at = std::chrono::steady_clock::now();
  tcp::Fd over = dial(o.agent_port);
  EXPECT_EQ(read_to_end(over.get()), "");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - refused_at).count(), 3.0);

  // Once a stalled client finishes its request, its place is free again.
  send_text(third.get(), "T /cluster HTTP/1.1\r\n\r\n");
  EXPECT_EQ(read_to_end(third.get()).substr(0, 15), "HTTP/1.1 200 OK");
  std::this_thread::sleep_for(300ms);
  tcp::Fd again = dial(o.agent_port);
  send_text(again.get(), "GET /cluster HTTP/1.1\r\n\r\n");
  EXPECT_EQ(read_to_end(again.get()).substr(0, 15), "HTTP/1.1 200 OK");

  // The other two finish too (a hello that is not one is refused), so the agent stops at once.
  send_text(half_head.get(), "ter HTTP/1.1\r\n\r\n");
  EXPECT_EQ(read_to_end(half_head.get()).substr(0, 15), "HTTP/1.1 200 OK");
  send_text(half_hello.get(), std::string(62, 'x'));
  EXPECT_EQ(read_to_end(half_hello.get()).size(), 8u) << "the agent's verdict on a forged hello";
  stop = true;
  runner.join();
}

}  // namespace
}  // namespace orchard::cluster

// libFuzzer target for the bytes a peer sends over the ring backend's TCP links, as a rank reads
// them. Rank 0 runs in a thread of this process; the fuzzer plays rank 1 over loopback, either
// before the handshake (its bytes answer rank 0's challenge: a port scanner, another job) or after
// it (its bytes are everything rank 1 sends during two collectives that the first input byte
// picks). Whatever the bytes, rank 0 must finish or throw an orchard::Error that names the peer,
// within its timeout; any other exception, a crash or a hang is a finding.
//
// The first byte: bit 7 set plays the handshake; else bits 0-2 pick the collective (all-reduce,
// all-gather, reduce-scatter, broadcast from rank 1, recv from rank 1, barrier), bits 3-4 the
// element type, and the second byte the element count (1-256).
#include <sys/socket.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/group.h"
#include "comm/transport/tcp/handshake.h"
#include "comm/transport/tcp/socket.h"
#include "core/error.h"

namespace {

using namespace orchard;
using namespace orchard::comm;

constexpr char kSecret[] = "fuzz-secret";
// Rank 0 waits this long for bytes that never come; the fuzzer closes its side when it has sent
// its input, so a wait this long means a hang.
constexpr auto kTimeout = std::chrono::seconds(5);

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_comm_stream: %s\n", what.c_str());
  std::abort();
}

void check_names_peer(const std::string& message, const std::string& peer) {
  if (message.find(peer) == std::string::npos) finding("an error that does not name " + peer + ": " + message);
}

// The bytes as the answer to rank 0's challenge.
void play_handshake(const uint8_t* data, size_t size) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return;
  tcp::Fd ours(pair[0]), theirs(pair[1]);
  // Inputs are small (-max_len): they fit the socket buffer, so this does not block.
  if (size > 0) tcp::write_exact(ours.get(), data, size, tcp::Clock::now() + kTimeout, "rank 0");
  ::shutdown(ours.get(), SHUT_WR);
  try {
    const auto hello = tcp::accept_handshake(theirs.get(), kSecret, 2, 1, tcp::Clock::now() + kTimeout, "the fuzzer");
    (void)hello;
    finding("a handshake accepted without the secret");
  } catch (const Error& e) {
    check_names_peer(e.what(), "the fuzzer");
  }
}

void run_collective(Group& g, uint8_t choice, size_t count) {
  const DType dtype = std::array{DType::F32, DType::F16, DType::BF16, DType::F32}[(choice >> 3) & 3];
  const size_t elem = dtype_size(dtype);
  std::vector<uint8_t> a(2 * count * elem, 0x3c), b(2 * count * elem);
  switch (choice & 7) {
    case 0: g.all_reduce(a.data(), count, dtype); break;
    case 1: g.all_gather(a.data(), b.data(), count * elem); break;
    case 2: {
      const size_t counts[2] = {count, count};
      g.reduce_scatter(a.data(), b.data(), counts, dtype);
      break;
    }
    case 3: g.broadcast(a.data(), count * elem, 1); break;
    case 4: g.recv(a.data(), count * elem, 1, 7); break;
    default: g.barrier(); break;
  }
}

// The bytes as everything rank 1 sends once the link is up.
void play_collectives(const uint8_t* data, size_t size) {
  const uint8_t choice = data[0];
  const size_t count = size_t{data[1]} + 1;
  data += 2;
  size -= 2;
  tcp::Fd listener = tcp::listen_on("127.0.0.1", 0);
  Config config;
  config.world = 2;
  config.rank = 0;
  config.secret = kSecret;
  config.timeout = kTimeout;
  config.connect_timeout = kTimeout;
  config.endpoints = {{fmt::format("127.0.0.1:{}", tcp::local_port(listener.get()))}, {"127.0.0.1:1"}};
  config.listen_fd = listener.release();
  std::string error;
  std::exception_ptr other;
  std::thread rank0([&] {
    try {
      Group g = init(config);
      run_collective(g, choice, count);
      run_collective(g, choice, count);
    } catch (const Error& e) {
      error = e.what();
    } catch (...) {
      other = std::current_exception();
    }
  });
  {
    const auto deadline = tcp::Clock::now() + kTimeout;
    tcp::Fd fd = tcp::connect_to(tcp::parse_endpoint(config.endpoints[0][0]), deadline, "rank 0");
    tcp::dial_handshake(fd.get(), kSecret, 1, 2, 0, 1, deadline, "rank 0");
    try {
      // Rank 0's own frames (at most a few KiB) wait unread in the socket buffer.
      if (size > 0) tcp::write_exact(fd.get(), data, size, deadline, "rank 0");
    } catch (const Error&) {
      // Rank 0 refused the stream part way and closed its end: what it threw is judged below.
    }
    ::shutdown(fd.get(), SHUT_WR);
    rank0.join();
  }
  if (other) {
    try {
      std::rethrow_exception(other);
    } catch (const std::exception& e) {
      finding(std::string("an exception that is not an orchard::Error: ") + e.what());
    }
  }
  if (!error.empty()) {
    check_names_peer(error, "rank 1");
    if (error.find("did not answer within") != std::string::npos) finding("rank 0 hung: " + error);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  if (data[0] & 0x80) play_handshake(data + 1, size - 1);
  else play_collectives(data, size);
  return 0;
}

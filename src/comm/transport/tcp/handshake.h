#pragma once
// The first messages on every TCP connection between ranks. The accepting rank sends a random
// nonce; the dialing rank answers with its rank, the world size, its socket index and an
// HMAC-SHA256 of all that under the job secret; the acceptor checks everything and answers
// with a verdict. Anything else (another job, a port scanner, garbage) is refused.
#include <cstdint>
#include <string>

#include "comm/transport/tcp/socket.h"

namespace orchard::comm::tcp {

inline constexpr uint32_t kHandshakeMagic = 0x4f524348;  // "ORCH"
inline constexpr uint16_t kProtocolVersion = 1;

#pragma pack(push, 1)
struct Challenge {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint8_t nonce[16];
};
static_assert(sizeof(Challenge) == 24);

struct Hello {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint32_t rank;
  uint32_t world;
  uint32_t socket_index;
  uint32_t sockets_per_link;
  uint8_t mac[32];  // HMAC-SHA256(secret, nonce || the fields above)
};
static_assert(sizeof(Hello) == 56);

struct Verdict {
  uint32_t magic;
  uint32_t accepted;  // 1: accepted; 0: refused
};
static_assert(sizeof(Verdict) == 8);
#pragma pack(pop)

struct HelloInfo {
  int rank;
  int socket_index;
};

// Dialing side: answers the challenge on fd; throws Error when the acceptor refuses.
void dial_handshake(int fd, const std::string& secret, int rank, int world, int socket_index,
                    int sockets_per_link, Clock::time_point deadline, const std::string& peer);

// Accepting side: returns who connected, or throws FormatError saying why the connection is
// refused (after telling the other side). expected_world/sockets_per_link must match.
HelloInfo accept_handshake(int fd, const std::string& secret, int world, int sockets_per_link,
                           Clock::time_point deadline, const std::string& from);

// The MAC a Hello must carry (exposed for tests that play a rank by hand).
void hello_mac(const std::string& secret, const uint8_t nonce[16], Hello& hello);

}  // namespace orchard::comm::tcp

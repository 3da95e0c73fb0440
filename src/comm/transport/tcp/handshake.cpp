#include "comm/transport/tcp/handshake.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

#include "comm/group.h"

namespace orchard::comm::tcp {

void hello_mac(const std::string& secret, const uint8_t nonce[16], Hello& hello) {
  uint8_t message[16 + offsetof(Hello, mac)];
  std::memcpy(message, nonce, 16);
  std::memcpy(message + 16, &hello, offsetof(Hello, mac));
  unsigned int len = sizeof hello.mac;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), message, sizeof message, hello.mac, &len);
}

void dial_handshake(int fd, const std::string& secret, int rank, int world, int socket_index,
                    int sockets_per_link, Clock::time_point deadline, const std::string& peer) {
  Challenge challenge{};
  read_exact(fd, &challenge, sizeof challenge, deadline, peer);
  if (challenge.magic != kHandshakeMagic || challenge.version != kProtocolVersion) {
    throw FormatError(error_message("comm", "{} is not an Orchard rank speaking protocol {} (magic 0x{:08x}, version {})",
                                    peer, kProtocolVersion, +challenge.magic, +challenge.version));
  }
  Hello hello{};
  hello.magic = kHandshakeMagic;
  hello.version = kProtocolVersion;
  hello.rank = static_cast<uint32_t>(rank);
  hello.world = static_cast<uint32_t>(world);
  hello.socket_index = static_cast<uint32_t>(socket_index);
  hello.sockets_per_link = static_cast<uint32_t>(sockets_per_link);
  hello_mac(secret, challenge.nonce, hello);
  write_exact(fd, &hello, sizeof hello, deadline, peer);
  Verdict verdict{};
  read_exact(fd, &verdict, sizeof verdict, deadline, peer);
  if (verdict.magic != kHandshakeMagic || verdict.accepted != 1) {
    throw Error(error_message("comm", "{} refused this rank (different job secret, world size or sockets per link?)",
                              peer));
  }
}

HelloInfo accept_handshake(int fd, const std::string& secret, int world, int sockets_per_link,
                           Clock::time_point deadline, const std::string& from) {
  Challenge challenge{};
  challenge.magic = kHandshakeMagic;
  challenge.version = kProtocolVersion;
  if (RAND_bytes(challenge.nonce, sizeof challenge.nonce) != 1) {
    throw Error(error_message("comm", "no random bytes for a handshake nonce"));
  }
  write_exact(fd, &challenge, sizeof challenge, deadline, from);
  Hello hello{};
  read_exact(fd, &hello, sizeof hello, deadline, from);
  std::string why;
  if (hello.magic != kHandshakeMagic) {
    why = fmt::format("bad magic 0x{:08x}", +hello.magic);
  } else if (hello.version != kProtocolVersion) {
    why = fmt::format("protocol version {} (this rank speaks {})", +hello.version, kProtocolVersion);
  } else {
    Hello expected = hello;
    hello_mac(secret, challenge.nonce, expected);
    if (CRYPTO_memcmp(expected.mac, hello.mac, sizeof hello.mac) != 0) {
      why = "wrong job secret";
    } else if (hello.world != static_cast<uint32_t>(world)) {
      why = fmt::format("world size {} (this job has {})", +hello.world, world);
    } else if (hello.sockets_per_link != static_cast<uint32_t>(sockets_per_link)) {
      why = fmt::format("{} sockets per link (this rank uses {})", +hello.sockets_per_link, sockets_per_link);
    } else if (hello.rank >= static_cast<uint32_t>(world) || hello.socket_index >= hello.sockets_per_link) {
      why = fmt::format("rank {} socket {} out of range", +hello.rank, +hello.socket_index);
    }
  }
  Verdict verdict{kHandshakeMagic, why.empty() ? 1u : 0u};
  write_exact(fd, &verdict, sizeof verdict, deadline, from);
  if (!why.empty()) throw FormatError(error_message("comm", "refused a connection from {}: {}", from, why));
  return {static_cast<int>(hello.rank), static_cast<int>(hello.socket_index)};
}

}  // namespace orchard::comm::tcp

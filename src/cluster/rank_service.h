#pragma once
// An agent starts a rank of a job on request, so a cluster needs no ssh server anywhere: the
// machine that planned the job asks each chosen machine's `orchard agent` to run its rank (the
// same orchard binary, `run`, `serve` or `chat` with the job's arguments and comm environment),
// and the agent streams the rank's output and exit status back. When the requester goes away (its
// connection drops, sends no sealed frame for kRankSilenceLimit, or carries a frame that is not
// the requester's) or asks, the agent stops the rank.
//
// Protocol (on the agent's TCP port, after a ProbeHello for kOpStart that the agent accepted):
//   agent -> client: 16 random bytes, a challenge fresh for this connection;
//   client -> agent: u32 length, then the request JSON {"args": [...], "env": {...}, "cwd": "..."}
//                    sealed (seal_start_request): encrypted, since its env carries the job's comm
//                    secret, and authenticated with the cluster name and the challenge;
//   agent -> client: frames (FrameHeader + payload): kStarted (the pid), kStdout/kStderr
//                    (bytes as the rank wrote them), kHeartbeat (each second), then kExit
//                    (JSON {"code", "signaled"}), each payload sealed (the rank's output may
//                    hold the job's text); or, instead of kStarted, kRefused (why, in clear, for
//                    a request it will not run);
//   client -> agent: frames with an empty sealed payload: ControlKind::kHeartbeat each second,
//                    kStop to stop the rank.
// The challenge makes a request good for one connection only: a recorded one replayed later
// meets another challenge, whatever the clocks of the two machines say.
// Sealing is libsodium's XChaCha20-Poly1305 AEAD: key HMAC-SHA256(secret, "orchard start
// request" || cluster name), a random 24-byte nonce sent before the ciphertext, associated data
// the cluster name || the challenge. Frames are sealed the same way with the key HMAC-SHA256(
// secret, "orchard rank output" || cluster name) and associated data cluster name || challenge ||
// u32 kind || u64 frame number, so a relay cannot read, replay, reorder or drop them unseen; the
// requester's frames likewise with the key HMAC-SHA256(secret, "orchard rank control" || cluster
// name), numbered apart, so a relay can neither stop a rank by a frame of its own nor keep a
// gone requester's rank alive by replaying its heartbeats. The agent takes a requester frame that
// does not open as a dropped connection: it stops the rank and reports the frame (a relay able
// to inject bytes could as well cut the connection, which stops the rank too).
// (An open cluster, secret "", gets a key anyone can derive:
// it keeps nothing from a listener, as its other messages do not.)
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/transport/tcp/socket.h"
#include "parallel/launch.h"

namespace orchard::cluster {

inline constexpr size_t kChallengeBytes = 16;
inline constexpr uint32_t kMaxStartRequestBytes = 1u << 20;  // sealed, nonce and tag included
inline constexpr uint32_t kMaxFrameBytes = 1u << 20;
// Either side that hears nothing for this long takes the other as gone.
inline constexpr std::chrono::milliseconds kRankSilenceLimit{10000};

enum class FrameKind : uint32_t { kStarted = 1, kStdout = 2, kStderr = 3, kHeartbeat = 4, kExit = 5, kRefused = 6 };
// The requester's frames to the agent once the rank has started (their payload is empty).
enum class ControlKind : uint32_t { kHeartbeat = 1, kStop = 2 };
inline constexpr uint32_t kMaxControlBytes = 64;  // an empty payload sealed is its 24-byte nonce and 16-byte tag

#pragma pack(push, 1)
struct FrameHeader {
  uint32_t kind;
  uint32_t bytes;  // payload that follows, at most kMaxFrameBytes
};
static_assert(sizeof(FrameHeader) == 8);
#pragma pack(pop)

// The start request `request` sealed for the agent that sent `challenge`: nonce || ciphertext.
std::vector<uint8_t> seal_start_request(const std::string& cluster, const std::string& secret,
                                        const uint8_t (&challenge)[kChallengeBytes], const std::string& request);

struct RankServiceOptions {
  std::string cluster, secret;
  std::string executable;  // what the agent runs as a rank: its own binary
  std::string cache_dir;   // given to the rank as ORCHARD_CACHE_DIR (received shards); empty: the rank's default
};

// Agent side, for a connection whose kOpStart hello was accepted: checks the request, runs the
// rank and streams it until it ends; stops it when the requester goes away or `stop` turns
// true. Throws Error on a protocol error, a refused request, or (once the rank is stopped) a
// requester frame not sealed for this connection and place (the caller logs it).
void serve_rank_start(comm::tcp::Fd fd, const std::string& from, const RankServiceOptions& options,
                      const std::atomic<bool>& stop);

// Client side: asks the agent at `agent` ("addr:port") to run `rank` (its command without
// command[0], which the agent replaces with its own binary), naming the machine `machine` in
// every message. The rank's output goes to this process's stdout and stderr. Throws Error when
// the agent cannot be reached or refuses.
std::unique_ptr<parallel::RankProcess> start_rank_by_agent(const std::string& agent, const std::string& machine,
                                                           const std::string& cluster, const std::string& secret,
                                                           const parallel::RankCommand& rank);

}  // namespace orchard::cluster

#pragma once
// Node identity: an Ed25519 key pair (libsodium), and the signing of every node request. The
// signed string is canonical: METHOD \n PATH \n TIMESTAMP_MS \n NONCE \n hex(SHA-256(body)), so
// a signature covers the body and cannot be moved to another path, time or request.
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

namespace orchard::network {

class NodeKey {
 public:
  static NodeKey generate();
  // Reads the key file, or creates it (mode 0600, owner only) when absent. Throws Error when the
  // file is unreadable, malformed, or readable by others (a leaked key can spend the node's
  // reputation).
  static NodeKey load_or_create(const std::string& path);
  const std::string& public_hex() const { return public_hex_; }
  std::string sign_hex(std::string_view message) const;

 private:
  std::string public_hex_;
  std::string secret_;  // crypto_sign_SECRETKEYBYTES raw bytes
};

// A node id as the coordinator keys it: lower-case hex.
std::string canonical_node_id(std::string_view id);

bool verify_signature(const std::string& public_hex, std::string_view message, const std::string& signature_hex);

std::string canonical_request(std::string_view method, std::string_view path, int64_t timestamp_ms,
                              std::string_view nonce, std::string_view body);

// The headers a signed request carries.
inline constexpr const char* kNodeHeader = "X-Orchard-Node";
inline constexpr const char* kTimestampHeader = "X-Orchard-Timestamp";
inline constexpr const char* kNonceHeader = "X-Orchard-Nonce";
inline constexpr const char* kSignatureHeader = "X-Orchard-Signature";

struct SignedHeaders {
  std::string node, timestamp, nonce, signature;
};
SignedHeaders sign_request(const NodeKey& key, std::string_view method, std::string_view path, std::string_view body,
                           int64_t now_ms);

// Refuses forged, replayed and stale requests. A request is fresh when its timestamp is within
// the window of now; a nonce is remembered for twice the window, so a replay inside the window
// is refused and one outside it is stale. After a restart the nonce memory is empty, so requests
// timestamped before the guard was created are refused as well.
class RequestGuard {
 public:
  RequestGuard(int64_t window_ms, int64_t created_ms) : window_ms_(window_ms), created_ms_(created_ms) {}
  // "" when accepted, else why not (for a 401 body). Canonicalises h.node first (lower-case hex):
  // signature and replay checks, and the caller, see one id per key.
  std::string check(SignedHeaders& h, std::string_view method, std::string_view path, std::string_view body,
                    int64_t now_ms);
  // Keeps the nonces with `remember` (given "node/nonce" and the timestamp; true the first time
  // any process saw it) instead of in this process, so that coordinators sharing a database
  // refuse each other's replays. remember forgets what is older than twice the window.
  void share(std::function<bool(const std::string& id, int64_t ts)> remember) { remember_ = std::move(remember); }
  int64_t window_ms() const { return window_ms_; }

 private:
  int64_t window_ms_, created_ms_;
  std::function<bool(const std::string&, int64_t)> remember_;
  std::mutex mu_;
  std::set<std::pair<int64_t, std::string>> by_time_;  // (timestamp, node/nonce) for expiry
  std::set<std::string> seen_;
};

}  // namespace orchard::network

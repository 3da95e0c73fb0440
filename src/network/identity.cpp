#include "network/identity.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <fmt/format.h>
#include <fstream>

#include "core/error.h"
#include "network/store/store.h"

namespace orchard::network {
namespace {

std::string to_hex(const unsigned char* p, size_t n) {
  std::string hex(2 * n + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), p, n);
  hex.pop_back();
  return hex;
}

bool from_hex(const std::string& hex, unsigned char* out, size_t n) {
  size_t len = 0;
  return hex.size() == 2 * n && sodium_hex2bin(out, n, hex.data(), hex.size(), nullptr, &len, nullptr) == 0 && len == n;
}

void init_sodium() { ORCHARD_CHECK(sodium_init() >= 0, "libsodium failed to initialize"); }

}  // namespace

NodeKey NodeKey::generate() {
  init_sodium();
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_keypair(pk, sk);
  NodeKey k;
  k.public_hex_ = to_hex(pk, sizeof pk);
  k.secret_.assign(reinterpret_cast<char*>(sk), sizeof sk);
  sodium_memzero(sk, sizeof sk);
  return k;
}

NodeKey NodeKey::load_or_create(const std::string& path) {
  init_sodium();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    NodeKey k = generate();
    // O_EXCL: two agents starting at once must not overwrite each other's key.
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) throw Error(error_message("network", "cannot create key file {}", path));
    std::string text = to_hex(reinterpret_cast<const unsigned char*>(k.secret_.data()), k.secret_.size()) + "\n";
    bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    if (!ok) throw Error(error_message("network", "cannot write key file {}", path));
    return k;
  }
  if ((st.st_mode & 077) != 0)
    throw Error(error_message("network", "key file {} is readable by others (mode {:o}); chmod 600 it", path,
                              st.st_mode & 0777));
  std::ifstream in(path);
  std::string hex;
  in >> hex;
  unsigned char sk[crypto_sign_SECRETKEYBYTES], pk[crypto_sign_PUBLICKEYBYTES];
  if (!from_hex(hex, sk, sizeof sk)) throw FormatError(error_message("network", "key file {} is not a node key", path));
  crypto_sign_ed25519_sk_to_pk(pk, sk);
  NodeKey k;
  k.public_hex_ = to_hex(pk, sizeof pk);
  k.secret_.assign(reinterpret_cast<char*>(sk), sizeof sk);
  sodium_memzero(sk, sizeof sk);
  return k;
}

std::string NodeKey::sign_hex(std::string_view message) const {
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(message.data()), message.size(),
                       reinterpret_cast<const unsigned char*>(secret_.data()));
  return to_hex(sig, sizeof sig);
}

bool verify_signature(const std::string& public_hex, std::string_view message, const std::string& signature_hex) {
  init_sodium();
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sig[crypto_sign_BYTES];
  if (!from_hex(public_hex, pk, sizeof pk) || !from_hex(signature_hex, sig, sizeof sig)) return false;
  return crypto_sign_verify_detached(sig, reinterpret_cast<const unsigned char*>(message.data()), message.size(), pk) ==
         0;
}

std::string canonical_request(std::string_view method, std::string_view path, int64_t timestamp_ms,
                              std::string_view nonce, std::string_view body) {
  return fmt::format("{}\n{}\n{}\n{}\n{}", method, path, timestamp_ms, nonce, sha256_hex(body));
}

SignedHeaders sign_request(const NodeKey& key, std::string_view method, std::string_view path, std::string_view body,
                           int64_t now_ms) {
  SignedHeaders h{key.public_hex(), std::to_string(now_ms), random_hex(16), ""};
  h.signature = key.sign_hex(canonical_request(method, path, now_ms, h.nonce, body));
  return h;
}

std::string canonical_node_id(std::string_view id) {
  std::string out(id);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string RequestGuard::check(SignedHeaders& h, std::string_view method, std::string_view path,
                                std::string_view body, int64_t now_ms) {
  if (h.node.empty() || h.timestamp.empty() || h.nonce.empty() || h.signature.empty()) return "unsigned request";
  // The hex decoder takes either case: one key must be one id, or a replay with the id's case
  // changed would pass as new, and the node's records would split.
  h.node = canonical_node_id(h.node);
  int64_t ts = 0;
  try {
    ts = std::stoll(h.timestamp);
  } catch (const std::exception&) {
    return "bad timestamp";
  }
  if (h.nonce.size() < 16 || h.nonce.size() > 64) return "bad nonce";
  if (!verify_signature(h.node, canonical_request(method, path, ts, h.nonce, body), h.signature))
    return "bad signature";
  if (ts < now_ms - window_ms_ || ts > now_ms + window_ms_) return "stale request (timestamp outside the window)";
  if (ts < created_ms_) return "stale request (sent before the coordinator started)";
  if (remember_) return remember_(h.node + "/" + h.nonce, ts) ? "" : "replayed request";
  std::lock_guard lock(mu_);
  while (!by_time_.empty() && by_time_.begin()->first < now_ms - 2 * window_ms_) {
    seen_.erase(by_time_.begin()->second);
    by_time_.erase(by_time_.begin());
  }
  std::string id = h.node + "/" + h.nonce;
  if (!seen_.insert(id).second) return "replayed request";
  by_time_.emplace(ts, id);
  return "";
}

}  // namespace orchard::network

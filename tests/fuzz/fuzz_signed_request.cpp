// libFuzzer target for the network's signed-request guard: the input rewrites the headers,
// method, path, body and clock of one genuinely signed request. Whatever the input, the guard
// must answer (never throw or crash), and it may accept only the original request — the same
// method, path, body, timestamp and nonce, from the same key — and only once.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "network/identity.h"

namespace {

using orchard::network::NodeKey;
using orchard::network::RequestGuard;
using orchard::network::SignedHeaders;

constexpr int64_t kNow = 1'800'000'000'000;
constexpr int64_t kWindow = 60'000;
constexpr const char* kMethod = "POST";
constexpr const char* kPath = "/v1/nodes/complete";
constexpr const char* kBody = R"({"job":"j1","attempt":1,"result":{"text":"hi"}})";

// Reads length-prefixed fields off the input: one byte of length, then that many bytes.
struct Fields {
  const uint8_t* at;
  size_t left;
  bool next(std::string& out) {
    if (left == 0) return false;
    size_t n = std::min<size_t>(*at, left - 1);
    out.assign(reinterpret_cast<const char*>(at + 1), n);
    at += n + 1;
    left -= n + 1;
    return true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const NodeKey key = NodeKey::generate();
  static const SignedHeaders original = orchard::network::sign_request(key, kMethod, kPath, kBody, kNow);
  if (size == 0) return 0;
  // The first byte says which parts the fields that follow replace (bit i: part i).
  const uint8_t replace = data[0];
  Fields fields{data + 1, size - 1};
  SignedHeaders h = original;
  std::string method = kMethod, path = kPath, body = kBody, clock;
  std::string* parts[] = {&h.node, &h.timestamp, &h.nonce, &h.signature, &method, &path, &body, &clock};
  for (int i = 0; i < 8; ++i)
    if (replace & (1 << i)) fields.next(*parts[i]);
  int64_t now = kNow;
  if (!clock.empty()) now += static_cast<int8_t>(clock[0]) * 1000;
  RequestGuard guard(kWindow, kNow - kWindow);
  // Twice: the second time is a replay and must be refused whatever the first said.
  for (int attempt = 0; attempt < 2; ++attempt) {
    SignedHeaders copy = h;
    const std::string why = guard.check(copy, method, path, body, now);
    if (!why.empty()) continue;
    const bool genuine = attempt == 0 && copy.node == original.node && copy.nonce == original.nonce &&
                         std::stoll(copy.timestamp) == std::stoll(original.timestamp) && method == kMethod &&
                         path == kPath && body == kBody;
    if (!genuine) std::abort();
  }
  return 0;
}

#include "cluster/cluster_status.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <thread>
#include <nlohmann/json.hpp>

#include "cluster/cluster_page.h"
#include "cluster/planner.h"
#include "comm/transport/tcp/socket.h"
#include "core/error.h"

namespace orchard::cluster {
namespace {

namespace tcp = comm::tcp;

constexpr size_t kMaxHead = 8192;

// A model preset's characters: anything else in the query is refused, not decoded.
bool plain_preset(const std::string& s) {
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == ':')) return false;
  return !s.empty();
}

// The value of header `lower_name` (lower case) in a request head, "" when absent.
std::string header_value(const std::string& head, std::string_view lower_name) {
  std::string lower(head.size(), ' ');
  std::transform(head.begin(), head.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  const size_t at = lower.find(fmt::format("\r\n{}:", lower_name));
  if (at == std::string::npos) return "";
  size_t begin = at + 3 + lower_name.size();
  const size_t end = head.find("\r\n", begin);
  while (begin < end && head[begin] == ' ') ++begin;
  return head.substr(begin, end - begin);
}

struct Reply {
  int status = 200;
  std::string_view content_type = "application/json";
  std::string_view body;
  std::string headers{};  // more header lines, each ending in \r\n
};

void send(int fd, const Reply& r, const std::string& peer) {
  const char* reason = r.status == 200   ? "OK"
                       : r.status == 304 ? "Not Modified"
                       : r.status == 404 ? "Not Found"
                                         : "Bad Request";
  const std::string head =
      fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n", r.status,
                  reason, r.content_type, r.body.size(), r.headers);
  const auto deadline = tcp::Clock::now() + std::chrono::seconds(5);
  tcp::write_exact(fd, head.data(), head.size(), deadline, peer);
  tcp::write_exact(fd, r.body.data(), r.body.size(), deadline, peer);
}

void answer(int fd, int status, const nlohmann::json& body, const std::string& peer) {
  const std::string text = body.dump();
  send(fd, {.status = status, .body = text}, peer);
}

// A file of the cluster page, cached as web_files.h's send_file does for the other pages:
// content-hashed assets for a year, the rest revalidated by ETag.
void send_page_file(int fd, const core::EmbeddedFile& file, const std::string& head, const std::string& peer) {
  const bool hashed = file.path.starts_with("assets/");
  const core::EncodedBytes body = core::encoded_for(file, header_value(head, "accept-encoding"));
  Reply r{.content_type = file.content_type, .body = body.bytes};
  r.headers = fmt::format(
      "Cache-Control: {}\r\nETag: {}\r\nX-Content-Type-Options: nosniff\r\nContent-Security-Policy: {}\r\n"
      "Referrer-Policy: no-referrer\r\nVary: Accept-Encoding\r\n",
      hashed ? "public, max-age=31536000, immutable" : "no-cache", file.etag, core::kEmbeddedPageCsp);
  if (!body.content_encoding.empty()) r.headers += fmt::format("Content-Encoding: {}\r\n", body.content_encoding);
  if (header_value(head, "if-none-match") == file.etag) {
    r.status = 304;
    r.body = {};
  }
  send(fd, r, peer);
}

nlohmann::json error_body(const std::string& message) { return {{"error", message}}; }

}  // namespace

nlohmann::json cluster_status(const Topology& t, const std::string& model) {
  using nlohmann::json;
  json machines = json::array();
  for (const Announcement& a : t.machines)
    machines.push_back({{"node_id", a.node_id},
                        {"hostname", a.hostname},
                        {"chip", a.chip.empty() ? a.cpu_brand : a.chip},
                        {"os", a.os + " " + a.os_version},
                        {"cores", a.cores},
                        {"memory_total_bytes", a.memory_total_bytes},
                        {"memory_free_bytes", a.memory_free_bytes},
                        {"decode_gbs", a.decode_gbs},
                        {"compute_gflops", a.compute_gflops},
                        {"models", a.models}});
  json links = json::array();
  for (const LinkMeasurement& l : t.links)
    links.push_back({{"from", l.from_node},
                     {"to", l.to_node},
                     {"from_addr", l.from_addr},
                     {"to_addr", l.to_addr},
                     {"rtt_us", l.rtt_us_p50},
                     {"gbit_s", l.gbps},
                     {"transport", "tcp"}});  // RDMA is not implemented (docs/cluster.md, Limits)
  json out = {{"machines", std::move(machines)},
              {"links", std::move(links)},
              {"presets", {{"shapes", ModelFacts::preset_shapes()}, {"types", ModelFacts::preset_types()}}}};
  if (model.empty()) return out;
  try {
    PlanRequest r;
    r.model = ModelFacts::from_preset(model);
    r.work.context = r.model.config.context_length;
    for (const Announcement& a : t.machines) r.machines.push_back(machine_spec(a));
    r.links = link_matrix(t, r.default_link);
    const Plan plan = make_plan(r);
    out["plan"] = plan_to_json(plan);
    out["plan"]["model"] = model;
  } catch (const Error& e) {
    out["plan"] = {{"model", model}, {"error", e.what()}};
  }
  return out;
}

std::pair<int, nlohmann::json> cluster_status_answer(const std::string& query, const std::function<Topology()>& topology) {
  if (query.empty()) return {200, cluster_status(topology(), "")};
  if (query.rfind("model=", 0) != 0 || !plain_preset(query.substr(6)))
    return {400, error_body("the query is model=PRESET, e.g. model=llama-70b:q4_k_m")};
  return {200, cluster_status(topology(), query.substr(6))};
}

bool starts_with_http_get(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = tcp::Clock::now() + timeout;
  char head[4];
  for (;;) {
    const ssize_t n = ::recv(fd, head, sizeof head, MSG_PEEK | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(sizeof head)) return std::memcmp(head, "GET ", sizeof head) == 0;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    if (tcp::Clock::now() >= deadline) return false;  // the probe code then reports the silence
    // Fewer than 4 bytes so far: wait for more.
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 10);
    if (n > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void serve_status_request(int fd, const std::string& from, const std::function<Topology()>& topology,
                          std::chrono::milliseconds timeout) {
  const std::string peer = "HTTP client " + from;
  const auto deadline = tcp::Clock::now() + timeout;
  std::string head;
  while (head.find("\r\n\r\n") == std::string::npos) {
    if (head.size() >= kMaxHead) return answer(fd, 400, error_body("request head over 8 KiB"), peer);
    char byte;
    tcp::read_exact(fd, &byte, 1, deadline, peer);
    head += byte;
  }
  // "GET /cluster?model=NAME HTTP/1.1"
  const size_t target_at = head.find(' ') + 1, target_end = head.find(' ', target_at);
  if (head.compare(0, 4, "GET ") != 0 || target_end == std::string::npos)
    return answer(fd, 400, error_body("expected GET / or GET /cluster[?model=PRESET]"), peer);
  const std::string target = head.substr(target_at, target_end - target_at);
  const std::string path = target.substr(0, target.find('?'));
  if (path == "/" || path == "/index.html")
    return send_page_file(fd, *core::find_embedded_file(cluster_page_files(), "index.html"), head, peer);
  if (path.starts_with("/assets/")) {
    if (const core::EmbeddedFile* file = core::find_embedded_file(cluster_page_files(), path.substr(1)))
      return send_page_file(fd, *file, head, peer);
  }
  if (path != "/cluster") return answer(fd, 404, error_body("no such page: " + path + " (try / or /cluster)"), peer);
  const size_t q = target.find('?');
  const auto [status, body] = cluster_status_answer(q == std::string::npos ? "" : target.substr(q + 1), topology);
  answer(fd, status, body, peer);
}

}  // namespace orchard::cluster

#include "cluster/cluster_status.h"

#include <poll.h>
#include <sys/socket.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <thread>
#include <nlohmann/json.hpp>

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

void answer(int fd, int status, const nlohmann::json& body, const std::string& peer) {
  const char* reason = status == 200 ? "OK" : status == 404 ? "Not Found" : "Bad Request";
  const std::string text = body.dump();
  const std::string head = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", status,
      reason, text.size());
  const auto deadline = tcp::Clock::now() + std::chrono::seconds(5);
  tcp::write_exact(fd, head.data(), head.size(), deadline, peer);
  tcp::write_exact(fd, text.data(), text.size(), deadline, peer);
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
  json out = {{"machines", std::move(machines)}, {"links", std::move(links)}};
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
    return answer(fd, 400, error_body("expected GET /cluster[?model=PRESET]"), peer);
  const std::string target = head.substr(target_at, target_end - target_at);
  const std::string path = target.substr(0, target.find('?'));
  if (path != "/cluster") return answer(fd, 404, error_body("no such page: " + path + " (try /cluster)"), peer);
  std::string model;
  if (const size_t q = target.find('?'); q != std::string::npos) {
    const std::string query = target.substr(q + 1);
    if (query.rfind("model=", 0) != 0 || !plain_preset(query.substr(6)))
      return answer(fd, 400, error_body("the query is model=PRESET, e.g. model=llama-70b:q4_k_m"), peer);
    model = query.substr(6);
  }
  answer(fd, 200, cluster_status(topology(), model), peer);
}

}  // namespace orchard::cluster

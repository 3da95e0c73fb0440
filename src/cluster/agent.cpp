#include "cluster/agent.h"

#include <openssl/rand.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "cluster/cluster_status.h"
#include "cluster/link_probe.h"
#include "cluster/machine_probe.h"
#include "cluster/rank_service.h"
#include "comm/launcher.h"
#include "comm/transport/tcp/socket.h"
#include "core/error.h"

namespace orchard::cluster {
namespace {

std::string random_node_id() {
  uint8_t bytes[8];
  RAND_bytes(bytes, sizeof bytes);
  std::string id;
  for (uint8_t b : bytes) id += fmt::format("{:02x}", b);
  return id;
}

std::vector<std::string> model_files(const std::string& dir) {
  std::vector<std::string> names;
  if (dir.empty()) return names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.is_regular_file() && entry.path().extension() == ".gguf") names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void fill_local(Announcement& a, const std::string& models_dir) {
  const LocalMachine m = detect_local_machine();
  a.hostname = m.hostname;
  a.os = m.os;
  a.os_version = m.os_version;
  a.cpu_brand = m.cpu_brand;
  a.chip = m.chip;
  a.cores = m.cores;
  a.performance_cores = m.performance_cores;
  a.memory_total_bytes = m.memory_total_bytes;
  a.memory_free_bytes = m.memory_free_bytes;
  a.interfaces = m.interfaces;
  a.models = model_files(models_dir);
}

// Waits up to `timeout` until `bytes` bytes have come on fd and copies them to `out` without
// taking them; false when they did not come (the caller's read then reports why).
bool peek_bytes(int fd, void* out, size_t bytes, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const ssize_t n = ::recv(fd, out, bytes, MSG_PEEK | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(bytes)) return true;
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    if (Clock::now() >= deadline) return false;
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 10);
    if (n > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // some came: poll would not wait
  }
}

}  // namespace

Agent::Agent(AgentOptions options) : options_(std::move(options)) {
  self_.node_id = random_node_id();
  self_.agent_port = options_.agent_port;
  fill_local(self_, options_.models_dir);
  if (options_.measure_machine) {
    const MachineProbe probe = probe_machine(options_.probe_threads);
    self_.decode_gbs = probe.decode_gbs;
    self_.compute_gflops = probe.compute_gflops;
  }
}

Announcement Agent::announcement() const {
  std::lock_guard lock(mutex_);
  Announcement a = self_;
  for (const auto& [key, link] : links_)
    if (peers_.count(link.to_node)) a.links.push_back(link);
  return a;
}

Topology Agent::topology() const {
  std::vector<Announcement> all{announcement()};
  std::lock_guard lock(mutex_);
  for (const auto& [id, peer] : peers_) all.push_back(peer.announcement);
  return topology_from_announcements(std::move(all));
}

void Agent::run(const std::atomic<bool>& stop) {
  DiscoverySocket socket(options_.port);
  // Bind the TCP port before announcing it.
  comm::tcp::Fd listener = comm::tcp::listen_on("", options_.agent_port);
  const RankServiceOptions rank_service{options_.cluster, options_.secret, comm::current_executable(), options_.cache_dir};
  // Ranks end when the agent does (serve_rank_start stops them once `ending` is set).
  std::atomic<bool> ending{false};
  // Each connection is served on a thread of its own, so a slow client (a browser on a bad
  // link, a stalled or hostile peer) keeps no other one waiting. At most max_connections are
  // read at once; more are closed at once. A rank, once started, runs on its connection's
  // thread for as long as it lives and is no longer counted.
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done = std::make_shared<std::atomic<bool>>(false);
  };
  std::vector<Connection> connections;
  std::atomic<int> reading{0};
  // Link measurements still run one at a time: a probe measures one link, and a second one
  // running beside it would share the CPU and the wire and spoil both figures.
  std::mutex measuring;
  auto serve_connection = [&](comm::tcp::Fd fd, const std::string& from) {
    bool counted = true;
    auto read_done = [&] {
      if (counted) --reading;
      counted = false;
    };
    try {
      if (starts_with_http_get(fd.get(), options_.probe.timeout)) {  // `GET /cluster`, the page: a browser, curl
        serve_status_request(fd.get(), from, [this] { return topology(); }, options_.probe.timeout);
        read_done();
        return;
      }
      ProbeHello hello{};
      std::unique_lock lock(measuring, std::defer_lock);
      if (peek_bytes(fd.get(), &hello, sizeof hello, options_.probe.timeout) && (hello.op == kOpPing || hello.op == kOpBulk))
        lock.lock();
      const uint16_t op = serve_probe_connection(fd.get(), from, options_.cluster, options_.secret,
                                                 [this] { return to_json(topology()).dump(); }, options_.probe.timeout);
      if (lock.owns_lock()) lock.unlock();
      read_done();
      if (op != kOpStart) return;
    } catch (const std::exception& e) {
      spdlog::debug("{}", e.what());
      read_done();
      return;
    }
    try {
      serve_rank_start(std::move(fd), from, rank_service, ending);
    } catch (const std::exception& e) {
      spdlog::warn("{}", e.what());
    }
  };
  std::thread server([&] {
    while (!stop && !failed_) {
      std::string from;
      comm::tcp::Fd fd = comm::tcp::accept_until(listener.get(), Clock::now() + std::chrono::milliseconds(200), &from);
      std::erase_if(connections, [](Connection& c) {
        if (!*c.done) return false;
        c.thread.join();
        return true;
      });
      if (fd.get() < 0) continue;
      if (reading >= options_.max_connections) {
        spdlog::debug("[cluster] {} connections being read already: closed the one from {}", reading.load(), from);
        continue;
      }
      ++reading;
      Connection& c = connections.emplace_back();
      c.thread = std::thread([&serve_connection, from, done = c.done, fd = std::move(fd)]() mutable {
        serve_connection(std::move(fd), from);
        *done = true;
      });
    }
  });
  auto end_threads = [&] {
    server.join();
    ending = true;
    for (Connection& c : connections) c.thread.join();
  };
  std::thread prober([&] { probe_peers(stop); });

  std::vector<uint8_t> datagram;
  auto next_announce = Clock::now();
  try {
    while (!stop) {
      if (Clock::now() >= next_announce) {
        {
          std::lock_guard lock(mutex_);
          fill_local(self_, options_.models_dir);  // free memory, cables and files change
        }
        socket.send(encode_announcement(announcement(), options_.cluster, options_.secret));
        next_announce = Clock::now() + options_.announce_every;
      }
      const auto until = std::min(next_announce, Clock::now() + std::chrono::milliseconds(200));
      if (!socket.receive(datagram, until)) continue;
      std::string why;
      std::optional<Announcement> a = decode_announcement(datagram, options_.cluster, options_.secret, &why);
      if (!a) {
        spdlog::debug("[cluster] ignored a datagram: {}", why);
        continue;
      }
      if (a->node_id == self_.node_id) continue;
      std::lock_guard lock(mutex_);
      auto [it, fresh] = peers_.try_emplace(a->node_id);
      if (fresh) spdlog::info("[cluster] found {} ({}, {})", a->hostname, a->chip.empty() ? a->cpu_brand : a->chip, a->node_id);
      it->second.announcement = std::move(*a);
      it->second.last_heard = Clock::now();
      for (auto p = peers_.begin(); p != peers_.end();) {
        if (Clock::now() - p->second.last_heard > options_.forget_after) {
          spdlog::info("[cluster] lost {} ({})", p->second.announcement.hostname, p->first);
          p = peers_.erase(p);
        } else {
          ++p;
        }
      }
    }
  } catch (...) {
    failed_ = true;
    end_threads();
    prober.join();
    throw;
  }
  end_threads();
  prober.join();
}

void Agent::probe_peers(const std::atomic<bool>& stop) {
  while (!stop && !failed_) {
    // One peer per round, the least recently measured first.
    std::optional<Announcement> target;
    {
      std::lock_guard lock(mutex_);
      Peer* oldest = nullptr;
      for (auto& [id, peer] : peers_) {
        const bool due = !peer.probed || Clock::now() - peer.last_probed > options_.probe_every;
        if (due && (!oldest || peer.last_probed < oldest->last_probed)) oldest = &peer;
      }
      if (oldest) {
        oldest->probed = true;
        oldest->last_probed = Clock::now();
        target = oldest->announcement;
      }
    }
    if (!target) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      continue;
    }
    std::vector<NetInterface> locals;
    {
      std::lock_guard lock(mutex_);
      locals = self_.interfaces;
    }
    for (const NetInterface& local : locals) {
      for (const NetInterface& remote : target->interfaces) {
        // A pair on one subnet is one cable (or one switch); other pairs would take a route
        // through whatever cable the routing table picks and measure nothing new.
        if (stop || !same_subnet(local.address, remote.address, local.prefix_length)) continue;
        LinkMeasurement l{self_.node_id, local.name, local.address, target->node_id, remote.name, remote.address, 0, 0};
        try {
          const LinkFigures f = probe_link(local.address, remote.address, target->agent_port, options_.cluster,
                                           options_.secret, options_.probe);
          l.rtt_us_p50 = f.rtt_us_p50;
          l.gbps = f.gbps;
        } catch (const std::exception& e) {
          spdlog::warn("[cluster] probing {} {} -> {}: {}", target->hostname, local.address, remote.address, e.what());
          continue;
        }
        std::lock_guard lock(mutex_);
        links_[target->node_id + "|" + local.address + "|" + remote.address] = l;
      }
    }
  }
}

Topology find_cluster(const std::string& cluster, const std::string& secret, uint16_t port, uint16_t agent_port,
                      std::chrono::milliseconds wait) {
  try {
    return topology_from_json(
        nlohmann::json::parse(query_topology("127.0.0.1", agent_port, cluster, secret, std::chrono::milliseconds(2000))));
  } catch (const Error& e) {
    spdlog::debug("[cluster] no local agent ({}); listening for {} ms", e.what(), wait.count());
  }
  return topology_from_announcements(listen_for_peers(cluster, secret, port, wait));
}

Topology local_cluster(const std::string& cluster, const std::string& secret, uint16_t agent_port,
                       std::chrono::milliseconds wait) {
  try {
    return topology_from_json(nlohmann::json::parse(query_topology("127.0.0.1", agent_port, cluster, secret, wait)));
  } catch (const std::exception& e) {
    spdlog::debug("[cluster] no local agent ({}): the cluster page shows this machine alone", e.what());
  }
  Announcement self;
  self.node_id = "local";
  fill_local(self, "");
  return topology_from_announcements({self});
}

}  // namespace orchard::cluster

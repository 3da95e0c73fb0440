#include "comm/bootstrap.h"

#include <nlohmann/json.hpp>
#include <openssl/rand.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "comm/link_emulator.h"

namespace orchard::comm {
namespace {

std::string with_port(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos && host.front() != '[') return fmt::format("[{}]:{}", host, port);  // IPv6
  return fmt::format("{}:{}", host, port);
}

bool has_port(const std::string& address) {
  if (address.front() == '[') return address.find("]:") != std::string::npos;
  return std::count(address.begin(), address.end(), ':') == 1;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  long value = std::strtol(v, &end, 10);
  if (*end != '\0') throw Error(error_message("comm", "{}='{}' is not an integer", name, v));
  return static_cast<int>(value);
}

}  // namespace

std::vector<std::vector<std::string>> parse_hostfile(const std::string& json_text, uint16_t base_port) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(error_message("comm", "hostfile is not JSON: {}", e.what()));
  }
  if (doc.is_object() && doc.contains("hosts")) doc = doc["hosts"];
  if (!doc.is_array() || doc.empty()) throw FormatError(error_message("comm", "hostfile must list at least one host"));
  std::vector<std::vector<std::string>> endpoints;
  for (size_t rank = 0; rank < doc.size(); ++rank) {
    const auto& entry = doc[rank];
    const uint16_t port = static_cast<uint16_t>(base_port + rank);
    std::vector<std::string> addresses;
    auto add = [&](const nlohmann::json& a) {
      if (!a.is_string() || a.get<std::string>().empty()) {
        throw FormatError(error_message("comm", "hostfile host {}: addresses must be strings", rank));
      }
      const std::string s = a.get<std::string>();
      addresses.push_back(has_port(s) ? s : with_port(s, port));
    };
    if (entry.is_object()) {
      if (entry.contains("ips") && entry["ips"].is_array() && !entry["ips"].empty()) {
        for (const auto& ip : entry["ips"]) add(ip);
      } else if (entry.contains("ssh")) {
        add(entry["ssh"]);
      } else {
        throw FormatError(error_message("comm", "hostfile host {} has neither \"ips\" nor \"ssh\"", rank));
      }
    } else if (entry.is_array() && !entry.empty()) {
      for (const auto& a : entry) add(a);
    } else if (entry.is_string()) {
      add(entry);
    } else {
      throw FormatError(error_message("comm", "hostfile host {} is neither an object, a list nor a string", rank));
    }
    endpoints.push_back(std::move(addresses));
  }
  return endpoints;
}

Config config_from_env() {
  Config c;
  if (const char* v = env("ORCHARD_BACKEND")) c.backend = parse_backend(v);
  c.rank = env_int("ORCHARD_RANK", 0);
  c.world = env_int("ORCHARD_WORLD", 1);
  const auto base_port = static_cast<uint16_t>(env_int("ORCHARD_PORT", kDefaultBasePort));
  if (const char* path = env("ORCHARD_HOSTFILE")) {
    std::ifstream in(path);
    if (!in) throw Error(error_message("comm", "cannot read hostfile {}", path));
    std::stringstream text;
    text << in.rdbuf();
    c.endpoints = parse_hostfile(text.str(), base_port);
  } else if (const char* list = env("ORCHARD_ENDPOINTS")) {
    std::stringstream ranks(list);
    for (std::string rank_part; std::getline(ranks, rank_part, ',');) {
      std::vector<std::string> addresses;
      std::stringstream ifs(rank_part);
      for (std::string a; std::getline(ifs, a, '|');) addresses.push_back(a);
      c.endpoints.push_back(std::move(addresses));
    }
  }
  if (!c.endpoints.empty() && !env("ORCHARD_WORLD")) c.world = static_cast<int>(c.endpoints.size());
  if (c.rank < 0 || c.rank >= c.world) {
    throw Error(error_message("comm", "ORCHARD_RANK={} is outside a world of {}", c.rank, c.world));
  }
  if (const char* v = env("ORCHARD_JOB_SECRET")) c.secret = v;
  if (const char* v = env("ORCHARD_TIMEOUT_S")) c.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::atof(v) * 1000));
  c.sockets_per_link = env_int("ORCHARD_SOCKETS_PER_LINK", c.sockets_per_link);
  c.busy_poll = busy_poll_from_env();
  c.link = link_emulation_from_env();
  c.listen_fd = env_int("ORCHARD_LISTEN_FD", -1);
  return c;
}

bool busy_poll_from_env() { return env_int("ORCHARD_BUSY_POLL", 0) != 0; }

std::vector<std::pair<std::string, std::string>> config_to_env(const Config& c) {
  std::vector<std::pair<std::string, std::string>> out = {
      {"ORCHARD_BACKEND", std::string(backend_name(c.backend))},
      {"ORCHARD_RANK", std::to_string(c.rank)},
      {"ORCHARD_WORLD", std::to_string(c.world)},
      {"ORCHARD_JOB_SECRET", c.secret},
      {"ORCHARD_TIMEOUT_S", fmt::format("{}", c.timeout.count() / 1000.0)},
      {"ORCHARD_SOCKETS_PER_LINK", std::to_string(c.sockets_per_link)},
      {"ORCHARD_BUSY_POLL", c.busy_poll ? "1" : "0"},
      {"ORCHARD_LINK_LATENCY_US", fmt::format("{}", c.link.latency_us)},
      {"ORCHARD_LINK_GBPS", fmt::format("{}", c.link.gbps)},
      {"ORCHARD_LISTEN_FD", std::to_string(c.listen_fd)},
  };
  std::string endpoints;
  for (const auto& rank : c.endpoints) {
    if (!endpoints.empty()) endpoints += ',';
    for (size_t i = 0; i < rank.size(); ++i) endpoints += (i ? "|" : "") + rank[i];
  }
  out.emplace_back("ORCHARD_ENDPOINTS", endpoints);
  return out;
}

std::string random_secret() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) throw Error(error_message("comm", "no random bytes for a job secret"));
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

}  // namespace orchard::comm

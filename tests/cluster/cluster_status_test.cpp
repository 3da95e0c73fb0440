// `GET /cluster` on the agent's port: the JSON it gives for a known topology, the plan of a
// preset model over it, the HTTP answers (200, 304, 404, 400) on a loopback connection and the
// cluster page served beside the JSON.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "cluster/cluster_page.h"
#include "cluster/cluster_status.h"
#include "cluster/cost_model.h"
#include "comm/transport/tcp/socket.h"

namespace orchard::cluster {
namespace {

namespace tcp = comm::tcp;
using namespace std::chrono_literals;

Topology two_macs() {
  Announcement a, b;
  a.node_id = "n1";
  a.hostname = "studio-1";
  a.chip = "M4 Max";
  a.cpu_brand = "Apple M4 Max";
  a.memory_total_bytes = 64ull << 30;
  a.memory_free_bytes = 60ull << 30;
  a.decode_gbs = 300;
  b = a;
  b.node_id = "n2";
  b.hostname = "studio-2";
  b.memory_free_bytes = 50ull << 30;
  a.links = {{"n1", "en0", "10.0.0.1", "n2", "en0", "10.0.0.2", 600, 10}};
  return topology_from_announcements({a, b});
}

TEST(ClusterStatus, MachinesLinksAndAPlan) {
  const nlohmann::json j = cluster_status(two_macs(), "llama-8b:q4_k_m");
  ASSERT_EQ(j["machines"].size(), 2u) << j.dump(1);
  EXPECT_EQ(j["machines"][0]["hostname"], "studio-1");
  EXPECT_EQ(j["machines"][0]["chip"], "M4 Max");
  EXPECT_EQ(j["machines"][1]["memory_free_bytes"], 50ull << 30);
  EXPECT_EQ(j["machines"][0]["decode_gbs"], 300.0);
  ASSERT_EQ(j["links"].size(), 1u);
  EXPECT_EQ(j["links"][0]["from"], "n1");
  EXPECT_EQ(j["links"][0]["rtt_us"], 600.0);
  EXPECT_EQ(j["links"][0]["gbit_s"], 10.0);
  EXPECT_EQ(j["links"][0]["transport"], "tcp");
  ASSERT_TRUE(j.contains("plan")) << j.dump(1);
  EXPECT_EQ(j["plan"]["model"], "llama-8b:q4_k_m");
  EXPECT_FALSE(j["plan"].contains("error")) << j["plan"].dump(1);
  EXPECT_GE(j["plan"]["assignment"].size(), 1u);
  EXPECT_GT(j["plan"]["predicted"]["gen_tok_s"].get<double>(), 0);

  EXPECT_FALSE(cluster_status(two_macs(), "").contains("plan"));
  // The page's picker offers what from_preset takes.
  const nlohmann::json& presets = j["presets"];
  EXPECT_NE(std::find(presets["shapes"].begin(), presets["shapes"].end(), "llama-70b"), presets["shapes"].end());
  EXPECT_NE(std::find(presets["types"].begin(), presets["types"].end(), "q4_k_m"), presets["types"].end());
  for (const auto& shape : presets["shapes"])
    EXPECT_NO_THROW(ModelFacts::from_preset(shape.get<std::string>() + ":q8_0")) << shape;
  const nlohmann::json unknown = cluster_status(two_macs(), "llama-9000b:q4_0");
  EXPECT_NE(unknown["plan"]["error"].get<std::string>().find("llama-9000b"), std::string::npos) << unknown.dump(1);
}

// One request over loopback: the whole reply ("" when it was not taken for HTTP).
std::string exchange(const std::string& head) {
  tcp::Fd listener = tcp::listen_on("127.0.0.1", 0);
  const uint16_t port = tcp::local_port(listener.get());
  bool http = false;
  std::thread server([&] {
    std::string from;
    tcp::Fd fd = tcp::accept_until(listener.get(), tcp::Clock::now() + 5s, &from);
    http = starts_with_http_get(fd.get(), 2000ms);
    if (http) serve_status_request(fd.get(), from, two_macs, 2000ms);
  });
  tcp::Fd fd = tcp::connect_to({"127.0.0.1", port}, tcp::Clock::now() + 5s, "status server");
  tcp::write_exact(fd.get(), head.data(), head.size(), tcp::Clock::now() + 5s, "status server");
  std::string reply;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd.get(), buffer, sizeof buffer, 0)) > 0;) reply.append(buffer, static_cast<size_t>(n));
  server.join();
  return http ? reply : "";
}

// One request over loopback: the status line and the JSON body.
std::pair<int, nlohmann::json> request(const std::string& head) {
  const std::string reply = exchange(head);
  if (reply.empty()) return {0, nullptr};
  const int status = std::stoi(reply.substr(9, 3));
  return {status, nlohmann::json::parse(reply.substr(reply.find("\r\n\r\n") + 4), nullptr, false)};
}

TEST(ClusterStatus, AnswersHttpOnTheAgentsPort) {
  auto [ok, body] = request("GET /cluster HTTP/1.1\r\nHost: studio-1:52417\r\n\r\n");
  EXPECT_EQ(ok, 200);
  EXPECT_EQ(body["machines"].size(), 2u) << body.dump(1);
  auto [planned, with_plan] = request("GET /cluster?model=tinyllama-1.1b:q4_0 HTTP/1.1\r\n\r\n");
  EXPECT_EQ(planned, 200);
  EXPECT_TRUE(with_plan["plan"].contains("strategy")) << with_plan.dump(1);
  auto [missing, why] = request("GET /world HTTP/1.1\r\n\r\n");
  EXPECT_EQ(missing, 404);
  EXPECT_NE(why["error"].get<std::string>().find("/world"), std::string::npos);
  auto [bad, query] = request("GET /cluster?model=$(reboot) HTTP/1.1\r\n\r\n");
  EXPECT_EQ(bad, 400);
  EXPECT_NE(query["error"].get<std::string>().find("model=PRESET"), std::string::npos);
  // The agent's binary hello is not taken for HTTP.
  auto [binary, nothing] = request(std::string("PCRO\x01\x00\x03\x00", 8) + std::string(56, '\0'));
  EXPECT_EQ(binary, 0);
}

// The cluster page on the same port: its index at /, its assets by their hashed names (answered
// 304 when the browser has them), with the same-origin CSP; an unknown asset is 404.
TEST(ClusterStatus, ServesThePage) {
  const std::string page = exchange("GET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(page.substr(0, 15), "HTTP/1.1 200 OK") << page.substr(0, 200);
  EXPECT_NE(page.find("Content-Type: text/html; charset=utf-8\r\n"), std::string::npos);
  EXPECT_NE(page.find("Content-Security-Policy: default-src 'none';"), std::string::npos);
  EXPECT_NE(page.find("<title>Orchard cluster</title>"), std::string::npos);
  if (kClusterPageBuilt) {
    const auto files = cluster_page_files();
    const auto js = std::find_if(files.begin(), files.end(), [](const core::EmbeddedFile& f) { return f.path.ends_with(".js"); });
    ASSERT_NE(js, files.end());
    EXPECT_NE(page.find("src=\"/" + std::string(js->path) + "\""), std::string::npos) << "the page names its script";
    const std::string script = exchange("GET /" + std::string(js->path) + " HTTP/1.1\r\n\r\n");
    EXPECT_EQ(script.substr(0, 15), "HTTP/1.1 200 OK");
    EXPECT_NE(script.find("Cache-Control: public, max-age=31536000, immutable"), std::string::npos);
    EXPECT_EQ(script.substr(script.find("\r\n\r\n") + 4), js->bytes);
    // Compressed at build time: sent as it is to a browser that accepts it.
    ASSERT_FALSE(js->brotli.empty());
    const std::string packed = exchange("GET /" + std::string(js->path) + " HTTP/1.1\r\nAccept-Encoding: gzip, br\r\n\r\n");
    EXPECT_NE(packed.find("Content-Encoding: br\r\n"), std::string::npos) << packed.substr(0, 400);
    EXPECT_EQ(packed.substr(packed.find("\r\n\r\n") + 4), js->brotli);
    const std::string again =
        exchange("GET /" + std::string(js->path) + " HTTP/1.1\r\nif-none-match: " + std::string(js->etag) + "\r\n\r\n");
    EXPECT_EQ(again.substr(0, 25), "HTTP/1.1 304 Not Modified");
    EXPECT_EQ(again.substr(again.find("\r\n\r\n") + 4), "");
  } else {
    EXPECT_NE(page.find("built without the cluster page"), std::string::npos);
  }
  EXPECT_EQ(request("GET /assets/nothing-here.js HTTP/1.1\r\n\r\n").first, 404);
}

}  // namespace
}  // namespace orchard::cluster

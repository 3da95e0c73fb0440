// `orchard bench-comm`: latency and bus bandwidth of the comm backends, side by side with
// OpenMPI's MPI_Allreduce (--compare-mpi) and a bare TCP ping-pong (--compare-tcp) in one run.
// Alone it starts its ranks on this machine (re-executing itself, or through mpirun for mpi);
// under `orchard launch` or mpirun it is one rank.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/orchard/flag_ranges.h"
#include "commands.h"
#include "comm/bench.h"
#include "comm/bootstrap.h"
#include "comm/launcher.h"
#include "comm/link_emulator.h"

namespace orchard::app {
namespace {

struct BenchFlags {
  std::string backend = "ring";
  int world = 2;
  std::string op = "all_reduce";
  std::string sizes = "4K,16K,64K,1M,16M";
  int iters = 0;
  bool json = false;
  bool compare_mpi = false;
  bool compare_tcp = false;
  double link_latency_us = -1;
  double link_gbps = -1;
  int sockets_per_link = 0;
  bool busy_poll = false;
  double skew_us = 0;
  double timeout_s = 0;
  bool as_rank = false;
  std::string result_file;
};

nlohmann::json to_json(const std::vector<comm::BenchResult>& results) {
  auto out = nlohmann::json::array();
  for (const auto& r : results) {
    out.push_back({{"op", r.op}, {"bytes", r.bytes}, {"p50_us", r.p50_us}, {"p99_us", r.p99_us},
                   {"busbw_gb_s", r.busbw_gb_s}});
  }
  return out;
}

std::string temp_path() {
  char path[] = "/tmp/orchard-bench-XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) throw Error(error_message("bench-comm", "cannot create a temporary file"));
  ::close(fd);
  return path;
}

nlohmann::json read_results(const std::string& path, const std::string& who) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path.c_str());
  if (text.str().empty()) throw Error(error_message("bench-comm", "{} produced no results", who));
  return nlohmann::json::parse(text.str());
}

// The flags a rank process needs to measure what this run measures.
std::vector<std::string> rank_args(const BenchFlags& f, const std::string& backend, const std::string& result_file) {
  return {comm::current_executable(), "bench-comm", "--as-rank", "--backend", backend, "--op", f.op, "--sizes",
          f.sizes, "--iters", std::to_string(f.iters), "--skew-us", fmt::format("{}", f.skew_us), "--result-file",
          result_file};
}

// OpenMPI's collectives under mpirun: over TCP for comparison with the ring, over its default
// shared-memory transport otherwise.
nlohmann::json run_under_mpirun(const BenchFlags& f, bool tcp_only) {
  const std::string out = temp_path();
  std::string command = fmt::format("mpirun {} --oversubscribe -np {} {}", ::geteuid() == 0 ? "--allow-run-as-root" : "",
                                    f.world, tcp_only ? "--mca btl tcp,self" : "");
  for (const auto& a : rank_args(f, "mpi", out)) command += " '" + a + "'";
  if (std::system(command.c_str()) != 0) {
    std::remove(out.c_str());
    throw Error(error_message("bench-comm", "mpirun failed: {}", command));
  }
  return read_results(out, "mpirun");
}

void run_as_rank(const BenchFlags& f) {
  comm::Config config = comm::config_from_env();
  config.backend = comm::parse_backend(f.backend);
  comm::Group group = comm::init(config);
  auto results = comm::bench_collective(group, f.op, comm::parse_sizes(f.sizes), f.iters, f.skew_us);
  if (group.rank() != 0) return;
  const std::string text = to_json(results).dump();
  if (f.result_file.empty()) {
    std::printf("%s\n", text.c_str());
  } else {
    std::ofstream(f.result_file) << text;
  }
}

void print_table(const nlohmann::json& report) {
  std::printf("bench-comm: backend %s, world %d\n", report["backend"].get<std::string>().c_str(),
              report["world"].get<int>());
  std::printf("%-10s %10s %10s %10s %10s %12s %12s %12s\n", "op", "bytes", "p50_us", "p99_us", "busbw_GB/s",
              "mpi_p50_us", "x_vs_mpi", "tcp_rtt_us");
  const auto& results = report["results"];
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    std::string mpi = "-", ratio = "-", tcp = "-";
    if (report.contains("mpi") && i < report["mpi"].size()) {
      const double m = report["mpi"][i]["p50_us"].get<double>();
      mpi = fmt::format("{:.1f}", m);
      ratio = fmt::format("{:.2f}", m / r["p50_us"].get<double>());  // > 1: faster than MPI
    }
    if (report.contains("tcp_pingpong") && i < report["tcp_pingpong"].size()) {
      tcp = fmt::format("{:.1f}", report["tcp_pingpong"][i]["rtt_p50_us"].get<double>());
    }
    std::printf("%-10s %10zu %10.1f %10.1f %10.2f %12s %12s %12s\n", r["op"].get<std::string>().c_str(),
                r["bytes"].get<size_t>(), r["p50_us"].get<double>(), r["p99_us"].get<double>(),
                r["busbw_gb_s"].get<double>(), mpi.c_str(), ratio.c_str(), tcp.c_str());
  }
  if (report.contains("mpi")) {
    std::printf("mpi (%s):\n", report["mpi_transport"].get<std::string>().c_str());
    for (const auto& r : report["mpi"]) {
      std::printf("%-10s %10zu %10.1f %10.1f %10.2f\n", r["op"].get<std::string>().c_str(), r["bytes"].get<size_t>(),
                  r["p50_us"].get<double>(), r["p99_us"].get<double>(), r["busbw_gb_s"].get<double>());
    }
  }
}

void run_alone(const BenchFlags& f) {
  const comm::Backend backend = comm::parse_backend(f.backend);
  nlohmann::json report = {{"backend", std::string(comm::backend_name(backend))}, {"world", f.world}};
  if (backend == comm::Backend::Mpi) {
    report["results"] = run_under_mpirun(f, false);
  } else {
    comm::Config config;
    config.backend = backend;
    if (f.link_latency_us >= 0) config.link.latency_us = f.link_latency_us;
    if (f.link_gbps >= 0) config.link.gbps = f.link_gbps;
    if (f.link_latency_us < 0 && f.link_gbps < 0) config.link = comm::link_emulation_from_env();
    if (f.sockets_per_link > 0) config.sockets_per_link = f.sockets_per_link;
    config.busy_poll = f.busy_poll;
    if (f.timeout_s > 0) config.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
    const std::string out = temp_path();
    comm::LocalLaunchOptions options;
    options.pin_cpus = true;
    const auto exits = comm::exec_local_ranks(f.world, config, rank_args(f, f.backend, out), options);
    for (const auto& e : exits) {
      if (!e.ok()) throw Error(error_message("bench-comm", "{}", e.describe()));
    }
    report["results"] = read_results(out, "rank 0");
  }
  if (f.compare_mpi) {
    const bool tcp_only = backend == comm::Backend::Ring;
    report["mpi"] = run_under_mpirun(f, tcp_only);
    report["mpi_transport"] = tcp_only ? "btl tcp,self" : "default (shared memory)";
  }
  if (f.compare_tcp) {
    auto pingpong = nlohmann::json::array();
    for (const auto& r : comm::bench_tcp_pingpong(comm::parse_sizes(f.sizes), f.iters)) {
      pingpong.push_back({{"bytes", r.bytes}, {"rtt_p50_us", r.rtt_p50_us}});
    }
    report["tcp_pingpong"] = pingpong;
  }
  if (f.json) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    print_table(report);
  }
}

}  // namespace

void add_bench_comm_command(CLI::App& app) {
  auto flags = std::make_shared<BenchFlags>();
  auto* cmd = app.add_subcommand("bench-comm", "Measure collective latency and bandwidth of a comm backend");
  cmd->add_option("--backend", flags->backend, "ring | shm | mpi")->capture_default_str();
  cmd->add_option("--world", flags->world, "ranks to start on this machine when run alone")
      ->capture_default_str()
      ->check(between(2, 1024));
  cmd->add_option("--op", flags->op, "all_reduce | all_gather")->capture_default_str();
  cmd->add_option("--sizes", flags->sizes, "message sizes, e.g. 4K,64K,1M,16M")->capture_default_str();
  cmd->add_option("--iters", flags->iters, "iterations per size (0: by size)")->capture_default_str()->check(at_least(0));
  cmd->add_flag("--json", flags->json,
                "print JSON: per size p50_us, p99_us (microseconds) and busbw_gb_s (bus bandwidth, gigabytes/s)");
  cmd->add_flag("--compare-mpi", flags->compare_mpi, "also run OpenMPI's MPI_Allreduce via mpirun");
  cmd->add_flag("--compare-tcp", flags->compare_tcp, "also run a bare TCP ping-pong");
  cmd->add_option("--link-latency-us", flags->link_latency_us, "emulated per-message latency (also ORCHARD_LINK_LATENCY_US)")
      ->check(at_least(0));
  add_renamed_option(cmd, "--link-gbit-s", "--link-gbps", flags->link_gbps,
                     "emulated link bandwidth, gigabits/s (also ORCHARD_LINK_GBPS)", at_least(0));
  cmd->add_option("--sockets-per-link", flags->sockets_per_link, "TCP sockets per link (ring; 0: the default)")
      ->check(between(0, 64));
  cmd->add_flag("--busy-poll", flags->busy_poll, "spin on sockets instead of sleeping in poll()");
  cmd->add_option("--skew-us", flags->skew_us,
                  "ranks take turns arriving this late (busy), as a split's uneven steps do; shows each call's "
                  "time beyond the skew, wake-ups included (0: all arrive together)")
      ->check(between(0, 1e6));
  cmd->add_option("--timeout-s", flags->timeout_s, "inactivity timeout of each call, seconds (0: the default)")
      ->check(at_least(0));
  cmd->add_flag("--as-rank", flags->as_rank, "run as one rank (set by the launcher)")->group("");
  cmd->add_option("--result-file", flags->result_file, "where rank 0 writes its results")->group("");
  cmd->callback([flags] {
    // Under `orchard launch` (ORCHARD_RANK) or mpirun (OMPI_COMM_WORLD_SIZE) this is one rank.
    const bool launched = std::getenv("ORCHARD_RANK") || std::getenv("OMPI_COMM_WORLD_SIZE");
    if (flags->as_rank || launched) {
      run_as_rank(*flags);
    } else {
      run_alone(*flags);
    }
  });
}

}  // namespace orchard::app

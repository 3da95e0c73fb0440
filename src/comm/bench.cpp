#include "comm/bench.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "comm/launcher.h"
#include "comm/transport/tcp/socket.h"

namespace orchard::comm {
namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double>& v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// Plain blocking calls, one syscall per message where the kernel allows: the baseline must not
// carry the poll() overhead of the helpers in socket.h.
void send_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, tcp::send_flags());
    if (k <= 0) throw PeerError(error_message("comm", "ping-pong peer went away"));
    p += k;
    n -= static_cast<size_t>(k);
  }
}
void recv_all(int fd, uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, MSG_WAITALL);
    if (k <= 0) throw PeerError(error_message("comm", "ping-pong peer went away"));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

}  // namespace

int default_iterations(size_t bytes) {
  return static_cast<int>(std::clamp<size_t>((64u << 20) / std::max<size_t>(bytes, 1), 20, 2000));
}

std::vector<size_t> parse_sizes(const std::string& list) {
  std::vector<size_t> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    size_t unit = 1;
    const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(item.back())));
    if (last == 'K') unit = 1u << 10;
    if (last == 'M') unit = 1u << 20;
    if (last == 'G') unit = 1u << 30;
    if (unit != 1) item.pop_back();
    char* end = nullptr;
    const unsigned long long n = std::strtoull(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n == 0) throw Error(error_message("comm", "size '{}' is not like 4K, 1M or 4096", item));
    out.push_back(static_cast<size_t>(n) * unit);
  }
  return out;
}

namespace {

// Keeps the CPU busy for `us` microseconds without touching memory: a rank's compute.
void work_for(double us) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::micro>(us));
  while (Clock::now() < until) {
  }
}

}  // namespace

std::vector<BenchResult> bench_collective(Group& group, const std::string& op, const std::vector<size_t>& sizes,
                                          int iterations, double skew_us) {
  if (op != "all_reduce" && op != "all_gather") {
    throw Error(error_message("comm", "bench-comm measures all_reduce or all_gather, not '{}'", op));
  }
  const int n = group.size();
  std::vector<BenchResult> results;
  std::vector<uint8_t> buffer;
  std::vector<double> times;
  for (size_t bytes : sizes) {
    const int iters = iterations > 0 ? iterations : default_iterations(bytes);
    const size_t per_rank = std::max<size_t>(bytes / static_cast<size_t>(n), 1);
    buffer.assign(op == "all_reduce" ? bytes : per_rank * static_cast<size_t>(n), 0);
    auto run_once = [&] {
      if (op == "all_reduce") {
        group.all_reduce(buffer.data(), bytes / 4, DType::F32);
      } else {
        group.all_gather(buffer.data() + per_rank * static_cast<size_t>(group.rank()), buffer.data(), per_rank);
      }
    };
    for (int i = 0; i < std::min(iters, 10); ++i) run_once();
    group.barrier();
    times.clear();
    if (skew_us > 0) {
      const int late[2] = {0, n - 1};
      for (int i = 0; i < iters; ++i) {
        const auto t0 = Clock::now();
        for (int side = 0; side < 2; ++side) {
          if (group.rank() == late[side]) work_for(skew_us);
          run_once();
        }
        times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 2 - skew_us);
      }
    } else {
      for (int i = 0; i < iters; ++i) {
        const auto t0 = Clock::now();
        run_once();
        times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
    }
    BenchResult r;
    r.op = op;
    r.bytes = bytes;
    r.p50_us = percentile(times, 0.5);
    r.p99_us = percentile(times, 0.99);
    const double algbw = static_cast<double>(buffer.size()) / (r.p50_us * 1e-6) / 1e9;
    const double factor = op == "all_reduce" ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
    r.busbw_gb_s = n > 1 ? algbw * factor : 0.0;
    results.push_back(r);
  }
  return results;
}

std::vector<PingPongResult> bench_tcp_pingpong(const std::vector<size_t>& sizes, int iterations) {
  tcp::Fd listener = tcp::listen_on("127.0.0.1", 0);
  const tcp::Endpoint endpoint{"127.0.0.1", tcp::local_port(listener.get())};
  const size_t max_bytes = *std::max_element(sizes.begin(), sizes.end());
  const auto deadline = [] { return Clock::now() + std::chrono::seconds(30); };
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) throw Error(error_message("comm", "fork failed for the ping-pong peer"));
  if (child == 0) {
    // Echo every message back, sizes in the same order as the parent.
    int code = 0;
    try {
      pin_to_cpu(1);
      tcp::Fd fd = tcp::connect_to(endpoint, deadline(), "ping-pong parent");
      tcp::set_nodelay(fd.get());
      std::vector<uint8_t> buf(max_bytes);
      for (size_t bytes : sizes) {
        const int iters = (iterations > 0 ? iterations : default_iterations(bytes)) + 10;
        for (int i = 0; i < iters; ++i) {
          recv_all(fd.get(), buf.data(), bytes);
          send_all(fd.get(), buf.data(), bytes);
        }
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      code = 1;
    }
    ::_exit(code);
  }
  std::vector<PingPongResult> results;
  try {
    pin_to_cpu(0);
    std::string from;
    tcp::Fd fd = tcp::accept_until(listener.get(), deadline(), &from);
    if (fd.get() < 0) throw TimeoutError(error_message("comm", "ping-pong peer did not connect"));
    tcp::set_nodelay(fd.get());
    std::vector<uint8_t> buf(max_bytes, 1);
    std::vector<double> times;
    for (size_t bytes : sizes) {
      const int iters = (iterations > 0 ? iterations : default_iterations(bytes)) + 10;
      times.clear();
      for (int i = 0; i < iters; ++i) {
        const auto t0 = Clock::now();
        send_all(fd.get(), buf.data(), bytes);
        recv_all(fd.get(), buf.data(), bytes);
        if (i >= 10) times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
      results.push_back({bytes, percentile(times, 0.5)});
    }
  } catch (...) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    throw;
  }
  ::waitpid(child, nullptr, 0);
  return results;
}

}  // namespace orchard::comm

#pragma once
// Measurements behind `orchard bench-comm`: collective latency percentiles and bus bandwidth
// per size, and a bare TCP ping-pong baseline.
#include <cstddef>
#include <string>
#include <vector>

#include "comm/group.h"

namespace orchard::comm {

struct BenchResult {
  std::string op;
  size_t bytes = 0;
  double p50_us = 0;
  double p99_us = 0;
  // all_reduce: algbw x 2(n-1)/n; all_gather (bytes = the gathered total): algbw x (n-1)/n.
  double busbw_gb_s = 0;
};

struct PingPongResult {
  size_t bytes = 0;
  double rtt_p50_us = 0;
};

// Iterations for a size when none are given: many for small messages, about 64 MiB of
// traffic for large ones.
int default_iterations(size_t bytes);

// Every rank calls this with the same arguments; op is "all_reduce" (f32) or "all_gather".
// Times are rank 0's; other ranks get the same vector.
// skew_us > 0 models a split's uneven steps: before each call one rank (rank 0 and the last
// rank in turn) works skew_us on its CPU, so the other waits for it, as a decode step's layers
// wait for the rank with more of their work. Times are then per call, averaged over a pair of
// calls (each side late once), minus skew_us: what waiting costs beyond the wait itself (a
// waiter that slept pays its wake-up before its next step).
std::vector<BenchResult> bench_collective(Group& group, const std::string& op, const std::vector<size_t>& sizes,
                                          int iterations, double skew_us = 0);

// Two processes on this machine (pinned to CPUs 0 and 1) bounce each size over a TCP
// connection with TCP_NODELAY: the floor any TCP collective is measured against.
std::vector<PingPongResult> bench_tcp_pingpong(const std::vector<size_t>& sizes, int iterations);

// "4K,64K,1M,16M" -> bytes.
std::vector<size_t> parse_sizes(const std::string& list);

}  // namespace orchard::comm

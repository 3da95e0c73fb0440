#pragma once
// Where a rank learns who it is and where its peers are, in the manner of mlx.launch.
//
// Environment (flags of the CLI map onto the same Config fields):
//   ORCHARD_BACKEND        ring | shm | mpi (default ring)
//   ORCHARD_RANK, ORCHARD_WORLD
//   ORCHARD_HOSTFILE       path of a JSON hostfile (below)
//   ORCHARD_ENDPOINTS      instead of a hostfile: "host:port,host:port" (one per rank, a rank's
//                          several interfaces joined with '|')
//   ORCHARD_PORT           first port for hostfile entries without ports (rank r: port + r)
//   ORCHARD_JOB_SECRET     per-job secret (set by the launcher)
//   ORCHARD_TIMEOUT_S      inactivity timeout of every call (default 10)
//   ORCHARD_SOCKETS_PER_LINK, ORCHARD_BUSY_POLL (0/1)
//   ORCHARD_LINK_LATENCY_US, ORCHARD_LINK_GBPS   link emulation
//   ORCHARD_LISTEN_FD      an inherited listening socket (local launcher)
//
// Hostfile shapes accepted (all of MLX's, so existing files work):
//   [{"ssh": "m1", "ips": ["10.0.0.1", "10.0.1.1"]}, ...]           one host per rank
//   {"backend": "...", "hosts": [{"ssh": ..., "ips": [...]}, ...]}   mlx.distributed_config
//   [["10.0.0.1:5000"], ["10.0.0.2:5000"]]                           MLX_HOSTFILE of the ring
// Entries without a port get ORCHARD_PORT + rank; a host without "ips" is reached by its "ssh"
// name.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "comm/group.h"

namespace orchard::comm {

inline constexpr uint16_t kDefaultBasePort = 32323;

// Per rank, its "host:port" endpoints. Throws FormatError naming what is wrong.
std::vector<std::vector<std::string>> parse_hostfile(const std::string& json_text, uint16_t base_port);

// A Config from the environment above; unset variables keep Config's defaults.
Config config_from_env();

// ORCHARD_BUSY_POLL=1 in this process's environment: what a launcher (`orchard launch`, `--world
// N`) gives its ranks unless its --busy-poll flag asks for it anyway.
bool busy_poll_from_env();

// The environment that makes config_from_env() return `config` in a child process.
std::vector<std::pair<std::string, std::string>> config_to_env(const Config& config);

// 32 random bytes, hex: a fresh job secret.
std::string random_secret();

}  // namespace orchard::comm

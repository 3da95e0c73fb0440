#pragma once
// The communication interface: a value-type Group (rank, size) over one abstract GroupImpl per
// backend, in the shape of MLX's distributed Group. Backends are chosen at link time: a backend
// that is built off links a stub whose is_available() is false and whose init() throws, so no
// code above this header needs #ifdef.
//
// Contract shared by every collective:
//  - called from one thread (the compute thread) on caller-owned buffers; every rank of the
//    group makes the same calls in the same order with matching sizes;
//  - no copies beyond what the transport needs and no allocation per call once a call of the
//    same shape has run once (scratch buffers grow and then stay);
//  - a peer that dies or stops answering makes the call throw (PeerError or TimeoutError naming
//    the peer) within Config::timeout of the last progress; a frame whose header does not match
//    the call (magic, op, tag, sequence, length) throws FormatError. After any throw the group
//    is broken: it closes its links so that the other ranks fail fast too, and every later call
//    throws.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace orchard::comm {

// Element types that collectives reduce. Sums of F16 and BF16 are computed in float and rounded
// once per addition (one rounding per hop of a ring).
enum class DType : uint8_t { F32 = 0, F16 = 1, BF16 = 2 };
size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);

enum class Backend : uint8_t { Ring = 0, Shm = 1, Mpi = 2 };
std::string_view backend_name(Backend backend);
// "ring" | "tcp" | "shm" | "mpi"; throws Error for anything else.
Backend parse_backend(std::string_view name);

// A peer died, closed its connection, or reported a failure.
class PeerError : public Error {
 public:
  using Error::Error;
};

// Link emulation, applied by the sender to every frame: the frame leaves no earlier than
// latency + bytes / bandwidth after the link became free. Zero means off.
struct LinkEmulation {
  double latency_us = 0;
  double gbps = 0;  // gigabits per second
  bool enabled() const { return latency_us > 0 || gbps > 0; }
};

struct Config {
  Backend backend = Backend::Ring;
  int rank = 0;
  int world = 1;
  // Per rank, one "host:port" per interface (IPv4, [IPv6] or a name). Socket s of a link dials
  // the peer's interface s % n, so two cables between two machines each carry part of a large
  // message. Not used by shm and mpi.
  std::vector<std::vector<std::string>> endpoints;
  // Per-job secret; every TCP connection must prove it knows it (HMAC-SHA256 over a nonce).
  // Also names the job's shared-memory segments.
  std::string secret;
  // Inactivity deadline of every call: no progress for this long is a TimeoutError.
  std::chrono::milliseconds timeout{10000};
  // How long init waits for all peers to appear.
  std::chrono::milliseconds connect_timeout{30000};
  int sockets_per_link = 1;
  // Spin on non-blocking sockets instead of sleeping in poll(): lower latency, one busy core.
  bool busy_poll = false;
  LinkEmulation link;
  // An already listening socket to accept peers on (set by the local launcher so that ports
  // are never raced for); -1: bind the port of this rank's first endpoint.
  int listen_fd = -1;
};

// Backend implementation. Sizes and counts follow the Group methods below.
class GroupImpl {
 public:
  virtual ~GroupImpl() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;
  virtual void all_reduce(void* data, size_t count, DType dtype) = 0;
  virtual void all_gatherv(const void* send, void* recv, std::span<const size_t> bytes_per_rank) = 0;
  virtual void reduce_scatter(const void* send, void* recv, std::span<const size_t> counts, DType dtype) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void all_to_allv(const void* send, std::span<const size_t> send_bytes, void* recv,
                           std::span<const size_t> recv_bytes) = 0;
  virtual void send(const void* data, size_t bytes, int peer, uint32_t tag) = 0;
  virtual void recv(void* data, size_t bytes, int peer, uint32_t tag) = 0;
  virtual void barrier() = 0;
};

class Group {
 public:
  explicit Group(std::shared_ptr<GroupImpl> impl);

  int rank() const { return impl_->rank(); }
  int size() const { return impl_->size(); }
  Backend backend() const { return impl_->backend(); }

  // data[i] = sum over ranks of data[i], in place; data holds `count` elements of `dtype`.
  // Every rank ends with bit-identical results.
  void all_reduce(void* data, size_t count, DType dtype) { impl_->all_reduce(data, count, dtype); }

  // recv[r * bytes_per_rank ...] = send of rank r. recv holds size() * bytes_per_rank bytes;
  // send may point at this rank's own slot of recv.
  void all_gather(const void* send, void* recv, size_t bytes_per_rank);
  // Uneven variant: rank r contributes bytes_per_rank[r] bytes, stored at the sum of the
  // earlier ranks' sizes in recv. bytes_per_rank has size() entries, the same on every rank.
  void all_gatherv(const void* send, void* recv, std::span<const size_t> bytes_per_rank) {
    impl_->all_gatherv(send, recv, bytes_per_rank);
  }

  // send holds sum(counts) elements; recv gets this rank's segment (counts[rank()] elements,
  // starting at the sum of the earlier counts) of the element-wise sum over ranks. send is not
  // modified.
  void reduce_scatter(const void* send, void* recv, std::span<const size_t> counts, DType dtype) {
    impl_->reduce_scatter(send, recv, counts, dtype);
  }

  // Every rank's data becomes root's `bytes` bytes.
  void broadcast(void* data, size_t bytes, int root) { impl_->broadcast(data, bytes, root); }

  // Personalized exchange: send holds one segment per rank, in rank order, send_bytes[p] bytes
  // for rank p; recv gets rank p's segment for this rank at the sum of recv_bytes[0..p).
  // send_bytes[rank()] == recv_bytes[rank()] (that segment is copied), and recv_bytes[p] here
  // must equal rank p's send_bytes[rank()]. Empty segments send no message, so ranks that have
  // nothing for each other do not wait on each other. send and recv must not overlap.
  void all_to_allv(const void* send, std::span<const size_t> send_bytes, void* recv,
                   std::span<const size_t> recv_bytes) {
    impl_->all_to_allv(send, send_bytes, recv, recv_bytes);
  }

  // Point to point. Messages between two ranks arrive in the order sent; the receiver's tag and
  // size must match the next message from that peer (a mismatch throws FormatError: there is no
  // matching by tag). send may block until the receiver takes the data.
  void send(const void* data, size_t bytes, int peer, uint32_t tag) { impl_->send(data, bytes, peer, tag); }
  void recv(void* data, size_t bytes, int peer, uint32_t tag) { impl_->recv(data, bytes, peer, tag); }

  void barrier() { impl_->barrier(); }

  GroupImpl& impl() { return *impl_; }

 private:
  std::shared_ptr<GroupImpl> impl_;
};

// Whether `backend` was built into this binary (and, for mpi, whether MPI can start).
bool is_available(Backend backend);

// Connects this rank to its peers as described by config (ring/shm), or joins the MPI job
// (mpi: rank and world come from mpirun). Throws Error/TimeoutError naming the missing peer.
Group init(const Config& config);

// Even split of `total` items over `parts`: the first total % parts get one more.
std::vector<size_t> even_split(size_t total, int parts);

}  // namespace orchard::comm

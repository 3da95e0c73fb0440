#pragma once
// GroupImpl for every transport that offers PointToPoint (ring over TCP, shm): small messages
// take a direct exchange (one hop of latency), large ones a ring reduce-scatter + all-gather
// whose receive-side sums overlap the transfer.
#include <memory>
#include <vector>

#include "comm/algorithms/point_to_point.h"
#include "comm/group.h"

namespace orchard::comm {

// Bytes each rank sends, (n - 1) x the vector, up to which all-reduce takes the direct
// exchange (one message latency) instead of the ring (2 (n - 1) hops, 2 (n - 1) / n x the
// vector). With 2 ranks both send the vector once, so the direct path wins up to here.
inline constexpr size_t kDirectAllReduceBytes = 1024 * 1024;
// Total size up to which all_gather, reduce_scatter and broadcast go direct.
inline constexpr size_t kDirectExchangeBytes = 256 * 1024;

class P2PGroup final : public GroupImpl {
 public:
  P2PGroup(std::unique_ptr<PointToPoint> transport, Backend backend);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return backend_; }
  void all_reduce(void* data, size_t count, DType dtype) override;
  void all_gatherv(const void* send, void* recv, std::span<const size_t> bytes_per_rank) override;
  void reduce_scatter(const void* send, void* recv, std::span<const size_t> counts, DType dtype) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void all_to_allv(const void* send, std::span<const size_t> send_bytes, void* recv,
                   std::span<const size_t> recv_bytes) override;
  void send(const void* data, size_t bytes, int peer, uint32_t tag) override;
  void recv(void* data, size_t bytes, int peer, uint32_t tag) override;
  void barrier() override;

 private:
  // Runs transfer; on failure marks the group broken and aborts the transport.
  void transfer(WireOp op, uint32_t tag, std::span<const SendOp> sends, std::span<const RecvOp> recvs);
  void check_usable(const char* what) const;
  void check_peer(int peer, const char* what) const;
  uint8_t* scratch(size_t index, size_t bytes);

  void all_reduce_direct(void* data, size_t count, DType dtype);
  void all_reduce_ring(void* data, size_t count, DType dtype);
  void all_gather_ring(void* recv, std::span<const size_t> bytes_per_rank, WireOp op);
  int next() const { return (rank_ + 1) % size_; }
  int prev() const { return (rank_ + size_ - 1) % size_; }
  int wrap(int r) const { return ((r % size_) + size_) % size_; }

  std::unique_ptr<PointToPoint> transport_;
  Backend backend_;
  int rank_;
  int size_;
  bool broken_ = false;
  std::string broken_reason_;
  // Reused between calls: op lists and scratch buffers only grow.
  std::vector<SendOp> sends_;
  std::vector<RecvOp> recvs_;
  std::vector<size_t> offsets_;
  std::vector<size_t> sizes_;
  std::vector<std::vector<uint8_t>> scratch_;
};

}  // namespace orchard::comm

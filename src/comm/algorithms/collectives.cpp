#include "comm/algorithms/collectives.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "comm/reduce.h"

namespace orchard::comm {

P2PGroup::P2PGroup(std::unique_ptr<PointToPoint> transport, Backend backend)
    : transport_(std::move(transport)), backend_(backend), rank_(transport_->rank()), size_(transport_->size()) {
  sends_.reserve(static_cast<size_t>(size_));
  recvs_.reserve(static_cast<size_t>(size_));
  offsets_.reserve(static_cast<size_t>(size_) + 1);
  sizes_.reserve(static_cast<size_t>(size_));
}

void P2PGroup::check_usable(const char* what) const {
  if (broken_) {
    throw Error(error_message("comm", "rank {}: {} on a group broken by an earlier error: {}", rank_, what,
                              broken_reason_));
  }
}

void P2PGroup::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_ || peer == rank_) {
    throw Error(error_message("comm", "rank {}: {} with peer {} in a group of {}", rank_, what, peer, size_));
  }
}

void P2PGroup::transfer(WireOp op, uint32_t tag, std::span<const SendOp> sends, std::span<const RecvOp> recvs) {
  try {
    transport_->transfer(op, tag, sends, recvs);
  } catch (const std::exception& e) {
    broken_ = true;
    broken_reason_ = e.what();
    transport_->abort();
    throw;
  }
}

uint8_t* P2PGroup::scratch(size_t index, size_t bytes) {
  if (scratch_.size() <= index) scratch_.resize(index + 1);
  if (scratch_[index].size() < bytes) scratch_[index].resize(bytes);
  return scratch_[index].data();
}

void P2PGroup::all_reduce(void* data, size_t count, DType dtype) {
  check_usable("all_reduce");
  if (size_ == 1 || count == 0) return;
  if (count * dtype_size(dtype) * static_cast<size_t>(size_ - 1) <= kDirectAllReduceBytes) {
    all_reduce_direct(data, count, dtype);
  } else {
    all_reduce_ring(data, count, dtype);
  }
}

// Every rank sends its whole vector to every other and sums all n in rank order, so results
// are bit-identical everywhere although each rank adds on its own.
void P2PGroup::all_reduce_direct(void* data, size_t count, DType dtype) {
  const size_t bytes = count * dtype_size(dtype);
  uint8_t* slots = scratch(0, bytes * static_cast<size_t>(size_));
  sends_.clear();
  recvs_.clear();
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    sends_.push_back({p, data, bytes});
    recvs_.push_back({p, slots + bytes * static_cast<size_t>(p), bytes});
  }
  transfer(WireOp::AllReduce, 0, sends_, recvs_);
  // data is overwritten by the first sum, so a rank whose own term comes later keeps a copy.
  auto term = [&](int p) -> const void* {
    return p == rank_ && rank_ < 2 ? data : slots + bytes * static_cast<size_t>(p);
  };
  if (rank_ >= 2) std::memcpy(slots + bytes * static_cast<size_t>(rank_), data, bytes);
  sum_into(data, term(0), term(1), count, dtype);
  for (int p = 2; p < size_; ++p) sum_into(data, data, term(p), count, dtype);
}

// Ring reduce-scatter then ring all-gather over n segments of (almost) equal size: each rank
// sends 2 (n - 1) / n of the vector, the bandwidth optimum.
void P2PGroup::all_reduce_ring(void* data, size_t count, DType dtype) {
  const size_t elem = dtype_size(dtype);
  auto* bytes = static_cast<uint8_t*>(data);
  sizes_ = even_split(count, size_);
  for (auto& s : sizes_) s *= elem;
  offsets_.assign(1, 0);
  for (size_t s : sizes_) offsets_.push_back(offsets_.back() + s);
  for (int step = 0; step < size_ - 1; ++step) {
    const int send_seg = wrap(rank_ - step);
    const int recv_seg = wrap(rank_ - step - 1);
    const SendOp send{next(), bytes + offsets_[send_seg], sizes_[send_seg]};
    uint8_t* acc = bytes + offsets_[recv_seg];
    const RecvOp recv{prev(), acc, sizes_[recv_seg], true, acc, dtype};
    transfer(WireOp::AllReduce, 0, {&send, 1}, {&recv, 1});
  }
  // Rank r now holds the complete segment r + 1; pass the complete segments around.
  all_gather_ring(data, sizes_, WireOp::AllReduce);
}

// Rank r's own segment (r + 1 for all_reduce, r for all_gather) travels n - 1 hops.
void P2PGroup::all_gather_ring(void* recv, std::span<const size_t> sizes, WireOp op) {
  auto* bytes = static_cast<uint8_t*>(recv);
  // all_reduce_ring's segment r+1 is complete on rank r; all_gather's segment r.
  const int first = op == WireOp::AllReduce ? 1 : 0;
  std::vector<size_t>& offsets = offsets_;
  if (sizes.data() != sizes_.data()) {
    offsets.assign(1, 0);
    for (size_t s : sizes) offsets.push_back(offsets.back() + s);
  }
  for (int step = 0; step < size_ - 1; ++step) {
    const int send_seg = wrap(rank_ + first - step);
    const int recv_seg = wrap(rank_ + first - step - 1);
    const SendOp send{next(), bytes + offsets[send_seg], sizes[send_seg]};
    const RecvOp rcv{prev(), bytes + offsets[recv_seg], sizes[recv_seg]};
    transfer(op, 0, {&send, 1}, {&rcv, 1});
  }
}

void P2PGroup::all_gatherv(const void* send, void* recv, std::span<const size_t> bytes_per_rank) {
  check_usable("all_gather");
  ORCHARD_CHECK(bytes_per_rank.size() == static_cast<size_t>(size_), "all_gatherv: {} sizes for {} ranks",
                bytes_per_rank.size(), size_);
  auto* out = static_cast<uint8_t*>(recv);
  const size_t own_offset = std::accumulate(bytes_per_rank.begin(), bytes_per_rank.begin() + rank_, size_t{0});
  if (bytes_per_rank[rank_] > 0 && send != out + own_offset) std::memmove(out + own_offset, send, bytes_per_rank[rank_]);
  if (size_ == 1) return;
  const size_t total = std::accumulate(bytes_per_rank.begin(), bytes_per_rank.end(), size_t{0});
  if (total > kDirectExchangeBytes * 2) {
    all_gather_ring(recv, bytes_per_rank, WireOp::AllGather);
    return;
  }
  sends_.clear();
  recvs_.clear();
  size_t offset = 0;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) {
      sends_.push_back({p, out + own_offset, bytes_per_rank[rank_]});
      recvs_.push_back({p, out + offset, bytes_per_rank[p]});
    }
    offset += bytes_per_rank[p];
  }
  transfer(WireOp::AllGather, 0, sends_, recvs_);
}

void P2PGroup::reduce_scatter(const void* send, void* recv, std::span<const size_t> counts, DType dtype) {
  check_usable("reduce_scatter");
  ORCHARD_CHECK(counts.size() == static_cast<size_t>(size_), "reduce_scatter: {} counts for {} ranks",
                counts.size(), size_);
  const size_t elem = dtype_size(dtype);
  const auto* in = static_cast<const uint8_t*>(send);
  offsets_.assign(1, 0);
  sizes_.clear();
  for (size_t c : counts) {
    sizes_.push_back(c * elem);
    offsets_.push_back(offsets_.back() + c * elem);
  }
  const size_t own = sizes_[rank_];
  if (size_ == 1) {
    if (own > 0) std::memmove(recv, in, own);
    return;
  }
  if (offsets_.back() <= kDirectExchangeBytes * 2) {
    // Everyone sends each peer its segment; the owner sums in rank order.
    uint8_t* slots = scratch(0, own * static_cast<size_t>(size_));
    sends_.clear();
    recvs_.clear();
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      sends_.push_back({p, in + offsets_[p], sizes_[p]});
      recvs_.push_back({p, slots + own * static_cast<size_t>(p), own});
    }
    transfer(WireOp::ReduceScatter, 0, sends_, recvs_);
    auto term = [&](int p) -> const void* {
      return p == rank_ ? in + offsets_[rank_] : slots + own * static_cast<size_t>(p);
    };
    sum_into(recv, term(0), term(1), counts[rank_], dtype);
    for (int p = 2; p < size_; ++p) sum_into(recv, recv, term(p), counts[rank_], dtype);
    return;
  }
  // Ring whose last hop lands segment r on rank r. Partial sums alternate between two scratch
  // buffers because one is sent while the next is received; `send` is never written.
  const size_t max_seg = *std::max_element(sizes_.begin(), sizes_.end());
  uint8_t* partial[2] = {scratch(0, max_seg), scratch(1, max_seg)};
  for (int step = 0; step < size_ - 1; ++step) {
    const int send_seg = wrap(rank_ - step - 1);
    const int recv_seg = wrap(rank_ - step - 2);
    const void* from = step == 0 ? in + offsets_[send_seg] : partial[(step - 1) % 2];
    void* into = step == size_ - 2 ? recv : partial[step % 2];
    const SendOp snd{next(), from, sizes_[send_seg]};
    const RecvOp rcv{prev(), into, sizes_[recv_seg], true, in + offsets_[recv_seg], dtype};
    transfer(WireOp::ReduceScatter, 0, {&snd, 1}, {&rcv, 1});
  }
}

void P2PGroup::broadcast(void* data, size_t bytes, int root) {
  check_usable("broadcast");
  if (root < 0 || root >= size_) {
    throw Error(error_message("comm", "broadcast from root {} in a group of {}", root, size_));
  }
  if (size_ == 1 || bytes == 0) return;
  sends_.clear();
  recvs_.clear();
  if (bytes <= kDirectExchangeBytes || size_ == 2) {
    if (rank_ == root) {
      for (int p = 0; p < size_; ++p) {
        if (p != root) sends_.push_back({p, data, bytes});
      }
    } else {
      recvs_.push_back({root, data, bytes});
    }
    transfer(WireOp::Broadcast, 0, sends_, recvs_);
    return;
  }
  // Large: the root scatters one segment to each rank, then a ring all-gather, so the root
  // sends the vector once instead of n - 1 times.
  auto* out = static_cast<uint8_t*>(data);
  std::vector<size_t>& sizes = sizes_;
  sizes = even_split(bytes, size_);
  offsets_.assign(1, 0);
  for (size_t s : sizes) offsets_.push_back(offsets_.back() + s);
  if (rank_ == root) {
    for (int p = 0; p < size_; ++p) {
      if (p != root) sends_.push_back({p, out + offsets_[p], sizes[p]});
    }
  } else {
    recvs_.push_back({root, out + offsets_[rank_], sizes[rank_]});
  }
  transfer(WireOp::Broadcast, 0, sends_, recvs_);
  all_gather_ring(data, sizes, WireOp::Broadcast);
}

// Every non-empty segment in one concurrent transfer: one message latency, and each byte
// crosses one link once.
void P2PGroup::all_to_allv(const void* send, std::span<const size_t> send_bytes, void* recv,
                           std::span<const size_t> recv_bytes) {
  check_usable("all_to_all");
  ORCHARD_CHECK(send_bytes.size() == static_cast<size_t>(size_) && recv_bytes.size() == static_cast<size_t>(size_),
                "all_to_allv: {} send and {} receive sizes for {} ranks", send_bytes.size(), recv_bytes.size(), size_);
  ORCHARD_CHECK(send_bytes[rank_] == recv_bytes[rank_], "all_to_allv: rank {} sends itself {} bytes but takes {}",
                rank_, send_bytes[rank_], recv_bytes[rank_]);
  const auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  sends_.clear();
  recvs_.clear();
  size_t sent = 0, received = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) {
      if (send_bytes[p] > 0) std::memcpy(out + received, in + sent, send_bytes[p]);
    } else {
      if (send_bytes[p] > 0) sends_.push_back({p, in + sent, send_bytes[p]});
      if (recv_bytes[p] > 0) recvs_.push_back({p, out + received, recv_bytes[p]});
    }
    sent += send_bytes[p];
    received += recv_bytes[p];
  }
  if (!sends_.empty() || !recvs_.empty()) transfer(WireOp::AllToAll, 0, sends_, recvs_);
}

void P2PGroup::send(const void* data, size_t bytes, int peer, uint32_t tag) {
  check_usable("send");
  check_peer(peer, "send");
  const SendOp op{peer, data, bytes};
  transfer(WireOp::Send, tag, {&op, 1}, {});
}

void P2PGroup::recv(void* data, size_t bytes, int peer, uint32_t tag) {
  check_usable("recv");
  check_peer(peer, "recv");
  const RecvOp op{peer, data, bytes};
  transfer(WireOp::Send, tag, {}, {&op, 1});
}

// Dissemination barrier: after round k every rank has heard, directly or not, from 2^(k+1)
// ranks; ceil(log2 n) rounds of empty frames.
void P2PGroup::barrier() {
  check_usable("barrier");
  for (int distance = 1; distance < size_; distance *= 2) {
    const SendOp snd{wrap(rank_ + distance), nullptr, 0};
    const RecvOp rcv{wrap(rank_ - distance), nullptr, 0};
    transfer(WireOp::Barrier, 0, {&snd, 1}, {&rcv, 1});
  }
}

}  // namespace orchard::comm

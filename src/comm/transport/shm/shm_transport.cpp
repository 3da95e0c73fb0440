#include "comm/transport/shm/shm_transport.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "comm/reduce.h"
#include "comm/transport/shm/shm_layout.h"

namespace orchard::comm::shm {

using Clock = std::chrono::steady_clock;

namespace {

// Bytes moved per step before the counters are published, so the receiver starts on a large
// frame while the sender is still copying it.
constexpr size_t kCopyChunk = 64 * 1024;
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr auto kYield = std::chrono::microseconds(1000);
constexpr auto kNap = std::chrono::microseconds(50);
constexpr auto kLivenessInterval = std::chrono::milliseconds(2);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

size_t pad8(size_t n) { return (n + 7) / 8 * 8; }

// Copies between linear memory and the ring, in two pieces where the range wraps.
void ring_write(Ring& r, uint64_t pos, const void* src, size_t n) {
  if (n == 0) return;  // src may be null (empty frames of barrier)
  const size_t at = pos % kRingBytes;
  const size_t first = std::min(n, kRingBytes - at);
  std::memcpy(r.data + at, src, first);
  std::memcpy(r.data, static_cast<const uint8_t*>(src) + first, n - first);
}
void ring_read(const Ring& r, uint64_t pos, void* dst, size_t n) {
  if (n == 0) return;
  const size_t at = pos % kRingBytes;
  const size_t first = std::min(n, kRingBytes - at);
  std::memcpy(dst, r.data + at, first);
  std::memcpy(static_cast<uint8_t*>(dst) + first, r.data, n - first);
}

bool pid_alive(int pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

}  // namespace

std::string ShmTransport::segment_name(const std::string& secret, int rank) {
  return fmt::format("/orc{:012x}_{}", job_hash(secret) & 0xffffffffffffull, rank);
}

ShmTransport::ShmTransport(const Config& config)
    : rank_(config.rank),
      world_(config.world),
      busy_poll_(config.busy_poll),
      timeout_(config.timeout),
      emulator_(config.link, config.world),
      segments_(static_cast<size_t>(config.world), nullptr),
      pids_(static_cast<size_t>(config.world), 0),
      send_sequence_(static_cast<size_t>(config.world), 0),
      recv_sequence_(static_cast<size_t>(config.world), 0) {
  streams_.reserve(static_cast<size_t>(2 * world_));
  if (world_ == 1) return;
  const auto deadline = Clock::now() + config.connect_timeout;
  const uint64_t job = job_hash(config.secret);
  segment_bytes_ = Segment::bytes_for(world_);
  own_name_ = segment_name(config.secret, rank_);
  ::shm_unlink(own_name_.c_str());  // stale, from a crashed run of this job
  int fd = ::shm_open(own_name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(segment_bytes_)) != 0) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    ::shm_unlink(own_name_.c_str());
    throw Error(error_message("comm", "rank {}: cannot create shared memory {}: {}", rank_, own_name_, std::strerror(err)));
  }
  void* mem = ::mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mem == MAP_FAILED) {
    ::shm_unlink(own_name_.c_str());
    throw Error(error_message("comm", "rank {}: cannot map {}: {}", rank_, own_name_, std::strerror(errno)));
  }
  auto* own = static_cast<Segment*>(mem);  // zero-filled by ftruncate
  own->magic = kSegmentMagic;
  own->version = kSegmentVersion;
  own->job = job;
  own->world = world_;
  own->rank = rank_;
  own->pid = static_cast<int32_t>(::getpid());
  own->ready.store(1, std::memory_order_release);
  segments_[static_cast<size_t>(rank_)] = own;
  pids_[static_cast<size_t>(rank_)] = own->pid;

  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    const std::string name = segment_name(config.secret, p);
    for (;;) {
      if (Clock::now() >= deadline) {
        throw TimeoutError(error_message("comm", "rank {}: rank {} did not create its shared memory {} within {} s",
                                         rank_, p, name, config.connect_timeout.count() / 1000.0));
      }
      int pfd = ::shm_open(name.c_str(), O_RDWR, 0600);
      struct stat st {};
      if (pfd >= 0 && ::fstat(pfd, &st) == 0 && static_cast<size_t>(st.st_size) == segment_bytes_) {
        void* pm = ::mmap(nullptr, segment_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
        ::close(pfd);
        auto* seg = pm == MAP_FAILED ? nullptr : static_cast<Segment*>(pm);
        // A segment of another job, a world of another size, or one left by a dead process is
        // not this peer's: wait for the real one.
        if (seg && seg->ready.load(std::memory_order_acquire) == 1 && seg->magic == kSegmentMagic &&
            seg->version == kSegmentVersion && seg->job == job && seg->world == world_ && seg->rank == p &&
            pid_alive(seg->pid)) {
          seg->attached.fetch_add(1, std::memory_order_acq_rel);
          segments_[static_cast<size_t>(p)] = seg;
          pids_[static_cast<size_t>(p)] = seg->pid;
          break;
        }
        if (seg) ::munmap(seg, segment_bytes_);
      } else if (pfd >= 0) {
        ::close(pfd);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  while (own->attached.load(std::memory_order_acquire) < static_cast<uint32_t>(world_ - 1)) {
    if (Clock::now() >= deadline) {
      throw TimeoutError(error_message("comm", "rank {}: not every peer mapped {} within {} s", rank_, own_name_,
                                       config.connect_timeout.count() / 1000.0));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::shm_unlink(own_name_.c_str());
  own_name_.clear();
}

ShmTransport::~ShmTransport() {
  if (!own_name_.empty()) ::shm_unlink(own_name_.c_str());
  for (Segment* s : segments_) {
    if (s) ::munmap(s, segment_bytes_);
  }
}

std::string ShmTransport::peer_name(int peer) const {
  return fmt::format("rank {} (pid {})", peer, pids_[static_cast<size_t>(peer)]);
}

void ShmTransport::abort() noexcept {
  if (Segment* own = segments_[static_cast<size_t>(rank_)]) own->failed.store(1, std::memory_order_release);
}

// A peer may exit the moment its last frame is in our ring (the end of a job's final barrier), so a
// dead peer fails the transfer only when what it wrote before exiting cannot finish our receive.
// An unfinished send to it always fails: it never read that frame.
size_t ShmTransport::check_peers(WireOp op) {
  size_t finished = 0;
  for (auto& s : streams_) {
    if (s.complete) continue;
    const Segment* seg = segments_[static_cast<size_t>(s.peer)];
    if (seg->failed.load(std::memory_order_acquire)) {
      throw PeerError(error_message("comm", "rank {}: {} failed during {}", rank_, peer_name(s.peer), wire_op_name(op)));
    }
    if (pid_alive(pids_[static_cast<size_t>(s.peer)])) continue;
    if (!s.is_send) {
      while (!s.complete && advance_recv(s, op)) {
      }
    }
    if (!s.complete) {
      throw PeerError(error_message("comm", "rank {}: {} died during {}", rank_, peer_name(s.peer), wire_op_name(op)));
    }
    ++finished;
  }
  return finished;
}

// The frame to peer p goes into ring[rank_] of p's segment.
bool ShmTransport::advance_send(Stream& s) {
  if (s.release != Clock::time_point{} && Clock::now() < s.release) return false;
  Ring& ring = segments_[static_cast<size_t>(s.peer)]->ring(rank_);
  uint64_t head = ring.head.load(std::memory_order_relaxed);
  const uint64_t start = head;
  const uint64_t space = kRingBytes - (head - ring.tail.load(std::memory_order_acquire));
  if (!s.header_done) {
    if (space < sizeof s.header) return false;
    ring_write(ring, head, &s.header, sizeof s.header);
    head += sizeof s.header;
    s.header_done = true;
  }
  const uint64_t room = kRingBytes - (head - ring.tail.load(std::memory_order_relaxed));
  const size_t n = std::min({static_cast<size_t>(room), s.bytes - s.done, size_t{kCopyChunk}});
  ring_write(ring, head, s.src + s.done, n);
  head += n;
  s.done += n;
  const size_t pad = pad8(s.bytes) - s.bytes;
  if (s.done == s.bytes && room - n >= pad) {
    head += pad;  // frames start 8-aligned, so no element ever wraps the ring
    s.complete = true;
  }
  if (head == start && !s.complete) return false;  // ring full: nothing moved
  ring.head.store(head, std::memory_order_release);
  return true;
}

bool ShmTransport::advance_recv(Stream& s, WireOp op) {
  Ring& ring = segments_[static_cast<size_t>(rank_)]->ring(s.peer);
  uint64_t tail = ring.tail.load(std::memory_order_relaxed);
  const uint64_t start = tail;
  const uint64_t head = ring.head.load(std::memory_order_acquire);
  if (head == tail) return false;
  if (!s.header_done) {
    if (head - tail < sizeof s.header) return false;
    ring_read(ring, tail, &s.header, sizeof s.header);
    std::string why = check_frame_header(s.header, s.expected);
    if (!why.empty()) {
      throw FormatError(error_message("comm", "rank {}: malformed frame from {} during {}: {}", rank_,
                                      peer_name(s.peer), wire_op_name(op), why));
    }
    tail += sizeof s.header;
    s.header_done = true;
  }
  size_t n = std::min({static_cast<size_t>(head - tail), s.bytes - s.done, size_t{kCopyChunk}});
  if (s.reduce) {
    const size_t elem = dtype_size(s.dtype);
    n = n / elem * elem;
    // Sum straight out of the ring, in two pieces where it wraps (never inside an element).
    const size_t at = tail % kRingBytes;
    const size_t first = std::min(n, kRingBytes - at);
    sum_into(s.dst + s.done, s.addend + s.done, ring.data + at, first / elem, s.dtype);
    sum_into(s.dst + s.done + first, s.addend + s.done + first, ring.data, (n - first) / elem, s.dtype);
  } else {
    ring_read(ring, tail, s.dst + s.done, n);
  }
  tail += n;
  s.done += n;
  const size_t pad = pad8(s.bytes) - s.bytes;
  if (s.done == s.bytes && head - tail >= pad) {
    tail += pad;
    s.complete = true;
  }
  if (tail == start && !s.complete) return false;  // only part of an element or of the padding so far
  ring.tail.store(tail, std::memory_order_release);
  return true;
}

void ShmTransport::transfer(WireOp op, uint32_t tag, std::span<const SendOp> sends, std::span<const RecvOp> recvs) {
  streams_.clear();
  for (const auto& o : sends) {
    Stream s{};
    s.peer = o.peer;
    s.is_send = true;
    s.header = make_frame_header(op, tag, send_sequence_[static_cast<size_t>(o.peer)]++, o.bytes);
    s.src = static_cast<const uint8_t*>(o.data);
    s.bytes = o.bytes;
    s.release = emulator_.enabled() ? emulator_.release_time(o.peer, o.bytes) : Clock::time_point{};
    streams_.push_back(s);
  }
  for (const auto& o : recvs) {
    Stream s{};
    s.peer = o.peer;
    s.expected = FrameExpectation{op, tag, recv_sequence_[static_cast<size_t>(o.peer)]++, o.bytes};
    s.dst = static_cast<uint8_t*>(o.data);
    s.bytes = o.bytes;
    s.reduce = o.reduce;
    s.addend = static_cast<const uint8_t*>(o.addend);
    s.dtype = o.dtype;
    streams_.push_back(s);
  }
  size_t remaining = streams_.size();
  auto last_progress = Clock::now();
  auto last_check = last_progress;
  while (remaining > 0) {
    bool progressed = false;
    for (auto& s : streams_) {
      if (s.complete) continue;
      if (s.is_send ? advance_send(s) : advance_recv(s, op)) {
        progressed = true;
        if (s.complete) --remaining;
      }
    }
    if (remaining == 0) break;
    if (progressed) {
      last_progress = Clock::now();
      continue;
    }
    const auto now = Clock::now();
    const auto idle = now - last_progress;
    if (now - last_check >= kLivenessInterval) {
      last_check = now;
      remaining -= check_peers(op);
      if (remaining == 0) break;
      if (idle >= timeout_) {
        for (const auto& s : streams_) {
          if (s.complete) continue;
          throw TimeoutError(error_message("comm", "rank {}: {} did not answer within {} s during {}", rank_,
                                           peer_name(s.peer), timeout_.count() / 1000.0, wire_op_name(op)));
        }
      }
    }
    if (busy_poll_ || idle < kSpin) {
      cpu_relax();
    } else if (idle < kYield) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(kNap);
    }
  }
}

}  // namespace orchard::comm::shm

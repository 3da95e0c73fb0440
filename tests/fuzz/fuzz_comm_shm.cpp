// libFuzzer target for the frames a peer writes into a rank's shared-memory ring (the shm backend
// for ranks on one host), as the rank reads them. Rank 0 runs ShmTransport in a thread of this
// process; the fuzzer plays rank 1 as another process would, through the segments themselves
// (shm_layout.h): it maps rank 0's inbox, writes its input into the ring rank 1 sends on, then
// raises its own segment's failed flag. Whatever the bytes, rank 0 must finish its two transfers
// or throw an orchard::Error that names rank 1, promptly (it sees the flag once it has read all it
// can); any other exception, a crash, a write past a buffer or a hang is a finding.
//
// The first byte: bits 0-1 pick what rank 0 receives (plain bytes, or summed into its own as f32,
// f16 or bf16), bits 2-4 the op the frames are for; the second byte the payload bytes (1-256,
// whole elements). The rest is what rank 1 writes.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/transport/shm/shm_layout.h"
#include "core/error.h"

namespace {

using namespace orchard;
using namespace orchard::comm;

// Rank 0 gives up on a peer that neither writes nor fails for this long: a wait this long means it
// missed the failed flag (a hang).
constexpr auto kTimeout = std::chrono::seconds(5);

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_comm_shm: %s\n", what.c_str());
  std::abort();
}

// A segment this process maps (its own, or rank 0's), unmapped at the end.
struct Mapped {
  shm::Segment* segment = nullptr;
  size_t bytes = 0;
  ~Mapped() {
    if (segment) ::munmap(segment, bytes);
  }
};

shm::Segment* map(int fd, size_t bytes) {
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  return m == MAP_FAILED ? nullptr : static_cast<shm::Segment*>(m);
}

void play(const uint8_t* data, size_t size) {
  static int run = 0;
  const std::string secret = fmt::format("fuzz-shm-{}-{}", ::getpid(), run++);
  const uint8_t choice = data[0];
  const DType dtype = std::array{DType::F32, DType::F32, DType::F16, DType::BF16}[choice & 3];
  const bool reduce = (choice & 3) != 0;
  const WireOp op = static_cast<WireOp>(1 + ((choice >> 2) & 7) % 7);
  const size_t elem = reduce ? dtype_size(dtype) : 1;
  const size_t bytes = std::max<size_t>(elem, (size_t{data[1]} + 1) / elem * elem);
  data += 2;
  size -= 2;

  // Rank 1's own segment, as ShmTransport lays one out, made before rank 0 looks for it.
  const size_t segment_bytes = shm::Segment::bytes_for(2);
  const std::string own_name = shm::ShmTransport::segment_name(secret, 1);
  Mapped own{nullptr, segment_bytes};
  {
    const int fd = ::shm_open(own_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(segment_bytes)) != 0) finding("cannot make rank 1's segment");
    own.segment = map(fd, segment_bytes);
    if (!own.segment) finding("cannot map rank 1's segment");
  }
  own.segment->magic = shm::kSegmentMagic;
  own.segment->version = shm::kSegmentVersion;
  own.segment->job = shm::job_hash(secret);
  own.segment->world = 2;
  own.segment->rank = 1;
  own.segment->pid = static_cast<int32_t>(::getpid());
  own.segment->ready.store(1, std::memory_order_release);

  Config config;
  config.backend = Backend::Shm;
  config.rank = 0;
  config.world = 2;
  config.secret = secret;
  config.timeout = kTimeout;
  config.connect_timeout = kTimeout;
  std::string error;
  std::exception_ptr other;
  std::thread rank0([&] {
    try {
      shm::ShmTransport t(config);
      std::vector<uint8_t> out(bytes, 0x3c), in(bytes, 0);
      for (uint32_t round = 0; round < 2; ++round) {
        const SendOp send{1, out.data(), bytes};
        const RecvOp recv{1, in.data(), bytes, reduce, out.data(), dtype};
        t.transfer(op, 0, {&send, 1}, {&recv, 1});
      }
    } catch (const Error& e) {
      error = e.what();
    } catch (...) {
      other = std::current_exception();
    }
  });

  // Rank 0's inbox, once it is there: rank 1 maps it as a peer does, then writes the input.
  Mapped inbox{nullptr, segment_bytes};
  const std::string inbox_name = shm::ShmTransport::segment_name(secret, 0);
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  while (!inbox.segment && std::chrono::steady_clock::now() < deadline) {
    const int fd = ::shm_open(inbox_name.c_str(), O_RDWR, 0600);
    struct stat st {};
    if (fd >= 0 && ::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == segment_bytes) {
      shm::Segment* s = map(fd, segment_bytes);
      if (s && s->ready.load(std::memory_order_acquire) == 1) inbox.segment = s;
      else if (s) ::munmap(s, segment_bytes);
    } else if (fd >= 0) {
      ::close(fd);
    }
    if (!inbox.segment) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!inbox.segment) finding("rank 0 made no segment");
  inbox.segment->attached.fetch_add(1, std::memory_order_acq_rel);
  while (own.segment->attached.load(std::memory_order_acquire) < 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  ::shm_unlink(own_name.c_str());
  // Inputs are small (-max_len): they fit the ring without wrapping.
  shm::Ring& ring = inbox.segment->ring(1);
  std::memcpy(ring.data, data, std::min(size, shm::kRingBytes));
  ring.head.store(std::min(size, shm::kRingBytes), std::memory_order_release);
  own.segment->failed.store(1, std::memory_order_release);
  rank0.join();

  if (other) {
    try {
      std::rethrow_exception(other);
    } catch (const std::exception& e) {
      finding(std::string("an exception that is not an orchard::Error: ") + e.what());
    }
  }
  if (!error.empty()) {
    if (error.find("rank 1") == std::string::npos) finding("an error that does not name rank 1: " + error);
    if (error.find("did not answer within") != std::string::npos) finding("rank 0 hung: " + error);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 2) play(data, size);
  return 0;
}

#include "comm/group.h"

#include "comm/algorithms/collectives.h"
#include "comm/backends.h"
#include "comm/transport/shm/shm_transport.h"
#include "comm/transport/tcp/tcp_transport.h"

namespace orchard::comm {

size_t dtype_size(DType dtype) { return dtype == DType::F32 ? 4 : 2; }

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
  }
  return "?";
}

std::string_view backend_name(Backend backend) {
  switch (backend) {
    case Backend::Ring: return "ring";
    case Backend::Shm: return "shm";
    case Backend::Mpi: return "mpi";
  }
  return "?";
}

Backend parse_backend(std::string_view name) {
  if (name == "ring" || name == "tcp") return Backend::Ring;
  if (name == "shm") return Backend::Shm;
  if (name == "mpi") return Backend::Mpi;
  throw Error(error_message("comm", "unknown backend '{}' (ring, shm or mpi)", name));
}

Group::Group(std::shared_ptr<GroupImpl> impl) : impl_(std::move(impl)) {
  ORCHARD_CHECK(impl_ != nullptr, "Group without an implementation");
}

void Group::all_gather(const void* send, void* recv, size_t bytes_per_rank) {
  // A fixed array keeps the even case free of allocation; worlds beyond it fall back to a vector.
  constexpr int kInline = 64;
  const int n = size();
  if (n <= kInline) {
    size_t sizes[kInline];
    for (int r = 0; r < n; ++r) sizes[r] = bytes_per_rank;
    impl_->all_gatherv(send, recv, {sizes, static_cast<size_t>(n)});
  } else {
    std::vector<size_t> sizes(static_cast<size_t>(n), bytes_per_rank);
    impl_->all_gatherv(send, recv, sizes);
  }
}

bool is_available(Backend backend) { return backend == Backend::Mpi ? mpi::is_available() : true; }

Group init(const Config& config) {
  if (config.backend != Backend::Mpi && (config.world < 1 || config.rank < 0 || config.rank >= config.world)) {
    throw Error(error_message("comm", "rank {} does not fit a world of {}", config.rank, config.world));
  }
  switch (config.backend) {
    case Backend::Ring:
      return Group(std::make_shared<P2PGroup>(std::make_unique<tcp::TcpTransport>(config), Backend::Ring));
    case Backend::Shm:
      return Group(std::make_shared<P2PGroup>(std::make_unique<shm::ShmTransport>(config), Backend::Shm));
    case Backend::Mpi:
      return Group(mpi::init(config));
  }
  throw Error(error_message("comm", "unknown backend {}", static_cast<int>(config.backend)));
}

std::vector<size_t> even_split(size_t total, int parts) {
  std::vector<size_t> out(static_cast<size_t>(parts), total / static_cast<size_t>(parts));
  for (size_t i = 0; i < total % static_cast<size_t>(parts); ++i) ++out[i];
  return out;
}

}  // namespace orchard::comm

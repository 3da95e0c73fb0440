// The MPI backend: OpenMPI's own collectives (MPI_Allreduce etc.) behind GroupImpl. Ranks are
// started by mpirun, which also owns fault handling: a rank that dies makes mpirun abort the
// job, so Config::timeout does not apply here. F16/BF16 sums use a user-defined MPI_Op.
#include <mpi.h>

#include <cstdlib>
#include <limits>
#include <vector>

#include "comm/backends.h"
#include "comm/reduce.h"

namespace orchard::comm::mpi {
namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw PeerError(error_message("comm", "{} failed: {}", what, std::string(text, static_cast<size_t>(len))));
  }
}

int as_int(size_t n, const char* what) {
  if (n > static_cast<size_t>(std::numeric_limits<int>::max())) {
    throw Error(error_message("comm", "{} of {} elements exceeds MPI's int counts", what, n));
  }
  return static_cast<int>(n);
}

template <DType kType>
void sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  sum_into(inout, inout, in, static_cast<size_t>(*len), kType);
}

class MpiGroup final : public GroupImpl {
 public:
  MpiGroup() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Op_create(&sum_op<DType::F16>, 1, &f16_sum_);
    MPI_Op_create(&sum_op<DType::BF16>, 1, &bf16_sum_);
    counts_.resize(static_cast<size_t>(size_));
    displs_.resize(static_cast<size_t>(size_));
    recv_counts_.resize(static_cast<size_t>(size_));
    recv_displs_.resize(static_cast<size_t>(size_));
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::Mpi; }

  void all_reduce(void* data, size_t count, DType dtype) override {
    if (count == 0) return;
    check(MPI_Allreduce(MPI_IN_PLACE, data, as_int(count, "all_reduce"), type(dtype), sum_op_for(dtype),
                        MPI_COMM_WORLD),
          "MPI_Allreduce");
  }
  void all_gatherv(const void* send, void* recv, std::span<const size_t> bytes_per_rank) override {
    int offset = 0;
    for (int r = 0; r < size_; ++r) {
      counts_[static_cast<size_t>(r)] = as_int(bytes_per_rank[static_cast<size_t>(r)], "all_gather");
      displs_[static_cast<size_t>(r)] = offset;
      offset += counts_[static_cast<size_t>(r)];
    }
    const void* in = send == static_cast<uint8_t*>(recv) + displs_[static_cast<size_t>(rank_)] ? MPI_IN_PLACE : send;
    check(MPI_Allgatherv(in, counts_[static_cast<size_t>(rank_)], MPI_BYTE, recv, counts_.data(), displs_.data(),
                         MPI_BYTE, MPI_COMM_WORLD),
          "MPI_Allgatherv");
  }
  void reduce_scatter(const void* send, void* recv, std::span<const size_t> counts, DType dtype) override {
    for (int r = 0; r < size_; ++r) counts_[static_cast<size_t>(r)] = as_int(counts[static_cast<size_t>(r)], "reduce_scatter");
    check(MPI_Reduce_scatter(send, recv, counts_.data(), type(dtype), sum_op_for(dtype), MPI_COMM_WORLD),
          "MPI_Reduce_scatter");
  }
  void broadcast(void* data, size_t bytes, int root) override {
    check(MPI_Bcast(data, as_int(bytes, "broadcast"), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }
  void all_to_allv(const void* send, std::span<const size_t> send_bytes, void* recv,
                   std::span<const size_t> recv_bytes) override {
    int sent = 0, received = 0;
    for (int r = 0; r < size_; ++r) {
      const auto i = static_cast<size_t>(r);
      counts_[i] = as_int(send_bytes[i], "all_to_all");
      displs_[i] = sent;
      recv_counts_[i] = as_int(recv_bytes[i], "all_to_all");
      recv_displs_[i] = received;
      sent += counts_[i];
      received += recv_counts_[i];
    }
    check(MPI_Alltoallv(send, counts_.data(), displs_.data(), MPI_BYTE, recv, recv_counts_.data(),
                        recv_displs_.data(), MPI_BYTE, MPI_COMM_WORLD),
          "MPI_Alltoallv");
  }
  void send(const void* data, size_t bytes, int peer, uint32_t tag) override {
    check(MPI_Send(data, as_int(bytes, "send"), MPI_BYTE, peer, static_cast<int>(tag & 0x7fff), MPI_COMM_WORLD),
          "MPI_Send");
  }
  void recv(void* data, size_t bytes, int peer, uint32_t tag) override {
    MPI_Status status;
    check(MPI_Recv(data, as_int(bytes, "recv"), MPI_BYTE, peer, static_cast<int>(tag & 0x7fff), MPI_COMM_WORLD,
                   &status),
          "MPI_Recv");
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if (static_cast<size_t>(got) != bytes) {
      throw FormatError(error_message("comm", "rank {}: message of {} bytes from rank {} where {} were expected", rank_,
                                      got, peer, bytes));
    }
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

 private:
  static MPI_Datatype type(DType dtype) { return dtype == DType::F32 ? MPI_FLOAT : MPI_UINT16_T; }
  MPI_Op sum_op_for(DType dtype) const {
    return dtype == DType::F32 ? MPI_SUM : dtype == DType::F16 ? f16_sum_ : bf16_sum_;
  }

  int rank_ = 0;
  int size_ = 1;
  MPI_Op f16_sum_;
  MPI_Op bf16_sum_;
  std::vector<int> counts_;
  std::vector<int> displs_;
  std::vector<int> recv_counts_;
  std::vector<int> recv_displs_;
};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

bool is_available() { return true; }

std::shared_ptr<GroupImpl> init(const Config&) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    // Errors come back as codes (turned into exceptions) instead of aborting the process.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit(finalize_at_exit);
  }
  return std::make_shared<MpiGroup>();
}

}  // namespace orchard::comm::mpi

#include "collective_checks.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

namespace orchard::comm::testing {
namespace {

// Inputs are multiples of 1/8 in [-6, 6]: every f32 and f16 partial sum of up to 8 of them is
// exact, so those must match bit for bit. BF16 (8 significant bits) rounds partial sums beyond
// 32; each of the world - 1 additions errs by at most half an ulp (0.125 at 48), hence the
// tolerance 0.125 x (world - 1).
float input(int rank, size_t i) { return static_cast<float>(static_cast<int>((rank * 131 + i * 7) % 97) - 48) / 8.0f; }

// The compiler's own half type, independent of core's conversions: _Float16, or __fp16 on arm64
// with GCC 12, whose C++ has no _Float16.
#if defined(__aarch64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
using CompilerHalf = __fp16;
#else
using CompilerHalf = _Float16;
#endif

uint16_t to_bits(float f, DType dtype) {
  if (dtype == DType::F16) {
    CompilerHalf h = static_cast<CompilerHalf>(f);
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    return bits;
  }
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);  // exact: inputs fit in bf16
}

float from_bits(const uint8_t* p, DType dtype) {
  if (dtype == DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  if (dtype == DType::F16) {
    CompilerHalf h;
    std::memcpy(&h, &bits, 2);
    return static_cast<float>(h);
  }
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, 4);
  return f;
}

void fill(std::vector<uint8_t>& buf, int rank, size_t count, DType dtype, size_t first = 0) {
  const size_t elem = dtype_size(dtype);
  buf.resize(count * elem);
  for (size_t i = 0; i < count; ++i) {
    float v = input(rank, first + i);
    if (dtype == DType::F32) {
      std::memcpy(&buf[i * elem], &v, 4);
    } else {
      uint16_t b = to_bits(v, dtype);
      std::memcpy(&buf[i * elem], &b, 2);
    }
  }
}

float expected_sum(int world, size_t i) {
  float s = 0;
  for (int r = 0; r < world; ++r) s += input(r, i);
  return s;
}

void check_sum(const uint8_t* got, size_t count, size_t first, int world, DType dtype, const char* op, size_t n) {
  const float tolerance = dtype == DType::BF16 ? 0.125f * static_cast<float>(world - 1) : 0.0f;
  for (size_t i = 0; i < count; ++i) {
    const float want = expected_sum(world, first + i);
    const float have = from_bits(got + i * dtype_size(dtype), dtype);
    if (!(std::fabs(have - want) <= tolerance)) {
      throw std::runtime_error(fmt::format("{} {} count {}: element {} is {} instead of {}", op, dtype_name(dtype), n,
                                           first + i, have, want));
    }
  }
}

void check_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const char* op, size_t n) {
  if (got != want) {
    size_t i = 0;
    while (got[i] == want[i]) ++i;
    throw std::runtime_error(fmt::format("{} count {}: byte {} differs", op, n, i));
  }
}

}  // namespace

std::vector<size_t> test_counts(int world, DType dtype, bool with_64mib) {
  std::vector<size_t> counts = {1, 3, 13, 1031, 4096, 262147};
  if (with_64mib && world == 2 && dtype == DType::F32) counts.push_back(16u << 20);
  return counts;
}

void check_all_collectives(Group& group, bool with_64mib) {
  const int world = group.size();
  const int rank = group.rank();
  std::vector<uint8_t> data, all, want;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    const size_t elem = dtype_size(dtype);
    for (size_t n : test_counts(world, dtype, with_64mib)) {
      // all_reduce, in place.
      fill(data, rank, n, dtype);
      group.all_reduce(data.data(), n, dtype);
      check_sum(data.data(), n, 0, world, dtype, "all_reduce", n);

      // reduce_scatter, even and deliberately uneven splits (rank 0 takes the remainder).
      for (bool skewed : {false, true}) {
        std::vector<size_t> counts = even_split(n, world);
        if (skewed) {
          counts.assign(static_cast<size_t>(world), n / static_cast<size_t>(world) / 2);
          counts[0] = n - counts[0] * static_cast<size_t>(world - 1);
        }
        const size_t first = std::accumulate(counts.begin(), counts.begin() + rank, size_t{0});
        fill(data, rank, n, dtype);
        const std::vector<uint8_t> before = data;
        std::vector<uint8_t> out(counts[static_cast<size_t>(rank)] * elem + 1, 0xab);
        group.reduce_scatter(data.data(), out.data(), counts, dtype);
        check_sum(out.data(), counts[static_cast<size_t>(rank)], first, world, dtype, "reduce_scatter", n);
        if (out.back() != 0xab) throw std::runtime_error(fmt::format("reduce_scatter count {} wrote past its output", n));
        check_bytes(data, before, "reduce_scatter (input untouched)", n);
      }
      if (dtype != DType::F32) continue;  // byte-moving ops do not depend on dtype

      // all_gather (even) and all_gatherv (uneven, some ranks empty).
      const size_t bytes = n * elem;
      fill(data, rank, n, dtype);
      all.assign(bytes * static_cast<size_t>(world), 0);
      group.all_gather(data.data(), all.data(), bytes);
      want.clear();
      for (int r = 0; r < world; ++r) {
        std::vector<uint8_t> part;
        fill(part, r, n, dtype);
        want.insert(want.end(), part.begin(), part.end());
      }
      check_bytes(all, want, "all_gather", n);

      std::vector<size_t> sizes(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r) sizes[static_cast<size_t>(r)] = (r % 3 == 1 ? 0 : n / static_cast<size_t>(r + 1)) * elem;
      want.clear();
      for (int r = 0; r < world; ++r) {
        std::vector<uint8_t> part;
        fill(part, r, sizes[static_cast<size_t>(r)] / elem, dtype);
        want.insert(want.end(), part.begin(), part.end());
      }
      fill(data, rank, sizes[static_cast<size_t>(rank)] / elem, dtype);
      all.assign(want.size(), 0);
      group.all_gatherv(data.data(), all.data(), sizes);
      check_bytes(all, want, "all_gatherv", n);

      // all_to_allv: rank r sends rank p (r + 2p) % 5 x n / 4 elements (so some pairs send
      // nothing, including some to themselves), filled from input(1000 r + p, ...).
      auto pair_count = [&](int from, int to) { return static_cast<size_t>((from + 2 * to) % 5) * n / 4; };
      std::vector<size_t> send_sizes(static_cast<size_t>(world)), recv_sizes(static_cast<size_t>(world));
      data.clear();
      want.clear();
      for (int p = 0; p < world; ++p) {
        std::vector<uint8_t> part;
        fill(part, 1000 * rank + p, pair_count(rank, p), dtype);
        data.insert(data.end(), part.begin(), part.end());
        fill(part, 1000 * p + rank, pair_count(p, rank), dtype);
        want.insert(want.end(), part.begin(), part.end());
        send_sizes[static_cast<size_t>(p)] = pair_count(rank, p) * elem;
        recv_sizes[static_cast<size_t>(p)] = pair_count(p, rank) * elem;
      }
      all.assign(want.size(), 0);
      group.all_to_allv(data.data(), send_sizes, all.data(), recv_sizes);
      check_bytes(all, want, "all_to_allv", n);

      // broadcast from the last rank.
      const int root = world - 1;
      fill(data, rank == root ? 1000 : rank, n, dtype);
      fill(want, 1000, n, dtype);
      group.broadcast(data.data(), bytes, root);
      check_bytes(data, want, "broadcast", n);
    }
  }
  // Point to point around the ring, tagged; then a barrier.
  const int next = (rank + 1) % world;
  const int prev = (rank + world - 1) % world;
  if (world > 1) {
    std::vector<uint8_t> out(1031 * 4), in(1031 * 4);
    fill(out, rank, 1031, DType::F32);
    if (rank % 2 == 0) {
      group.send(out.data(), out.size(), next, 7);
      group.recv(in.data(), in.size(), prev, 7);
    } else {
      group.recv(in.data(), in.size(), prev, 7);
      group.send(out.data(), out.size(), next, 7);
    }
    fill(want, prev, 1031, DType::F32);
    check_bytes(in, want, "send/recv", 1031);
  }
  group.barrier();
}

}  // namespace orchard::comm::testing

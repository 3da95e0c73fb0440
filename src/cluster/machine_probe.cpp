#include "cluster/machine_probe.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "core/kernels.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace orchard::cluster {
namespace {

using Clock = std::chrono::steady_clock;

// Several matrices of a 4096-wide model layer, 150 MB in all: well past any cache, so the
// one-token pass measures memory, as decoding a real model does.
constexpr int64_t kCols = 4096;
constexpr int64_t kRows = 4096;
constexpr int kMatrices = 8;
constexpr int64_t kPromptTokens = 64;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

MachineProbe probe_machine(int threads) {
  core::ThreadPool pool(threads);
  MachineProbe probe;
  probe.threads = pool.size();
  // Blocks with a modest scale and varied nibbles: the kernels' speed does not depend on
  // values, but NaNs or denormals could.
  std::vector<std::vector<core::BlockQ4_0>> storage(kMatrices, std::vector<core::BlockQ4_0>(kRows * kCols / 32));
  std::vector<core::WeightMatrix> matrices;
  for (auto& blocks : storage) {
    for (size_t b = 0; b < blocks.size(); ++b) {
      blocks[b].d = 0x2c00;  // 1/16 in IEEE half
      std::memset(blocks[b].qs, static_cast<int>(0x11 * (b % 15)), sizeof blocks[b].qs);
    }
    matrices.push_back(core::WeightMatrix::prepare(core::TensorType::Q4_0, blocks.data(), kRows, kCols));
  }
  std::vector<float> x(kPromptTokens * kCols, 0.5f), y(kPromptTokens * kRows);
  core::MatmulScratch scratch;
  for (const auto& w : matrices) core::matmul(w, x.data(), 1, y.data(), pool, scratch);  // warm up

  double bytes = 0;
  auto start = Clock::now();
  while (seconds_since(start) < 0.5) {
    for (const auto& w : matrices) {
      core::matmul(w, x.data(), 1, y.data(), pool, scratch);
      bytes += static_cast<double>(w.bytes());
    }
  }
  probe.decode_gbs = bytes / seconds_since(start) / 1e9;

  double flops = 0;
  start = Clock::now();
  while (seconds_since(start) < 0.5) {
    core::matmul(matrices[0], x.data(), kPromptTokens, y.data(), pool, scratch);
    flops += 2.0 * kPromptTokens * kRows * kCols;
  }
  probe.compute_gflops = flops / seconds_since(start) / 1e9;
  return probe;
}

}  // namespace orchard::cluster

#include "cluster/machine_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/kernels.h"
#include "core/quant.h"
#include "core/thread_pool.h"

namespace orchard::cluster {
namespace {

using Clock = std::chrono::steady_clock;

// Enough copies of the layer that the set is well past any cache: decoding a real model
// streams its weights from memory, and so must the probe.
constexpr double kMinimumBytes = 160e6;
constexpr int64_t kPromptTokens = 64;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Rates of one expert's products over few tokens, as fractions of its rate over 64 (where the
// dense probe measures): copies of the expert's matrices past the caches, as a prompt streams a
// layer's experts once per chunk. The token counts take turns, several rounds of each, and each
// keeps its best round: other programs' load then spoils a round, not the ratio.
std::vector<double> expert_efficiency(const ProbeShape& shape, core::ThreadPool& pool) {
  const int64_t d = shape.n_embd, ff = shape.n_ff_exp;
  const std::pair<int64_t, int64_t> expert[] = {{ff, d}, {ff, d}, {d, ff}};
  const double expert_bytes = 3.0 * static_cast<double>(ff * d) / 32 * sizeof(core::BlockQ4_0);
  const int copies = static_cast<int>(kMinimumBytes / expert_bytes) + 1;
  std::vector<std::vector<core::BlockQ4_0>> storage;
  std::vector<core::WeightMatrix> matrices;
  for (int c = 0; c < copies; ++c)
    for (const auto& [rows, cols] : expert) {
      std::vector<core::BlockQ4_0>& blocks = storage.emplace_back(static_cast<size_t>(rows * cols / 32));
      for (size_t b = 0; b < blocks.size(); ++b) {
        blocks[b].d = 0x2c00;
        std::memset(blocks[b].qs, static_cast<int>(0x11 * (b % 15)), sizeof blocks[b].qs);
      }
      matrices.push_back(core::WeightMatrix::prepare(core::TensorType::Q4_0, blocks.data(), rows, cols));
    }
  const int64_t most = int64_t{1} << (kExpertProbePoints - 1);
  std::vector<float> x(static_cast<size_t>(most * std::max(d, ff)), 0.5f), y(x.size());
  core::MatmulScratch scratch;
  constexpr int kRounds = 4;
  std::vector<double> best(kExpertProbePoints, 0.0);
  for (int round = 0; round < kRounds; ++round)
    for (int k = 0; k < kExpertProbePoints; ++k) {
      const int64_t tokens = int64_t{1} << k;
      double flops = 0;
      const auto start = Clock::now();
      for (size_t i = 0; seconds_since(start) < 0.02; i = (i + 1) % matrices.size()) {
        core::matmul(matrices[i], x.data(), tokens, y.data(), pool, scratch);
        flops += 2.0 * static_cast<double>(tokens) * static_cast<double>(matrices[i].rows() * matrices[i].cols());
      }
      best[static_cast<size_t>(k)] = std::max(best[static_cast<size_t>(k)], flops / seconds_since(start));
    }
  // Fewer tokens never multiply faster (each weight is unpacked for fewer products): a point
  // above the one after it is noise, and is lowered to it.
  for (double& rate : best) rate /= best.back();
  for (int k = kExpertProbePoints - 2; k >= 0; --k)
    best[static_cast<size_t>(k)] = std::min(best[static_cast<size_t>(k)], best[static_cast<size_t>(k) + 1]);
  return best;
}

// Copies of one layer's matrices (Q4_0), enough of them to be well past any cache.
struct LayerSet {
  std::vector<std::vector<core::BlockQ4_0>> storage;
  std::vector<core::WeightMatrix> matrices;
  int64_t widest = 0;
};

LayerSet layer_set(const ProbeShape& shape) {
  const int64_t d = shape.n_embd;
  const std::vector<std::pair<int64_t, int64_t>> layer = {{d, d}, {shape.kv_dim, d}, {shape.kv_dim, d}, {d, d},
                                                          {shape.n_ff, d}, {shape.n_ff, d}, {d, shape.n_ff}};
  double layer_bytes = 0;
  for (const auto& [rows, cols] : layer) layer_bytes += static_cast<double>(rows * cols) / 32 * sizeof(core::BlockQ4_0);
  const int copies = static_cast<int>(kMinimumBytes / layer_bytes) + 1;
  LayerSet set;
  set.widest = std::max(d, shape.n_ff);
  for (int c = 0; c < copies; ++c) {
    for (const auto& [rows, cols] : layer) {
      std::vector<core::BlockQ4_0>& blocks = set.storage.emplace_back(static_cast<size_t>(rows * cols / 32));
      // A modest scale and varied nibbles: the kernels' speed does not depend on values, but
      // NaNs or denormals could.
      for (size_t b = 0; b < blocks.size(); ++b) {
        blocks[b].d = 0x2c00;  // 1/16 in IEEE half
        std::memset(blocks[b].qs, static_cast<int>(0x11 * (b % 15)), sizeof blocks[b].qs);
      }
      set.matrices.push_back(core::WeightMatrix::prepare(core::TensorType::Q4_0, blocks.data(), rows, cols));
    }
  }
  return set;
}

// Weight bytes per second of one-token products streaming the set, GB/s (after a warm-up pass).
double decode_rate(const LayerSet& set, core::ThreadPool& pool, core::MatmulScratch& scratch, std::vector<float>& x,
                   std::vector<float>& y) {
  for (const auto& w : set.matrices) core::matmul(w, x.data(), 1, y.data(), pool, scratch);
  double bytes = 0;
  const auto start = Clock::now();
  while (seconds_since(start) < 0.5) {
    for (const auto& w : set.matrices) {
      core::matmul(w, x.data(), 1, y.data(), pool, scratch);
      bytes += static_cast<double>(w.bytes());
    }
  }
  return bytes / seconds_since(start) / 1e9;
}

}  // namespace

double probe_decode_gbs(int threads, const ProbeShape& shape) {
  core::ThreadPool pool(threads);
  const LayerSet set = layer_set(shape);
  std::vector<float> x(static_cast<size_t>(set.widest), 0.5f), y(x.size());
  core::MatmulScratch scratch;
  return decode_rate(set, pool, scratch, x, y);
}

MachineProbe probe_machine(int threads, const ProbeShape& shape) {
  core::ThreadPool pool(threads);
  MachineProbe probe;
  probe.threads = pool.size();
  const LayerSet set = layer_set(shape);
  const std::vector<core::WeightMatrix>& matrices = set.matrices;
  std::vector<float> x(static_cast<size_t>(kPromptTokens * set.widest), 0.5f), y(x.size());
  core::MatmulScratch scratch;
  probe.decode_gbs = decode_rate(set, pool, scratch, x, y);

  double flops = 0;
  const auto start = Clock::now();
  for (size_t i = 0; seconds_since(start) < 0.5; i = (i + 1) % matrices.size()) {
    core::matmul(matrices[i], x.data(), kPromptTokens, y.data(), pool, scratch);
    flops += 2.0 * kPromptTokens * static_cast<double>(matrices[i].rows() * matrices[i].cols());
  }
  probe.compute_gflops = flops / seconds_since(start) / 1e9;
  if (shape.n_ff_exp > 0) probe.expert_efficiency = expert_efficiency(shape, pool);
  return probe;
}

}  // namespace orchard::cluster

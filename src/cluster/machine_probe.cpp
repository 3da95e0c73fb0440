#include "cluster/machine_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "core/kernels.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "model/ops.h"

namespace orchard::cluster {
namespace {

using Clock = std::chrono::steady_clock;
using Shapes = std::vector<std::pair<int64_t, int64_t>>;  // {rows, cols} of each matrix

// Enough copies of the layer that the set is well past any cache: decoding a real model
// streams its weights from memory, and so must the probe.
constexpr double kMinimumBytes = 160e6;
constexpr int64_t kPromptTokens = 64;
// Rows per attention block: Forward's (model/forward.h), whose rows share each key's load.
constexpr int32_t kAttentionBlockRows = 8;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool whole_blocks(core::TensorType type, const Shapes& shapes) {
  return std::all_of(shapes.begin(), shapes.end(),
                     [&](const auto& m) { return m.second % core::type_traits(type).block_elements == 0; });
}

// Copies of some matrices of one type, enough to be well past any cache. Every row holds the
// same modest values (one row through the reference quantizer): the kernels' speed does not
// depend on values, but NaNs or denormals could. A repacked copy leaves its source free.
struct MatrixSet {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<core::WeightMatrix> matrices;
};

MatrixSet matrix_set(core::TensorType type, const Shapes& shapes) {
  double copy_bytes = 0;
  for (const auto& [rows, cols] : shapes) copy_bytes += static_cast<double>(rows * core::row_bytes(type, cols));
  const int copies = static_cast<int>(kMinimumBytes / copy_bytes) + 1;
  std::vector<std::vector<uint8_t>> filled;
  for (const auto& [rows, cols] : shapes) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (size_t i = 0; i < row.size(); ++i) row[i] = 0.0625f * static_cast<float>(static_cast<int>(i % 15) - 7);
    const size_t bytes = core::row_bytes(type, cols);
    std::vector<uint8_t>& m = filled.emplace_back(bytes * static_cast<size_t>(rows));
    core::quantize_row_reference(type, row.data(), m.data(), cols);
    for (int64_t r = 1; r < rows; ++r) std::memcpy(m.data() + static_cast<size_t>(r) * bytes, m.data(), bytes);
  }
  MatrixSet set;
  for (int c = 0; c < copies; ++c)
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::vector<uint8_t>& bytes = set.storage.emplace_back(filled[i]);
      set.matrices.push_back(core::WeightMatrix::prepare(type, bytes.data(), shapes[i].first, shapes[i].second));
      if (set.matrices.back().repacked()) std::vector<uint8_t>().swap(bytes);
    }
  return set;
}

// The layer's matrices; the decode probe keeps q and o square (n_embd wide), the set its
// bandwidth figure was checked against measured decode with (docs/BENCHMARKS.md).
Shapes layer_shapes(const ProbeShape& shape, bool decode = false) {
  const int64_t d = shape.n_embd, q = shape.q_dim > 0 && !decode ? shape.q_dim : d;
  return {{q, d}, {shape.kv_dim, d}, {shape.kv_dim, d}, {d, q}, {shape.n_ff, d}, {shape.n_ff, d}, {d, shape.n_ff}};
}

// FLOPs per second of `tokens`-token products cycling through `matrices` for `seconds`.
double product_rate(const std::vector<core::WeightMatrix>& matrices, int64_t tokens, double seconds,
                    const std::vector<float>& x, std::vector<float>& y, core::ThreadPool& pool,
                    core::MatmulScratch& scratch) {
  double flops = 0;
  const auto start = Clock::now();
  for (size_t i = 0; seconds_since(start) < seconds; i = (i + 1) % matrices.size()) {
    core::matmul(matrices[i], x.data(), tokens, y.data(), pool, scratch);
    flops += 2.0 * static_cast<double>(tokens) * static_cast<double>(matrices[i].rows() * matrices[i].cols());
  }
  return flops / seconds_since(start);
}

// The FLOP rate of a mix of weight types: their times per FLOP weighted by their shares.
double mixed_rate(const std::vector<TypeShare>& types, const std::function<double(size_t)>& rate_of) {
  double seconds_per_flop = 0;
  for (size_t t = 0; t < types.size(); ++t) seconds_per_flop += types[t].share / rate_of(t);
  return 1 / seconds_per_flop;
}

// Rates of one expert's products over few tokens, as fractions of its rate over 64 (where the
// dense probe measures): copies of the expert's matrices past the caches, as a prompt streams a
// layer's experts once per chunk. The token counts take turns, several rounds of each, and each
// keeps its best round: other programs' load then spoils a round, not the ratio. With several
// types, a point's time per FLOP is theirs weighted by their shares.
std::vector<double> expert_efficiency(const ProbeShape& shape, core::ThreadPool& pool) {
  const int64_t d = shape.n_embd, ff = shape.n_ff_exp;
  const Shapes expert = {{ff, d}, {ff, d}, {d, ff}};
  std::vector<MatrixSet> sets;
  for (const TypeShare& t : shape.types) sets.push_back(matrix_set(t.type, expert));
  const int64_t most = int64_t{1} << (kExpertProbePoints - 1);
  std::vector<float> x(static_cast<size_t>(most * std::max(d, ff)), 0.5f), y(x.size());
  core::MatmulScratch scratch;
  constexpr int kRounds = 4;
  std::vector<std::vector<double>> best(sets.size(), std::vector<double>(kExpertProbePoints, 0.0));
  for (int round = 0; round < kRounds; ++round)
    for (int k = 0; k < kExpertProbePoints; ++k)
      for (size_t t = 0; t < sets.size(); ++t) {
        double& b = best[t][static_cast<size_t>(k)];
        b = std::max(b, product_rate(sets[t].matrices, int64_t{1} << k, 0.02, x, y, pool, scratch));
      }
  std::vector<double> rate(kExpertProbePoints);
  for (size_t k = 0; k < rate.size(); ++k) rate[k] = mixed_rate(shape.types, [&](size_t t) { return best[t][k]; });
  // Fewer tokens never multiply faster (each weight is unpacked for fewer products): a point
  // above the one after it is noise, and is lowered to it.
  const double top = rate.back();
  for (double& r : rate) r /= top;
  for (int k = kExpertProbePoints - 2; k >= 0; --k)
    rate[static_cast<size_t>(k)] = std::min(rate[static_cast<size_t>(k)], rate[static_cast<size_t>(k) + 1]);
  return rate;
}

// FLOPs per second of a prompt's attention: kAttentionProbeTokens rows, each attending to
// itself and every row before it, over the shape's heads, from an F16 cache laid out as KvCache
// keeps it (each KV head's keys in whole blocks, then its values), one task per KV head and
// block as Forward runs it.
static_assert(kAttentionProbeTokens % model::kKeyBlock == 0, "the probe's keys are whole blocks");
double attention_rate(const ProbeShape& shape, core::ThreadPool& pool) {
  const int32_t rows = kAttentionProbeTokens, hd = shape.head_dim, kv_heads = shape.n_kv_heads;
  const int32_t group = shape.n_heads / kv_heads, blocks = rows / kAttentionBlockRows;
  const auto kv_floats = static_cast<size_t>(kv_heads) * static_cast<size_t>(hd) * static_cast<size_t>(rows);
  const std::vector<core::Half> keys(kv_floats, core::float_to_half(0.03f)), values(kv_floats, core::float_to_half(0.5f));
  const std::vector<float> q(static_cast<size_t>(rows) * static_cast<size_t>(shape.n_heads) * static_cast<size_t>(hd), 0.1f);
  std::vector<float> out(q.size());
  std::vector<int32_t> n_keys(static_cast<size_t>(rows));
  for (int32_t t = 0; t < rows; ++t) n_keys[static_cast<size_t>(t)] = t + 1;
  const auto per_thread = static_cast<size_t>(model::ops::attention_scratch_floats(kAttentionBlockRows, group, rows));
  std::vector<float> scores(per_thread * static_cast<size_t>(pool.size()));
  const int64_t row_stride = int64_t{shape.n_heads} * hd;
  auto pass = [&] {
    pool.parallel_for(int64_t{kv_heads} * blocks, [&](int64_t task, int thread) {
      const auto kv = static_cast<int32_t>(task % kv_heads);
      const int32_t t0 = static_cast<int32_t>(task / kv_heads) * kAttentionBlockRows;
      const size_t offset = static_cast<size_t>(t0) * static_cast<size_t>(row_stride) + static_cast<size_t>(kv) * group * hd;
      const size_t head = static_cast<size_t>(kv) * static_cast<size_t>(hd) * static_cast<size_t>(rows);
      model::ops::AttentionBlock b;
      b.q = &q[offset];
      b.out = &out[offset];
      b.row_stride = row_stride;
      b.n_rows = kAttentionBlockRows;
      b.group = group;
      b.head_dim = hd;
      b.n_keys = &n_keys[static_cast<size_t>(t0)];
      b.keys = &keys[head];
      b.values = &values[head];
      b.value_stride = hd;
      b.type = model::KvType::F16;
      b.scores = &scores[static_cast<size_t>(thread) * per_thread];
      model::ops::attend_block(b);
    });
  };
  pass();
  // Scores and values: 2 multiply-adds per key, head dimension and query head.
  const double flops_per_pass = 4.0 * shape.n_heads * hd * (static_cast<double>(rows) * (rows + 1) / 2);
  // The median of 5 rounds, as for the products.
  std::vector<double> rates;
  for (int round = 0; round < 5; ++round) {
    double flops = 0;
    const auto start = Clock::now();
    while (seconds_since(start) < 0.05) {
      pass();
      flops += flops_per_pass;
    }
    rates.push_back(flops / seconds_since(start));
  }
  std::nth_element(rates.begin(), rates.begin() + 2, rates.end());
  return rates[2];
}

// Weight bytes per second of one-token products streaming the set, GB/s (after a warm-up pass).
double decode_rate(const MatrixSet& set, core::ThreadPool& pool, core::MatmulScratch& scratch, std::vector<float>& x,
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

int64_t widest(const ProbeShape& shape) {
  return std::max({shape.n_embd, shape.n_ff, shape.q_dim, shape.n_ff_exp});
}

}  // namespace

ProbeShape probe_shape(const ModelFacts& model) {
  const model::ModelConfig& c = model.config;
  ProbeShape shape{c.n_embd, c.kv_dim(), c.n_ff, c.n_ff_exp, c.q_dim(), {}, c.n_heads, c.n_kv_heads, c.head_dim};
  Shapes all = layer_shapes(shape);
  if (c.n_ff_exp > 0) all.push_back({c.n_embd, c.n_ff_exp});
  for (const TypeShare& t : model.prompt_types)
    shape.types.push_back({whole_blocks(t.type, all) ? t.type : core::TensorType::Q4_0, t.share});
  if (shape.types.empty()) shape.types = {{core::TensorType::Q4_0, 1}};
  // Latent attention's heads attend in latent space, which this probe does not lay out.
  if (c.latent_attention() || c.n_kv_heads <= 0) shape.n_heads = 0;
  return shape;
}

double probe_decode_gbs(int threads, const ProbeShape& shape) {
  core::ThreadPool pool(threads);
  const MatrixSet set = matrix_set(core::TensorType::Q4_0, layer_shapes(shape, true));
  std::vector<float> x(static_cast<size_t>(widest(shape)), 0.5f), y(x.size());
  core::MatmulScratch scratch;
  return decode_rate(set, pool, scratch, x, y);
}

MachineProbe probe_machine(int threads, const ProbeShape& shape) {
  core::ThreadPool pool(threads);
  MachineProbe probe;
  probe.threads = pool.size();
  std::vector<float> x(static_cast<size_t>(kPromptTokens * widest(shape)), 0.5f), y(x.size());
  core::MatmulScratch scratch;
  // Decode streams weights: its rate is the memory's, measured with Q4_0 whatever the model.
  probe.decode_gbs = decode_rate(matrix_set(core::TensorType::Q4_0, layer_shapes(shape, true)), pool, scratch, x, y);
  // The prompt rate of the model's mix of types: each type's products for its share of half a
  // second (a tenth at least), in rounds that take turns, each type's median round kept (one
  // burst alone swung by ±20% on a shared host); their times per FLOP weighted by share.
  constexpr int kRounds = 5;
  std::vector<MatrixSet> sets;
  for (const TypeShare& t : shape.types) sets.push_back(matrix_set(t.type, layer_shapes(shape)));
  std::vector<std::vector<double>> rounds(sets.size());
  for (int round = 0; round < kRounds; ++round)
    for (size_t t = 0; t < sets.size(); ++t)
      rounds[t].push_back(product_rate(sets[t].matrices, kPromptTokens, std::max(0.1, 0.5 * shape.types[t].share) / kRounds,
                                       x, y, pool, scratch));
  const double prompt_rate = mixed_rate(shape.types, [&](size_t t) {
    std::nth_element(rounds[t].begin(), rounds[t].begin() + kRounds / 2, rounds[t].end());
    return rounds[t][kRounds / 2];
  });
  sets.clear();
  probe.compute_gflops = prompt_rate / 1e9;
  if (shape.n_ff_exp > 0) probe.expert_efficiency = expert_efficiency(shape, pool);
  if (shape.n_heads > 0 && shape.head_dim > 0 && shape.n_kv_heads > 0)
    probe.attention_efficiency = attention_rate(shape, pool) / 1e9 / probe.compute_gflops;
  return probe;
}

}  // namespace orchard::cluster

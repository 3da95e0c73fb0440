// Decode attention at depth: one decode step's attention over every layer of a TinyLlama-shaped
// cache (22 layers, 4 KV heads of 64, 8 query heads per KV head), as Forward::attend runs it
// (one task per KV head, query heads spread when threads outnumber KV heads), reported as GB/s
// of cache read and as a fraction of the read bandwidth measured in the same run. At depth 4096
// an F16 cache is 92 MB a step, far beyond the last-level cache, so each pass comes from DRAM.
//
// Prompt attention at depth: one layer's attention for a block of 512 prompt rows at positions
// [P, P+512) over a cache holding P positions before them (the prompt's own rows included, as
// Forward stores every row before any attends), split as Forward::attend splits it: blocks of 8
// rows, one task per (KV head, block) on the pool. Reported per CPU-second of the whole process
// (load from other processes does not count), as GFLOP/s (flops = Σ over rows of the keys it
// sees × head_dim × 4 × query heads: Q·K and P·V, a multiply and an add each) and as a share of
// one core's AVX2 FMA peak (2 FMAs × 8 floats × 2 flops × 2.45 GHz = 78.4 GFLOP/s).
// Run: bench_attention [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "membw.h"
#include "model/kv_cache.h"
#include "model/ops.h"

namespace orchard::model {
namespace {

constexpr int32_t kLayers = 22, kKvHeads = 4, kGroup = 8, kHeadDim = 64;
constexpr int32_t kPromptRows = 512, kBlockRows = 8;  // Forward's kAttentionBlockRows
constexpr double kCorePeakFlops = 2 * 8 * 2 * 2.45e9;

double bandwidth(int threads) {
  static double cached[3] = {};
  if (cached[threads] == 0) {
    core::ThreadPool pool(threads);
    cached[threads] = bench::measure_read_bandwidth(pool);
  }
  return cached[threads];
}

// range 0: threads (1, 2), range 1: depth, range 2: KvType.
void decode_attention(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const auto depth = static_cast<int32_t>(state.range(1));
  const auto type = static_cast<KvType>(state.range(2));
  const double bw = bandwidth(threads);
  KvCache cache(kLayers, depth + 64, kKvHeads, kHeadDim, kHeadDim, type);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> k(kKvHeads * kHeadDim), v(kKvHeads * kHeadDim);
  for (int32_t layer = 0; layer < kLayers; ++layer)
    for (int32_t pos = 0; pos < depth; ++pos) {
      for (auto& x : k) x = dist(rng);
      for (auto& x : v) x = dist(rng);
      cache.store(layer, pos, k.data(), v.data());
    }
  std::vector<float> q(kKvHeads * kGroup * kHeadDim), out(q.size());
  for (auto& x : q) x = dist(rng);
  core::ThreadPool pool(threads);
  const int64_t scratch = ops::attention_scratch_floats(kHeadDim);
  std::vector<float> scores(static_cast<size_t>(scratch * threads));
  const int32_t n_keys = depth;
  const int64_t parts = std::clamp<int64_t>((threads + kKvHeads - 1) / kKvHeads, 1, kGroup);
  for (auto _ : state) {
    for (int32_t layer = 0; layer < kLayers; ++layer)
      pool.parallel_for(kKvHeads * parts, [&](int64_t task, int thread) {
        const auto kv = static_cast<int32_t>(task / parts), part = static_cast<int32_t>(task % parts);
        const int32_t h0 = kGroup * part / static_cast<int32_t>(parts), h1 = kGroup * (part + 1) / static_cast<int32_t>(parts);
        ops::AttentionBlock b;
        b.q = &q[static_cast<size_t>((kv * kGroup + h0) * kHeadDim)];
        b.out = &out[static_cast<size_t>((kv * kGroup + h0) * kHeadDim)];
        b.row_stride = kKvHeads * kGroup * kHeadDim;
        b.n_rows = 1;
        b.group = h1 - h0;
        b.head_dim = kHeadDim;
        b.n_keys = &n_keys;
        b.keys = cache.keys(layer, kv);
        b.key_stride = cache.key_stride(layer);
        b.values = cache.values(layer, kv);
        b.value_stride = cache.value_stride();
        b.type = type;
        b.key_scales = cache.key_scales(layer, kv);
        b.value_scales = cache.value_scales(layer, kv);
        b.value_scale_stride = cache.value_scale_stride();
        b.scores = &scores[static_cast<size_t>(thread * scratch)];
        ops::attend_block(b);
      });
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = static_cast<double>(cache.bytes_per_position()) * depth;
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["of_bw"] = benchmark::Counter(bytes / bw, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(kv_type_name(type)));
}

BENCHMARK(decode_attention)
    ->ArgsProduct({{1, 2}, {512, 4096, 16384}, {static_cast<int64_t>(KvType::F16), static_cast<int64_t>(KvType::Q8_0), static_cast<int64_t>(KvType::F32)}})
    ->ArgNames({"threads", "depth", "type"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// range 0: threads (1, 2), range 1: the block's first position P, range 2: KvType.
void prefill_attention(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const auto start = static_cast<int32_t>(state.range(1));
  const auto type = static_cast<KvType>(state.range(2));
  const int32_t positions = start + kPromptRows;
  KvCache cache(1, positions, kKvHeads, kHeadDim, kHeadDim, type);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> k(kKvHeads * kHeadDim), v(kKvHeads * kHeadDim);
  for (int32_t pos = 0; pos < positions; ++pos) {
    for (auto& x : k) x = dist(rng);
    for (auto& x : v) x = dist(rng);
    cache.store(0, pos, k.data(), v.data());
  }
  const int32_t q_dim = kKvHeads * kGroup * kHeadDim;
  std::vector<float> q(static_cast<size_t>(kPromptRows) * q_dim), out(q.size());
  for (auto& x : q) x = dist(rng);
  std::vector<int32_t> n_keys(kPromptRows);
  double flops = 0;
  for (int32_t r = 0; r < kPromptRows; ++r) {
    n_keys[static_cast<size_t>(r)] = start + r + 1;
    flops += static_cast<double>(start + r + 1) * kHeadDim * 4 * kKvHeads * kGroup;
  }
  core::ThreadPool pool(threads);
  const int64_t scratch = ops::attention_scratch_floats(kHeadDim);
  std::vector<float> scores(static_cast<size_t>(scratch * threads));
  const int32_t n_blocks = kPromptRows / kBlockRows;
  for (auto _ : state) {
    pool.parallel_for(int64_t{kKvHeads} * n_blocks, [&](int64_t task, int thread) {
      const auto kv = static_cast<int32_t>(task % kKvHeads), block = static_cast<int32_t>(task / kKvHeads);
      const size_t offset = static_cast<size_t>(block) * kBlockRows * q_dim + static_cast<size_t>(kv) * kGroup * kHeadDim;
      ops::AttentionBlock b;
      b.q = &q[offset];
      b.out = &out[offset];
      b.row_stride = q_dim;
      b.n_rows = kBlockRows;
      b.group = kGroup;
      b.head_dim = kHeadDim;
      b.n_keys = &n_keys[static_cast<size_t>(block * kBlockRows)];
      b.keys = cache.keys(0, kv);
      b.key_stride = cache.key_stride(0);
      b.values = cache.values(0, kv);
      b.value_stride = cache.value_stride();
      b.type = type;
      b.key_scales = cache.key_scales(0, kv);
      b.value_scales = cache.value_scales(0, kv);
      b.value_scale_stride = cache.value_scale_stride();
      b.scores = &scores[static_cast<size_t>(thread * scratch)];
      ops::attend_block(b);
    });
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["of_peak"] = benchmark::Counter(flops / kCorePeakFlops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(kv_type_name(type)));
}

// CPU time of the whole process: the rates are per core-second, whatever else the host runs.
BENCHMARK(prefill_attention)
    ->ArgsProduct({{1, 2}, {0, 4096, 15872}, {static_cast<int64_t>(KvType::F16), static_cast<int64_t>(KvType::Q8_0)}})
    ->ArgNames({"threads", "start", "type"})
    ->Unit(benchmark::kMillisecond)
    ->MeasureProcessCPUTime();

}  // namespace
}  // namespace orchard::model

BENCHMARK_MAIN();

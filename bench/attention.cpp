// Decode attention at depth: one decode step's attention over every layer of a TinyLlama-shaped
// cache (22 layers, 4 KV heads of 64, 8 query heads per KV head), as Forward::attend runs it
// (one task per KV head, query heads spread when threads outnumber KV heads), reported as GB/s
// of cache read and as a fraction of the read bandwidth measured in the same run. At depth 4096
// an F16 cache is 92 MB a step, far beyond the last-level cache, so each pass comes from DRAM.
//
// Prompt attention at depth: one layer's attention for 512 prompt rows at positions [P, P + 512)
// of the same cache shape, in Forward::attend's blocks (one task per KV head and block), with the
// vector loops (blocks of 8 rows) and, where the CPU has them, AMX tiles (attention_amx.h;
// blocks of 32); GFLOP/s
// counts Q·K and P·V (4 × visible keys × 64 × 32 heads per row) per second of wall time.
//
// Latent attention (DeepSeek's shape): a decode step and an 8-row prompt block at depth 4096,
// over an F16 cache as a latent block (16-bit integer products, attention_vnni.h) and, for
// comparison in the same run, as a dense model's block (the float loops).
// Run: bench_attention [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/line_aligned.h"
#include "core/thread_pool.h"
#include "membw.h"
#include "model/attention_amx.h"
#include "model/kv_cache.h"
#include "model/ops.h"

namespace orchard::model {
namespace {

constexpr int32_t kLayers = 22, kKvHeads = 4, kGroup = 8, kHeadDim = 64;
// Latent attention as DeepSeek V3 keeps it (one latent of 512 and a rotated part of 64 per
// position, read by every head; Forward gives a task 16 heads), 32 heads over 8 layers at depth 4096.
constexpr int32_t kLatentLayers = 8, kLatentHeads = 32, kLatentHeadsPerTask = 16, kLatentKeyDim = 576, kLatentValueDim = 512,
                  kLatentDepth = 4096;

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
  core::LineAlignedVector<float> q(kKvHeads * kGroup * kHeadDim), out(q.size());
  for (auto& x : q) x = dist(rng);
  core::ThreadPool pool(threads);
  const int64_t scratch = ops::attention_scratch_floats(1, kGroup, depth);
  core::LineAlignedVector<float> scores(static_cast<size_t>(scratch * threads));
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

// range 0: threads, range 1: P (keys before the prompt), range 2: KvType, range 3: AMX (0, 1).
void prefill_attention(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const auto depth = static_cast<int32_t>(state.range(1));
  const auto type = static_cast<KvType>(state.range(2));
  const bool amx = state.range(3) != 0;
  if (amx && !ops::amx_available()) {
    state.SkipWithError("no AMX on this CPU");
    return;
  }
  constexpr int32_t kPrompt = 512;
  const int32_t n_ctx = depth + kPrompt;
  KvCache cache(1, n_ctx, kKvHeads, kHeadDim, kHeadDim, type);
  // Blocks of rows as Forward takes them.
  ops::allow_amx_attention(amx);
  ops::AttentionBlock shape;
  shape.head_dim = kHeadDim;
  shape.type = type;
  shape.value_scale_stride = cache.value_scale_stride();
  const int32_t block_rows = ops::attention_takes_wide_blocks(shape) ? 32 : 8;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> k(kKvHeads * kHeadDim), v(kKvHeads * kHeadDim);
  for (int32_t pos = 0; pos < n_ctx; ++pos) {
    for (auto& x : k) x = dist(rng);
    for (auto& x : v) x = dist(rng);
    cache.store(0, pos, k.data(), v.data());
  }
  constexpr int64_t kRowStride = kKvHeads * kGroup * kHeadDim;
  core::LineAlignedVector<float> q(static_cast<size_t>(kPrompt * kRowStride)), out(q.size());
  for (auto& x : q) x = dist(rng);
  std::vector<int32_t> n_keys(kPrompt);
  for (int32_t t = 0; t < kPrompt; ++t) n_keys[static_cast<size_t>(t)] = depth + t + 1;
  core::ThreadPool pool(threads);
  const int64_t scratch = ops::attention_scratch_floats(block_rows, kGroup, n_ctx);
  core::LineAlignedVector<float> scores(static_cast<size_t>(scratch * threads));
  for (auto _ : state) {
    // A KV head's blocks consecutive, as Forward orders them.
    pool.parallel_for(int64_t{kKvHeads} * (kPrompt / block_rows), [&](int64_t task, int thread) {
      const auto kv = static_cast<int32_t>(task / (kPrompt / block_rows));
      const auto t0 = static_cast<int32_t>(task % (kPrompt / block_rows)) * block_rows;
      const auto offset = static_cast<size_t>(t0 * kRowStride + kv * kGroup * kHeadDim);
      ops::AttentionBlock b;
      b.q = &q[offset];
      b.out = &out[offset];
      b.row_stride = kRowStride;
      b.n_rows = block_rows;
      b.group = kGroup;
      b.head_dim = kHeadDim;
      b.n_keys = &n_keys[static_cast<size_t>(t0)];
      b.keys = cache.keys(0, kv);
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
  ops::allow_amx_attention(true);
  double keys_seen = 0;
  for (int32_t n : n_keys) keys_seen += n;
  const double flops = 4.0 * keys_seen * kHeadDim * kKvHeads * kGroup;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  // Wide blocks off AMX are the VNNI integer products' (a Q8_0 cache on AVX-512).
  state.SetLabel(std::string(kv_type_name(type)) + (amx ? ", amx" : block_rows > 8 ? ", vnni" : ", vector"));
}

BENCHMARK(prefill_attention)
    ->ArgsProduct({{1, 2}, {0, 4096, 15872}, {static_cast<int64_t>(KvType::F16), static_cast<int64_t>(KvType::Q8_0)}, {0, 1}})
    ->ArgNames({"threads", "P", "type", "amx"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// range 0: threads, range 1: rows (1: a decode step; 8: a prompt block), range 2: KvType,
// range 3: latent (AttentionBlock::latent: 0 takes the float loops, as a dense model's block).
void latent_attention(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const auto rows = static_cast<int32_t>(state.range(1));
  const auto type = static_cast<KvType>(state.range(2));
  const bool latent = state.range(3) != 0;
  const int32_t n_ctx = kLatentDepth + rows;
  KvCache cache(kLatentLayers, n_ctx, 1, kLatentKeyDim, kLatentValueDim, type);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> k(kLatentKeyDim), v(kLatentValueDim);
  for (int32_t layer = 0; layer < kLatentLayers; ++layer)
    for (int32_t pos = 0; pos < n_ctx; ++pos) {
      for (auto& x : k) x = dist(rng);
      for (auto& x : v) x = dist(rng);
      cache.store(layer, pos, k.data(), v.data());
    }
  const int64_t row_stride = int64_t{kLatentHeads} * kLatentKeyDim, out_stride = int64_t{kLatentHeads} * kLatentValueDim;
  core::LineAlignedVector<float> q(static_cast<size_t>(rows * row_stride)), out(static_cast<size_t>(rows * out_stride));
  for (auto& x : q) x = dist(rng);
  std::vector<int32_t> n_keys(static_cast<size_t>(rows));
  for (int32_t t = 0; t < rows; ++t) n_keys[static_cast<size_t>(t)] = kLatentDepth + t + 1;
  core::ThreadPool pool(threads);
  const int64_t scratch = ops::attention_scratch_floats(rows, kLatentHeadsPerTask, n_ctx);
  core::LineAlignedVector<float> scores(static_cast<size_t>(scratch * threads));
  constexpr int32_t kParts = kLatentHeads / kLatentHeadsPerTask;
  for (auto _ : state) {
    for (int32_t layer = 0; layer < kLatentLayers; ++layer)
      pool.parallel_for(kParts, [&](int64_t part, int thread) {
        const auto h0 = static_cast<int32_t>(part) * kLatentHeadsPerTask;
        ops::AttentionBlock b;
        b.q = &q[static_cast<size_t>(h0 * kLatentKeyDim)];
        b.out = &out[static_cast<size_t>(h0 * kLatentValueDim)];
        b.row_stride = row_stride;
        b.out_row_stride = out_stride;
        b.n_rows = rows;
        b.group = kLatentHeadsPerTask;
        b.head_dim = kLatentKeyDim;
        b.value_dim = kLatentValueDim;
        b.scale = 1.0f / std::sqrt(192.0f);
        b.latent = latent;
        b.n_keys = n_keys.data();
        b.keys = cache.keys(layer, 0);
        b.values = cache.values(layer, 0);
        b.value_stride = cache.value_stride();
        b.type = type;
        b.key_scales = cache.key_scales(layer, 0);
        b.value_scales = cache.value_scales(layer, 0);
        b.value_scale_stride = cache.value_scale_stride();
        b.scores = &scores[static_cast<size_t>(thread * scratch)];
        ops::attend_block(b);
      });
    benchmark::DoNotOptimize(out.data());
  }
  double keys_seen = 0;
  for (int32_t n : n_keys) keys_seen += n;
  const double flops = 2.0 * keys_seen * (kLatentKeyDim + kLatentValueDim) * kLatentHeads * kLatentLayers;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(kv_type_name(type)) + (latent && type == KvType::F16 ? ", 16-bit products" : ""));
}

BENCHMARK(latent_attention)
    ->ArgsProduct({{1, 2}, {1, 8}, {static_cast<int64_t>(KvType::F16)}, {0, 1}})
    ->ArgNames({"threads", "rows", "type", "latent"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace orchard::model

BENCHMARK_MAIN();

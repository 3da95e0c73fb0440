// Matmul kernels on TinyLlama shapes: decode (GEMV, one token) as GB/s of weights read and as
// a fraction of the read bandwidth measured in the same run, and prompt (GEMM, 512 tokens) as
// tokens/s and GMAC/s (a 1.1B model does ~1e9 multiply-adds per token in its matmuls, so
// GMAC/s reads as that model's prompt tokens/s at this matrix's speed). Run: bench_kernels [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "core/kernels.h"
#include "core/kernels/kernel_set.h"
#include "core/quant.h"
#include "membw.h"

namespace orchard::core {
namespace {

// Read bandwidth per thread count, measured once per run (1 GiB array).
double bandwidth(int threads) {
  static std::map<int, double> cache;
  auto it = cache.find(threads);
  if (it != cache.end()) return it->second;
  ThreadPool pool(threads);
  return cache[threads] = bench::measure_read_bandwidth(pool);
}

// GGUF bytes of a rows × cols matrix with random weights: a few distinct rows quantized once,
// then repeated (the kernels' speed does not depend on the values).
std::vector<uint8_t> random_matrix(TensorType type, int64_t rows, int64_t cols) {
  const size_t rb = row_bytes(type, cols);
  constexpr int64_t kDistinct = 64;
  std::mt19937 rng(42);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<uint8_t> bytes(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    if (r < kDistinct) {
      for (auto& v : row) v = dist(rng);
      quantize_row_reference(type, row.data(), bytes.data() + rb * static_cast<size_t>(r), cols);
    } else {
      std::memcpy(bytes.data() + rb * static_cast<size_t>(r), bytes.data() + rb * static_cast<size_t>(r % kDistinct), rb);
    }
  }
  return bytes;
}

std::vector<float> random_activations(int64_t n) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = dist(rng);
  return x;
}

// Decode reads each matrix once per token, and the whole model is far larger than L3: cycle
// through enough prepared copies (≥ 128 MiB together) that every pass comes from DRAM.
class DramMatrices {
 public:
  DramMatrices(TensorType type, int64_t rows, int64_t cols, bool repack = true) {
    std::vector<uint8_t> source = random_matrix(type, rows, cols);
    const size_t copies = std::max<size_t>(1, ((size_t{128} << 20) + source.size() - 1) / source.size());
    sources_.assign(copies, source);
    for (auto& s : sources_) matrices_.push_back(WeightMatrix::prepare(type, s.data(), rows, cols, repack));
  }
  const WeightMatrix& first() const { return matrices_[0]; }
  const WeightMatrix& next() {
    const WeightMatrix& m = matrices_[next_];
    next_ = (next_ + 1) % matrices_.size();
    return m;
  }

 private:
  std::vector<std::vector<uint8_t>> sources_;
  std::vector<WeightMatrix> matrices_;
  size_t next_ = 0;
};

// A decode step of several sequences, the small-batch kernels (range 2: 1) against the
// KernelSet's own few-token kernels (0), on the repacked copy. Process CPU time (what the
// table's time column and rows_per_s are per) reads through a loaded host better than wall
// time, and the least of several repetitions better still: compare the two settings' rows
// within one run (--benchmark_repetitions=N --benchmark_enable_random_interleaving=true).
void small_batch(benchmark::State& state, TensorType type, int64_t rows, int64_t cols) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t tokens = state.range(1);
  kernels::use_small_batch_kernels(state.range(2) != 0);
  DramMatrices matrices(type, rows, cols);
  ThreadPool pool(threads);
  MatmulScratch scratch;
  std::vector<float> x = random_activations(tokens * cols), y(static_cast<size_t>(tokens * rows));
  for (auto _ : state) {
    matmul(matrices.next(), x.data(), tokens, y.data(), pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  kernels::use_small_batch_kernels(true);
  state.counters["rows_per_s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kernel_isa_name() + (matrices.first().repacked() ? " repacked" : ""));
}

// Range 1 chooses the layout, as for gemm below.
void gemv(benchmark::State& state, TensorType type, int64_t rows, int64_t cols) {
  const int threads = static_cast<int>(state.range(0));
  const bool repack = state.range(1) != 0;
  const double bw = bandwidth(threads);
  DramMatrices matrices(type, rows, cols, repack);
  ThreadPool pool(threads);
  MatmulScratch scratch;
  std::vector<float> x = random_activations(cols), y(static_cast<size_t>(rows));
  for (auto _ : state) {
    matmul(matrices.next(), x.data(), 1, y.data(), pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  const double bytes = static_cast<double>(matrices.first().bytes());
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["of_bw"] = benchmark::Counter(bytes / bw, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bw_GBps"] = bw / 1e9;
  state.SetLabel(kernel_isa_name() + (matrices.first().repacked() ? " repacked" : ""));
}

// One token against a 2048-wide matrix that stays in cache (range 0: rows; Q6_K at 128 rows is
// 217 KB, in L2, at 2048 rows 3.4 MB, in L3): the one-token kernel's cost per byte without
// DRAM's stream, which is what decides whether two cores' kernels keep up with the memory.
// One thread, process CPU time (readable on a loaded host); compare builds by the least of
// several repetitions. Each pass also quantizes the 2048 activations (about 1 µs).
void gemv_cached(benchmark::State& state, TensorType type) {
  const int64_t rows = state.range(0), cols = 2048;
  std::vector<uint8_t> source = random_matrix(type, rows, cols);
  const WeightMatrix matrix = WeightMatrix::prepare(type, source.data(), rows, cols);
  ThreadPool pool(1);
  MatmulScratch scratch;
  std::vector<float> x = random_activations(cols), y(static_cast<size_t>(rows));
  for (auto _ : state) {
    matmul(matrix, x.data(), 1, y.data(), pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(matrix.bytes()) * state.iterations());
  state.SetLabel(kernel_isa_name() + (matrix.repacked() ? " repacked" : ""));
}

// A decode step of several sequences: the same matrices as gemv, each pass with `tokens` rows
// of activations (range 1). of_bw near 1 means the pass costs no more than reading the weights
// once; below that, the kernels' arithmetic for the extra rows shows.
void decode_batch(benchmark::State& state, TensorType type, int64_t rows, int64_t cols) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t tokens = state.range(1);
  const double bw = bandwidth(threads);
  DramMatrices matrices(type, rows, cols);
  ThreadPool pool(threads);
  MatmulScratch scratch;
  std::vector<float> x = random_activations(tokens * cols), y(static_cast<size_t>(tokens * rows));
  for (auto _ : state) {
    matmul(matrices.next(), x.data(), tokens, y.data(), pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  const double bytes = static_cast<double>(matrices.first().bytes());
  state.counters["of_bw"] = benchmark::Counter(bytes / bw, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["rows_per_s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kernel_isa_name() + (matrices.first().repacked() ? " repacked" : ""));
}

// A decode step's mixture of experts on moe-3b's layer (Qwen3-30B-A3B: 2048 wide, experts 768
// wide, 4 of 32 chosen), the way Forward runs it: the chosen experts' gate and up products in
// one matmul_many, then their down projections, each of its own input, in another. Each pass
// takes the next 4 of 32 experts and the next of enough layers that the chosen bytes come from
// DRAM. of_bw is against the bytes the 4 experts read; moe-3b's Q4_K_M gives them Q4_K gate/up
// and, in half the layers, Q6_K down (range 1: the down projections' type, 0 Q4_K, 1 Q6_K; Q4_0
// files use Q4_0 for all). The experts are repacked copies of one random matrix each (the
// kernels' speed does not depend on the values); a set without repacking would read that one
// matrix from cache.
void moe_decode(benchmark::State& state, TensorType type) {
  constexpr int64_t kWidth = 2048, kExpertWidth = 768, kExperts = 32, kChosen = 4;
  const int threads = static_cast<int>(state.range(0));
  const TensorType down_type = type == TensorType::Q4_K && state.range(1) != 0 ? TensorType::Q6_K : type;
  const double bw = bandwidth(threads);
  const std::vector<uint8_t> gate_up = random_matrix(type, kExpertWidth, kWidth);
  const std::vector<uint8_t> down = random_matrix(down_type, kWidth, kExpertWidth);
  const size_t layer_bytes = kExperts * (2 * gate_up.size() + down.size());
  const size_t layers = std::max<size_t>(1, ((size_t{256} << 20) + layer_bytes - 1) / layer_bytes);
  struct Expert {
    WeightMatrix gate, up, down;
  };
  std::vector<Expert> experts;
  for (size_t i = 0; i < layers * kExperts; ++i)
    experts.push_back({WeightMatrix::prepare(type, gate_up.data(), kExpertWidth, kWidth),
                       WeightMatrix::prepare(type, gate_up.data(), kExpertWidth, kWidth),
                       WeightMatrix::prepare(down_type, down.data(), kWidth, kExpertWidth)});
  ThreadPool pool(threads);
  MatmulScratch scratch;
  std::vector<float> x = random_activations(kWidth), hidden(static_cast<size_t>(2 * kChosen * kExpertWidth)),
                     out(static_cast<size_t>(kChosen * kWidth));
  size_t next = 0;
  for (auto _ : state) {
    MatmulTarget targets[2 * kChosen];
    for (int64_t i = 0; i < kChosen; ++i) {
      const Expert& e = experts[(next + static_cast<size_t>(i)) % experts.size()];
      targets[2 * i] = {&e.gate, &hidden[static_cast<size_t>(2 * i * kExpertWidth)]};
      targets[2 * i + 1] = {&e.up, &hidden[static_cast<size_t>((2 * i + 1) * kExpertWidth)]};
    }
    matmul_many(targets, x.data(), 1, pool, scratch);
    MatmulTarget downs[kChosen];
    for (int64_t i = 0; i < kChosen; ++i)
      downs[i] = {&experts[(next + static_cast<size_t>(i)) % experts.size()].down, &out[static_cast<size_t>(i * kWidth)],
                  &hidden[static_cast<size_t>(2 * i * kExpertWidth)]};
    matmul_many(downs, nullptr, 1, pool, scratch);
    benchmark::DoNotOptimize(out.data());
    next = (next + kChosen) % experts.size();
  }
  const double bytes = static_cast<double>(kChosen * (2 * experts[0].gate.bytes() + experts[0].down.bytes()));
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["of_bw"] = benchmark::Counter(bytes / bw, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kernel_isa_name() + (experts[0].down.repacked() ? " repacked" : ""));
}

// Range 1 chooses the layout (0: GGUF rows, 1: the repacked copy where the kernel set has one),
// so a new interleaved kernel is measured against the row kernel in the same run.
void gemm(benchmark::State& state, TensorType type, int64_t rows, int64_t cols) {
  const int threads = static_cast<int>(state.range(0));
  const bool repack = state.range(1) != 0;
  constexpr int64_t kTokens = 512;
  std::vector<uint8_t> source = random_matrix(type, rows, cols);
  WeightMatrix w = WeightMatrix::prepare(type, source.data(), rows, cols, repack);
  ThreadPool pool(threads);
  MatmulScratch scratch;
  std::vector<float> x = random_activations(kTokens * cols), y(static_cast<size_t>(kTokens * rows));
  for (auto _ : state) {
    matmul(w, x.data(), kTokens, y.data(), pool, scratch);
    benchmark::DoNotOptimize(y.data());
  }
  const double macs = static_cast<double>(kTokens) * static_cast<double>(rows) * static_cast<double>(cols);
  state.counters["tokens_per_s"] = benchmark::Counter(kTokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GMACps"] = benchmark::Counter(macs / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kernel_isa_name() + (w.repacked() ? " repacked" : ""));
}

void memory_bandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  double bw = 0;
  for (auto _ : state) bw = bandwidth(threads);
  state.counters["GBps"] = bw / 1e9;
}

BENCHMARK(memory_bandwidth)->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond);

#define ORCHARD_SHAPES(kind, type)                                                                         \
  BENCHMARK_CAPTURE(kind, type##_5632x2048, TensorType::type, 5632, 2048)                                  \
      ->ArgsProduct({{1, 2}, {0, 1}})->ArgNames({"threads", "repack"})->Unit(benchmark::kMicrosecond)->UseRealTime(); \
  BENCHMARK_CAPTURE(kind, type##_32000x2048, TensorType::type, 32000, 2048)                                \
      ->ArgsProduct({{1, 2}, {0, 1}})->ArgNames({"threads", "repack"})->Unit(benchmark::kMicrosecond)->UseRealTime();

ORCHARD_SHAPES(gemv, Q4_0)
ORCHARD_SHAPES(gemv, Q8_0)
ORCHARD_SHAPES(gemv, Q4_K)
ORCHARD_SHAPES(gemv, Q6_K)
ORCHARD_SHAPES(gemv, F16)
ORCHARD_SHAPES(gemv, BF16)
ORCHARD_SHAPES(gemv, Q4_1)
ORCHARD_SHAPES(gemv, Q5_0)
ORCHARD_SHAPES(gemv, Q5_1)
ORCHARD_SHAPES(gemv, Q2_K)
ORCHARD_SHAPES(gemv, Q3_K)
ORCHARD_SHAPES(gemv, Q5_K)
ORCHARD_SHAPES(gemv, IQ4_NL)
ORCHARD_SHAPES(gemv, IQ4_XS)
ORCHARD_SHAPES(gemv, MXFP4)

#define ORCHARD_GEMV_CACHED(type)                                                                   \
  BENCHMARK_CAPTURE(gemv_cached, type, TensorType::type)                                                   \
      ->ArgsProduct({{128, 2048}})->ArgNames({"rows"})->Unit(benchmark::kMicrosecond)->MeasureProcessCPUTime() \
      ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });

ORCHARD_GEMV_CACHED(Q4_0)
ORCHARD_GEMV_CACHED(Q4_K)
ORCHARD_GEMV_CACHED(Q6_K)

#define ORCHARD_DECODE_BATCH(type)                                                                       \
  BENCHMARK_CAPTURE(decode_batch, type##_5632x2048, TensorType::type, 5632, 2048)                          \
      ->ArgsProduct({{2}, {1, 2, 4, 8, 16}})->ArgNames({"threads", "rows"})->Unit(benchmark::kMicrosecond)->UseRealTime();

ORCHARD_DECODE_BATCH(Q4_0)
ORCHARD_DECODE_BATCH(Q8_0)
ORCHARD_DECODE_BATCH(Q4_K)
ORCHARD_DECODE_BATCH(Q6_K)

#define ORCHARD_SMALL_BATCH(type)                                                                   \
  BENCHMARK_CAPTURE(small_batch, type##_5632x2048, TensorType::type, 5632, 2048)                          \
      ->ArgsProduct({{1}, {1, 2, 4, 8, 16}, {0, 1}})->ArgNames({"threads", "rows", "small"})               \
      ->Unit(benchmark::kMicrosecond)->MeasureProcessCPUTime()                                            \
      ->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });

ORCHARD_SMALL_BATCH(Q4_0)
ORCHARD_SMALL_BATCH(Q8_0)
ORCHARD_SMALL_BATCH(Q4_K)
ORCHARD_SMALL_BATCH(Q6_K)

BENCHMARK_CAPTURE(moe_decode, Q4_0, TensorType::Q4_0)
    ->ArgsProduct({{1, 2}, {0}})->ArgNames({"threads", "q6_k_down"})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(moe_decode, Q4_K, TensorType::Q4_K)
    ->ArgsProduct({{1, 2}, {0, 1}})->ArgNames({"threads", "q6_k_down"})->Unit(benchmark::kMicrosecond)->UseRealTime();

#define ORCHARD_GEMM(type)                                                                      \
  BENCHMARK_CAPTURE(gemm, type##_5632x2048, TensorType::type, 5632, 2048)                                 \
      ->ArgsProduct({{1, 2}, {0, 1}})->ArgNames({"threads", "repack"})->Unit(benchmark::kMillisecond)->UseRealTime();

ORCHARD_GEMM(Q4_0)
ORCHARD_GEMM(Q8_0)
ORCHARD_GEMM(Q4_K)
ORCHARD_GEMM(Q6_K)
ORCHARD_GEMM(F16)
ORCHARD_GEMM(Q3_K)
ORCHARD_GEMM(Q5_K)
ORCHARD_GEMM(IQ4_XS)
ORCHARD_GEMM(MXFP4)

}  // namespace
}  // namespace orchard::core

BENCHMARK_MAIN();

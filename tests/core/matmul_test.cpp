// Every kernel set this CPU runs (and the generic one) × every weight type × both layouts ×
// odd row counts × token counts, against the reference dequantizer and a float64 dot product.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/kernels.h"
#include "core/kernels/kernel_set.h"
#include "core/quant.h"

namespace orchard::core {
namespace {

std::vector<const kernels::KernelSet*> all_sets() {
  std::vector<const kernels::KernelSet*> sets = kernels::supported_simd_kernels();
  sets.push_back(&kernels::generic_kernels());
  return sets;
}

// Activation quantization step (amax / 127) of the block holding each element, or 0 where
// matmul feeds f32 activations.
double activation_step(TensorType type, const float* x, int64_t cols, int64_t i) {
  // The quantized types take activations in blocks of their own size (32 or 256).
  const int64_t block = type_traits(type).block_elements;
  if (block == 1) return 0;
  int64_t start = i / block * block;
  float amax = 0;
  for (int64_t j = start; j < start + block && j < cols; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax / 127.0;
}

struct Problem {
  TensorType type;
  int64_t rows, cols, n_tokens;
  std::vector<uint8_t> weights;
  std::vector<float> x;         // [n_tokens, cols]
  std::vector<double> expected;  // [n_tokens, rows]
  std::vector<double> tolerance;
};

// Random weights of `type` and, unless `shared_x` gives them, random activations.
Problem make_problem(TensorType type, int64_t rows, int64_t cols, int64_t n_tokens, uint32_t seed,
                     const std::vector<float>* shared_x = nullptr) {
  Problem p{type, rows, cols, n_tokens, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const size_t rb = row_bytes(type, cols);
  p.weights.resize(rb * static_cast<size_t>(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<float> w(static_cast<size_t>(rows * cols));  // dequantized weights
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = normal(rng);
    quantize_row_reference(type, row.data(), p.weights.data() + rb * static_cast<size_t>(r), cols);
    dequantize_row_reference(type, p.weights.data() + rb * static_cast<size_t>(r), w.data() + r * cols, cols);
  }
  p.x.resize(static_cast<size_t>(n_tokens * cols));
  for (auto& v : p.x) v = uniform(rng) * 3.0f;
  if (shared_x) p.x = *shared_x;
  p.expected.resize(static_cast<size_t>(n_tokens * rows));
  p.tolerance.resize(p.expected.size());
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = p.x.data() + t * cols;
    std::vector<double> step(static_cast<size_t>(cols));
    for (int64_t i = 0; i < cols; ++i) step[i] = activation_step(type, xt, cols, i);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0, magnitude = 0, quant_error = 0;
      for (int64_t i = 0; i < cols; ++i) {
        double wi = w[r * cols + i];
        sum += wi * xt[i];
        magnitude += std::fabs(wi * xt[i]);
        quant_error += std::fabs(wi) * step[i] / 2;  // rounding x moves it at most half a step
      }
      p.expected[t * rows + r] = sum;
      // Worst-case activation rounding, plus float32 accumulation and scale products.
      p.tolerance[t * rows + r] = quant_error + 1e-5 * magnitude + 1e-6;
    }
  }
  return p;
}

void check(const Problem& p, const std::vector<float>& y, const std::string& what) {
  for (int64_t t = 0; t < p.n_tokens; ++t)
    for (int64_t r = 0; r < p.rows; ++r) {
      size_t i = static_cast<size_t>(t * p.rows + r);
      ASSERT_NEAR(y[i], p.expected[i], p.tolerance[i]) << what << " token " << t << " row " << r;
    }
}

struct TypeCase {
  TensorType type;
  int64_t cols;
};

class Matmul : public ::testing::TestWithParam<TypeCase> {
 protected:
  void TearDown() override { kernels::use_kernel_set(nullptr); }
};

TEST_P(Matmul, EveryKernelSetMatchesReference) {
  const TypeCase c = GetParam();
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (int64_t rows : {1, 17, 50}) {  // 17, 50: partial 16-row groups
    for (int64_t n_tokens : {1, 2, 3, 7, 16, 33}) {
      Problem p = make_problem(c.type, rows, c.cols, n_tokens, static_cast<uint32_t>(rows * 100 + n_tokens));
      for (const kernels::KernelSet* set : all_sets()) {
        kernels::use_kernel_set(set);
        for (bool repack : {false, true}) {
          WeightMatrix w = WeightMatrix::prepare(c.type, p.weights.data(), rows, c.cols, repack);
          std::vector<float> y(static_cast<size_t>(n_tokens * rows), NAN);
          matmul(w, p.x.data(), n_tokens, y.data(), pool, scratch);
          check(p, y, std::string(set->name) + (w.repacked() ? " repacked" : " rows") + " rows=" + std::to_string(rows) +
                          " tokens=" + std::to_string(n_tokens));
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST_P(Matmul, ManyTokensAndOneThread) {
  // Crosses the driver's 64-token chunks; one thread runs every task itself.
  const TypeCase c = GetParam();
  ThreadPool pool(1);
  MatmulScratch scratch;
  Problem p = make_problem(c.type, 40, c.cols, 70, 99);
  for (const kernels::KernelSet* set : all_sets()) {
    kernels::use_kernel_set(set);
    WeightMatrix w = WeightMatrix::prepare(c.type, p.weights.data(), p.rows, c.cols);
    std::vector<float> y(static_cast<size_t>(p.n_tokens * p.rows), NAN);
    matmul(w, p.x.data(), p.n_tokens, y.data(), pool, scratch);
    check(p, y, set->name);
  }
}

TEST_P(Matmul, RepackedRowsDequantizeIdentically) {
  const TypeCase c = GetParam();
  Problem p = make_problem(c.type, 37, c.cols, 1, 5);
  for (const kernels::KernelSet* set : all_sets()) {
    kernels::use_kernel_set(set);
    WeightMatrix view = WeightMatrix::view(c.type, p.weights.data(), p.rows, c.cols);
    WeightMatrix prepared = WeightMatrix::prepare(c.type, p.weights.data(), p.rows, c.cols);
    std::vector<float> a(static_cast<size_t>(c.cols)), b(a.size());
    for (int64_t r = 0; r < p.rows; ++r) {
      view.dequantize_row(r, a.data());
      prepared.dequantize_row(r, b.data());
      ASSERT_EQ(a, b) << set->name << " row " << r;
    }
    EXPECT_EQ(view.bytes(), row_bytes(c.type, c.cols) * static_cast<size_t>(p.rows));
    EXPECT_GE(prepared.bytes(), view.bytes());
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Matmul,
                         ::testing::Values(TypeCase{TensorType::F32, 77}, TypeCase{TensorType::F16, 77},
                                           TypeCase{TensorType::F16, 512}, TypeCase{TensorType::BF16, 77},
                                           TypeCase{TensorType::Q4_0, 96}, TypeCase{TensorType::Q4_0, 512},
                                           TypeCase{TensorType::Q8_0, 96}, TypeCase{TensorType::Q8_0, 512},
                                           TypeCase{TensorType::Q4_K, 512}, TypeCase{TensorType::Q6_K, 512},
                                           TypeCase{TensorType::Q6_K, 768},
                                           TypeCase{TensorType::Q4_1, 96}, TypeCase{TensorType::Q5_0, 96},
                                           TypeCase{TensorType::Q5_1, 96}, TypeCase{TensorType::IQ4_NL, 96},
                                           TypeCase{TensorType::MXFP4, 96}, TypeCase{TensorType::Q2_K, 512},
                                           TypeCase{TensorType::Q3_K, 512}, TypeCase{TensorType::Q5_K, 512},
                                           TypeCase{TensorType::Q5_K, 768}, TypeCase{TensorType::IQ4_XS, 512}),
                         [](const auto& info) {
                           return std::string(type_name(info.param.type)) + "_" + std::to_string(info.param.cols);
                         });

kernels::Layout interleaved_layout_of(TensorType type) {
  switch (type) {
    case TensorType::Q4_0: return kernels::kQ4_0x16;
    case TensorType::Q8_0: return kernels::kQ8_0x16;
    case TensorType::Q4_K: return kernels::kQ4_Kx16;
    case TensorType::Q5_K: return kernels::kQ5_Kx16;
    case TensorType::IQ4_XS: return kernels::kIQ4_XSx16;
    case TensorType::Q3_K: return kernels::kQ3_Kx16;
    case TensorType::Q2_K: return kernels::kQ2_Kx16;
    case TensorType::F32: return kernels::kF32x16;
    case TensorType::F16: return kernels::kF16x16;
    case TensorType::BF16: return kernels::kBF16x16;
    default: return kernels::kQ6_Kx16;
  }
}

kernels::TileFn interleaved_tile_of(const kernels::KernelSet& set, TensorType type) {
  switch (type) {
    case TensorType::Q4_0: return set.q4_0x16;
    case TensorType::Q8_0: return set.q8_0x16;
    case TensorType::Q4_K: return set.q4_kx16;
    case TensorType::Q5_K: return set.q5_kx16;
    case TensorType::IQ4_XS: return set.iq4_xsx16;
    case TensorType::Q3_K: return set.q3_kx16;
    case TensorType::Q2_K: return set.q2_kx16;
    case TensorType::F32: return set.f32x16;
    case TensorType::F16: return set.f16x16;
    case TensorType::BF16: return set.bf16x16;
    default: return set.q6_kx16;
  }
}

TEST(MatmulContract, GenericAndRepackedLayoutsAgreeBitForBit) {
  // The generic kernels rebuild each interleaved block, so both layouts run the same arithmetic.
  // Row counts below, at and above one 16-row group, and not a multiple of it.
  for (TensorType type : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K,
                          TensorType::IQ4_XS, TensorType::Q3_K, TensorType::Q2_K, TensorType::F32, TensorType::F16,
                          TensorType::BF16}) {
    const bool k_quant = type_traits(type).block_elements == kQK_K;
    const bool is_float = type_traits(type).block_elements == 1;
    const int64_t cols = 512, n_blocks = cols / type_traits(type).block_elements;
    const kernels::Layout layout = interleaved_layout_of(type);
    for (int64_t rows : {5, 16, 33}) {
      Problem p = make_problem(type, rows, cols, 3, 11);
      std::vector<uint8_t> copy(kernels::interleaved_bytes(layout, rows, n_blocks));
      kernels::repack(layout, p.weights.data(), rows, n_blocks, copy.data());
      ThreadPool pool(1);
      MatmulScratch scratch;
      kernels::use_kernel_set(&kernels::generic_kernels());
      WeightMatrix w = WeightMatrix::view(type, p.weights.data(), rows, cols);
      std::vector<float> y_rows(static_cast<size_t>(3 * rows)), y_interleaved(y_rows.size());
      matmul(w, p.x.data(), 3, y_rows.data(), pool, scratch);
      // Drive the generic interleaved kernel directly on the copy, with the activations matmul uses.
      const size_t x_stride = is_float  ? cols * sizeof(float)
                              : k_quant ? n_blocks * sizeof(BlockQ8_K)
                                        : n_blocks * sizeof(kernels::ActQ8_0);
      std::vector<uint8_t> act(3 * x_stride);
      for (int t = 0; t < 3; ++t) {
        if (is_float)
          std::memcpy(act.data() + t * x_stride, p.x.data() + t * cols, x_stride);
        else if (k_quant)
          kernels::quantize_act_q8_k(p.x.data() + t * cols, reinterpret_cast<BlockQ8_K*>(act.data() + t * x_stride), n_blocks);
        else
          kernels::quantize_act_q8_0(p.x.data() + t * cols, reinterpret_cast<kernels::ActQ8_0*>(act.data() + t * x_stride), n_blocks);
      }
      const size_t group_bytes = kernels::interleaved_bytes(layout, kernels::kInterleave, n_blocks);
      kernels::Tile tile{copy.data(), group_bytes, rows, n_blocks, act.data(), x_stride, 3, y_interleaved.data(), rows};
      interleaved_tile_of(kernels::generic_kernels(), type)(tile);
      EXPECT_EQ(y_rows, y_interleaved) << type_name(type) << " rows " << rows;
      // Every block comes back out of the copy as the GGUF bytes it went in as.
      const size_t block = row_bytes(type, cols) / static_cast<size_t>(n_blocks);
      std::vector<uint8_t> out(block);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < n_blocks; ++b) {
          kernels::extract_block(layout, copy.data(), n_blocks, r, b, out.data());
          ASSERT_EQ(0, std::memcmp(out.data(), p.weights.data() + static_cast<size_t>(r * n_blocks + b) * block, block))
              << type_name(type) << " row " << r << " block " << b;
        }
    }
  }
  kernels::use_kernel_set(nullptr);
}

TEST(MatmulContract, ManyMatricesOfOneInputMatchTheirOwnProducts) {
  // Types that take each input kind, row counts that end in partial groups, token counts on
  // both sides of the driver's few-token path and its 64-token chunks; every product must match
  // the reference and be bit-for-bit what matmul gives the matrix alone (the kernels, not the
  // split, decide each output).
  const int64_t cols = 512;
  const std::vector<std::pair<TensorType, int64_t>> shapes = {{TensorType::Q4_K, 50}, {TensorType::Q6_K, 16},
                                                              {TensorType::Q8_0, 17}, {TensorType::F16, 33},
                                                              {TensorType::Q4_0, 1}};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n_tokens : {1, 3, 70}) {
      std::vector<float> x(static_cast<size_t>(n_tokens * cols));
      for (auto& v : x) v = uniform(rng);
      std::vector<Problem> problems;
      std::vector<WeightMatrix> matrices;
      std::vector<std::vector<float>> outputs;
      for (auto [type, rows] : shapes) {
        problems.push_back(make_problem(type, rows, cols, n_tokens, static_cast<uint32_t>(rows), &x));
        matrices.push_back(WeightMatrix::prepare(type, problems.back().weights.data(), rows, cols));
        outputs.emplace_back(static_cast<size_t>(n_tokens * rows), NAN);
      }
      std::vector<MatmulTarget> targets;
      for (size_t i = 0; i < shapes.size(); ++i) targets.push_back({&matrices[i], outputs[i].data()});
      MatmulScratch scratch;
      matmul_many(targets, x.data(), n_tokens, pool, scratch);
      for (size_t i = 0; i < shapes.size(); ++i) {
        const std::string what = std::string(type_name(shapes[i].first)) + " threads=" + std::to_string(threads) +
                                 " tokens=" + std::to_string(n_tokens);
        check(problems[i], outputs[i], what);
        std::vector<float> alone(outputs[i].size(), NAN);
        matmul(matrices[i], x.data(), n_tokens, alone.data(), pool, scratch);
        ASSERT_EQ(0, std::memcmp(alone.data(), outputs[i].data(), alone.size() * sizeof(float))) << what;
      }
    }
  }
}

TEST(MatmulContract, ManyMatricesOfTheirOwnInputsMatchTheirOwnProducts) {
  // A decode step's down projections: each matrix reads its own input (their column counts may
  // differ), beside matrices reading the call's shared input, two of them reading one own input
  // (quantized once for both); every product must match the reference and be bit for bit what
  // matmul gives the matrix alone on its input.
  struct Shape {
    TensorType type;
    int64_t rows, cols;
    int input;  // -1: the shared x; otherwise which own input
  };
  const std::vector<Shape> shapes = {{TensorType::Q4_0, 40, 256, 0},  {TensorType::Q4_K, 33, 512, 1},
                                     {TensorType::Q6_K, 16, 512, 1},  {TensorType::F32, 17, 256, 2},
                                     {TensorType::Q8_0, 20, 768, -1}, {TensorType::Q4_0, 50, 768, -1},
                                     {TensorType::Q4_K, 16, 768, 3}};
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n_tokens : {1, 3, 70}) {
      std::mt19937 rng(static_cast<uint32_t>(17 * threads + n_tokens));
      std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
      auto random_input = [&](int64_t cols) {
        std::vector<float> x(static_cast<size_t>(n_tokens * cols));
        for (auto& v : x) v = uniform(rng);
        return x;
      };
      const std::vector<float> shared = random_input(768);
      std::vector<std::vector<float>> own = {random_input(256), random_input(512), random_input(256), random_input(768)};
      std::vector<Problem> problems;
      std::vector<WeightMatrix> matrices;
      std::vector<std::vector<float>> outputs;
      for (const Shape& shape : shapes) {
        const std::vector<float>& x = shape.input < 0 ? shared : own[static_cast<size_t>(shape.input)];
        problems.push_back(make_problem(shape.type, shape.rows, shape.cols, n_tokens,
                                        static_cast<uint32_t>(shape.rows + shape.cols), &x));
        matrices.push_back(WeightMatrix::prepare(shape.type, problems.back().weights.data(), shape.rows, shape.cols));
        outputs.emplace_back(static_cast<size_t>(n_tokens * shape.rows), NAN);
      }
      std::vector<MatmulTarget> targets;
      for (size_t i = 0; i < shapes.size(); ++i)
        targets.push_back({&matrices[i], outputs[i].data(),
                           shapes[i].input < 0 ? nullptr : own[static_cast<size_t>(shapes[i].input)].data()});
      MatmulScratch scratch;
      matmul_many(targets, shared.data(), n_tokens, pool, scratch);
      for (size_t i = 0; i < shapes.size(); ++i) {
        const std::string what = std::string(type_name(shapes[i].type)) + " input " + std::to_string(shapes[i].input) +
                                 " threads=" + std::to_string(threads) + " tokens=" + std::to_string(n_tokens);
        check(problems[i], outputs[i], what);
        std::vector<float> alone(outputs[i].size(), NAN);
        matmul(matrices[i], problems[i].x.data(), n_tokens, alone.data(), pool, scratch);
        ASSERT_EQ(0, std::memcmp(alone.data(), outputs[i].data(), alone.size() * sizeof(float))) << what;
      }
      // Only own inputs: no shared x at all.
      const std::vector<MatmulTarget> own_only = {targets[0], targets[1], targets[6]};
      std::vector<std::vector<float>> before = {outputs[0], outputs[1], outputs[6]};
      for (const MatmulTarget& target : own_only) std::fill_n(target.y, static_cast<size_t>(n_tokens * target.w->rows()), NAN);
      matmul_many(own_only, nullptr, n_tokens, pool, scratch);
      for (size_t i = 0; i < own_only.size(); ++i)
        ASSERT_EQ(0, std::memcmp(before[i].data(), own_only[i].y, before[i].size() * sizeof(float))) << i;
    }
  }
}

TEST(MatmulContract, ManyMatricesNeedAnInputAndAtMostSixteen) {
  Problem a = make_problem(TensorType::Q4_0, 16, 256, 1, 1);
  WeightMatrix wa = WeightMatrix::prepare(TensorType::Q4_0, a.weights.data(), 16, 256);
  std::vector<float> y(16);
  ThreadPool pool(2);
  MatmulScratch scratch;
  const MatmulTarget without_input[] = {{&wa, y.data(), a.x.data()}, {&wa, y.data()}};
  EXPECT_THROW(matmul_many(without_input, nullptr, 1, pool, scratch), Error);
  const std::vector<MatmulTarget> seventeen(17, MatmulTarget{&wa, y.data(), a.x.data()});
  EXPECT_THROW(matmul_many(seventeen, nullptr, 1, pool, scratch), Error);
  std::vector<std::vector<float>> ys(16, std::vector<float>(16, NAN));
  std::vector<MatmulTarget> sixteen;
  for (auto& out : ys) sixteen.push_back({&wa, out.data(), a.x.data()});
  matmul_many(sixteen, nullptr, 1, pool, scratch);
  for (const auto& out : ys) check(a, out, "sixteen targets");
}

TEST(MatmulContract, PerHeadProductsMatchTheReference) {
  // matmul_heads: each head's input and output at its own stride (padded, so a wrong stride
  // reads or writes the padding), tokens on both sides of the few-token path and its 64-token
  // chunks; every head must match the reference and be bit for bit what matmul gives it alone.
  const int64_t heads = 5, cols = 256;
  const std::vector<std::pair<TensorType, int64_t>> shapes = {
      {TensorType::Q8_0, 17}, {TensorType::Q4_K, 50}, {TensorType::F32, 33}, {TensorType::Q4_0, 16}};
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    MatmulScratch scratch;
    for (auto [type, rows] : shapes)
      for (int64_t n_tokens : {1, 3, 70}) {
        const int64_t x_head = cols + 32, x_stride = heads * x_head + 8;
        const int64_t y_head = rows + 3, y_stride = heads * y_head + 5;
        std::vector<float> x(static_cast<size_t>(n_tokens * x_stride), NAN);
        std::vector<float> y(static_cast<size_t>(n_tokens * y_stride), -7.0f);
        std::vector<Problem> problems;
        std::vector<WeightMatrix> matrices;
        for (int64_t h = 0; h < heads; ++h) {
          std::vector<float> xh(static_cast<size_t>(n_tokens * cols));
          for (auto& v : xh) v = uniform(rng);
          for (int64_t t = 0; t < n_tokens; ++t)
            std::copy_n(&xh[static_cast<size_t>(t * cols)], cols, &x[static_cast<size_t>(t * x_stride + h * x_head)]);
          problems.push_back(make_problem(type, rows, cols, n_tokens, static_cast<uint32_t>(h + 1), &xh));
        }
        for (const Problem& p : problems) matrices.push_back(WeightMatrix::prepare(type, p.weights.data(), rows, cols));
        matmul_heads(matrices, x.data(), x_stride, x_head, n_tokens, y.data(), y_stride, y_head, pool, scratch);
        const std::string what = std::string(type_name(type)) + " threads=" + std::to_string(threads) +
                                 " tokens=" + std::to_string(n_tokens);
        for (int64_t h = 0; h < heads; ++h) {
          std::vector<float> got(static_cast<size_t>(n_tokens * rows));
          for (int64_t t = 0; t < n_tokens; ++t)
            std::copy_n(&y[static_cast<size_t>(t * y_stride + h * y_head)], rows, &got[static_cast<size_t>(t * rows)]);
          check(problems[static_cast<size_t>(h)], got, what + " head " + std::to_string(h));
          // Float kernels need not give the same bits for another split of the work (as
          // QuantizedOutputsDoNotDependOnTheBatch says): only the quantized ones promise them.
          if (type == TensorType::F32) continue;
          std::vector<float> alone(got.size(), NAN);
          matmul(matrices[static_cast<size_t>(h)], problems[static_cast<size_t>(h)].x.data(), n_tokens, alone.data(),
                 pool, scratch);
          ASSERT_EQ(0, std::memcmp(alone.data(), got.data(), got.size() * sizeof(float))) << what << " head " << h;
        }
        // The padding between heads and after the last is never written.
        for (int64_t t = 0; t < n_tokens; ++t)
          for (int64_t i = 0; i < y_stride; ++i) {
            if (i >= heads * y_head || i % y_head >= rows) {
              ASSERT_EQ(y[static_cast<size_t>(t * y_stride + i)], -7.0f) << what;
            }
          }
      }
  }
}

TEST(MatmulContract, PerHeadMatricesMustShareTheirShape) {
  Problem a = make_problem(TensorType::Q8_0, 16, 64, 1, 1), b = make_problem(TensorType::Q8_0, 32, 64, 1, 2);
  const std::vector<WeightMatrix> w = {WeightMatrix::prepare(TensorType::Q8_0, a.weights.data(), 16, 64),
                                       WeightMatrix::prepare(TensorType::Q8_0, b.weights.data(), 32, 64)};
  ThreadPool pool(1);
  MatmulScratch scratch;
  std::vector<float> x(128), y(64);
  EXPECT_THROW(matmul_heads(w, x.data(), 128, 64, 1, y.data(), 64, 32, pool, scratch), std::exception);
}

TEST(MatmulContract, CopiesMadeOnFirstUseMatchCopiesMadeAtOnce) {
  // The copy is made by the first matmul (or row read), once, even when threads race to it.
  const int64_t rows = 50, cols = 512;
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (TensorType type : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::F16}) {
    Problem p = make_problem(type, rows, cols, 3, 9);
    const WeightMatrix eager = WeightMatrix::prepare(type, p.weights.data(), rows, cols);
    std::vector<float> want(static_cast<size_t>(3 * rows));
    matmul(eager, p.x.data(), 3, want.data(), pool, scratch);
    for (int round = 0; round < 2; ++round) {
      const WeightMatrix lazy = WeightMatrix::prepare_on_first_use(type, p.weights.data(), rows, cols);
      EXPECT_EQ(lazy.repacked(), eager.repacked());
      EXPECT_EQ(lazy.pending(), lazy.repacked());
      EXPECT_EQ(lazy.bytes(), eager.bytes());
      if (round == 0) {
        // Two callers at once, each with its own pool.
        std::vector<float> a(want.size()), b(want.size());
        std::thread other([&] {
          ThreadPool own(2);
          MatmulScratch own_scratch;
          matmul(lazy, p.x.data(), 3, b.data(), own, own_scratch);
        });
        matmul(lazy, p.x.data(), 3, a.data(), pool, scratch);
        other.join();
        EXPECT_EQ(a, want) << type_name(type);
        EXPECT_EQ(b, want) << type_name(type);
      } else {
        std::vector<float> row(static_cast<size_t>(cols)), eager_row(row.size());
        lazy.dequantize_row(rows - 1, row.data());
        eager.dequantize_row(rows - 1, eager_row.data());
        EXPECT_EQ(row, eager_row) << type_name(type);
      }
      EXPECT_FALSE(lazy.pending());
    }
  }
}

TEST(MatmulContract, QuantizedOutputsDoNotDependOnTheBatch) {
  // A token's outputs are bit for bit the same whether it runs alone (a decode step) or inside
  // a batch, where the kernels take tokens in runs of several (and the AVX2 interleaved ones
  // switch loop order above two): the engine's batched passes rely on it. Quantized types
  // only: the float kernels split a lone token's columns over several sums.
  const int64_t rows = 50, cols = 512, n_tokens = 37;
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (TensorType type : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K, TensorType::Q4_1,
                          TensorType::Q2_K, TensorType::Q3_K, TensorType::Q5_K, TensorType::IQ4_XS}) {
    Problem p = make_problem(type, rows, cols, n_tokens, 21);
    for (const kernels::KernelSet* set : all_sets()) {
      kernels::use_kernel_set(set);
      for (bool repack : {false, true}) {
        WeightMatrix w = WeightMatrix::prepare(type, p.weights.data(), rows, cols, repack);
        std::vector<float> batch(static_cast<size_t>(n_tokens * rows), NAN), alone(static_cast<size_t>(rows), NAN);
        matmul(w, p.x.data(), n_tokens, batch.data(), pool, scratch);
        const std::string what = std::string(type_name(type)) + " " + set->name + (w.repacked() ? " repacked" : " rows");
        check(p, batch, what);
        for (int64_t t = 0; t < n_tokens; ++t) {
          matmul(w, p.x.data() + t * cols, 1, alone.data(), pool, scratch);
          ASSERT_EQ(0, std::memcmp(alone.data(), batch.data() + t * rows, alone.size() * sizeof(float)))
              << what << " token " << t;
        }
      }
    }
  }
  kernels::use_kernel_set(nullptr);
}

TEST(MatmulContract, SmallBatchKernelsMatchTheReferenceAndOneTokenSteps) {
  // A decode step of 2..16 sequences takes the small-batch kernels where the set has them
  // (AVX2, NEON): against the float64 reference, and bit for bit each token's one-token step and
  // the set's own few-token kernels. Every token count from 2 to 16 (one run of 8 or fewer, or a
  // run of 8 and a remainder); row counts of whole groups (16), of a last group with a partial
  // quad (37: 5 rows) and with padding quads (50: 2 rows); rows of a few blocks (96, 768 wide)
  // and a row wider than a run's activations stay in L1 for (Q4_0 at 4096).
  ThreadPool pool(2);
  MatmulScratch scratch;
  int small_sets = 0;
  for (const kernels::KernelSet* set : all_sets()) small_sets += kernels::small_batch_kernels(*set) != nullptr;
  struct Case {
    TensorType type;
    int64_t cols, rows;
  };
  for (const Case c : {Case{TensorType::Q4_0, 96, 37}, Case{TensorType::Q4_0, 512, 50}, Case{TensorType::Q4_0, 4096, 16},
                       Case{TensorType::Q8_0, 96, 50}, Case{TensorType::Q8_0, 512, 37}, Case{TensorType::Q4_K, 512, 50},
                       Case{TensorType::Q4_K, 768, 37}, Case{TensorType::Q6_K, 768, 50}, Case{TensorType::Q6_K, 256, 16}}) {
    for (int64_t n_tokens = 2; n_tokens <= kernels::kSmallBatch; ++n_tokens) {
      Problem p = make_problem(c.type, c.rows, c.cols, n_tokens, static_cast<uint32_t>(31 + n_tokens));
      for (const kernels::KernelSet* set : all_sets()) {
        kernels::use_kernel_set(set);
        WeightMatrix w = WeightMatrix::prepare(c.type, p.weights.data(), c.rows, c.cols);
        const std::string what = std::string(type_name(c.type)) + " " + std::to_string(c.cols) + " " + set->name +
                                 (w.repacked() ? " repacked" : " rows") + " rows=" + std::to_string(c.rows) +
                                 " tokens=" + std::to_string(n_tokens);
        std::vector<float> batch(static_cast<size_t>(n_tokens * c.rows), NAN), own(batch.size(), NAN),
            alone(static_cast<size_t>(c.rows), NAN);
        matmul(w, p.x.data(), n_tokens, batch.data(), pool, scratch);
        check(p, batch, what);
        kernels::use_small_batch_kernels(false);
        matmul(w, p.x.data(), n_tokens, own.data(), pool, scratch);
        kernels::use_small_batch_kernels(true);
        ASSERT_EQ(0, std::memcmp(own.data(), batch.data(), batch.size() * sizeof(float))) << what;
        for (int64_t t = 0; t < n_tokens; ++t) {
          matmul(w, p.x.data() + t * c.cols, 1, alone.data(), pool, scratch);
          ASSERT_EQ(0, std::memcmp(alone.data(), batch.data() + t * c.rows, alone.size() * sizeof(float)))
              << what << " token " << t;
        }
      }
    }
  }
  kernels::use_kernel_set(nullptr);
  // On an AVX2 or arm64 machine the kernels above were the small-batch ones; elsewhere this says so.
  if (small_sets == 0) GTEST_SKIP() << "no kernel set of this CPU has small-batch kernels: only the fallback ran";
}

// Every set and both layouts on weights of `type` (rows × cols, built by the caller from
// extreme quants) against activations all +1 or all -1, which quantize to ±127 in every block:
// the worst case for intermediate integer sums. Expected: the reference dequantizer's row sums.
void expect_extreme_rows_exact(TensorType type, const void* weights, int64_t rows, int64_t cols) {
  ThreadPool pool(2);
  MatmulScratch scratch;
  std::vector<float> dequantized(static_cast<size_t>(cols));
  for (float sign : {1.0f, -1.0f}) {
    std::vector<float> x(static_cast<size_t>(17 * cols), sign);
    std::vector<double> expected(static_cast<size_t>(rows)), magnitude(expected.size());
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row_reference(type, static_cast<const uint8_t*>(weights) + row_bytes(type, cols) * static_cast<size_t>(r),
                               dequantized.data(), cols);
      for (int64_t i = 0; i < cols; ++i) {
        expected[r] += static_cast<double>(dequantized[i]) * sign;
        magnitude[r] += std::fabs(dequantized[i]);
      }
    }
    for (const kernels::KernelSet* set : all_sets()) {
      kernels::use_kernel_set(set);
      for (bool repack : {false, true}) {
        WeightMatrix w = WeightMatrix::prepare(type, weights, rows, cols, repack);
        // 2..16: the small-batch kernels, 9 a run of 8 and one; 8 and 17: a step of several
        // sequences and a prompt, which AVX2's Q4_0 takes in runs of 4.
        for (int64_t n_tokens : {1, 2, 3, 8, 9, 17}) {
          std::vector<float> y(static_cast<size_t>(n_tokens * rows), NAN);
          matmul(w, x.data(), n_tokens, y.data(), pool, scratch);
          for (int64_t t = 0; t < n_tokens; ++t)
            for (int64_t r = 0; r < rows; ++r)
              ASSERT_NEAR(y[t * rows + r], expected[r], 1e-5 * magnitude[r])
                  << type_name(type) << " " << set->name << (w.repacked() ? " repacked" : " rows") << " tokens "
                  << n_tokens << " sign " << sign << " row " << r;
        }
      }
    }
  }
  kernels::use_kernel_set(nullptr);
}

TEST(MatmulContract, Q6_KExtremeQuantsDoNotOverflow) {
  // The AVX2 kernels add two words' u8 × s8 pair sums in int16 before the scale (at most
  // 2 × 2 × 63 × 127 = 32004): every quant at 63 (or 0) against activations all at ±127, with the
  // largest scales of either sign, is the worst case.
  const int64_t rows = 33, cols = 512;
  std::vector<BlockQ6_K> blocks(static_cast<size_t>(rows * cols / kQK_K));
  for (size_t i = 0; i < blocks.size(); ++i) {
    BlockQ6_K& b = blocks[i];
    const bool top = i % 3 != 2;  // quants 63 (or 0 in every third block)
    std::memset(b.ql, top ? 0xFF : 0x00, sizeof b.ql);
    std::memset(b.qh, top ? 0xFF : 0x00, sizeof b.qh);
    for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(i % 2 ? -128 : 127);
    b.d = float_to_half(0.5f);
  }
  expect_extreme_rows_exact(TensorType::Q6_K, blocks.data(), rows, cols);
}

TEST(MatmulContract, RepackedQ6_KIsItsBlocksIntegerSumsExactly) {
  // Every SIMD set's interleaved Q6_K kernels (a decode step's one token, two, and more) give
  // each output as Σ_b fma(Σ_j scale_j · Σ_i (q_i - 32) · x_i, d_b · d_x) in block order: the
  // integer sums are exact however a kernel groups them, so a regrouped kernel must keep every
  // bit. Expected values built here from the GGUF blocks and the quantized activations alone.
  const int64_t rows = 37, cols = 768, n_blocks = cols / kQK_K;  // a partial last group
  ThreadPool pool(2);
  MatmulScratch scratch;
  int checked = 0;
  for (int64_t n_tokens : {1, 2, 5}) {
    Problem p = make_problem(TensorType::Q6_K, rows, cols, n_tokens, static_cast<uint32_t>(41 + n_tokens));
    std::vector<float> expected(static_cast<size_t>(n_tokens * rows));
    std::vector<BlockQ8_K> act(static_cast<size_t>(n_blocks));
    for (int64_t t = 0; t < n_tokens; ++t) {
      kernels::quantize_act_q8_k(p.x.data() + t * cols, act.data(), n_blocks);
      for (int64_t r = 0; r < rows; ++r) {
        const auto* blocks = reinterpret_cast<const BlockQ6_K*>(p.weights.data() + row_bytes(TensorType::Q6_K, cols) * r);
        float acc = 0;
        for (int64_t b = 0; b < n_blocks; ++b) {
          int32_t sum = 0;
          for (int j = 0; j < 16; ++j) {
            int32_t sub = 0;
            for (int i = 16 * j; i < 16 * j + 16; ++i) sub += (q6_k_quant(blocks[b], i) - 32) * act[b].qs[i];
            sum += blocks[b].scales[j] * sub;
          }
          acc = std::fma(static_cast<float>(sum), half_to_float(blocks[b].d) * act[b].d, acc);
        }
        expected[static_cast<size_t>(t * rows + r)] = acc;
      }
    }
    for (const kernels::KernelSet* set : kernels::supported_simd_kernels()) {
      kernels::use_kernel_set(set);
      WeightMatrix w = WeightMatrix::prepare(TensorType::Q6_K, p.weights.data(), rows, cols);
      if (!w.repacked()) continue;
      std::vector<float> y(expected.size(), NAN);
      matmul(w, p.x.data(), n_tokens, y.data(), pool, scratch);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(expected[i], y[i]) << set->name << " tokens " << n_tokens << " output " << i;
      ++checked;
    }
  }
  kernels::use_kernel_set(nullptr);
  if (checked == 0) GTEST_SKIP() << "no kernel set of this CPU repacks Q6_K";
}

TEST(MatmulContract, Q8_0AndQ4_0ExtremeQuantsDoNotOverflow) {
  // Q8_0 at -128 and 127 against ±127: the NEON kernel without sdot adds two products in int16
  // (at most 2 × 128 × 127 = 32512), the AVX2 ones move the weight's sign onto x. Q4_0 at both
  // ends of its nibbles (-8 and 7), whose offset the interleaved kernels take off through Σx.
  const int64_t rows = 33, cols = 512;
  std::vector<BlockQ8_0> q8(static_cast<size_t>(rows * cols / 32));
  for (size_t i = 0; i < q8.size(); ++i) {
    std::memset(q8[i].qs, i % 3 != 2 ? 0x80 : 0x7F, sizeof q8[i].qs);
    q8[i].d = float_to_half(i % 2 ? -0.5f : 0.5f);
  }
  expect_extreme_rows_exact(TensorType::Q8_0, q8.data(), rows, cols);
  std::vector<BlockQ4_0> q4(q8.size());
  for (size_t i = 0; i < q4.size(); ++i) {
    std::memset(q4[i].qs, i % 3 != 2 ? 0x00 : 0xFF, sizeof q4[i].qs);
    q4[i].d = float_to_half(i % 2 ? -0.5f : 0.5f);
  }
  expect_extreme_rows_exact(TensorType::Q4_0, q4.data(), rows, cols);
}

TEST(MatmulContract, Q4_KExtremeQuantsDoNotOverflow) {
  // Every nibble 15 (or 0) with the largest 6-bit scales and mins: the interleaved kernels'
  // int16 and int32 sums at their largest.
  const int64_t rows = 33, cols = 512;
  std::vector<BlockQ4_K> blocks(static_cast<size_t>(rows * cols / kQK_K));
  uint8_t scales[8], mins[8];
  std::memset(scales, 63, sizeof scales);
  std::memset(mins, 63, sizeof mins);
  for (size_t i = 0; i < blocks.size(); ++i) {
    BlockQ4_K& b = blocks[i];
    std::memset(b.qs, i % 3 != 2 ? 0xFF : 0x00, sizeof b.qs);
    pack_q4_k_scales(scales, mins, b.scales);
    b.d = float_to_half(0.5f);
    b.dmin = float_to_half(i % 2 ? -0.25f : 0.25f);
  }
  expect_extreme_rows_exact(TensorType::Q4_K, blocks.data(), rows, cols);
}

TEST(MatmulContract, CopiesFromAnArenaMatchCopiesOfTheirOwn) {
  // Small blocks, so the copies fill one, open others, and one is larger than a block; every
  // copy outlives the arena.
  std::vector<Problem> problems;
  std::vector<WeightMatrix> alone, pooled;
  {
    CopyArena arena(4096);
    for (int64_t rows : {16, 40, 200, 17}) {
      problems.push_back(make_problem(TensorType::Q4_K, rows, 512, 3, static_cast<uint32_t>(rows)));
      alone.push_back(WeightMatrix::prepare(TensorType::Q4_K, problems.back().weights.data(), rows, 512));
      pooled.push_back(WeightMatrix::prepare(TensorType::Q4_K, problems.back().weights.data(), rows, 512, true, &arena));
    }
  }
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    std::vector<float> a(static_cast<size_t>(p.n_tokens * p.rows)), b(a.size());
    matmul(alone[i], p.x.data(), p.n_tokens, a.data(), pool, scratch);
    matmul(pooled[i], p.x.data(), p.n_tokens, b.data(), pool, scratch);
    EXPECT_EQ(a, b) << "rows " << p.rows;
    check(p, b, "arena rows " + std::to_string(p.rows));
  }
}

TEST(MatmulContract, ArenaPlacesAreAlignedAndApart) {
  CopyArena arena(1000);
  std::vector<std::pair<std::shared_ptr<void>, size_t>> places;  // held, so no block is reused
  for (size_t bytes : {1, 64, 100, 3000, 5, 900}) {
    std::shared_ptr<void> place = arena.allocate(bytes);
    ASSERT_TRUE(place);
    auto* p = static_cast<uint8_t*>(place.get());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    std::memset(p, 0xAB, bytes);  // writable to its end (ASan checks the bounds)
    for (const auto& [other, n] : places) {
      auto* q = static_cast<uint8_t*>(other.get());
      EXPECT_TRUE(p + bytes <= q || q + n <= p) << "overlap";
    }
    places.emplace_back(std::move(place), bytes);
  }
}

TEST(MatmulContract, ManyMatricesMustShareTheColumnCount) {
  Problem a = make_problem(TensorType::Q4_0, 16, 256, 1, 1);
  Problem b = make_problem(TensorType::Q4_0, 16, 512, 1, 2);
  WeightMatrix wa = WeightMatrix::prepare(TensorType::Q4_0, a.weights.data(), 16, 256);
  WeightMatrix wb = WeightMatrix::prepare(TensorType::Q4_0, b.weights.data(), 16, 512);
  std::vector<float> ya(16), yb(16);
  const MatmulTarget targets[] = {{&wa, ya.data()}, {&wb, yb.data()}};
  ThreadPool pool(2);
  MatmulScratch scratch;
  EXPECT_THROW(matmul_many(targets, a.x.data(), 1, pool, scratch), Error);
}

TEST(MatmulContract, FastQ8KActivationsMatchTheReferenceQuantizer) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(4 * kQK_K);
  for (auto& v : x) v = normal(rng);
  std::fill(x.begin() + kQK_K, x.begin() + 2 * kQK_K, 0.0f);  // an all-zero block: d = 0, q = 0
  x[3 * kQK_K + 7] = -50.0f;                                      // a negative extreme
  std::vector<BlockQ8_K> fast(4), reference(4);
  kernels::quantize_act_q8_k(x.data(), fast.data(), 4);
  quantize_row_reference(TensorType::Q8_K, x.data(), reference.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(0, std::memcmp(fast.data(), reference.data(), 4 * sizeof(BlockQ8_K)));
}

// The Q8_0-style activations (a clone per ISA): q = the float product x · (127 / amax) rounded
// to nearest, ties to even; d = amax / 127; sum = Σ q. Blocks: random, all zero, and one whose
// amax is 127, so that x · 127 / amax is x and the halves below are exact ties.
TEST(MatmulContract, Q8_0ActivationsRoundToNearestEven) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(5 * 32);
  for (auto& v : x) v = normal(rng);
  std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(64 + i)] = static_cast<float>(i % 2 ? i : -i) + 0.5f;
  x[64 + 3] = -127.0f;
  x[4 * 32 + 9] = -1e-20f;  // a tiny value in an ordinary block
  std::vector<kernels::ActQ8_0> act(5);
  kernels::quantize_act_q8_0(x.data(), act.data(), 5);
  for (size_t b = 0; b < 5; ++b) {
    float amax = 0;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    const float inv = amax > 0 ? 127 / amax : 0;
    int32_t sum = 0;
    for (size_t i = 0; i < 32; ++i) {
      const float product = x[32 * b + i] * inv;
      const auto want = static_cast<int32_t>(std::nearbyint(product));
      ASSERT_EQ(act[b].qs[i], want) << "block " << b << " value " << x[32 * b + i];
      sum += want;
    }
    EXPECT_EQ(act[b].d, amax / 127) << "block " << b;
    EXPECT_EQ(act[b].sum, sum) << "block " << b;
  }
  EXPECT_EQ(act[2].qs[0], 0);   // 0.5 to even
  EXPECT_EQ(act[2].qs[1], 2);   // 1.5
  EXPECT_EQ(act[2].qs[2], -2);  // -1.5
}

TEST(MatmulContract, ScratchStopsGrowing) {
  Problem p = make_problem(TensorType::Q4_0, 16, 256, 4, 1);
  ThreadPool pool(2);
  MatmulScratch scratch;
  WeightMatrix w = WeightMatrix::prepare(TensorType::Q4_0, p.weights.data(), 16, 256);
  std::vector<float> y(64);
  matmul(w, p.x.data(), 4, y.data(), pool, scratch);
  const uint8_t* buffer = scratch.activations.data();
  for (int64_t n : {1, 4, 2}) {
    matmul(w, p.x.data(), n, y.data(), pool, scratch);
    EXPECT_EQ(scratch.activations.data(), buffer);
  }
}

TEST(MatmulContract, ColumnsMustBeWholeBlocks) {
  std::vector<uint8_t> bytes(4096);
  EXPECT_THROW(WeightMatrix::view(TensorType::Q4_0, bytes.data(), 2, 48), FormatError);
  EXPECT_THROW(WeightMatrix::prepare(TensorType::Q6_K, bytes.data(), 2, 128), FormatError);
  EXPECT_THROW(WeightMatrix::view(TensorType::Q8_K, bytes.data(), 2, 256), FormatError);
  EXPECT_NO_THROW(WeightMatrix::view(TensorType::F16, bytes.data(), 2, 3));
}

TEST(MatmulContract, ASetWithoutAKernelBorrowsOne) {
  // A set with no kernels at all, outside the CPU's list: every type runs on the generic
  // kernels, bit for bit. (A listed set borrows from the sets after it first: on AVX-512 the
  // types it has no kernel for run AVX2's, which Matmul.EveryKernelSetMatchesReference covers.)
  kernels::KernelSet empty{};
  empty.name = "empty";
  ThreadPool pool(1);
  MatmulScratch scratch;
  for (TensorType type : {TensorType::Q5_K, TensorType::MXFP4, TensorType::F16}) {
    Problem p = make_problem(type, 20, 512, 3, 4);
    std::vector<float> expected(60), got(60);
    kernels::use_kernel_set(&kernels::generic_kernels());
    matmul(WeightMatrix::prepare(type, p.weights.data(), 20, 512), p.x.data(), 3, expected.data(), pool, scratch);
    kernels::use_kernel_set(&empty);
    WeightMatrix w = WeightMatrix::prepare(type, p.weights.data(), 20, 512);
    EXPECT_FALSE(w.repacked());
    matmul(w, p.x.data(), 3, got.data(), pool, scratch);
    EXPECT_EQ(expected, got) << type_name(type);
  }
  kernels::use_kernel_set(nullptr);
}

TEST(MatmulContract, NoWeightTypeFallsBackToGenericOnASimdCpu) {
  // Where this CPU runs a SIMD set, every weight type has a kernel in one of its sets (they
  // borrow from each other before the generic set), and the best set repacks the types with
  // an interleaved quantized layout (x86 and arm64 alike).
  const std::vector<const kernels::KernelSet*> simd = kernels::supported_simd_kernels();
  if (simd.empty()) GTEST_SKIP() << "no SIMD kernel set on this CPU";
  using Field = kernels::TileFn kernels::KernelSet::*;
  const std::pair<const char*, Field> rows[] = {
      {"f32", &kernels::KernelSet::f32},       {"f16", &kernels::KernelSet::f16},
      {"bf16", &kernels::KernelSet::bf16},     {"q4_0", &kernels::KernelSet::q4_0},
      {"q8_0", &kernels::KernelSet::q8_0},     {"q4_k", &kernels::KernelSet::q4_k},
      {"q6_k", &kernels::KernelSet::q6_k},     {"q4_1", &kernels::KernelSet::q4_1},
      {"q5_0", &kernels::KernelSet::q5_0},     {"q5_1", &kernels::KernelSet::q5_1},
      {"q2_k", &kernels::KernelSet::q2_k},     {"q3_k", &kernels::KernelSet::q3_k},
      {"q5_k", &kernels::KernelSet::q5_k},     {"iq4_nl", &kernels::KernelSet::iq4_nl},
      {"iq4_xs", &kernels::KernelSet::iq4_xs}, {"mxfp4", &kernels::KernelSet::mxfp4},
  };
  for (const auto& [name, field] : rows)
    EXPECT_TRUE(std::any_of(simd.begin(), simd.end(), [&](const kernels::KernelSet* set) { return set->*field != nullptr; }))
        << name;
  for (TensorType type : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K}) {
    Problem p = make_problem(type, 16, 256, 1, 3);
    EXPECT_TRUE(WeightMatrix::prepare(type, p.weights.data(), 16, 256).repacked()) << simd.front()->name << " " << type_name(type);
  }
  // Q5_K's, IQ4_XS's, Q3_K's and Q2_K's copies only where the set has their kernels (AVX-512);
  // elsewhere their rows stay.
  for (const auto& [type, field] : {std::pair{TensorType::Q5_K, &kernels::KernelSet::q5_kx16},
                                    std::pair{TensorType::IQ4_XS, &kernels::KernelSet::iq4_xsx16},
                                    std::pair{TensorType::Q3_K, &kernels::KernelSet::q3_kx16},
                                    std::pair{TensorType::Q2_K, &kernels::KernelSet::q2_kx16}}) {
    Problem p = make_problem(type, 16, 256, 1, 3);
    EXPECT_EQ(WeightMatrix::prepare(type, p.weights.data(), 16, 256).repacked(), simd.front()->*field != nullptr)
        << simd.front()->name << " " << type_name(type);
  }
}

TEST(MatmulContract, IsaNameNamesTheChosenSet) {
  std::string best = kernel_isa_name();
  force_generic_kernels(true);
  EXPECT_EQ(kernel_isa_name(), "generic");
  force_generic_kernels(false);
  EXPECT_EQ(kernel_isa_name(), best);
  std::vector<const kernels::KernelSet*> simd = kernels::supported_simd_kernels();
  if (!simd.empty()) {
    EXPECT_EQ(best, simd.front()->name);
  }
  // By name: every set this CPU runs, best first, then the generic one; any other is refused
  // naming them all.
  const std::vector<std::string> names = runnable_kernel_sets();
  ASSERT_EQ(names.size(), simd.size() + 1);
  EXPECT_EQ(names.front(), best);
  EXPECT_EQ(names.back(), "generic");
  std::string listed;
  for (const std::string& name : names) {
    use_kernel_set(name);
    EXPECT_EQ(kernel_isa_name(), name);
    listed += (listed.empty() ? "" : ", ") + name;
  }
  use_kernel_set("");
  EXPECT_EQ(kernel_isa_name(), best);
  try {
    use_kernel_set(best.starts_with("neon") ? "avx2" : "neon");
    ADD_FAILURE() << "a set this CPU does not run was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a kernel set this CPU runs (it runs " + listed + ")"), std::string::npos) << e.what();
  }
  EXPECT_EQ(kernel_isa_name(), best);
}

}  // namespace
}  // namespace orchard::core

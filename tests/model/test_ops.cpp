// The forward pass's small operations against float64 formulas: SiLU and softmax use our own
// vectorizable e^x, so their accuracy is checked here over the whole range a model produces
// and past it. The ones with a vector clone per instruction set run on every kernel set this
// CPU runs (the model's vector code follows the chosen set).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/kernels.h"
#include "core/kernels/kernel_set.h"
#include "core/quant.h"
#include "model/attention_amx.h"
#include "model/kv_cache.h"
#include "model/ops.h"

namespace orchard::model {
namespace {

// Each kernel set this CPU runs, and where it has AMX, the AVX-512 set with attention's prompt
// blocks on AMX tiles ("avx512-vnni+amx"; the set alone computes them with vector loops).
constexpr std::string_view kAmx = "+amx";
std::vector<std::string> kernel_sets_and_amx() {
  std::vector<std::string> sets = core::runnable_kernel_sets();
  if (ops::amx_available()) sets.push_back("avx512-vnni" + std::string(kAmx));
  return sets;
}

class OpsOnEachSet : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& name = GetParam();
    const bool amx = name.ends_with(kAmx);
    ops::allow_amx_attention(amx);
    core::use_kernel_set(amx ? name.substr(0, name.size() - kAmx.size()) : name);
  }
  void TearDown() override {
    core::use_kernel_set("");
    ops::allow_amx_attention(true);
  }
};

// AMX multiplies pairs of bfloat16s (attention_amx.h): a product of a query's and a key's
// element is off by at most 3·2^-18 of its size (each operand's split leaves 2^-18 and the lo·lo
// term is dropped), so a score by at most that share of Σ_d |q_d k_d| · scale, and an output, a
// probability-weighted mean of values, by at most twice the largest score error times
// Σ_j p_j |v_j|. This is that bound's factor on Σ_j p_j |v_j|; 0 for the F32 loops, whose
// error the tests' own tolerances cover.
double amx_output_error(bool amx, double largest_abs_score_sum) {
  return amx ? 2 * 3 * std::ldexp(1.0, -18) * largest_abs_score_sum : 0.0;
}

INSTANTIATE_TEST_SUITE_P(KernelSets, OpsOnEachSet, ::testing::ValuesIn(kernel_sets_and_amx()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           std::replace(name.begin(), name.end(), '+', '_');
                           return name;
                         });

TEST_P(OpsOnEachSet, SiluMulMatchesFloat64AcrossTheRange) {
  std::vector<float> gate, up;
  for (float x = -120.0f; x <= 120.0f; x += 0.0137f) gate.push_back(x);
  for (float x : {-1e30f, -88.5f, -87.4f, -87.3f, -1e-30f, 0.0f, 1e-30f, 88.3f, 88.5f, 1e30f}) gate.push_back(x);
  for (size_t i = 0; i < gate.size(); ++i) up.push_back(i % 3 == 0 ? -1.5f : 0.75f);
  std::vector<float> out = gate;
  ops::silu_mul(out.data(), up.data(), static_cast<int64_t>(out.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const double x = gate[i];
    const double exact = x / (1.0 + std::exp(-x)) * up[i];
    // A few float roundings of the result; below 1e-30 (e^x past the clamp) only absolutely.
    ASSERT_NEAR(out[i], exact, 4e-7 * std::fabs(exact) + 1e-30) << "silu(" << gate[i] << ") * " << up[i];
  }
}

// gpt-oss's clamped SwiGLU over the range, on both sides of both clamps.
TEST_P(OpsOnEachSet, SwigluClampedMatchesFloat64AcrossTheRange) {
  std::vector<float> gate, up;
  for (float x = -120.0f; x <= 120.0f; x += 0.0137f) gate.push_back(x);
  for (float x : {-1e30f, -51.3f, -51.0f, -1e-30f, 0.0f, 6.99f, 7.0f, 7.01f, 1e30f}) gate.push_back(x);
  const float ups[] = {-1e30f, -9.0f, -7.0f, -1.5f, 0.0f, 0.75f, 6.5f, 7.5f, 1e30f};
  for (size_t i = 0; i < gate.size(); ++i) up.push_back(ups[i % std::size(ups)]);
  std::vector<float> out = gate;
  ops::swiglu_clamped(out.data(), up.data(), static_cast<int64_t>(out.size()));
  for (size_t i = 0; i < gate.size(); ++i) {
    const double g = std::min<double>(gate[i], 7.0), u = std::clamp<double>(up[i], -7.0, 7.0);
    const double exact = g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
    // As silu's, plus the float rounding of 1.702·g, which e^x turns into a relative error of
    // |1.702·g| times that rounding (up to 88 × 6e-8 where e^x still counts).
    const double tolerance = (4e-7 + 1.2e-7 * std::fabs(1.702 * g)) * std::fabs(exact) + 1e-30;
    ASSERT_NEAR(out[i], exact, tolerance) << "swiglu(" << gate[i] << ", " << up[i] << ")";
  }
}

TEST_P(OpsOnEachSet, SiluMulPassesNanThrough) {
  float gate[] = {std::numeric_limits<float>::quiet_NaN(), 1.0f};
  const float up[] = {1.0f, 1.0f};
  ops::silu_mul(gate, up, 2);
  EXPECT_TRUE(std::isnan(gate[0]));
  EXPECT_NEAR(gate[1], 1.0 / (1.0 + std::exp(-1.0)), 1e-7);
}

// Transposed keys (dimension d of position j at d * positions + j) laid out in KvCache's blocks;
// the slots past `positions` that complete the last block are NaN, which no result may see.
std::vector<float> in_key_blocks(const std::vector<float>& transposed, int32_t dims, int32_t positions) {
  const int32_t slots = (positions + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
  std::vector<float> blocked(static_cast<size_t>(dims) * slots, NAN);
  for (int32_t d = 0; d < dims; ++d)
    for (int32_t j = 0; j < positions; ++j)
      blocked[static_cast<size_t>(key_element(dims, d, j))] = transposed[static_cast<size_t>(d) * positions + j];
  return blocked;
}

struct AttentionCase {
  int32_t n_rows, group, head_dim, positions;
  std::vector<int32_t> n_keys;
  std::vector<int32_t> first_key = {};  // a sliding window's first visible key per row; empty: none
  std::vector<float> sinks = {};        // each query head's sink logit; empty: none
};

// Rows with different key counts (within and past one 32-key tile, up to every position the keys hold),
// query-vector counts that leave a partial tile of 4, head sizes with and without a tail past
// whole 64-dimension tiles; scores spread wider than e^x's clamp, so some weights underflow.
// Sliding windows (gpt-oss) starting inside and past the first 32-key tile, one key wide and
// wider than a tile, differing within a tile of query vectors; sinks (gpt-oss) from negligible
// to dominating the scores.
TEST_P(OpsOnEachSet, AttentionBlockMatchesFloat64Softmax) {
  const std::vector<AttentionCase> cases = {
      {1, 8, 64, 40, {1}},        {1, 8, 64, 40, {40}},          {1, 3, 64, 70, {33}},
      {8, 8, 64, 80, {65, 66, 67, 68, 69, 70, 71, 72}},          {3, 2, 24, 45, {45, 7, 32}},
      {5, 1, 128, 100, {1, 31, 32, 64, 100}},                    {2, 4, 80, 64, {64, 63}},
      {8, 2, 64, 80, {73, 74, 75, 76, 77, 78, 79, 80}, {68, 69, 70, 71, 72, 73, 74, 75}},
      {5, 1, 64, 100, {1, 31, 40, 64, 100}, {0, 30, 3, 33, 99}},
      {3, 4, 80, 128, {128, 127, 70}, {0, 60, 69}},
      {4, 4, 64, 48, {45, 46, 47, 48}, {}, {-30.0f, 0.0f, 3.5f, 40.0f}},
      {6, 2, 24, 90, {85, 86, 87, 88, 89, 90}, {80, 81, 82, 83, 84, 85}, {2.0f, -1.0f}},
      // Decode and prompt blocks at depth: keys in many 64-key chunks, a whole KV head's query
      // heads (8, two tiles) over each chunk; windows starting inside a chunk, differing by row.
      {1, 8, 64, 4200, {4097}},   {1, 8, 64, 1000, {1000}, {301}},  {1, 7, 80, 2100, {2050}},
      {8, 8, 64, 700, {693, 694, 695, 696, 697, 698, 699, 700}, {100, 131, 200, 263, 264, 300, 450, 690}},
      {2, 8, 64, 3000, {2999, 3000}, {}, {1.0f, -2.0f, 0.5f, 8.0f, -8.0f, 0.0f, 3.0f, 2.0f}},
      // Decode steps in AVX-512's tiles of 8 query vectors × 32 dimensions: two tiles (16 query
      // heads of a KV head), head sizes with a tail past whole 32-dimension tiles and with none.
      {1, 16, 80, 300, {290}},    {1, 8, 24, 100, {99}, {20}},  {1, 8, 96, 70, {70}, {}, {0.5f, -1.0f, 2.0f, 0.0f, 4.0f, -3.0f, 1.0f, 0.25f}},
      // More query vectors than one group of tiles takes at a time (32 tiles of 4): 160 vectors
      // with windows, and 130 (latent attention's many heads) ending in a part tile.
      {8, 20, 32, 150, {143, 144, 145, 146, 147, 148, 149, 150}, {10, 70, 71, 100, 101, 102, 140, 149}},
      {1, 130, 32, 90, {90}},
  };
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int32_t amx_blocks = 0;
  for (const AttentionCase& c : cases) {
    const int32_t hd = c.head_dim, vectors = c.n_rows * c.group;
    const int64_t row_stride = static_cast<int64_t>(c.group) * hd + 5;  // rows apart, as in a wider buffer
    std::vector<float> q(static_cast<size_t>(c.n_rows * row_stride)), keys(static_cast<size_t>(hd) * c.positions);
    std::vector<float> values(static_cast<size_t>(c.positions) * hd);
    for (auto& v : q) v = normal(rng) * 4.0f;
    for (auto& v : keys) v = normal(rng) * 4.0f;
    for (auto& v : values) v = normal(rng);
    int32_t max_keys = 0;
    for (int32_t n : c.n_keys) max_keys = std::max(max_keys, n);
    std::vector<float> scratch(static_cast<size_t>(ops::attention_scratch_floats(c.n_rows, c.group, max_keys)), NAN);
    std::vector<float> out(q.size(), NAN);
    const std::vector<float> blocked_keys = in_key_blocks(keys, hd, c.positions);
    ops::AttentionBlock b{q.data(), out.data(), row_stride, c.n_rows, c.group, hd, c.n_keys.data(),
                          blocked_keys.data(), values.data(), hd, scratch.data()};
    if (!c.first_key.empty()) b.first_key = c.first_key.data();
    if (!c.sinks.empty()) b.sinks = c.sinks.data();
    // attend_block keeps an F32 cache on the vector loops; the AMX parameter calls the tile
    // path itself for the prompt-sized blocks (windows, sinks, partial tiles).
    const bool on_tiles = GetParam().ends_with(kAmx) && vectors >= 16 && hd % 32 == 0;
    amx_blocks += on_tiles;
    if (on_tiles) ops::attend_block_amx(b);
    else ops::attend_block(b);
    for (int32_t v = 0; v < vectors; ++v) {
      const int32_t row = v / c.group, head = v % c.group, n = c.n_keys[static_cast<size_t>(row)];
      const int32_t first = c.first_key.empty() ? 0 : c.first_key[static_cast<size_t>(row)];
      const float* qv = &q[static_cast<size_t>(row * row_stride + head * hd)];
      const float* ov = &out[static_cast<size_t>(row * row_stride + head * hd)];
      std::vector<double> p(static_cast<size_t>(n), -INFINITY);
      double max = c.sinks.empty() ? -INFINITY : c.sinks[static_cast<size_t>(head)], sum = 0, abs_sum = 0;
      for (int32_t j = first; j < n; ++j) {
        double dot = 0, abs_dot = 0;
        for (int32_t d = 0; d < hd; ++d) {
          const double product = static_cast<double>(qv[d]) * keys[static_cast<size_t>(d) * c.positions + j];
          dot += product;
          abs_dot += std::fabs(product);
        }
        p[j] = dot / std::sqrt(static_cast<double>(hd));
        max = std::max(max, p[j]);
        abs_sum = std::max(abs_sum, abs_dot / std::sqrt(static_cast<double>(hd)));
      }
      const double amx_error = amx_output_error(GetParam().ends_with(kAmx), abs_sum);
      // A sink joins the denominator only.
      if (!c.sinks.empty()) sum += std::exp(c.sinks[static_cast<size_t>(head)] - max);
      for (double& x : p) sum += x = std::exp(x - max);
      for (int32_t d = 0; d < hd; ++d) {
        double expected = 0, magnitude = 0;
        for (int32_t j = first; j < n; ++j) {
          expected += p[j] / sum * values[static_cast<size_t>(j) * hd + d];
          magnitude += p[j] / sum * std::fabs(values[static_cast<size_t>(j) * hd + d]);
        }
        // float32 scores of |q·k| up to a few hundred: their rounding moves each weight by ~1e-5.
        ASSERT_NEAR(ov[d], expected, (1e-4 + amx_error) * magnitude + 1e-6)
            << "rows " << c.n_rows << " group " << c.group << " head_dim " << hd << ": row " << row << " head " << head
            << " dim " << d;
      }
    }
    // Nothing between the rows' heads is written.
    for (int32_t row = 0; row < c.n_rows; ++row)
      for (int64_t i = static_cast<int64_t>(c.group) * hd; i < row_stride; ++i)
        ASSERT_TRUE(std::isnan(out[static_cast<size_t>(row * row_stride + i)]));
  }
  EXPECT_EQ(amx_blocks, GetParam().ends_with(kAmx) ? 7 : 0);
}

// Latent attention's form: one KV "head" whose values are narrower or wider than its keys, a
// score scale of its own and an output laid out apart from the queries.
TEST_P(OpsOnEachSet, AttentionBlockWithValuesOfTheirOwnWidth) {
  struct Shape {
    int32_t key_dim, value_dim;
  };
  for (const Shape shape : {Shape{72, 64}, Shape{24, 80}}) {
    const int32_t rows = 3, group = 5, positions = 48, kd = shape.key_dim, vd = shape.value_dim;
    const std::vector<int32_t> n_keys = {46, 47, 48};
    const float scale = 0.3f;
    std::mt19937 rng(9);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> q(static_cast<size_t>(rows * group * kd)), keys(static_cast<size_t>(kd) * positions);
    std::vector<float> values(static_cast<size_t>(positions) * vd);
    for (auto* v : {&q, &keys, &values})
      for (float& x : *v) x = normal(rng);
    const int64_t out_stride = static_cast<int64_t>(group) * vd + 3;
    std::vector<float> out(static_cast<size_t>(rows * out_stride), NAN);
    std::vector<float> scratch(static_cast<size_t>(ops::attention_scratch_floats(rows, group, positions)));
    const std::vector<float> blocked_keys = in_key_blocks(keys, kd, positions);
    ops::AttentionBlock b{q.data(), out.data(), static_cast<int64_t>(group) * kd, rows, group, kd, n_keys.data(),
                          blocked_keys.data(), values.data(), vd, scratch.data()};
    b.scale = scale;
    b.value_dim = vd;
    b.out_row_stride = out_stride;
    ops::attend_block(b);
    for (int32_t r = 0; r < rows; ++r)
      for (int32_t g = 0; g < group; ++g) {
        const int32_t n = n_keys[static_cast<size_t>(r)];
        std::vector<double> p(static_cast<size_t>(n));
        double max = -INFINITY, sum = 0;
        for (int32_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int32_t d = 0; d < kd; ++d)
            dot += static_cast<double>(q[static_cast<size_t>((r * group + g) * kd + d)]) * keys[static_cast<size_t>(d) * positions + j];
          max = std::max(max, p[j] = dot * scale);
        }
        for (double& x : p) sum += x = std::exp(x - max);
        for (int32_t d = 0; d < vd; ++d) {
          double expected = 0;
          for (int32_t j = 0; j < n; ++j) expected += p[j] / sum * values[static_cast<size_t>(j) * vd + d];
          ASSERT_NEAR(out[static_cast<size_t>(r * out_stride + g * vd + d)], expected, 1e-5)
              << "key " << kd << " value " << vd << ": row " << r << " head " << g << " dim " << d;
        }
      }
    for (int32_t r = 0; r < rows; ++r)
      for (int64_t i = static_cast<int64_t>(group) * vd; i < out_stride; ++i)
        ASSERT_TRUE(std::isnan(out[static_cast<size_t>(r * out_stride + i)]));
  }
}

// Keys and values kept as F16 or Q8_0 (KvCache's layouts, a second KV head and a second layer
// so that offsets count) are read as stored: the result is float64 attention over the cache's
// elements as the core reference dequantizes them. Shapes: head widths of 64 and of latent
// attention's 96-wide keys with 64-wide values, key counts within and past whole tiles, a
// sliding window, partial tiles of query vectors.
TEST_P(OpsOnEachSet, AttentionReadsF16AndQ8_0CachesAsStored) {
  struct Shape {
    int32_t n_rows, group, key_dim, value_dim, n_ctx;
    std::vector<int32_t> n_keys, first_key;
  };
  const std::vector<Shape> shapes = {
      {1, 8, 64, 64, 80, {1}, {}},
      {1, 4, 64, 64, 80, {77}, {}},
      {8, 2, 64, 64, 96, {89, 90, 91, 92, 93, 94, 95, 96}, {}},
      {3, 5, 96, 64, 70, {33, 64, 70}, {}},
      {4, 3, 64, 64, 100, {97, 98, 99, 100}, {60, 61, 62, 90}},
      // At depth: a decode step's 8 query heads over 2,000 keys, with and without a window.
      {1, 8, 64, 64, 2100, {2049}, {}},
      {1, 8, 64, 64, 2100, {2100}, {1500}},
      {4, 8, 64, 64, 1100, {1097, 1098, 1099, 1100}, {33, 100, 700, 1090}},
      // DeepSeek V3's latent widths: keys of 576, values of 512.
      {2, 4, 576, 512, 150, {129, 150}, {}},
  };
  int32_t amx_blocks = 0;
  // An F16 cache both as a dense model's (float loops everywhere) and as latent attention's
  // (integer products under AVX-512).
  int32_t blocks = 0;
  for (const auto& [type, latent] : {std::pair{KvType::F16, false}, std::pair{KvType::F16, true}, std::pair{KvType::Q8_0, false}}) {
    for (const Shape& c : shapes) {
      ++blocks;
      const int32_t kd = c.key_dim, vd = c.value_dim, heads = 2, layer = 1, head = 1;
      KvCache cache(2, c.n_ctx, heads, kd, vd, type);
      std::mt19937 rng(11);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      // AVX-512 takes a cache's scores and outputs as integer products (attention_vnni.h). A
      // Q8_0 cache's codes are its own; an F16 cache's elements, and the query, are rounded to
      // 8191 steps of their 32-element block's largest magnitude (as float arithmetic rounds
      // them: x · (8191 / largest) to the nearest integer), which the reference takes as stored.
      const bool vnni = GetParam() == "avx512-vnni";
      const bool word_codes = type == KvType::F16 && latent && vnni;
      auto word_rounded = [](std::vector<float>& x, std::vector<float>* block_scales) {
        for (size_t b = 0; b < x.size() / 32; ++b) {
          float largest = 0;
          for (size_t i = 32 * b; i < 32 * b + 32; ++i) largest = std::max(largest, std::fabs(x[i]));
          const float to_code = largest > 0 ? 8191.0f / largest : 0.0f;
          for (size_t i = 32 * b; i < 32 * b + 32; ++i) x[i] = static_cast<float>(std::nearbyint(x[i] * to_code) * (largest / 8191.0));
          if (block_scales) (*block_scales)[b] = largest / 8191.0f;
        }
      };
      // What each stored element reads back as, by the reference (de)quantizers.
      // block_scales: each 32 elements' Q8_0 scale or code worth (1 for F16 read as floats).
      auto as_stored = [&](std::vector<float> x, std::vector<float>* block_scales = nullptr) {
        std::vector<float> back(x.size());
        std::vector<float> scales(x.size() / 32, 1.0f);
        if (!block_scales) block_scales = &scales;
        block_scales->assign(x.size() / 32, 1.0f);
        if (type == KvType::F16) {
          for (size_t i = 0; i < x.size(); ++i) back[i] = core::half_to_float(core::float_to_half(x[i]));
          if (word_codes) word_rounded(back, block_scales);
        } else {
          std::vector<core::BlockQ8_0> blocks(x.size() / 32);
          core::quantize_row_reference(core::TensorType::Q8_0, x.data(), blocks.data(), static_cast<int64_t>(x.size()));
          core::dequantize_row_reference(core::TensorType::Q8_0, blocks.data(), back.data(), static_cast<int64_t>(x.size()));
          for (size_t b = 0; b < blocks.size(); ++b) (*block_scales)[b] = core::half_to_float(blocks[b].d);
        }
        return back;
      };
      std::vector<std::vector<float>> keys, values;  // of KV head `head` in `layer`, as stored
      std::vector<std::vector<float>> value_scales;   // values' block scales
      for (int32_t pos = 0; pos < c.n_ctx; ++pos) {
        std::vector<float> k(static_cast<size_t>(heads * kd)), v(static_cast<size_t>(heads * vd));
        for (float& x : k) x = normal(rng) * 3.0f;
        for (float& x : v) x = normal(rng);
        cache.store(layer, pos, k.data(), v.data());
        std::vector<float> other_k = k, other_v = v;  // another layer's, which must not be read
        for (float& x : other_k) x = -x * 5.0f;
        for (float& x : other_v) x = -x * 5.0f;
        cache.store(0, pos, other_k.data(), other_v.data());
        std::vector<float> scales;
        const auto kb = as_stored(k), vb = as_stored(v, &scales);
        keys.emplace_back(kb.begin() + head * kd, kb.begin() + (head + 1) * kd);
        values.emplace_back(vb.begin() + head * vd, vb.begin() + (head + 1) * vd);
        value_scales.emplace_back(scales.begin() + head * vd / 32, scales.begin() + (head + 1) * vd / 32);
      }
      const int64_t row_stride = static_cast<int64_t>(c.group) * kd;
      std::vector<float> q(static_cast<size_t>(c.n_rows * row_stride));
      for (float& x : q) x = normal(rng);
      // Against a Q8_0 cache the query is rounded to 8 bits per 32 dimensions, as a matrix
      // product's activations are; against an F16 cache to 8191 steps as the keys: the
      // reference scores that query. The outputs round each weight p_j · s_j (probability times
      // the value block's scale) to 255 (Q8_0) or 4095 (F16) steps of the query's largest over
      // a chunk of keys: off by at most half a step per key, times the value's code |v_jd| / s_j.
      const bool integer_products = vnni && (type == KvType::Q8_0 || word_codes);
      const double weight_steps = word_codes ? 4095 : 255;
      std::vector<float> q_scored = q;
      if (word_codes) {
        word_rounded(q_scored, nullptr);
      } else if (integer_products) {
        std::vector<core::kernels::ActQ8_0> blocks(q.size() / 32);
        core::kernels::quantize_act_q8_0(q.data(), blocks.data(), static_cast<int64_t>(blocks.size()));
        for (size_t i = 0; i < q.size(); ++i) q_scored[i] = blocks[i / 32].d * blocks[i / 32].qs[i % 32];
      }
      const int64_t out_stride = static_cast<int64_t>(c.group) * vd;
      std::vector<float> out(static_cast<size_t>(c.n_rows * out_stride), NAN);
      int32_t max_keys = *std::max_element(c.n_keys.begin(), c.n_keys.end());
      std::vector<float> scratch(static_cast<size_t>(ops::attention_scratch_floats(c.n_rows, c.group, max_keys)));
      ops::AttentionBlock b{q.data(), out.data(), row_stride, c.n_rows, c.group, kd, c.n_keys.data(),
                            cache.keys(layer, head), cache.values(layer, head), cache.value_stride(),
                            scratch.data()};
      b.value_dim = vd;
      b.out_row_stride = out_stride;
      if (!c.first_key.empty()) b.first_key = c.first_key.data();
      b.type = type;
      b.key_scales = cache.key_scales(layer, head);
      b.value_scales = cache.value_scales(layer, head);
      b.value_scale_stride = cache.value_scale_stride();
      b.latent = latent;
      amx_blocks += ops::amx_suits(b);
      ops::attend_block(b);
      for (int32_t r = 0; r < c.n_rows; ++r)
        for (int32_t g = 0; g < c.group; ++g) {
          const int32_t n = c.n_keys[static_cast<size_t>(r)], first = c.first_key.empty() ? 0 : c.first_key[static_cast<size_t>(r)];
          std::vector<double> p(static_cast<size_t>(n));
          double max = -INFINITY, sum = 0, abs_sum = 0;
          for (int32_t j = first; j < n; ++j) {
            double dot = 0, abs_dot = 0;
            for (int32_t d = 0; d < kd; ++d) {
              const double product = static_cast<double>(q_scored[static_cast<size_t>(r * row_stride + g * kd + d)]) * keys[j][d];
              dot += product;
              abs_dot += std::fabs(product);
            }
            max = std::max(max, p[j] = dot / std::sqrt(static_cast<double>(kd)));
            abs_sum = std::max(abs_sum, abs_dot / std::sqrt(static_cast<double>(kd)));
          }
          const double amx_error = amx_output_error(GetParam().ends_with(kAmx), abs_sum);
          for (int32_t j = first; j < n; ++j) sum += p[j] = std::exp(p[j] - max);
          for (int32_t d = 0; d < vd; ++d) {
            double expected = 0, magnitude = 0, largest_weight = 0, codes = 0;
            for (int32_t j = first; j < n; ++j) {
              expected += p[j] / sum * values[j][d];
              magnitude += p[j] / sum * std::fabs(values[j][d]);
              largest_weight = std::max(largest_weight, p[j] / sum * value_scales[j][d / 32]);
              codes += std::fabs(values[j][d]) / value_scales[j][d / 32];
            }
            const double weight_rounding = integer_products ? largest_weight / (2 * weight_steps) * codes * (1 + 1e-5) : 0;
            // Measured worst: 3.3e-6 of the magnitude, on every kernel set's clone (an online
            // softmax over 64-key chunks measured 2.2e-6).
            ASSERT_NEAR(out[static_cast<size_t>(r * out_stride + g * vd + d)], expected,
                        (1e-5 + amx_error) * magnitude + 1e-6 + weight_rounding)
                << kv_type_name(type) << (latent ? " latent" : "") << ": rows " << c.n_rows << " group " << c.group << " key " << kd << ": row " << r
                << " head " << g << " dim " << d;
          }
        }
    }
  }
  // Under the AMX parameter, every block of both types (decode steps too) takes the tiles.
  EXPECT_EQ(amx_blocks, GetParam().ends_with(kAmx) ? blocks : 0);
}

TEST(Ops, KvCacheTypesAreNamedAndQ8_0WantsBlocksOf32) {
  for (KvType type : {KvType::F32, KvType::F16, KvType::Q8_0}) EXPECT_EQ(parse_kv_type(kv_type_name(type)), type);
  try {
    parse_kv_type("q4_0");
    FAIL() << "q4_0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected f32, f16 or q8_0"), std::string::npos) << e.what();
  }
  try {
    KvCache cache(1, 16, 2, 24, 24, KvType::Q8_0);
    FAIL() << "24-wide heads accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cache-type f16"), std::string::npos) << e.what();
  }
  // Bytes per position: keys and values of every layer and head, Q8_0 with a 2-byte scale per 32.
  EXPECT_EQ(KvCache(2, 8, 3, 64, 32, KvType::F32).bytes_per_position(), 2u * 3 * 96 * 4);
  EXPECT_EQ(KvCache(2, 8, 3, 64, 32, KvType::F16).bytes_per_position(), 2u * 3 * 96 * 2);
  EXPECT_EQ(KvCache(2, 8, 3, 64, 32, KvType::Q8_0).bytes_per_position(), 2u * 3 * 96 + 2u * 3 * 3 * 2);
}

// YaRN's angles worked by hand: 8 rotated dimensions, θ = 10000, factor 4 over an original
// context of 64, betas 32 and 1. Pair i turns 64 / (2π · 10000^(i/4)) times; beta_fast's pair
// 8·ln(64/(64π))/(2 ln 10000) = -0.50 gives low 0 (floored, at least 0), beta_slow's
// 8·ln(64/(2π))/(2 ln 10000) = 1.008 gives high 2 (ceiled): pair 0 keeps its frequency, pair 1
// is halfway (0.5 + 0.5/4 = 0.625 of it), pairs 2 and 3 are divided by 4; cos and sin carry
// 1 + 0.1·ln 4.
TEST(Ops, RopeAnglesFollowYarn) {
  ModelConfig c;
  c.rope_dims = 8;
  c.rope_theta = 10000.0f;
  c.rope_yarn = true;
  c.rope_freq_scale = 0.25f;
  c.yarn_original_context = 64;
  c.rope_mscale = static_cast<float>(1.0 + 0.1 * std::log(4.0));
  float cos[4], sin[4];
  ops::rope_angles(10, c, nullptr, cos, sin);
  const double angles[4] = {10.0, 10 * 0.1 * 0.625, 10 * 0.01 / 4, 10 * 0.001 / 4};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(cos[i], std::cos(angles[i]) * 1.1386294, 1e-6) << i;
    EXPECT_NEAR(sin[i], std::sin(angles[i]) * 1.1386294, 1e-6) << i;
  }
}

}  // namespace
}  // namespace orchard::model

namespace orchard::model {
namespace {

// top_k against a stable sort (descending; the lower index first among equals), for every k.
TEST(Ops, TopKMatchesAStableSort) {
  std::vector<float> x = {0.1f, 0.7f, 0.3f, 0.7f, -2.0f, 0.05f, 0.3f, 1.5f, 0.0f, 0.7f};
  std::vector<int32_t> order(x.size());
  for (size_t i = 0; i < x.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  for (int32_t k = 1; k <= static_cast<int32_t>(x.size()); ++k) {
    std::vector<int32_t> got(static_cast<size_t>(k));
    ops::top_k(x.data(), static_cast<int32_t>(x.size()), k, got.data());
    EXPECT_EQ(got, std::vector<int32_t>(order.begin(), order.begin() + k)) << "k " << k;
  }
}

// rms_norm sums its squares in 16 partial sums (and vector clones): against float64 on widths
// around and between those lanes, magnitudes from 2^-30 to 2^30 (their squares would overflow or
// vanish in float), written in place or apart.
TEST_P(OpsOnEachSet, RmsNormMatchesFloat64) {
  for (int64_t n : {1, 2, 15, 16, 17, 31, 33, 127, 128, 129, 2047, 2048, 2049}) {
    for (const int exponent : {-30, 0, 30}) {
      std::vector<float> x(static_cast<size_t>(n)), w(static_cast<size_t>(n));
      double squares = 0;
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(i);
        x[k] = std::ldexp(std::sin(0.37f * static_cast<float>(i) + 0.2f), exponent + static_cast<int>(i % 7) - 3);
        w[k] = 0.5f + std::cos(0.11f * static_cast<float>(i));
        squares += double(x[k]) * x[k];
      }
      constexpr float kEps = 1e-6f;
      const double inv_rms = 1.0 / std::sqrt(squares / static_cast<double>(n) + kEps);
      std::vector<float> out(static_cast<size_t>(n));
      ops::rms_norm(x.data(), w.data(), out.data(), n, kEps);
      std::vector<float> in_place = x;
      ops::rms_norm(in_place.data(), w.data(), in_place.data(), n, kEps);
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(i);
        const double want = x[k] * inv_rms * w[k];
        // The scale and two products rounded to float: a few ulps.
        ASSERT_NEAR(out[k], want, 4e-7 * std::fabs(want)) << "n " << n << " exponent " << exponent << " at " << i;
        ASSERT_EQ(in_place[k], out[k]) << "n " << n << " at " << i;
      }
    }
  }
}

// dot and softmax against float64.
TEST(Ops, DotAndSoftmaxMatchFloat64) {
  for (int64_t n : {1, 15, 16, 17, 100, 2048}) {
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    double want = 0, scale = 0;
    for (int64_t i = 0; i < n; ++i) {
      a[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 2;
      b[static_cast<size_t>(i)] = std::cos(0.11f * static_cast<float>(i));
      want += double(a[static_cast<size_t>(i)]) * b[static_cast<size_t>(i)];
      scale += std::abs(double(a[static_cast<size_t>(i)]) * b[static_cast<size_t>(i)]);
    }
    EXPECT_NEAR(ops::dot(a.data(), b.data(), n), want, 1e-6 * scale) << "n " << n;
    std::vector<float> p = a;
    ops::softmax(p.data(), n);
    double sum = 0;
    for (double v : a) sum += std::exp(v);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(p[static_cast<size_t>(i)], std::exp(double(a[static_cast<size_t>(i)])) / sum, 1e-6) << "n " << n;
  }
}

}  // namespace
}  // namespace orchard::model

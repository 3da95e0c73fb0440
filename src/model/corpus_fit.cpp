#include "model/corpus_fit.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "core/error.h"
#include "model/tokenizer/corpus.h"

namespace orchard::model {
namespace {

constexpr int32_t kBlock = 32;          // the widest block of the 32-element quantization types
constexpr double kBigramSmoothing = 0.05;  // pseudo-count of the unigram prior behind each bigram
constexpr double kTrigramBoost = 12.0;  // logits added to what followed a trigram context
constexpr double kGateSteepness = 24.0;  // SiLU(24 × 0.5) ≈ 12 when both codes match, ≈ 0 otherwise
constexpr double kGateThreshold = 1.5;  // matching codes give 2, one match about 1
constexpr double kPeakScore = 40.0;     // score margin scale: the peak takes > 99.9% of a softmax
constexpr double kPadFactor = 8.0;      // padding norm over the largest content norm

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A random ±1/√n unit vector: as incoherent as a Gaussian one and the same on every platform.
std::vector<float> random_code(uint64_t seed, uint64_t id, int32_t n) {
  std::vector<float> code(static_cast<size_t>(n));
  const float v = 1.0f / std::sqrt(static_cast<float>(n));
  for (int32_t i = 0; i < n; ++i) code[static_cast<size_t>(i)] = (mix(seed ^ mix(id * 1315423911ull + static_cast<uint64_t>(i))) & 1) ? v : -v;
  return code;
}

// RoPE's angle per position of pair i of a head_dim-wide head.
double pair_frequency(float rope_theta, int32_t i, int32_t head_dim) {
  return std::pow(static_cast<double>(rope_theta), -2.0 * i / head_dim);
}

double dot(const float* a, const float* b, int32_t n) {
  double s = 0;
  for (int32_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Where each role lives in the residual stream; every range starts on a block boundary.
struct Layout {
  int32_t codes = 0, n_codes = 0;  // logit codes (bigram and trigram continuations)
  int32_t current = 0, prev = 0, n_ids = 0;  // identity of the current token, of the previous one
  int32_t constant = 0;            // always c (queries, keys, gate thresholds, unigram bias)
  int32_t pad = 0;                 // sets every embedding's norm
  int32_t kv_heads_used = 0;       // KV heads carrying the previous token's identity
};

Layout plan_layout(const ModelConfig& c) {
  if (c.arch_name != "llama" || c.n_expert > 0)
    throw Error(error_message("make-model", "--fit-corpus needs a dense llama model, not {}{}", c.arch_name,
                              c.n_expert > 0 ? " with experts" : ""));
  if (c.rope_dims != c.head_dim || c.head_dim % 2 != 0 || c.rope_ordering != RopeOrdering::Normal)
    throw Error(error_message("make-model", "--fit-corpus needs RoPE over whole heads in llama's pair order"));
  Layout l;
  l.kv_heads_used = std::min(c.n_kv_heads, std::max(1, c.n_embd / (4 * c.head_dim)));
  l.n_ids = l.kv_heads_used * c.head_dim;
  l.n_codes = c.n_embd - 2 * l.n_ids - 2 * kBlock;
  if (l.n_ids % kBlock != 0 || l.n_codes < 4 * kBlock || c.n_embd % kBlock != 0)
    throw Error(error_message("make-model",
                              "--fit-corpus needs an embedding of at least {} (4 head widths and 256 code "
                              "dimensions, in blocks of 32), not {}",
                              2 * l.n_ids + 6 * kBlock, c.n_embd));
  l.codes = 0;
  l.current = l.n_codes;
  l.prev = l.current + l.n_ids;
  l.constant = l.prev + l.n_ids;
  l.pad = l.constant + kBlock;
  return l;
}

struct Statistics {
  std::vector<double> log_unigram;  // log frequency of every vocabulary token (smoothed)
  std::vector<std::unordered_map<int32_t, double>> bigram;  // b -> {c: count}
  struct Context {
    int32_t a, b;
    double count;
    std::unordered_map<int32_t, double> next;
  };
  std::vector<Context> trigram_contexts;  // by importance, most useful first
};

Statistics count_corpus(const Tokenizer& tokenizer, int32_t vocab) {
  const std::vector<TokenId> ids = tokenizer.encode(training_corpus(), false, false);
  Statistics s;
  std::vector<double> counts(static_cast<size_t>(vocab), 0.01);
  for (TokenId t : ids) counts[static_cast<size_t>(t)] += 1;
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  s.log_unigram.resize(counts.size());
  for (size_t t = 0; t < counts.size(); ++t) s.log_unigram[t] = std::log(counts[t] / total);
  s.bigram.resize(static_cast<size_t>(vocab));
  for (size_t i = 0; i + 1 < ids.size(); ++i) s.bigram[static_cast<size_t>(ids[i])][ids[i + 1]] += 1;
  std::map<std::pair<int32_t, int32_t>, std::unordered_map<int32_t, double>> trigrams;
  for (size_t i = 0; i + 2 < ids.size(); ++i) trigrams[{ids[i], ids[i + 1]}][ids[i + 2]] += 1;
  for (auto& [key, next] : trigrams) {
    // A second token with one continuation is already told by the bigram.
    if (s.bigram[static_cast<size_t>(key.second)].size() < 2) continue;
    double count = 0;
    for (const auto& [c, n] : next) count += n;
    s.trigram_contexts.push_back({key.first, key.second, count, std::move(next)});
  }
  std::stable_sort(s.trigram_contexts.begin(), s.trigram_contexts.end(),
                   [](const Statistics::Context& x, const Statistics::Context& y) { return x.count > y.count; });
  return s;
}

}  // namespace

PreviousTokenPeak previous_token_peak(int32_t head_dim, float rope_theta, int32_t n_ctx) {
  const int32_t pairs = head_dim / 2;
  std::vector<double> theta(static_cast<size_t>(pairs));
  for (int32_t i = 0; i < pairs; ++i) theta[static_cast<size_t>(i)] = pair_frequency(rope_theta, i, head_dim);
  // margin[d][i]: how much lower pair i scores distance d than distance 1, per unit weight.
  std::vector<int32_t> distances;
  for (int32_t d = 0; d < n_ctx; ++d)
    if (d != 1) distances.push_back(d);
  std::vector<double> margin(distances.size() * static_cast<size_t>(pairs));
  for (size_t k = 0; k < distances.size(); ++k)
    for (int32_t i = 0; i < pairs; ++i)
      margin[k * pairs + i] = 1.0 - std::cos((distances[k] - 1) * theta[static_cast<size_t>(i)]);
  // Multiplicative weights on a soft minimum of the margins: a few thousand rounds come within a
  // few percent of the linear program's optimum, which is all the peak needs.
  std::vector<double> w(static_cast<size_t>(pairs), 1.0 / pairs), best = w, soft(distances.size()),
      gradient(static_cast<size_t>(pairs));
  double best_margin = -1;
  for (int round = 0; round < 3000; ++round) {
    double lowest = INFINITY;
    for (size_t k = 0; k < distances.size(); ++k) {
      double m = 0;
      for (int32_t i = 0; i < pairs; ++i) m += w[static_cast<size_t>(i)] * margin[k * pairs + i];
      soft[k] = m;
      lowest = std::min(lowest, m);
    }
    if (lowest > best_margin) best_margin = lowest, best = w;
    double sum = 0;
    for (double& m : soft) sum += m = std::exp(-(m - lowest) * 200.0);
    std::fill(gradient.begin(), gradient.end(), 0.0);
    for (size_t k = 0; k < distances.size(); ++k)
      for (int32_t i = 0; i < pairs; ++i) gradient[static_cast<size_t>(i)] += soft[k] / sum * margin[k * pairs + i];
    const double top = *std::max_element(gradient.begin(), gradient.end());
    double total = 0;
    for (int32_t i = 0; i < pairs; ++i) total += w[static_cast<size_t>(i)] *= std::exp(0.5 * gradient[static_cast<size_t>(i)] / top);
    for (double& x : w) x /= total;
  }
  return {best, best_margin};
}

std::map<std::string, std::vector<float>> fit_corpus_weights(const ModelConfig& c, const Tokenizer& tokenizer,
                                                              uint64_t seed) {
  const Layout l = plan_layout(c);
  const int32_t d = c.n_embd, vocab = c.vocab_size, hd = c.head_dim;
  const Statistics stats = count_corpus(tokenizer, vocab);
  std::map<std::string, std::vector<float>> out;
  auto tensor = [&](const std::string& name, int64_t rows, int64_t cols) -> std::vector<float>& {
    return out[name] = std::vector<float>(static_cast<size_t>(rows * cols), 0.0f);
  };

  // Every token's logit code and identity code.
  std::vector<std::vector<float>> logit_code(static_cast<size_t>(vocab)), identity(static_cast<size_t>(vocab));
  for (int32_t t = 0; t < vocab; ++t) {
    logit_code[static_cast<size_t>(t)] = random_code(seed, 2 * static_cast<uint64_t>(t), l.n_codes);
    identity[static_cast<size_t>(t)] = random_code(seed, 2 * static_cast<uint64_t>(t) + 1, l.n_ids);
  }
  auto add_code = [&](float* row, int32_t token, double weight) {
    const std::vector<float>& code = logit_code[static_cast<size_t>(token)];
    for (int32_t i = 0; i < l.n_codes; ++i) row[l.codes + i] += static_cast<float>(weight) * code[static_cast<size_t>(i)];
  };

  // The embedding's content: bigram continuations, identity, constant 1. Its norm then sets the
  // padding: every row gets norm K, so RMS normalization divides every position by K/√d.
  std::vector<float>& embedding = tensor("token_embd.weight", vocab, d);
  double largest = 0;
  for (int32_t b = 0; b < vocab; ++b) {
    float* row = embedding.data() + static_cast<size_t>(b) * d;
    for (const auto& [next, n] : stats.bigram[static_cast<size_t>(b)])
      add_code(row, next, std::log1p(n / (kBigramSmoothing * std::exp(stats.log_unigram[static_cast<size_t>(next)]))));
    std::copy(identity[static_cast<size_t>(b)].begin(), identity[static_cast<size_t>(b)].end(), row + l.current);
    row[l.constant] = 1.0f;
    largest = std::max(largest, dot(row, row, d));
  }
  // Later layers add the previous token's identity and trigram codes; the padding keeps all of
  // that within a few percent of the norm.
  const double norm = kPadFactor * std::sqrt(largest + 1.0 + kTrigramBoost * kTrigramBoost);
  for (int32_t b = 0; b < vocab; ++b) {
    float* row = embedding.data() + static_cast<size_t>(b) * d;
    row[l.pad] = static_cast<float>(std::sqrt(norm * norm - dot(row, row, d)));
  }
  // What normalization leaves of a content value of 1: consumers divide by it.
  const double eta = std::sqrt(static_cast<double>(d)) / norm;

  std::vector<float>& output = tensor("output.weight", vocab, d);
  for (int32_t t = 0; t < vocab; ++t) {
    float* row = output.data() + static_cast<size_t>(t) * d;
    add_code(row, t, 1.0 / eta);
    row[l.constant] = static_cast<float>(stats.log_unigram[static_cast<size_t>(t)] / eta);
  }
  auto ones = [&](const std::string& name) {
    std::vector<float>& v = tensor(name, 1, d);
    std::fill(v.begin(), v.end(), 1.0f);
  };
  ones("output_norm.weight");

  // Layer 0: the first query head of each used KV head attends to the previous position.
  const PreviousTokenPeak peak = previous_token_peak(hd, c.rope_theta, c.context_length);
  const int32_t group = c.n_heads / c.n_kv_heads;
  const size_t ff_units = static_cast<size_t>(c.n_ff);
  size_t next_context = 0;
  for (int32_t layer = 0; layer < c.n_layers; ++layer) {
    const std::string p = "blk." + std::to_string(layer) + ".";
    ones(p + "attn_norm.weight");
    ones(p + "ffn_norm.weight");
    std::vector<float>& wq = tensor(p + "attn_q.weight", c.q_dim(), d);
    std::vector<float>& wk = tensor(p + "attn_k.weight", c.kv_dim(), d);
    std::vector<float>& wv = tensor(p + "attn_v.weight", c.kv_dim(), d);
    std::vector<float>& wo = tensor(p + "attn_output.weight", d, c.q_dim());
    if (layer == 0) {
      for (int32_t g = 0; g < l.kv_heads_used; ++g) {
        const int32_t head = g * group;
        for (int32_t i = 0; i < hd / 2; ++i) {
          // q·k over pair i is r² cos(θ(1 - distance)) once RoPE turns the query by -θ more than
          // the key; summed over pairs and divided by √hd, that is kPeakScore × the peak's score.
          const double theta = pair_frequency(c.rope_theta, i, hd);
          const double r = std::sqrt(kPeakScore * std::sqrt(static_cast<double>(hd)) * peak.pair_weights[static_cast<size_t>(i)]) / eta;
          wq[static_cast<size_t>(head * hd + 2 * i) * d + l.constant] = static_cast<float>(r * std::cos(theta));
          wq[static_cast<size_t>(head * hd + 2 * i + 1) * d + l.constant] = static_cast<float>(-r * std::sin(theta));
          wk[static_cast<size_t>(g * hd + 2 * i) * d + l.constant] = static_cast<float>(r);
        }
        for (int32_t j = 0; j < hd; ++j) {
          wv[static_cast<size_t>(g * hd + j) * d + l.current + g * hd + j] = static_cast<float>(1.0 / eta);
          wo[static_cast<size_t>(l.prev + g * hd + j) * c.q_dim() + head * hd + j] = 1.0f;
        }
      }
    }
    // The FFN: one trigram context per hidden unit while contexts last.
    std::vector<float>& gate = tensor(p + "ffn_gate.weight", c.n_ff, d);
    std::vector<float>& up = tensor(p + "ffn_up.weight", c.n_ff, d);
    std::vector<float>& down = tensor(p + "ffn_down.weight", d, c.n_ff);
    const double fired = kGateSteepness * (2.0 - kGateThreshold);  // SiLU of it, almost exactly
    for (size_t unit = 0; unit < ff_units && next_context < stats.trigram_contexts.size(); ++unit, ++next_context) {
      const Statistics::Context& ctx = stats.trigram_contexts[next_context];
      float* g_row = gate.data() + unit * d;
      const std::vector<float>& prev_id = identity[static_cast<size_t>(ctx.a)];
      const std::vector<float>& cur_id = identity[static_cast<size_t>(ctx.b)];
      for (int32_t i = 0; i < l.n_ids; ++i) {
        g_row[l.prev + i] = static_cast<float>(kGateSteepness * prev_id[static_cast<size_t>(i)] / eta);
        g_row[l.current + i] = static_cast<float>(kGateSteepness * cur_id[static_cast<size_t>(i)] / eta);
      }
      g_row[l.constant] = static_cast<float>(-kGateSteepness * kGateThreshold / eta);
      up[unit * d + l.constant] = static_cast<float>(1.0 / eta);
      std::vector<float> written(static_cast<size_t>(d), 0.0f);
      for (const auto& [next, n] : ctx.next) add_code(written.data(), next, kTrigramBoost * n / ctx.count / fired);
      for (int32_t r = 0; r < d; ++r) down[static_cast<size_t>(r) * c.n_ff + unit] = written[static_cast<size_t>(r)];
    }
  }
  return out;
}

}  // namespace orchard::model

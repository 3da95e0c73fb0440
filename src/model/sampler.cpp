#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "model/ops.h"

namespace orchard::model {

Sampler::Sampler(const SamplerOptions& options, int32_t vocab_size)
    : options_(options), vocab_size_(vocab_size), rng_state_(options.seed) {
  if (options.temperature < 0) throw Error(error_message("sampler", "temperature {} is negative", options.temperature));
  if (options.top_p <= 0 || options.top_p > 1)
    throw Error(error_message("sampler", "top_p {} must be in (0, 1]", options.top_p));
  if (options.min_p < 0 || options.min_p >= 1)
    throw Error(error_message("sampler", "min_p {} must be in [0, 1)", options.min_p));
  if (options.repeat_penalty <= 0)
    throw Error(error_message("sampler", "repeat_penalty {} must be positive", options.repeat_penalty));
  candidates_.reserve(static_cast<size_t>(vocab_size));
  penalized_.reserve(static_cast<size_t>(vocab_size));
}

void Sampler::reset() {
  rng_state_ = options_.seed;
  recent_.clear();
}

void Sampler::remember(int32_t token) {
  if (options_.repeat_last_n <= 0) return;
  recent_.push_back(token);
  while (static_cast<int32_t>(recent_.size()) > options_.repeat_last_n) recent_.pop_front();
}

double Sampler::next_uniform() {
  // splitmix64: tiny, fast, and the same on every platform.
  uint64_t z = (rng_state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

void Sampler::penalize(const float* logits) {
  penalized_.assign(logits, logits + vocab_size_);
  if (options_.repeat_penalty == 1.0f) return;
  for (int32_t token : recent_) {
    float& l = penalized_[static_cast<size_t>(token)];
    // Once per distinct token, as llama.cpp does: a penalized logit is marked by being
    // compared against the original.
    if (l != logits[token]) continue;
    l = l > 0 ? l / options_.repeat_penalty : l * options_.repeat_penalty;
  }
}

bool Sampler::unfiltered() const {
  return options_.temperature > 0.0f && options_.top_k == 0 && options_.top_p >= 1.0f && options_.min_p == 0.0f;
}

int32_t Sampler::sample_unfiltered() {
  // Every token is a candidate, so the tempered softmax (vectorized) is drawn from in token
  // order: no sort and no libm exp per token. Sorting 32k logits cost the server more per
  // token than its share of a batched decode step.
  // Tokens masked out (a grammar refuses them) have probability 0 and are never chosen.
  if (*std::max_element(penalized_.begin(), penalized_.end()) == -std::numeric_limits<float>::infinity())
    throw Error(error_message("sampler", "every token's logit is -infinity"));
  if (options_.temperature != 1.0f)
    for (float& l : penalized_) l /= options_.temperature;
  ops::softmax(penalized_.data(), vocab_size_);
  const double r = next_uniform();
  double cumulative = 0;
  int32_t chosen = -1;
  for (int32_t i = 0; i < vocab_size_; ++i) {
    const float p = penalized_[static_cast<size_t>(i)];
    if (p == 0) continue;
    chosen = i;
    cumulative += p;
    if (r < cumulative) break;
  }
  return chosen;  // the last possible token when rounding left r beyond the sum
}

void Sampler::build_candidates(const float* logits) {
  penalize(logits);
  candidates_.clear();
  for (int32_t i = 0; i < vocab_size_; ++i)
    // Tokens masked out (a grammar refuses them) are no candidates at all, so neither top-p's
    // mass nor a rounding at the end of the cumulative sum can pick one.
    if (penalized_[static_cast<size_t>(i)] != -std::numeric_limits<float>::infinity())
      candidates_.emplace_back(i, penalized_[static_cast<size_t>(i)]);
  if (candidates_.empty()) throw Error(error_message("sampler", "every token's logit is -infinity"));
  auto by_logit = [](const auto& a, const auto& b) { return a.second > b.second || (a.second == b.second && a.first < b.first); };
  if (options_.temperature == 0.0f) {
    auto best = std::min_element(candidates_.begin(), candidates_.end(), by_logit);
    candidates_ = {{best->first, 1.0f}};
    return;
  }
  size_t keep = candidates_.size();
  if (options_.top_k > 0) keep = std::min(keep, static_cast<size_t>(options_.top_k));
  // by_logit is a total order, so a full sort gives the same sequence as a partial sort of all
  // of it, and is several times faster (partial_sort is a heap sort): without top-k, sampling
  // was the server's largest cost after the forward pass (≈ 10 ms a token for 32k logits).
  if (keep == candidates_.size())
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  else
    std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(keep), candidates_.end(), by_logit);
  candidates_.resize(keep);

  // Probabilities at temperature 1 for the filters (as llama.cpp's top-p and min-p see them).
  const float max_logit = candidates_.front().second;
  if (options_.top_p < 1.0f) {
    double sum = 0;
    for (auto& [token, logit] : candidates_) sum += std::exp(static_cast<double>(logit - max_logit));
    double cumulative = 0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
      cumulative += std::exp(static_cast<double>(candidates_[i].second - max_logit)) / sum;
      if (cumulative >= options_.top_p) {
        candidates_.resize(i + 1);
        break;
      }
    }
  }
  if (options_.min_p > 0) {
    // p_i / p_max >= min_p  <=>  logit_i >= max_logit + ln(min_p)
    const float threshold = max_logit + std::log(options_.min_p);
    size_t n = 1;
    while (n < candidates_.size() && candidates_[n].second >= threshold) ++n;
    candidates_.resize(n);
  }
  double total = 0;
  for (auto& [token, logit] : candidates_) {
    double p = std::exp(static_cast<double>(logit - max_logit) / options_.temperature);
    logit = static_cast<float>(p);
    total += p;
  }
  for (auto& c : candidates_) c.second = static_cast<float>(c.second / total);
}

int32_t Sampler::sample(const float* logits) {
  if (unfiltered()) {
    penalize(logits);
    const int32_t chosen = sample_unfiltered();
    remember(chosen);
    return chosen;
  }
  build_candidates(logits);
  int32_t chosen = candidates_.back().first;
  if (candidates_.size() > 1) {
    double r = next_uniform(), cumulative = 0;
    for (const auto& [token, p] : candidates_) {
      cumulative += p;
      if (r < cumulative) {
        chosen = token;
        break;
      }
    }
  } else {
    chosen = candidates_.front().first;
  }
  remember(chosen);
  return chosen;
}

std::vector<std::pair<int32_t, float>> Sampler::support(const float* logits) {
  build_candidates(logits);
  return candidates_;
}

}  // namespace orchard::model

// The sampler against probabilities computed here in float64: drawn frequencies of the
// unfiltered path (temperature alone, the OpenAI API's default, which skips the sort) and of
// the filtered path, the repetition penalty, and determinism per seed.
#include "model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace orchard::model {
namespace {

// softmax(logits / temperature) in float64.
std::vector<double> reference(const std::vector<float>& logits, double temperature) {
  double max = logits[0];
  for (float l : logits) max = std::max(max, static_cast<double>(l));
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp((logits[i] - max) / temperature);
  for (double& x : p) x /= sum;
  return p;
}

// Frequencies of n draws, one sampler per seed (the repetition penalty is off, so draws are
// independent given the logits).
std::vector<double> frequencies(SamplerOptions options, const std::vector<float>& logits, int n) {
  std::vector<double> count(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    options.seed = static_cast<uint64_t>(i) * 7919 + 1;
    Sampler s(options, static_cast<int32_t>(logits.size()));
    ++count[static_cast<size_t>(s.sample(logits.data()))];
  }
  for (double& c : count) c /= n;
  return count;
}

const std::vector<float> kLogits = {1.0f, 3.0f, -2.0f, 2.5f, 0.0f, 3.0f, -40.0f, 1.5f};

SamplerOptions unfiltered(float temperature) {
  SamplerOptions o;
  o.temperature = temperature;
  o.top_k = 0;
  o.top_p = 1.0f;
  o.min_p = 0.0f;
  return o;
}

TEST(Sampler, UnfilteredDrawsFollowTheTemperedSoftmax) {
  constexpr int kDraws = 40000;
  for (float temperature : {1.0f, 0.5f, 2.0f}) {
    const std::vector<double> want = reference(kLogits, temperature);
    const std::vector<double> got = frequencies(unfiltered(temperature), kLogits, kDraws);
    for (size_t i = 0; i < want.size(); ++i) {
      // Five standard deviations of a frequency over kDraws draws.
      const double tolerance = 5 * std::sqrt(want[i] * (1 - want[i]) / kDraws) + 1e-9;
      EXPECT_NEAR(got[i], want[i], tolerance) << "token " << i << ", temperature " << temperature;
    }
  }
}

TEST(Sampler, FilteredDrawsFollowTheKeptCandidates) {
  // top-k 3 keeps tokens 1, 5 (equal logits: the lower index first) and 3, renormalized.
  SamplerOptions o = unfiltered(1.0f);
  o.top_k = 3;
  constexpr int kDraws = 20000;
  const std::vector<double> all = reference(kLogits, 1.0);
  const double kept = all[1] + all[3] + all[5];
  const std::vector<double> got = frequencies(o, kLogits, kDraws);
  for (size_t i = 0; i < kLogits.size(); ++i) {
    const double want = i == 1 || i == 3 || i == 5 ? all[i] / kept : 0.0;
    EXPECT_NEAR(got[i], want, 5 * std::sqrt(want * (1 - want) / kDraws) + 1e-9) << "token " << i;
  }
}

TEST(Sampler, UnfilteredPenaltyAppliesOncePerRecentToken) {
  // Token 1 (logit 3) seen twice and token 2 (logit -2) once: 3 / 4 and -2 · 4, once each.
  SamplerOptions o = unfiltered(1.0f);
  o.repeat_penalty = 4.0f;
  std::vector<float> penalized = kLogits;
  penalized[1] = 3.0f / 4;
  penalized[2] = -8.0f;
  const std::vector<double> want = reference(penalized, 1.0);
  constexpr int kDraws = 40000;
  std::vector<double> got(kLogits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    o.seed = static_cast<uint64_t>(i) + 17;
    Sampler s(o, static_cast<int32_t>(kLogits.size()));
    for (int32_t t : {1, 2, 1}) s.remember(t);
    got[static_cast<size_t>(s.sample(kLogits.data()))] += 1.0 / kDraws;
  }
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 5 * std::sqrt(want[i] * (1 - want[i]) / kDraws) + 1e-9) << "token " << i;
}

TEST(Sampler, ASeedGivesTheSameTokens) {
  for (const SamplerOptions& o : {unfiltered(0.8f), SamplerOptions{.temperature = 0.8f}}) {
    std::vector<int32_t> first, second;
    for (std::vector<int32_t>* out : {&first, &second}) {
      SamplerOptions seeded = o;
      seeded.seed = 42;
      Sampler s(seeded, static_cast<int32_t>(kLogits.size()));
      for (int i = 0; i < 50; ++i) out->push_back(s.sample(kLogits.data()));
    }
    EXPECT_EQ(first, second);
    // A token far below the others (logit -40) is never drawn.
    for (int32_t t : first) EXPECT_NE(t, 6);
  }
}

}  // namespace
}  // namespace orchard::model

// The default model that speaks: a synthetic model whose weights are written from the built-in
// corpus continues corpus text as the corpus's own trigram counts say (counted here, independently
// of the fit), and its sampled text is made of the corpus's word pairs, where a random-weights model
// of the same shape produces almost none.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/corpus_fit.h"
#include "model/forward.h"
#include "model/generate.h"
#include "model/gguf/reader.h"
#include "model/synthetic.h"
#include "model/tokenizer/corpus.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weights.h"

namespace orchard {
namespace {

std::string fitted_model(const std::string& type, bool fit) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("orchard_fit_" + type + (fit ? "" : "_random") + "_" + std::to_string(::getpid()) + ".gguf"))
                               .string();
  if (!std::filesystem::exists(path)) {
    model::SyntheticModelSpec spec;
    spec.arch = "llama";
    spec.shape = "small";
    spec.type = type;
    spec.fit_corpus = fit;
    spec.threads = 2;
    model::write_synthetic_model(spec, path);
  }
  return path;
}

struct Loaded {
  model::gguf::Reader file;
  model::ModelConfig config;
  model::Tokenizer tokenizer;
  core::ThreadPool pool{2};
  model::ModelWeights weights;
  model::Forward forward;
  explicit Loaded(const std::string& path)
      : file(model::gguf::Reader::open(path)),
        config(model::ModelConfig::from_gguf(file)),
        tokenizer(model::Tokenizer::from_gguf(file)),
        weights(file, config, model::Shard::whole(config), model::LoadOptions{}),
        forward(weights, 512, 512, pool) {}
};

TEST(CorpusFit, PreviousTokenPeakBeatsEveryOtherDistance) {
  const auto peak = model::previous_token_peak(64, 10000.0f, 2048);
  double total = 0;
  for (double w : peak.pair_weights) total += w;
  EXPECT_NEAR(total, 1.0, 1e-9);
  // The score at each distance, recomputed in float64 from the weights alone.
  auto score = [&](int distance) {
    double s = 0;
    for (size_t i = 0; i < peak.pair_weights.size(); ++i)
      s += peak.pair_weights[i] * std::cos((distance - 1) * std::pow(10000.0, -2.0 * static_cast<double>(i) / 64));
    return s;
  };
  double worst = INFINITY;
  for (int d = 0; d < 2048; ++d)
    if (d != 1) worst = std::min(worst, score(1) - score(d));
  EXPECT_GT(worst, 0.2);  // measured 0.29; uniform weights give 0.03
  EXPECT_NEAR(worst, peak.margin, 1e-9);
}

TEST(CorpusFit, RefusesModelsItCannotWrite) {
  model::SyntheticModelSpec spec;
  spec.arch = "qwen3moe";
  spec.shape = "small";
  spec.fit_corpus = true;
  try {
    model::write_synthetic_model(spec, (std::filesystem::temp_directory_path() / "orchard_fit_refused.gguf").string());
    FAIL() << "a mixture of experts was fitted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--fit-corpus needs a dense llama model"), std::string::npos) << e.what();
  }
}

// Teacher-forced over a stretch of the corpus: where the corpus's trigram counts name one most
// frequent continuation, the model's greedy choice should be it.
double trigram_agreement(const std::string& type) {
  Loaded m(fitted_model(type, true));
  const std::vector<model::TokenId> ids = m.tokenizer.encode(model::training_corpus(), false, false);
  std::map<std::pair<int32_t, int32_t>, std::map<int32_t, int>> trigrams;
  for (size_t i = 0; i + 2 < ids.size(); ++i) ++trigrams[{ids[i], ids[i + 1]}][ids[i + 2]];
  const size_t begin = 1000, n = 400;  // a stretch well inside the corpus
  std::vector<model::TokenId> stretch(ids.begin() + begin, ids.begin() + begin + n);
  m.forward.run(stretch, nullptr, static_cast<int32_t>(n), 0, /*logits_for_all=*/true);
  int agree = 0, judged = 0;
  for (size_t t = 1; t + 1 < n; ++t) {
    const auto& next = trigrams[{stretch[t - 1], stretch[t]}];
    int best = -1, best_count = 0, ties = 0;
    for (const auto& [token, count] : next) {
      if (count > best_count) best = token, best_count = count, ties = 0;
      else if (count == best_count) ++ties;
    }
    if (ties > 0) continue;  // no single answer
    const float* logits = m.forward.logits(static_cast<int32_t>(t));
    ++judged;
    agree += std::max_element(logits, logits + m.config.vocab_size) - logits == best;
  }
  std::printf("%s: greedy continuation agrees with the corpus's trigram counts at %d of %d positions\n",
              type.c_str(), agree, judged);
  EXPECT_GT(judged, 300);
  return static_cast<double>(agree) / judged;
}

TEST(CorpusFit, GreedyContinuationFollowsTheCorpusTrigrams) {
  EXPECT_GE(trigram_agreement("f32"), 0.9);
  EXPECT_GE(trigram_agreement("q8_0"), 0.9);
  // Q4_0 rounds the codes to 4 bits (one sign of a ±v code to 7/8 of it): measured 0.78.
  EXPECT_GE(trigram_agreement("q4_0"), 0.7);
}

// The share of adjacent word pairs of sampled text that occur in the corpus.
double corpus_word_pairs(const std::string& path) {
  Loaded m(path);
  std::set<std::pair<std::string, std::string>> corpus_pairs;
  auto words = [](std::string_view text) {
    std::vector<std::string> out;
    std::istringstream in{std::string(text)};
    for (std::string w; in >> w;) out.push_back(w);
    return out;
  };
  const auto corpus_words = words(model::training_corpus());
  for (size_t i = 0; i + 1 < corpus_words.size(); ++i) corpus_pairs.insert({corpus_words[i], corpus_words[i + 1]});
  model::LocalModel local(m.forward);
  int found = 0, pairs = 0;
  for (uint64_t seed : {1, 2, 3}) {
    model::GenerationOptions options;
    options.max_tokens = 60;
    options.sampling.temperature = 0.8f;
    options.sampling.seed = seed;
    const auto prompt = m.tokenizer.encode("Once upon a time", true);
    const auto result = model::generate(local, m.tokenizer, prompt, options);
    const auto generated = words(result.text);
    std::printf("seed %llu: %s\n", static_cast<unsigned long long>(seed), result.text.c_str());
    for (size_t i = 1; i + 2 < generated.size(); ++i, ++pairs)  // not the ends, which may be cut words
      found += corpus_pairs.count({generated[i], generated[i + 1]});
  }
  return pairs > 0 ? static_cast<double>(found) / pairs : 0;
}

TEST(CorpusFit, SampledTextIsMadeOfTheCorpusWordPairs) {
  const double fitted = corpus_word_pairs(fitted_model("q8_0", true));
  const double random = corpus_word_pairs(fitted_model("q8_0", false));
  std::printf("word pairs found in the corpus: fitted %.2f, random weights %.2f\n", fitted, random);
  EXPECT_GE(fitted, 0.6);
  EXPECT_LE(random, 0.1);
}

TEST(CorpusFit, EveryMadeModelSaysItIsSynthetic) {
  for (bool fit : {true, false}) {
    auto file = model::gguf::Reader::open(fitted_model("q8_0", fit));
    const auto config = model::ModelConfig::from_gguf(file);
    EXPECT_NE(config.synthetic_note.find(fit ? "not trained" : "random"), std::string::npos) << config.synthetic_note;
  }
}

}  // namespace
}  // namespace orchard

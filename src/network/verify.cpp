#include "network/verify.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace orchard::network {

CheckResult check_output(model::Forward& forward, std::span<const model::TokenId> prompt,
                         std::span<const model::TokenId> output, const model::SamplerOptions& sampling) {
  CheckResult r;
  if (output.empty()) return r;
  ORCHARD_CHECK(!prompt.empty(), "a check needs the prompt");
  std::vector<model::TokenId> all(prompt.begin(), prompt.end());
  all.insert(all.end(), output.begin(), output.end());
  // The last output token predicts nothing we check: it need not be evaluated.
  const int32_t n = static_cast<int32_t>(all.size()) - 1;
  if (n > forward.n_ctx())
    throw Error(error_message("network", "check of {} tokens does not fit the context of {}", n, forward.n_ctx()));
  const int32_t vocab = forward.config().vocab_size;
  model::Sampler sampler(sampling, vocab);
  for (model::TokenId t : prompt) sampler.remember(t);  // as generate() does: the penalty sees the prompt
  const int32_t first = static_cast<int32_t>(prompt.size()) - 1;  // position whose logits give output[0]
  for (int32_t pos = 0; pos < n; pos += forward.max_batch()) {
    const int32_t len = std::min(forward.max_batch(), n - pos);
    forward.run(std::span<const model::TokenId>(all.data() + pos, len), nullptr, len, pos, true);
    for (int32_t i = std::max(0, first - pos); i < len; ++i) {
      const int64_t k = pos + i - first;  // output index this position predicts
      const model::TokenId token = output[k];
      const float* logits = forward.logits(i);
      bool ok;
      if (token < 0 || token >= vocab) {
        ok = false;
      } else if (sampling.temperature <= 0) {
        ok = logits[token] >= *std::max_element(logits, logits + vocab) - kGreedyTolerance;
      } else {
        auto support = sampler.support(logits);
        ok = std::any_of(support.begin(), support.end(), [&](const auto& c) { return c.first == token; });
      }
      if (!ok) return CheckResult{false, k, k};
      sampler.remember(token);
      r.checked = k + 1;
    }
  }
  return r;
}

}  // namespace orchard::network

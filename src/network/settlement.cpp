#include "network/settlement.h"

#include "network/placement.h"

namespace orchard::network {
namespace {

// Each older job weighs this much less in a node's delivered speed; its seat premium needs at
// least kDeliveryFloor of the speed its chip would give (the engine reaches about 0.6 of peak
// bandwidth, placement's estimate; half of that leaves room for prompt processing and the network).
constexpr double kDeliveryDecay = 0.8;
constexpr double kDeliveryFloor = 0.5;

double seconds_of(const CountedJob& job) {
  return job.elapsed_ms > 0 ? static_cast<double>(job.elapsed_ms) / 1000 : 0;
}

}  // namespace

Settlement::Settlement(double verify_fraction, uint64_t seed)
    : verify_fraction_(verify_fraction), rng_(seed ? seed : std::random_device{}()) {}

Settlement::Delivery Settlement::after(const std::string& node, const CountedJob& job) const {
  Delivery d;
  if (auto it = delivered_.find(node); it != delivered_.end()) d = it->second;
  const double seconds = seconds_of(job);
  d.tokens = d.tokens * kDeliveryDecay + (seconds > 0 ? static_cast<double>(job.completion_tokens) : 0);
  d.seconds = d.seconds * kDeliveryDecay + seconds;
  return d;
}

Price Settlement::price(const std::string& node, const Seller& seller, const CountedJob& job) {
  Price p;
  const double seconds = seconds_of(job);
  p.tok_s = seconds > 0 ? static_cast<double>(job.completion_tokens) / seconds : 0;
  const Delivery d = after(node, job);
  const double claimed =
      expected_tok_s(job.decode_bytes > 0 ? job.decode_bytes : job.model_bytes, seller.bandwidth_gbs, 1, 0);
  const bool delivers = d.seconds > 0 && d.tokens / d.seconds >= kDeliveryFloor * claimed;
  p.multiplier = delivers ? ledger::seat_multiplier(seller.seat, seller.tier) : 1.0;
  p.amount = ledger::job_credits(job.prompt_tokens + job.completion_tokens, job.model_bytes, p.multiplier);
  p.check = job.verifiable && verify_fraction_ > 0 &&
            std::uniform_real_distribution<double>(0, 1)(rng_) < verify_fraction_;
  return p;
}

void Settlement::settled(const std::string& node, const CountedJob& job) { delivered_[node] = after(node, job); }

int64_t Settlement::verifier_pay(int64_t job_tokens, int64_t model_bytes, const Seller& verifier) {
  return ledger::verifier_pay(job_tokens, model_bytes, ledger::seat_multiplier(verifier.seat, verifier.tier));
}

}  // namespace orchard::network

#pragma once
// What a completed job pays the node that ran it and costs its client, decided one way for the
// coordinator and for `orchard simulate` (which settles its virtual jobs through this class, so
// the earnings it reports are what the coordinator would pay). The rule for pods: a pod's job is
// paid, whole, to the member it was leased to (the pod's leader), at the leader's seat and tier.
// The leader is whom the coordinator leases to, hears from and holds to account (its lease, its
// spot checks, its fines); the members are machines whose owners formed the pod together (one
// hostfile) and share its pay among themselves as they agreed, which the coordinator can neither
// see nor verify. See docs/network.md.
#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>

#include "network/ledger.h"

namespace orchard::network {

// The holder as it is priced: its seat, the tier of its chip in the catalog, and the catalog's
// bandwidth for that chip (else its claim): the speed its seat premium is held to.
struct Seller {
  ledger::Seat seat = ledger::Seat::Shared;
  ledger::Tier tier = ledger::Tier::Base;
  double bandwidth_gbs = 0;
};

// A completion as counted by the coordinator (never as claimed by the node).
struct CountedJob {
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t model_bytes = 0;
  int64_t decode_bytes = 0;  // weights one decode step reads (MoE: its chosen experts)
  int64_t elapsed_ms = 0;    // from pickup to the result; 0 when unknown (a lease from before a restart)
  bool verifiable = false;   // token ids came with it: a spot check can confirm every counted token
};

struct Price {
  double multiplier = 1;  // the seat premium paid, or 1
  int64_t amount = 0;     // micro-credits to the holder, billed to the client
  double tok_s = 0;       // delivered on this job (0 when the time is unknown)
  bool check = false;     // held in escrow until a second node confirms it
};

class Settlement {
 public:
  // verify_fraction: the share of verifiable jobs spot-checked; seed 0: random draws.
  Settlement(double verify_fraction, uint64_t seed);

  // Prices a completion for `node`: a seat's premium over the shared rate is paid while the node
  // delivers (its recent jobs' counted tokens over their time, older jobs weighing less) at least
  // kDeliveryFloor of what its chip would, so claiming an Ultra earns nothing by itself. Draws
  // whether it is checked. Nothing is remembered until settled().
  Price price(const std::string& node, const Seller& seller, const CountedJob& job);
  // The completion was recorded (the store took it): it counts in the node's delivered speed.
  void settled(const std::string& node, const CountedJob& job);
  // A spot check's verifier's pay, at its own seat premium, for re-running `job_tokens`.
  static int64_t verifier_pay(int64_t job_tokens, int64_t model_bytes, const Seller& verifier);

 private:
  struct Delivery {
    double tokens = 0, seconds = 0;
  };
  Delivery after(const std::string& node, const CountedJob& job) const;
  double verify_fraction_;
  std::mt19937_64 rng_;
  std::unordered_map<std::string, Delivery> delivered_;
};

}  // namespace orchard::network

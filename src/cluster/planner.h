#pragma once
// Chooses single, pipeline, tensor, expert or hybrid and the split (and an expert split's replicas), from the cost model's predictions.
// Pure: model facts, machines and links in; a Plan with its reasons out. No sockets.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "cluster/cost_model.h"

namespace orchard::cluster {

struct PlanRequest {
  ModelFacts model;
  std::vector<MachineSpec> machines;
  // links[i][j]: the link between machines i and j (i != j). Empty: every pair uses
  // default_link.
  std::vector<std::vector<LinkSpec>> links;
  LinkSpec default_link{300, 10};
  Workload work;
  std::string link_source = "measured";
  // Only plans of this strategy (what-if comparisons, benchmarks); empty: all.
  std::optional<parallel::Strategy> only;
  // Only plans over exactly this many machines; 0: any number.
  int world = 0;  // said in the explanation: "measured", "what-if", ...
  // Splits of whole experts replicate this many experts per layer; unset: the planner chooses.
  std::optional<int32_t> expert_replicas;
};

struct Plan {
  parallel::Strategy strategy = parallel::Strategy::Single;
  std::vector<std::string> hosts;  // by rank
  std::vector<size_t> machine_indices;  // by rank: which of the request's machines
  Prediction predicted;
  double single_gen_tok_s = 0;     // the best one-machine prediction, 0 when none fits
  std::vector<Prediction> considered;  // every candidate that fits, best first
  std::string explanation;
};

// The fastest plan that fits (by predicted generation tok/s; fewer machines when a larger
// plan gains less than kFewerMachinesGain). Throws Error with the memory figures when nothing
// fits on all machines together.
Plan make_plan(const PlanRequest& request);

inline constexpr double kFewerMachinesGain = 1.05;
// An expert split replicates the fewest experts whose predicted generation rate is within this
// factor of the best number's (replicas take memory from the KV cache and bytes to ship).
inline constexpr double kReplicasGain = 1.02;

// {"strategy", "tp", "pp", "assignment": [{"host", "machine" (index into the request's machines:
//  host names may repeat), "layers": [b, e], "heads": [b, e]}],
//  "predicted": {"prompt_tok_s", "gen_tok_s", ...}, "explanation"}.
nlohmann::json plan_to_json(const Plan& plan);
// Several lines for people: the table of ranks and the explanation.
std::string format_plan(const Plan& plan);

}  // namespace orchard::cluster

#pragma once
// How often a mixture of experts chose each expert of each layer (`--expert-stats FILE`): a run
// adds its routing to the file, and an expert split reads it to give each rank an equal share of
// the choices instead of an equal number of experts.
//
// File: JSON {"architecture", "n_layers", "n_expert", "tokens", "counts": [[per expert] per layer]}
// (a dense layer's counts are zeros).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/group.h"
#include "model/config.h"

namespace orchard::parallel {

// The counts of `path` ([layer][expert]), empty when the file does not exist; throws
// FormatError naming the file when it is not such a file. Shapes are checked against the model
// by whoever uses them (Layout::validate, ExpertStats).
std::vector<std::vector<double>> read_expert_counts(const std::string& path);

class ExpertStats {
 public:
  // Zero counts for `config` (which must have experts; throws Error otherwise).
  explicit ExpertStats(const model::ModelConfig& config);
  // Adds the counts of `path` (when it exists); throws FormatError naming the file when they
  // were recorded for another shape of model.
  void add_file(const std::string& path);

  // One row's choice at `layer` (Forward::RoutingObserver's arguments).
  void record(int32_t layer, std::span<const int32_t> experts);
  // Collective: every rank's counts become the sum over the group (ranks that recorded nothing
  // hold zeros), so the ranks of each pipeline stage contribute their layers.
  void sum_over(comm::Group& group);
  // Writes the counts (through a temporary file, so a reader never sees half of them).
  void save(const std::string& path) const;

  const std::vector<std::vector<double>>& counts() const { return counts_; }
  // Rows routed: the choices at the first layer that has any, over the experts each row takes.
  double tokens() const;

 private:
  std::string architecture_;
  int32_t n_expert_used_ = 0;
  std::vector<std::vector<double>> counts_;
};

}  // namespace orchard::parallel

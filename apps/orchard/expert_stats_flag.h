#pragma once
// --expert-stats FILE on run and serve: the routing of this job is added to FILE's counts, and
// an expert split reads them first to place popular experts (parallel/expert_stats.h).
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/forward.h"
#include "parallel/expert_stats.h"
#include "parallel/layout.h"

namespace orchard::app {

inline void add_expert_stats_flag(CLI::App* cmd, std::string& path) {
  cmd->add_option("--expert-stats", path,
                  "Add this job's expert routing counts to FILE (JSON); --strategy expert (and hybrid) places experts by them")
      ->type_name("FILE");
}

// Counts the choices `forward` makes (when `observe`: one rank per stage, as the ranks of a
// group route alike) on top of the earlier counts in `path` (when `keep_earlier`: rank 0 only,
// the others start at zero and finish() sums them all). Nothing when path is empty.
class ExpertStatsRecorder {
 public:
  // `forwards`: every pass of this rank (serve: one per slot), run one at a time.
  ExpertStatsRecorder(const std::string& path, std::vector<model::Forward*> forwards, bool observe, bool keep_earlier)
      : path_(path) {
    if (path.empty()) return;
    stats_.emplace(forwards.front()->config());
    if (keep_earlier) stats_->add_file(path);
    if (observe)
      for (model::Forward* forward : forwards)
        forward->observe_routing([this](int32_t layer, int32_t, int32_t, std::span<const int32_t> experts) {
          stats_->record(layer, experts);
        });
  }
  ExpertStatsRecorder(const ExpertStatsRecorder&) = delete;  // the observers point here
  // Collective over `group` when given; rank 0 (or the only rank) writes the file.
  void finish(comm::Group* group) {
    if (!stats_) return;
    if (group) stats_->sum_over(*group);
    if (!group || group->rank() == 0) stats_->save(path_);
  }

 private:
  std::string path_;
  std::optional<parallel::ExpertStats> stats_;
};

// An expert split's placement from the counts in `path` (rank 0's are shared by the engine).
inline void place_by_expert_stats(const std::string& path, parallel::Layout& layout) {
  if (!path.empty() && (layout.strategy == parallel::Strategy::Expert || layout.strategy == parallel::Strategy::Hybrid))
    layout.expert_loads = parallel::read_expert_counts(path);
}

}  // namespace orchard::app

#include "parallel/expert_stats.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace orchard::parallel {

std::vector<std::vector<double>> read_expert_counts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  auto refuse = [&](const std::string& why) {
    return FormatError(error_message("parallel", "expert statistics {}: {}", path, why));
  };
  if (!doc.is_object() || !doc.contains("counts") || !doc["counts"].is_array())
    throw refuse("not an expert statistics file (expected a JSON object with \"counts\")");
  std::vector<std::vector<double>> counts;
  for (const auto& layer : doc["counts"]) {
    if (!layer.is_array()) throw refuse(fmt::format("layer {} is not a list of counts", counts.size()));
    auto& row = counts.emplace_back();
    for (const auto& count : layer) {
      if (!count.is_number() || !(count.get<double>() >= 0))
        throw refuse(fmt::format("count {} of layer {} is not a non-negative number", row.size(), counts.size() - 1));
      row.push_back(count.get<double>());
    }
    if (row.size() != counts.front().size())
      throw refuse(fmt::format("layer {} has {} counts, layer 0 has {}", counts.size() - 1, row.size(),
                               counts.front().size()));
  }
  return counts;
}

ExpertStats::ExpertStats(const model::ModelConfig& config)
    : architecture_(config.arch_name),
      n_expert_used_(config.n_expert_used),
      counts_(static_cast<size_t>(config.n_layers), std::vector<double>(static_cast<size_t>(config.n_expert), 0.0)) {
  if (config.n_expert == 0)
    throw Error(error_message("parallel", "expert statistics need a mixture of experts; this {} model has none",
                              config.arch_name));
}

void ExpertStats::add_file(const std::string& path) {
  const auto counts = read_expert_counts(path);
  if (counts.empty()) return;
  if (counts.size() != counts_.size() || counts.front().size() != counts_.front().size())
    throw FormatError(error_message("parallel", "expert statistics {}: recorded for {} layers of {} experts; this model "
                                                "has {} layers of {}",
                                    path, counts.size(), counts.front().size(), counts_.size(), counts_.front().size()));
  for (size_t l = 0; l < counts.size(); ++l)
    for (size_t e = 0; e < counts[l].size(); ++e) counts_[l][e] += counts[l][e];
}

void ExpertStats::record(int32_t layer, std::span<const int32_t> experts) {
  auto& row = counts_.at(static_cast<size_t>(layer));
  for (int32_t e : experts) row.at(static_cast<size_t>(e)) += 1;
}

void ExpertStats::sum_over(comm::Group& group) {
  // Float32 sums: counts stay exact up to 2^24 choices per expert.
  std::vector<float> flat;
  for (const auto& row : counts_) flat.insert(flat.end(), row.begin(), row.end());
  group.all_reduce(flat.data(), flat.size(), comm::DType::F32);
  size_t i = 0;
  for (auto& row : counts_)
    for (double& c : row) c = flat[i++];
}

double ExpertStats::tokens() const {
  for (const auto& row : counts_) {
    double sum = 0;
    for (double c : row) sum += c;
    if (sum > 0) return sum / n_expert_used_;
  }
  return 0;
}

void ExpertStats::save(const std::string& path) const {
  const nlohmann::json doc = {{"architecture", architecture_},
                              {"n_layers", counts_.size()},
                              {"n_expert", counts_.front().size()},
                              {"tokens", tokens()},
                              {"counts", counts_}};
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    out << doc.dump() << "\n";
    if (!out) throw Error(error_message("parallel", "cannot write expert statistics to {}", temporary));
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    throw Error(error_message("parallel", "cannot replace {} with the new expert statistics", path));
}

}  // namespace orchard::parallel

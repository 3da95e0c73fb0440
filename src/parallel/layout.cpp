#include "parallel/layout.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "core/error.h"

namespace orchard::parallel {

Strategy parse_strategy(const std::string& name) {
  if (name == "single") return Strategy::Single;
  if (name == "pipeline") return Strategy::Pipeline;
  if (name == "tensor") return Strategy::Tensor;
  if (name == "hybrid") return Strategy::Hybrid;
  if (name == "expert") return Strategy::Expert;
  throw Error(error_message("parallel", "unknown strategy '{}'; known: single, pipeline, tensor, hybrid, expert", name));
}

std::string strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::Single: return "single";
    case Strategy::Pipeline: return "pipeline";
    case Strategy::Tensor: return "tensor";
    case Strategy::Hybrid: return "hybrid";
    case Strategy::Expert: return "expert";
  }
  return "?";
}

Layout Layout::make(Strategy strategy, int world, int tp) {
  Layout l;
  l.strategy = strategy;
  switch (strategy) {
    case Strategy::Single:
      if (world != 1) throw Error(error_message("parallel", "strategy single runs on one rank, not {}", world));
      break;
    case Strategy::Pipeline: l.pp = world; break;
    case Strategy::Tensor: l.tp = world; break;
    case Strategy::Hybrid:
      if (tp < 1 || world % tp != 0)
        throw Error(error_message("parallel", "hybrid needs --tp dividing the world of {} (got tp {})", world, tp));
      l.tp = tp;
      l.pp = world / tp;
      break;
    case Strategy::Expert:
      if (tp < 0 || (tp > 0 && world % tp != 0))
        throw Error(error_message("parallel", "expert needs --tp dividing the world of {} (got tp {})", world, tp));
      l.tp = tp > 0 ? tp : world;
      l.pp = world / l.tp;
      break;
  }
  return l;
}

void Layout::validate(const model::ModelConfig& config, int world) const {
  if (tp * pp != world)
    throw Error(error_message("parallel", "tp {} × pp {} = {} ranks, but the world has {}", tp, pp, tp * pp, world));
  if (pp > config.n_layers)
    throw Error(error_message("parallel", "{} pipeline stages for a model of {} layers", pp, config.n_layers));
  if (tp > config.n_heads)
    throw Error(error_message("parallel", "{} tensor ranks for a model of {} attention heads", tp, config.n_heads));
  if (!stage_weights.empty() && static_cast<int>(stage_weights.size()) != pp)
    throw Error(error_message("parallel", "{} stage weights for {} stages", stage_weights.size(), pp));
  if (!tensor_weights.empty() && static_cast<int>(tensor_weights.size()) != tp)
    throw Error(error_message("parallel", "{} tensor weights for {} tensor ranks", tensor_weights.size(), tp));
  if (strategy == Strategy::Expert && config.n_expert == 0)
    throw Error(error_message("parallel", "strategy expert splits the experts of a mixture of experts; {} has none "
                                          "(use tensor)",
                              config.name.empty() ? config.arch_name : config.name));
  if (splits_experts(config)) {
    if (tp > config.n_expert)
      throw Error(error_message("parallel", "{} expert-parallel ranks for a model of {} experts per layer", tp,
                                config.n_expert));
    if (tp > kMaxExpertGroup)
      throw Error(error_message("parallel", "{} expert-parallel ranks in one group; at most {} (use --tp to form "
                                            "pipeline stages of smaller groups)",
                                tp, kMaxExpertGroup));
  }
  if (expert_replicas < 0 || expert_replicas > config.n_expert)
    throw Error(error_message("parallel", "{} replicated experts per layer; the model has {}", expert_replicas,
                              config.n_expert));
  if (expert_replicas > 0 && !splits_experts(config))
    throw Error(error_message("parallel", "replicated experts are for an expert split, not {}{} (a hybrid split of a "
                                          "mixture of experts takes them too)",
                              strategy_name(strategy), config.n_expert == 0 ? " of a dense model" : ""));
  if (!expert_loads.empty()) {
    if (static_cast<int32_t>(expert_loads.size()) != config.n_layers)
      throw Error(error_message("parallel", "expert statistics for {} layers; the model has {}", expert_loads.size(),
                                config.n_layers));
    for (size_t l = 0; l < expert_loads.size(); ++l)
      if (!expert_loads[l].empty() && static_cast<int32_t>(expert_loads[l].size()) != config.n_expert)
        throw Error(error_message("parallel", "expert statistics of layer {} count {} experts; the model has {}", l,
                                  expert_loads[l].size(), config.n_expert));
  }
}

std::vector<int64_t> proportional_split(int64_t total, size_t parts, const std::vector<double>& weights,
                                        int64_t minimum) {
  std::vector<double> w = weights.empty() ? std::vector<double>(parts, 1.0) : weights;
  ORCHARD_CHECK(w.size() == parts && parts > 0, "{} weights for {} parts", w.size(), parts);
  for (double x : w)
    if (!(x > 0)) throw Error(error_message("parallel", "split weights must be positive, got {}", x));
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<int64_t> counts(parts);
  // Largest-remainder rounding of the cumulative boundaries keeps the sum exact.
  int64_t previous = 0;
  double cumulative = 0;
  for (size_t i = 0; i < parts; ++i) {
    cumulative += w[i];
    int64_t boundary = i + 1 == parts ? total : static_cast<int64_t>(std::llround(total * cumulative / sum));
    counts[i] = boundary - previous;
    previous = boundary;
  }
  // Give every part its minimum, taking from the largest.
  if (total >= minimum * static_cast<int64_t>(parts)) {
    for (size_t i = 0; i < parts; ++i) {
      while (counts[i] < minimum) {
        size_t largest = static_cast<size_t>(std::max_element(counts.begin(), counts.end()) - counts.begin());
        --counts[largest];
        ++counts[i];
      }
    }
  }
  return counts;
}

namespace {

// [begin, end) of part `index` of a split.
std::pair<int64_t, int64_t> range_of(const std::vector<int64_t>& counts, int index) {
  int64_t begin = 0;
  for (int i = 0; i < index; ++i) begin += counts[static_cast<size_t>(i)];
  return {begin, begin + counts[static_cast<size_t>(index)]};
}

// Part `index` of `loads.size()` items split into contiguous runs whose summed loads follow
// `weights` (equal when empty), at least one item each: each boundary is the one whose
// cumulative load comes closest to its target.
std::pair<int64_t, int64_t> load_range(const std::vector<double>& loads, size_t parts, const std::vector<double>& weights,
                                       int index) {
  const auto n = static_cast<int64_t>(loads.size());
  std::vector<double> w = weights.empty() ? std::vector<double>(parts, 1.0) : weights;
  // Every expert counts at least a little, so ones never chosen in the statistics still spread.
  std::vector<double> cumulative(loads.size() + 1, 0.0);
  for (size_t e = 0; e < loads.size(); ++e) cumulative[e + 1] = cumulative[e] + loads[e] + 1;
  const double total = cumulative.back(), weight_sum = std::accumulate(w.begin(), w.end(), 0.0);
  int64_t begin = 0, end = 0;
  double weight_so_far = 0;
  for (int p = 0; p <= index; ++p) {
    begin = end;
    weight_so_far += w[static_cast<size_t>(p)];
    const int64_t last = n - static_cast<int64_t>(parts) + p + 1;  // leave one item for each later part
    if (p + 1 == static_cast<int>(parts)) {
      end = n;
      break;
    }
    const double target = total * weight_so_far / weight_sum;
    end = begin + 1;
    for (int64_t b = begin + 2; b <= last; ++b)
      if (std::abs(cumulative[static_cast<size_t>(b)] - target) < std::abs(cumulative[static_cast<size_t>(end)] - target))
        end = b;
  }
  return {begin, end};
}

}  // namespace

model::Shard shard_for_rank(const model::ModelConfig& c, const Layout& layout, int rank) {
  ORCHARD_CHECK(rank >= 0 && rank < layout.world(), "rank {} of {}", rank, layout.world());
  model::Shard s;
  const int stage = layout.stage_of(rank), t = layout.tensor_rank_of(rank);
  const auto layers = range_of(proportional_split(c.n_layers, static_cast<size_t>(layout.pp), layout.stage_weights), stage);
  s.layer_begin = static_cast<int32_t>(layers.first);
  s.layer_end = static_cast<int32_t>(layers.second);
  s.has_embedding = stage == 0;
  s.has_output = stage == layout.pp - 1;

  const size_t tp = static_cast<size_t>(layout.tp);
  const int32_t group = c.n_heads / c.n_kv_heads;
  if (c.n_kv_heads % layout.tp == 0) {
    const auto kv = range_of(proportional_split(c.n_kv_heads, tp, layout.tensor_weights), t);
    s.kv_head_begin = static_cast<int32_t>(kv.first);
    s.kv_head_end = static_cast<int32_t>(kv.second);
    s.head_begin = s.kv_head_begin * group;
    s.head_end = s.kv_head_end * group;
  } else {
    const auto q = range_of(proportional_split(c.n_heads, tp, layout.tensor_weights), t);
    s.head_begin = static_cast<int32_t>(q.first);
    s.head_end = static_cast<int32_t>(q.second);
    s.kv_head_begin = s.head_begin / group;
    s.kv_head_end = (s.head_end + group - 1) / group;
  }

  // FFN rows (dense, and every expert's alike) in units of whole quantization blocks of the
  // down projection's columns where each rank gets one.
  auto ff_rows = [&](int32_t width) -> std::pair<int32_t, int32_t> {
    const int64_t unit = width % 256 == 0 && width / 256 >= layout.tp ? 256 : 32;
    const auto ff = range_of(proportional_split(width / unit, tp, layout.tensor_weights), t);
    return {static_cast<int32_t>(ff.first * unit), t == layout.tp - 1 ? width : static_cast<int32_t>(ff.second * unit)};
  };
  std::tie(s.ff_begin, s.ff_end) = ff_rows(c.n_ff);
  s.expert_end = c.n_expert;
  if (layout.splits_experts(c)) {
    // Whole experts: all their rows, a run of them.
    s.expert_ff_end = c.n_ff_exp;
    const auto even = proportional_split(c.n_expert, tp, layout.tensor_weights);
    const auto experts = range_of(even, t);
    s.expert_begin = static_cast<int32_t>(experts.first);
    s.expert_end = static_cast<int32_t>(experts.second);
    // Member m's run of layer l's experts.
    auto run_of = [&](int m, size_t l) {
      const bool measured = l < layout.expert_loads.size() && !layout.expert_loads[l].empty();
      return measured ? load_range(layout.expert_loads[l], tp, layout.tensor_weights, m) : range_of(even, m);
    };
    for (size_t l = 0; l < layout.expert_loads.size(); ++l) {
      const auto run = run_of(t, l);
      s.layer_experts.emplace_back(static_cast<int32_t>(run.first), static_cast<int32_t>(run.second));
    }
    s.expert_member = t;
    s.expert_holders.resize(static_cast<size_t>(c.n_layers));
    for (size_t l = 0; l < static_cast<size_t>(c.n_layers); ++l) {
      auto& holders = s.expert_holders[l];
      holders.assign(static_cast<size_t>(c.n_expert), 0);
      // Each expert's place in its home run, for spreading replicas over the runs.
      std::vector<int64_t> place(static_cast<size_t>(c.n_expert));
      for (int m = 0; m < layout.tp; ++m) {
        const auto [begin, end] = run_of(m, l);
        for (int64_t e = begin; e < end; ++e) {
          holders[static_cast<size_t>(e)] = uint64_t{1} << m;
          place[static_cast<size_t>(e)] = (e - begin) * layout.tp + m;
        }
      }
      if (layout.expert_replicas == 0) continue;
      // The most chosen experts (by the statistics; without, the first of each run in turn)
      // are held by every member.
      const bool measured = l < layout.expert_loads.size() && !layout.expert_loads[l].empty();
      std::vector<int32_t> order(static_cast<size_t>(c.n_expert));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
        const double la = measured ? layout.expert_loads[l][static_cast<size_t>(a)] : 0;
        const double lb = measured ? layout.expert_loads[l][static_cast<size_t>(b)] : 0;
        if (la != lb) return la > lb;
        return place[static_cast<size_t>(a)] < place[static_cast<size_t>(b)];
      });
      const uint64_t everyone = layout.tp == 64 ? ~uint64_t{0} : (uint64_t{1} << layout.tp) - 1;
      for (int32_t i = 0; i < std::min(layout.expert_replicas, c.n_expert); ++i)
        holders[static_cast<size_t>(order[static_cast<size_t>(i)])] = everyone;
    }
  } else if (c.n_ff_exp > 0) {
    std::tie(s.expert_ff_begin, s.expert_ff_end) = ff_rows(c.n_ff_exp);
  }
  // Shared experts are one FFN every token visits: split by rows in either split, so the FFN's
  // all-reduce counts them once.
  if (c.n_expert_shared > 0) std::tie(s.shared_ff_begin, s.shared_ff_end) = ff_rows(c.n_ff_exp * c.n_expert_shared);

  const auto vocab = range_of(proportional_split(c.vocab_size, tp, layout.tensor_weights), t);
  s.vocab_begin = static_cast<int32_t>(vocab.first);
  s.vocab_end = static_cast<int32_t>(vocab.second);
  return s;
}

}  // namespace orchard::parallel

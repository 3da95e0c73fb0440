#include "cluster/planner.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"

namespace orchard::cluster {
namespace {

using parallel::Layout;
using parallel::Strategy;

double gb(double bytes) { return bytes / 1e9; }

struct Candidate {
  Prediction prediction;
  std::vector<size_t> machines;  // indices into the request, by rank
};

// The slowest figure over the pairs `pair_counts` selects (by rank): collectives wait for the
// worst link.
template <typename Pred>
LinkSpec worst_link(const PlanRequest& request, const std::vector<size_t>& subset, Pred pair_counts) {
  LinkSpec worst{0, 0};
  bool first = true;
  for (size_t a = 0; a < subset.size(); ++a)
    for (size_t b = a + 1; b < subset.size(); ++b) {
      if (!pair_counts(a, b)) continue;
      const LinkSpec& l = request.links.empty() ? request.default_link : request.links[subset[a]][subset[b]];
      worst.latency_us = std::max(worst.latency_us, l.latency_us);
      // 0 Gbps means unlimited: it only counts when every pair is unlimited.
      if (l.gbps > 0) worst.gbps = first || worst.gbps == 0 ? l.gbps : std::min(worst.gbps, l.gbps);
      first = false;
    }
  return worst;
}

std::vector<double> weights_by(const PlanRequest& request, const std::vector<size_t>& subset, bool memory) {
  std::vector<double> w;
  for (size_t i : subset) w.push_back(memory ? request.machines[i].memory_gb : request.machines[i].memory_bw_gbs);
  return w;
}

// Per stage, the sum of its machines' figures (hybrid).
std::vector<double> stage_sums(const std::vector<double>& per_rank, int tp) {
  std::vector<double> sums(per_rank.size() / static_cast<size_t>(tp), 0.0);
  for (size_t r = 0; r < per_rank.size(); ++r) sums[r / static_cast<size_t>(tp)] += per_rank[r];
  return sums;
}

// Replicated experts per layer worth trying: none, then 1/16 to all of them.
std::vector<int32_t> replica_options(const model::ModelConfig& c, const Layout& layout) {
  std::vector<int32_t> options = {0};
  if (!layout.splits_experts(c) || layout.tp < 2) return options;
  for (int32_t part : {16, 8, 4, 2, 1})
    if (c.n_expert / part > options.back()) options.push_back(c.n_expert / part);
  return options;
}

// The prediction for `layout` (its replicas chosen here when it splits experts), or nullopt
// when it does not fit or cannot split the model. Replicated experts cost memory and shipping
// and buy balance: the fewest whose generation rate is within kReplicasGain of the best that fits.
std::optional<Prediction> predict_fitting(const PlanRequest& request, Layout layout, const std::vector<MachineSpec>& ms,
                                          const LinkSpec& tensor_link, const LinkSpec& stage_link) {
  std::vector<Prediction> fitting;
  const std::vector<int32_t> options = request.expert_replicas && layout.splits_experts(request.model.config)
                                          ? std::vector<int32_t>{*request.expert_replicas}
                                          : replica_options(request.model.config, layout);
  for (int32_t replicas : options) {
    layout.expert_replicas = replicas;
    try {
      Prediction p = predict(request.model, layout, ms, tensor_link, stage_link, request.work);
      if (p.fits) fitting.push_back(std::move(p));
    } catch (const Error&) {
      return std::nullopt;  // the model cannot be split this way (more ranks than heads, ...)
    }
  }
  if (fitting.empty()) return std::nullopt;
  double best = 0;
  for (const Prediction& p : fitting) best = std::max(best, p.gen_tok_s);
  for (Prediction& p : fitting)
    if (p.gen_tok_s * kReplicasGain >= best) return std::move(p);
  return std::nullopt;
}

void try_layout(const PlanRequest& request, const std::vector<size_t>& subset, Layout layout,
                std::vector<Candidate>& out) {
  if (request.only && *request.only != layout.strategy) return;
  if (request.world > 0 && request.world != layout.world()) return;
  std::vector<MachineSpec> ms;
  for (size_t i : subset) ms.push_back(request.machines[i]);
  // Equal split, split by speed, split by memory: machines that differ need one of the last two.
  for (int variant = 0; variant < 3; ++variant) {
    if (variant > 0) {
      const std::vector<double> w = weights_by(request, subset, variant == 2);
      if (layout.tp == 1) layout.stage_weights = w;
      else if (layout.pp == 1) layout.tensor_weights = w;
      else layout.stage_weights = stage_sums(w, layout.tp);
    }
    const int tp = layout.tp;
    const LinkSpec tensor_link = worst_link(request, subset, [&](size_t a, size_t b) { return a / tp == b / tp; });
    const LinkSpec stage_link = worst_link(request, subset, [&](size_t a, size_t b) { return a / tp != b / tp; });
    try {
      layout.validate(request.model.config, layout.world());
    } catch (const Error&) {
      return;  // the model cannot be split this way (more ranks than heads, ...)
    }
    if (auto p = predict_fitting(request, layout, ms, tensor_link, stage_link)) out.push_back({std::move(*p), subset});
    if (layout.world() == 1) return;
  }
}

// `subset` reordered so that each run of `group` machines (a hybrid's group inside a stage)
// holds machines joined by the fastest links: from the first machine left, it and the
// group - 1 others nearest to it (lowest latency, then most bandwidth). Pods of low-latency
// links become groups, the slower links fall between the stages.
std::vector<size_t> grouped_by_links(const PlanRequest& request, const std::vector<size_t>& subset, int group) {
  if (request.links.empty()) return subset;
  std::vector<size_t> left = subset, out;
  while (!left.empty()) {
    const size_t first = left.front();
    left.erase(left.begin());
    std::stable_sort(left.begin(), left.end(), [&](size_t a, size_t b) {
      const LinkSpec &x = request.links[first][a], &y = request.links[first][b];
      if (x.latency_us != y.latency_us) return x.latency_us < y.latency_us;
      return (x.gbps == 0 ? INFINITY : x.gbps) > (y.gbps == 0 ? INFINITY : y.gbps);
    });
    out.push_back(first);
    const auto take = std::min(left.size(), static_cast<size_t>(group - 1));
    out.insert(out.end(), left.begin(), left.begin() + static_cast<std::ptrdiff_t>(take));
    left.erase(left.begin(), left.begin() + static_cast<std::ptrdiff_t>(take));
  }
  return out;
}

std::string strategy_words(const Prediction& p, const model::ModelConfig& config) {
  const Layout& l = p.layout;
  switch (l.strategy) {
    case Strategy::Single: return "a single machine";
    case Strategy::Pipeline: return fmt::format("a pipeline of {} stages", l.pp);
    case Strategy::Tensor: return fmt::format("a tensor split over {} machines", l.tp);
    case Strategy::Hybrid:
      return l.splits_experts(config) ? fmt::format("a hybrid of {} pipeline stages × {} expert-parallel ranks", l.pp, l.tp)
                 : fmt::format("a hybrid of {} pipeline stages × {} tensor ranks", l.pp, l.tp);
    case Strategy::Expert:
      return l.pp == 1 ? fmt::format("an expert split over {} machines", l.tp)
                       : fmt::format("{} pipeline stages × {} expert-parallel ranks", l.pp, l.tp);
  }
  return "?";
}

std::string link_words(const LinkSpec& l) {
  return l.gbps > 0 ? fmt::format("{:g} µs / {:g} Gb/s links", l.latency_us, l.gbps)
                    : fmt::format("{:g} µs links", l.latency_us);
}

std::string need_words(const RankCost& r) {
  return fmt::format("{:.1f} GB (weights {:.1f} + KV cache {:.1f} + runtime {:.1f})", gb(r.need_bytes()),
                     gb(r.weight_bytes), gb(r.kv_bytes), gb(r.overhead_bytes));
}

std::string explain(const PlanRequest& request, const Candidate& chosen, const std::vector<Candidate>& fitting,
                     const RankCost& whole, const Candidate* more_machines) {
  const ModelFacts& m = request.model;
  const Prediction& p = chosen.prediction;
  std::string text = fmt::format(
      "{}: {:.1f} GB of weights, {} layers, {} heads ({} KV heads); needs {} on one machine at {} positions of context. ",
      m.name, gb(m.total_bytes()), m.config.n_layers, m.config.n_heads, m.config.n_kv_heads, need_words(whole),
      request.work.context);
  const MachineSpec* roomiest = &request.machines.front();
  for (const MachineSpec& ms : request.machines)
    if (ms.memory_gb > roomiest->memory_gb) roomiest = &ms;
  // `whole` is the model on the roomiest machine; a single machine may still be left out of the
  // candidates by a restriction (--world, --strategy), which is not the same as not fitting.
  const bool fits_one = whole.need_bytes() <= whole.usable_bytes;
  const bool single_considered =
      std::any_of(fitting.begin(), fitting.end(), [](const Candidate& c) { return c.machines.size() == 1; });
  if (!fits_one)
    text += fmt::format("That does not fit one machine: the roomiest, {}, offers {:.1f} GB ({:.0f}% of {:g} GB). ",
                        roomiest->host, roomiest->memory_gb * kUsableMemoryFraction, kUsableMemoryFraction * 100,
                        roomiest->memory_gb);
  else if (!single_considered)
    text += fmt::format("It would fit one machine ({} offers {:.1f} GB); this plan was asked for splits only. ",
                        roomiest->host, roomiest->memory_gb * kUsableMemoryFraction);
  const std::string links = p.layout.world() == 1 ? "no links"
                            : p.layout.tp == 1     ? link_words(p.stage_link)
                            : p.layout.pp == 1     ? link_words(p.link)
                                                   : link_words(p.link) + " inside groups, " +
                                                     link_words(p.stage_link) + " between stages";
  text += fmt::format("Chosen: {} ({}, {}), predicting {:.1f} tok/s generation and {:.0f} tok/s prompt. ",
                      strategy_words(p, m.config), links, request.link_source, p.gen_tok_s, p.prompt_tok_s);
  const double per_token_sums = 2.0 * m.config.n_layers;
  if (m.config.n_expert > 0)
    text += fmt::format("A mixture of experts: a token uses {} of {} experts per layer, {:.0f}% of the FFN's weights. ",
                        m.config.n_expert_used, m.config.n_expert, m.ffn_active_fraction * 100);
  if (p.layout.splits_experts(m.config)) {
    const model::Shard& s = p.ranks.front().shard;
    const int32_t replicas = p.layout.expert_replicas;
    text += fmt::format("Each machine holds whole experts ({} of {} on the first{}) with its share of the attention "
                        "heads, and computes only the chosen experts it holds: a token's choices fall unevenly, so "
                        "the busiest machine of a group paces each step ({:.2f}× the mean share of a step's choices; "
                        "{:.1f} ms of weight reads); attention and experts are summed in {:.0f} all-reduces per token "
                        "({:.1f} ms, {:.0f} KB on the wire). ",
                        s.n_experts_held(s.layer_begin, m.config.n_expert), m.config.n_expert,
                        replicas > 0 ? fmt::format(", {} of them replicated on every machine of the group", replicas) : "",
                        p.ranks.front().expert_balance, p.gen_compute_ms, per_token_sums, p.allreduce_ms,
                        p.wire_bytes_per_token / 1e3);
    // What the replicas buy, against the same split without them.
    std::vector<MachineSpec> ms;
    for (size_t i : chosen.machines) ms.push_back(request.machines[i]);
    Layout plain = p.layout;
    plain.expert_replicas = 0;
    const Prediction without = predict(m, plain, ms, p.link, p.stage_link, request.work);
    if (replicas > 0)
      text += fmt::format("Replicas: {} experts of each layer (the most chosen by --expert-stats, else the first of each "
                          "machine's run in turn) are held by every machine of its group, for {:.1f} GB more "
                          "per machine, and a token's choice of one goes to the machine with fewer of the step's "
                          "choices: with choices drawn evenly the busiest machine's share falls from {:.2f}× the mean "
                          "to {:.2f}×, {:.1f} against {:.1f} tok/s without them (more replicas would gain under "
                          "{:.0f}%). ",
                          replicas,
                          gb(p.ranks.front().weight_bytes - without.ranks.front().weight_bytes),
                          without.ranks.front().expert_balance, p.ranks.front().expert_balance, p.gen_tok_s,
                          without.gen_tok_s, (kReplicasGain - 1) * 100);
    else if (p.layout.tp > 1)
      text += fmt::format("No replicated experts: {}. ",
                          without.ranks.front().expert_balance < 1 + (kReplicasGain - 1)
                              ? "the choices already fall evenly"
                              : "none fits beside the model, or none gains " +
                                    fmt::format("{:.0f}%", (kReplicasGain - 1) * 100));
  }
  if (p.layout.strategy == Strategy::Tensor || (p.layout.strategy == Strategy::Hybrid && !p.layout.splits_experts(m.config))) {
    text += fmt::format("Each machine reads only its share of the weights ({:.1f} ms per token) and the {:.0f} all-reduces "
                        "per token cost {:.1f} ms. ",
                        p.gen_compute_ms, per_token_sums, p.allreduce_ms);
  }
  if (p.layout.strategy == Strategy::Pipeline)
    text += fmt::format("Stages run one after another for each generated token ({:.1f} ms of weight reads in all, "
                        "{:.2f} ms of transfers), so a pipeline splits the memory, not the time per token; prompts "
                        "flow through the stages in chunks. ",
                        p.gen_compute_ms, p.gen_comm_ms);
  // Why not tensor, when tensor was possible but lost.
  if (p.layout.strategy != Strategy::Tensor) {
    const Candidate* tensor = nullptr;
    for (const Candidate& c : fitting)
      if (c.prediction.layout.strategy == Strategy::Tensor && (!tensor || c.prediction.gen_tok_s > tensor->prediction.gen_tok_s))
        tensor = &c;
    if (tensor) {
      const Prediction& t = tensor->prediction;
      text += fmt::format("A tensor split over {} machines would spend {:.1f} ms per token in {:.0f} all-reduces on "
                          "these {} against {:.1f} ms of weight reads, predicting {:.1f} tok/s. ",
                          t.layout.tp, t.allreduce_ms, per_token_sums, link_words(t.link), t.gen_compute_ms, t.gen_tok_s);
    }
  }
  // Why not experts, when an expert split was possible but lost.
  if (p.layout.strategy != Strategy::Expert) {
    const Candidate* expert = nullptr;
    for (const Candidate& c : fitting)
      if (c.prediction.layout.strategy == Strategy::Expert && c.prediction.layout.pp == 1 &&
          (!expert || c.prediction.gen_tok_s > expert->prediction.gen_tok_s))
        expert = &c;
    if (expert) {
      const Prediction& e = expert->prediction;
      text += fmt::format("An expert split over {} machines moves as many bytes ({:.0f} KB per token) but its busier "
                          "machine reads {:.1f} ms of weights per token, predicting {:.1f} tok/s generation and {:.0f} "
                          "tok/s prompt. ",
                          e.layout.tp, e.wire_bytes_per_token / 1e3, e.gen_compute_ms, e.gen_tok_s, e.prompt_tok_s);
    }
  }
  if (p.layout.world() > 1 && single_considered) {
    double single = 0;
    for (const Candidate& c : fitting)
      if (c.machines.size() == 1) single = std::max(single, c.prediction.gen_tok_s);
    text += fmt::format("That is {:.2f}× the best single machine ({:.1f} tok/s). ", p.gen_tok_s / single, single);
  }
  if (more_machines)
    text += fmt::format("{} would predict {:.1f} tok/s, only {:.0f}% more, so fewer machines are used. ",
                        strategy_words(more_machines->prediction, m.config), more_machines->prediction.gen_tok_s,
                        (more_machines->prediction.gen_tok_s / p.gen_tok_s - 1) * 100);
  if (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace

Plan make_plan(const PlanRequest& request) {
  const size_t n = request.machines.size();
  if (n == 0) throw Error(error_message("cluster", "plan: no machines to plan for"));
  if (!request.links.empty())
    ORCHARD_CHECK(request.links.size() == n, "link matrix of {} rows for {} machines", request.links.size(), n);

  std::vector<Candidate> fitting;
  for (size_t i = 0; i < n; ++i) try_layout(request, {i}, Layout::make(Strategy::Single, 1), fitting);
  // Two ways to pick k of n machines: the fastest first, the roomiest first.
  for (bool by_memory : {false, true}) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const MachineSpec &x = request.machines[a], &y = request.machines[b];
      return by_memory ? x.memory_gb > y.memory_gb : x.memory_bw_gbs > y.memory_bw_gbs;
    });
    for (size_t k = 2; k <= n; ++k) {
      const std::vector<size_t> subset(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
      const int world = static_cast<int>(k);
      try_layout(request, subset, Layout::make(Strategy::Pipeline, world), fitting);
      try_layout(request, subset, Layout::make(Strategy::Tensor, world), fitting);
      // Hybrid: groups inside pipeline stages (a mixture of experts' groups split its experts),
      // in this order and with the fastest-linked machines grouped together.
      for (int tp = 2; tp < world; ++tp) {
        if (world % tp != 0) continue;
        try_layout(request, subset, Layout::make(Strategy::Hybrid, world, tp), fitting);
        const std::vector<size_t> pods = grouped_by_links(request, subset, tp);
        if (pods != subset) try_layout(request, pods, Layout::make(Strategy::Hybrid, world, tp), fitting);
      }
      if (request.model.config.n_expert > 0) try_layout(request, subset, Layout::make(Strategy::Expert, world), fitting);
    }
  }

  // What the whole model needs on one rank, for the explanation and the refusal.
  MachineSpec roomiest = *std::max_element(request.machines.begin(), request.machines.end(),
                                           [](const MachineSpec& a, const MachineSpec& b) { return a.memory_gb < b.memory_gb; });
  const RankCost whole = predict(request.model, Layout::make(Strategy::Single, 1), {roomiest}, {}, request.work).ranks[0];

  if (fitting.empty() && (request.only || request.world > 0))
    throw Error(error_message("cluster", "plan refused: no {} plan{} fits {} ({} on one machine)",
                              request.only ? parallel::strategy_name(*request.only) : std::string("possible"),
                              request.world > 0 ? fmt::format(" over {} machines", request.world) : std::string(),
                              request.model.name, need_words(whole)));
  if (fitting.empty()) {
    double usable = 0, total = 0;
    std::string per_machine;
    for (const MachineSpec& ms : request.machines) {
      usable += ms.memory_gb * kUsableMemoryFraction;
      total += ms.memory_gb;
      per_machine += fmt::format("{}{} {:.1f} of {:g} GB", per_machine.empty() ? "" : ", ", ms.host,
                                 ms.memory_gb * kUsableMemoryFraction, ms.memory_gb);
    }
    throw Error(error_message(
        "cluster",
        "plan refused: {} needs {} at {} positions of context, and no split over the {} machine(s) fits: together they "
        "offer {:.1f} GB usable of {:g} GB ({}; {:.0f}% of each machine's memory is usable). Add machines with more "
        "memory, shorten the context (--ctx) or use a smaller quantization.",
        request.model.name, need_words(whole), request.work.context, n, usable, total, per_machine,
        kUsableMemoryFraction * 100));
  }

  std::stable_sort(fitting.begin(), fitting.end(), [](const Candidate& a, const Candidate& b) {
    return a.prediction.gen_tok_s > b.prediction.gen_tok_s;
  });
  const Candidate* best = &fitting.front();
  const Candidate* more_machines = nullptr;
  // Prefer fewer machines when the larger plan gains less than 5%.
  for (const Candidate& c : fitting) {
    if (c.machines.size() < best->machines.size() && c.prediction.gen_tok_s * kFewerMachinesGain >= fitting.front().prediction.gen_tok_s) {
      more_machines = &fitting.front();
      best = &c;
    }
  }

  Plan plan;
  plan.strategy = best->prediction.layout.strategy;
  plan.machine_indices = best->machines;
  for (size_t i : best->machines) plan.hosts.push_back(request.machines[i].host);
  plan.predicted = best->prediction;
  for (const Candidate& c : fitting) {
    if (c.machines.size() == 1) plan.single_gen_tok_s = std::max(plan.single_gen_tok_s, c.prediction.gen_tok_s);
    // The best variant of each shape only (fitting is sorted best first).
    const Layout& l = c.prediction.layout;
    const bool seen = std::any_of(plan.considered.begin(), plan.considered.end(), [&](const Prediction& q) {
      return q.layout.strategy == l.strategy && q.layout.tp == l.tp && q.layout.pp == l.pp;
    });
    if (!seen) plan.considered.push_back(c.prediction);
  }
  plan.explanation = explain(request, *best, fitting, whole, more_machines);
  return plan;
}

nlohmann::json plan_to_json(const Plan& plan) {
  using nlohmann::json;
  const Prediction& p = plan.predicted;
  json assignment = json::array();
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const RankCost& rc = p.ranks[r];
    json a = {{"host", plan.hosts[r]}, {"machine", plan.machine_indices[r]}, {"rank", r}};
    if (p.layout.pp > 1 || p.layout.world() == 1) a["layers"] = {rc.shard.layer_begin, rc.shard.layer_end};
    if (p.layout.tp > 1) a["heads"] = {rc.shard.head_begin, rc.shard.head_end};
    if (!rc.shard.expert_holders.empty()) {  // whole experts: expert splits, hybrid ones of a mixture of experts
      const auto experts = rc.shard.experts_of(rc.shard.layer_begin);
      a["experts"] = {experts.first, experts.second};
    }
    a["memory_gb"] = {{"need", gb(rc.need_bytes())}, {"weights", gb(rc.weight_bytes)}, {"kv_cache", gb(rc.kv_bytes)},
                      {"usable", gb(rc.usable_bytes)}};
    assignment.push_back(std::move(a));
  }
  json considered = json::array();
  for (const Prediction& c : plan.considered)
    considered.push_back({{"strategy", parallel::strategy_name(c.layout.strategy)}, {"tp", c.layout.tp},
                          {"pp", c.layout.pp}, {"expert_replicas", c.layout.expert_replicas}, {"gen_tok_s", c.gen_tok_s}, {"prompt_tok_s", c.prompt_tok_s},
                          {"allreduce_ms", c.allreduce_ms}, {"wire_bytes_per_token", c.wire_bytes_per_token}});
  return {{"strategy", parallel::strategy_name(plan.strategy)},
          {"tp", p.layout.tp},
          {"pp", p.layout.pp},
          {"expert_replicas", p.layout.expert_replicas},
          {"assignment", std::move(assignment)},
          {"predicted",
           {{"prompt_tok_s", p.prompt_tok_s},
            {"gen_tok_s", p.gen_tok_s},
            {"gen_ms", p.gen_ms},
            {"gen_compute_ms", p.gen_compute_ms},
            {"gen_comm_ms", p.gen_comm_ms},
            {"allreduce_ms", p.allreduce_ms},
            {"messages_per_token", p.messages_per_token},
            {"wire_bytes_per_token", p.wire_bytes_per_token},
            {"expert_balance", p.ranks.empty() ? 1.0 : p.ranks.front().expert_balance},
            {"speedup_vs_single", plan.single_gen_tok_s > 0 ? json(p.gen_tok_s / plan.single_gen_tok_s) : json(nullptr)}}},
          {"link", {{"latency_us", p.link.latency_us}, {"gbps", p.link.gbps}}},
          {"stage_link", {{"latency_us", p.stage_link.latency_us}, {"gbps", p.stage_link.gbps}}},
          {"considered", std::move(considered)},
          {"explanation", plan.explanation}};
}

std::string format_plan(const Plan& plan) {
  const Prediction& p = plan.predicted;
  std::string out = fmt::format("strategy {} (tp {}, pp {}{}): {:.1f} tok/s generation, {:.0f} tok/s prompt\n",
                                parallel::strategy_name(plan.strategy), p.layout.tp, p.layout.pp,
                                p.layout.expert_replicas > 0 ? fmt::format(", {} replicated experts", p.layout.expert_replicas) : "",
                                p.gen_tok_s, p.prompt_tok_s);
  out += fmt::format("{:<5} {:<20} {:>9} {:>9} {:>16} {:>8}\n", "rank", "host", "layers", "heads", "memory GB", "gen ms");
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    const RankCost& rc = p.ranks[r];
    out += fmt::format("{:<5} {:<20} {:>9} {:>9} {:>16} {:>8.2f}\n", r, plan.hosts[r],
                       fmt::format("{}-{}", rc.shard.layer_begin, rc.shard.layer_end),
                       fmt::format("{}-{}", rc.shard.head_begin, rc.shard.head_end),
                       fmt::format("{:.1f} / {:.1f}", gb(rc.need_bytes()), gb(rc.usable_bytes)),
                       p.layout.tp == 1 ? rc.gen_solo_ms : rc.gen_ms);  // as predict charges it
  }
  out += "\n" + plan.explanation + "\n";
  return out;
}

}  // namespace orchard::cluster

// Expert parallelism's placement: which experts each rank holds (by count, by capacity, by
// measured popularity), the bytes a rank is sent for them, and the statistics file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "model/gguf/reader.h"
#include "model/model_files.h"
#include "model/weights.h"
#include "parallel/distributed_model.h"
#include "parallel/expert_stats.h"
#include "parallel/layout.h"

namespace orchard {
namespace {

model::ModelConfig moe_config(int32_t layers = 2, int32_t experts = 8) {
  model::ModelConfig c;
  c.arch_name = "qwen3moe";
  c.n_embd = 64;
  c.n_layers = layers;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.rope_dims = 16;
  c.n_ff = 128;
  c.n_ff_exp = 96;
  c.n_expert = experts;
  c.n_expert_used = 2;
  c.vocab_size = 100;
  return c;
}

std::vector<std::pair<int32_t, int32_t>> expert_runs(const model::ModelConfig& c, const parallel::Layout& l,
                                                     int32_t layer) {
  std::vector<std::pair<int32_t, int32_t>> runs;
  for (int r = 0; r < l.world(); ++r) runs.push_back(parallel::shard_for_rank(c, l, r).experts_of(layer));
  return runs;
}

using Runs = std::vector<std::pair<int32_t, int32_t>>;

TEST(ExpertLayout, SplitsExpertsWholeAndTheRestAsTensor) {
  const auto c = moe_config();
  const auto layout = parallel::Layout::make(parallel::Strategy::Expert, 4);
  EXPECT_EQ(layout.tp, 4);
  EXPECT_EQ(layout.pp, 1);
  EXPECT_EQ(expert_runs(c, layout, 0), (Runs{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  const auto tensor = parallel::shard_for_rank(c, parallel::Layout::make(parallel::Strategy::Tensor, 4), 1);
  const auto s = parallel::shard_for_rank(c, layout, 1);
  // Whole experts: every row of each.
  EXPECT_EQ(s.expert_ff_begin, 0);
  EXPECT_EQ(s.expert_ff_end, c.n_ff_exp);
  // Attention, dense FFN rows and the vocabulary as a tensor split has them.
  EXPECT_EQ(s.head_begin, tensor.head_begin);
  EXPECT_EQ(s.head_end, tensor.head_end);
  EXPECT_EQ(s.ff_begin, tensor.ff_begin);
  EXPECT_EQ(s.vocab_end, tensor.vocab_end);
  EXPECT_TRUE(s.splits_layers(c));
  // A tensor split holds every expert.
  EXPECT_EQ(tensor.experts_of(0), (std::pair<int32_t, int32_t>{0, 8}));
  EXPECT_TRUE(model::Shard::whole(c).holds_all_experts(c));
}

TEST(ExpertLayout, ExpertsFollowRankCapacity) {
  const auto c = moe_config();
  auto layout = parallel::Layout::make(parallel::Strategy::Expert, 2);
  layout.tensor_weights = {3, 1};
  EXPECT_EQ(expert_runs(c, layout, 0), (Runs{{0, 6}, {6, 8}}));
}

TEST(ExpertLayout, InsidePipelineStages) {
  const auto c = moe_config(4);
  const auto layout = parallel::Layout::make(parallel::Strategy::Expert, 4, 2);
  EXPECT_EQ(layout.pp, 2);
  const auto s = parallel::shard_for_rank(c, layout, 3);  // stage 1, second expert rank
  EXPECT_EQ(s.layer_begin, 2);
  EXPECT_EQ(s.layer_end, 4);
  EXPECT_EQ(s.experts_of(2), (std::pair<int32_t, int32_t>{4, 8}));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A hybrid of a mixture of experts puts expert groups inside its stages (the layout of an
// expert split with --tp), replicas and all; a dense model's hybrid keeps tensor groups.
TEST(ExpertLayout, HybridOfAMixtureOfExpertsSplitsExperts) {
  const auto c = moe_config(4);
  auto hybrid = parallel::Layout::make(parallel::Strategy::Hybrid, 4, 2);
  auto expert = parallel::Layout::make(parallel::Strategy::Expert, 4, 2);
  hybrid.expert_replicas = expert.expert_replicas = 2;
  hybrid.validate(c, 4);
  EXPECT_TRUE(hybrid.splits_experts(c));
  for (int r = 0; r < 4; ++r) {
    const auto h = parallel::shard_for_rank(c, hybrid, r), e = parallel::shard_for_rank(c, expert, r);
    EXPECT_EQ(h.layer_begin, e.layer_begin);
    EXPECT_EQ(h.experts_of(h.layer_begin), e.experts_of(e.layer_begin));
    EXPECT_EQ(h.expert_holders, e.expert_holders);
    EXPECT_EQ(h.n_expert_ff(), c.n_ff_exp);  // whole experts, every row
    EXPECT_EQ(h.n_experts_held(h.layer_begin, c.n_expert), 4 + 1);  // its run and the other run's replica
  }
  auto dense = moe_config(4);
  dense.n_expert = dense.n_expert_used = dense.n_ff_exp = 0;
  auto dense_hybrid = parallel::Layout::make(parallel::Strategy::Hybrid, 4, 2);
  EXPECT_FALSE(dense_hybrid.splits_experts(dense));
  const auto d = parallel::shard_for_rank(dense, dense_hybrid, 1);
  EXPECT_TRUE(d.expert_holders.empty());
  EXPECT_EQ(d.n_ff(), dense.n_ff / 2);
  dense_hybrid.expert_replicas = 1;
  EXPECT_NE(error_of([&] { dense_hybrid.validate(dense, 4); }).find("the model has 0"), std::string::npos);
}

// With measured counts each rank's run of a layer's experts carries about an equal share of its
// choices, not an equal number of experts; each layer has its own runs.
TEST(ExpertLayout, PlacementFollowsCounts) {
  const auto c = moe_config();
  auto layout = parallel::Layout::make(parallel::Strategy::Expert, 2);
  // Layer 0: experts 0 to 3 take most choices; two of them are half the load. Layer 1: the
  // last expert is as popular as the seven others together.
  layout.expert_loads = {{500, 500, 500, 500, 10, 10, 10, 10}, {100, 100, 100, 100, 100, 100, 100, 700}};
  layout.validate(c, 2);
  EXPECT_EQ(expert_runs(c, layout, 0), (Runs{{0, 2}, {2, 8}}));
  EXPECT_EQ(expert_runs(c, layout, 1), (Runs{{0, 7}, {7, 8}}));
  // Capacity still counts: a rank of three times the capacity takes three quarters of the load.
  layout.tensor_weights = {3, 1};
  EXPECT_EQ(expert_runs(c, layout, 1), (Runs{{0, 7}, {7, 8}}));
  layout.expert_loads[1] = {100, 100, 100, 100, 100, 100, 100, 100};
  EXPECT_EQ(expert_runs(c, layout, 1), (Runs{{0, 6}, {6, 8}}));
  // Every rank keeps at least one expert, however skewed the counts.
  layout.tensor_weights.clear();
  auto four = parallel::Layout::make(parallel::Strategy::Expert, 4);
  four.expert_loads = {{10000, 0, 0, 0, 0, 0, 0, 0}, {}};
  EXPECT_EQ(expert_runs(c, four, 0), (Runs{{0, 1}, {1, 2}, {2, 3}, {3, 8}}));
  EXPECT_EQ(expert_runs(c, four, 1), (Runs{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));  // no counts: even
}

// Replicated hot experts: the N most chosen experts of each layer are held by every member
// (bit set per member), each also stays in its home run; without counts the first of each run
// in turn. Every member's table is the same.
TEST(ExpertLayout, HottestExpertsAreReplicatedOnEveryMember) {
  const auto c = moe_config();
  auto layout = parallel::Layout::make(parallel::Strategy::Expert, 2);
  layout.expert_replicas = 2;
  layout.expert_loads = {{500, 500, 500, 500, 10, 10, 10, 10}, {}};
  layout.expert_loads[0][3] = 900;  // the hottest, then expert 0 (first of the equal 500s)
  layout.validate(c, 2);
  const auto first = parallel::shard_for_rank(c, layout, 0), second = parallel::shard_for_rank(c, layout, 1);
  EXPECT_EQ(first.expert_holders, second.expert_holders);
  EXPECT_EQ(first.expert_member, 0);
  EXPECT_EQ(second.expert_member, 1);
  // Layer 0: runs {0, 1} and {2..7} by load, as in PlacementFollowsCounts; expert 3 (900) and
  // expert 0 (the first of the 500s in run order) everywhere.
  const auto runs = expert_runs(c, layout, 0);
  for (int32_t e = 0; e < 8; ++e) {
    const int home = e < runs[0].second ? 0 : 1;
    const uint64_t expected = e == 3 || e == 0 ? 3u : uint64_t{1} << home;
    EXPECT_EQ(first.expert_holders[0][static_cast<size_t>(e)], expected) << e;
    EXPECT_EQ(first.holds_expert(0, e), (expected & 1u) != 0) << e;
    EXPECT_EQ(second.holds_expert(0, e), (expected & 2u) != 0) << e;
  }
  // Layer 1 has no counts: even runs {0..3} {4..7}, and the first of each run replicated.
  EXPECT_EQ(first.expert_holders[1], (std::vector<uint64_t>{3, 1, 1, 1, 3, 2, 2, 2}));
  EXPECT_EQ(first.n_experts_held(1, 8), 5);
  EXPECT_EQ(second.n_experts_held(1, 8), 5);
  EXPECT_FALSE(first.holds_all_experts(c));
  // Every expert on every member: a shard that holds them all.
  layout.expert_replicas = 8;
  EXPECT_TRUE(parallel::shard_for_rank(c, layout, 1).holds_all_experts(c));
  // Refused: more replicas than experts, and replicas outside an expert split.
  layout.expert_replicas = 9;
  EXPECT_NE(error_of([&] { layout.validate(c, 2); }).find("9 replicated experts per layer; the model has 8"),
            std::string::npos);
  auto tensor = parallel::Layout::make(parallel::Strategy::Tensor, 2);
  tensor.expert_replicas = 1;
  EXPECT_NE(error_of([&] { tensor.validate(c, 2); }).find("replicated experts are for an expert split, not tensor"),
            std::string::npos);
}

// The expected load of the busier member for a token's `used` choices drawn uniformly from
// n_expert experts, `replicated` of them on both of 2 members and the rest split evenly:
// with i choices only member 0 holds, j only member 1 holds and k on both, the single-holder
// choices are fixed and the k fill the lighter side, so the busier one takes
// max(i, j, ceil(used / 2)). Summed over the hypergeometric probabilities, float64.
double expected_busier_load(int n_expert, int used, int replicated) {
  auto choose = [](int n, int k) {
    if (k < 0 || k > n) return 0.0;
    double r = 1;
    for (int i = 1; i <= k; ++i) r = r * (n - k + i) / i;
    return r;
  };
  const int only = (n_expert - replicated) / 2;
  double expected = 0;
  for (int i = 0; i <= used; ++i)
    for (int j = 0; i + j <= used; ++j)
      expected += choose(only, i) * choose(only, j) * choose(replicated, used - i - j) *
                  std::max({i, j, (used + 1) / 2});
  return expected / choose(n_expert, used);
}

// assign_experts over every possible choice of 4 of 32 experts on 2 members: each choice goes
// to a holder, the busier member's load averages what the formula above says, and every token
// whose choices can split 2 + 2 does.
TEST(ExpertAssignment, BalancesAsTheHypergeometricFormulaSays) {
  auto c = moe_config(1, 32);
  c.n_expert_used = 4;
  for (int replicated : {0, 4, 8, 32}) {
    auto layout = parallel::Layout::make(parallel::Strategy::Expert, 2);
    layout.expert_replicas = replicated;
    const auto shard = parallel::shard_for_rank(c, layout, 0);
    double busier = 0, tokens = 0;
    int32_t chosen[4], members[4];
    for (chosen[0] = 0; chosen[0] < 32; ++chosen[0])
      for (chosen[1] = chosen[0] + 1; chosen[1] < 32; ++chosen[1])
        for (chosen[2] = chosen[1] + 1; chosen[2] < 32; ++chosen[2])
          for (chosen[3] = chosen[2] + 1; chosen[3] < 32; ++chosen[3]) {
            model::assign_experts(shard, 0, chosen, 4, members);
            int load[2] = {0, 0};
            for (int i = 0; i < 4; ++i) {
              ASSERT_TRUE((shard.expert_holders[0][static_cast<size_t>(chosen[i])] >> members[i]) & 1u);
              ++load[members[i]];
            }
            busier += std::max(load[0], load[1]);
            ++tokens;
          }
    EXPECT_NEAR(busier / tokens, expected_busier_load(32, 4, replicated), 1e-12) << replicated;
  }
  // By hand: no replicas, a 2 + 2 split in 40% of tokens (C(16,2)^2 / C(32,4) = 14400 / 35960),
  // 3 + 1 in 49.8%, 4 + 0 in 10.1%: the busier member holds 1.35x the mean of 2.
  EXPECT_NEAR(expected_busier_load(32, 4, 0) / 2, (2 * 14400 + 3 * 17920 + 4 * 3640) / 35960.0 / 2, 1e-12);
  EXPECT_NEAR(expected_busier_load(32, 4, 0) / 2, 1.3504, 1e-4);
  EXPECT_NEAR(expected_busier_load(32, 4, 32) / 2, 1.0, 1e-12);
}

// A batch's choices spread over the whole batch: replicas fill the member that the fixed
// choices left lighter, ties start from a member that turns with the layer, and every rank
// computes the same assignment.
TEST(ExpertAssignment, ReplicasGoWhereTheBatchIsLighter) {
  auto c = moe_config(2, 8);
  auto layout = parallel::Layout::make(parallel::Strategy::Expert, 2);
  layout.expert_replicas = 2;  // experts 0 and 4 on both; 1-3 on member 0, 5-7 on member 1
  const auto shard = parallel::shard_for_rank(c, layout, 1);
  // Two rows of 2: {1, 0} and {2, 4}: members 0, 0 fixed at 1 and 2; the replicas go to 1.
  const int32_t chosen[] = {1, 0, 2, 4};
  int32_t members[4];
  model::assign_experts(shard, 0, chosen, 2, members);
  EXPECT_EQ(std::vector<int32_t>(members, members + 4), (std::vector<int32_t>{0, 1, 0, 1}));
  // Only replicas: layer 0 starts ties at member 0, layer 1 at member 1.
  const int32_t both[] = {0, 4};
  model::assign_experts(shard, 0, both, 2, std::span(members, 2));
  EXPECT_EQ(std::vector<int32_t>(members, members + 2), (std::vector<int32_t>{0, 1}));
  model::assign_experts(shard, 1, both, 2, std::span(members, 2));
  EXPECT_EQ(std::vector<int32_t>(members, members + 2), (std::vector<int32_t>{1, 0}));
  int32_t again[2];
  model::assign_experts(parallel::shard_for_rank(c, layout, 0), 1, both, 2, again);
  EXPECT_EQ(std::vector<int32_t>(again, again + 2), (std::vector<int32_t>{1, 0}));
}

TEST(ExpertLayout, RefusesWhatCannotBeSplit) {
  auto dense = moe_config();
  dense.n_expert = 0;
  dense.n_expert_used = 0;
  dense.n_ff_exp = 0;
  EXPECT_NE(error_of([&] { parallel::Layout::make(parallel::Strategy::Expert, 2).validate(dense, 2); })
                .find("strategy expert splits the experts of a mixture of experts; qwen3moe has none"),
            std::string::npos);
  const auto two = moe_config(2, 2);
  EXPECT_NE(error_of([&] { parallel::Layout::make(parallel::Strategy::Expert, 4).validate(two, 4); })
                .find("4 expert-parallel ranks for a model of 2 experts per layer"),
            std::string::npos);
  EXPECT_NE(error_of([] { parallel::Layout::make(parallel::Strategy::Expert, 4, 3); }).find("expert needs --tp dividing"),
            std::string::npos);
  auto layout = parallel::Layout::make(parallel::Strategy::Expert, 2);
  layout.expert_loads = {{1, 2, 3}, {}};
  EXPECT_NE(error_of([&] { layout.validate(moe_config(), 2); })
                .find("expert statistics of layer 0 count 3 experts; the model has 8"),
            std::string::npos);
  layout.expert_loads = {{}};
  EXPECT_NE(error_of([&] { layout.validate(moe_config(), 2); }).find("expert statistics for 1 layers; the model has 2"),
            std::string::npos);
  EXPECT_EQ(parallel::parse_strategy("expert"), parallel::Strategy::Expert);
  EXPECT_NE(error_of([] { parallel::parse_strategy("experts"); }).find("known: single, pipeline, tensor, hybrid, expert"),
            std::string::npos);
}

// A rank of an expert split is sent its experts' matrices of each stack (whole: all rows of
// gate, up and down), and the expert ranges of the two ranks add up to the stacks.
TEST(ExpertLayout, ByteRangesHoldTheRanksExperts) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("qwen3moe", "tiny", "f32"));
  const auto c = model::ModelConfig::from_gguf(file);
  model::Shard whole = model::Shard::whole(c), first = whole, second = whole;
  first.expert_end = 3;
  second.expert_begin = 3;
  auto total = [&](const model::Shard& s) {
    uint64_t bytes = 0;
    for (const auto& r : model::shard_byte_ranges(file, c, s)) bytes += r.size;
    return bytes;
  };
  uint64_t stacks = 0;
  for (const char* name : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"})
    for (int l = 0; l < c.n_layers; ++l) stacks += file.tensor(fmt::format("blk.{}.{}.weight", l, name)).size_bytes;
  EXPECT_EQ(total(whole) - total(first), stacks * 5 / 8);
  EXPECT_EQ(total(whole) - total(second), stacks * 3 / 8);
  // The first rank's ranges of layer 0's down stack start at the stack and hold 3 experts.
  const auto& down = file.tensor("blk.0.ffn_down_exps.weight");
  const uint64_t at = file.data_offset() + down.offset;
  bool found = false;
  for (const auto& r : model::shard_byte_ranges(file, c, first))
    if (r.offset == at) found = r.size == down.size_bytes * 3 / 8;
  EXPECT_TRUE(found);
  // Per-layer placement: layer 1 with no experts on this rank sends none of its stacks.
  model::Shard skewed = whole;
  skewed.layer_experts.assign(static_cast<size_t>(c.n_layers), {0, 8});
  skewed.layer_experts[1] = {8, 8};
  EXPECT_EQ(total(whole) - total(skewed), stacks / static_cast<uint64_t>(c.n_layers));
  // Replicated experts: rank 1 of 2 holds its run of 4 and the first of the other run (expert
  // 0), in two ranges per stack: 5 of 8 experts' bytes.
  auto layout = parallel::Layout::make(parallel::Strategy::Expert, 2);
  layout.expert_replicas = 2;
  const model::Shard replicated = parallel::shard_for_rank(c, layout, 1),
                     plain = parallel::shard_for_rank(c, parallel::Layout::make(parallel::Strategy::Expert, 2), 1);
  EXPECT_EQ(total(replicated) - total(plain), stacks / 8);
  int pieces = 0;
  for (const auto& r : model::shard_byte_ranges(file, c, replicated))
    if (r.offset >= at && r.offset < at + down.size_bytes) {
      ++pieces;
      if (r.offset == at) EXPECT_EQ(r.size, down.size_bytes / 8);
      else EXPECT_TRUE(r.offset == at + down.size_bytes / 2 && r.size == down.size_bytes / 2);
    }
  EXPECT_EQ(pieces, 2);
}

// A shard binds only its experts; the others stay empty matrices (nothing mapped or copied).
TEST(ExpertLayout, WeightsBindOnlyTheRanksExperts) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("qwen3moe", "tiny", "f32"));
  const auto c = model::ModelConfig::from_gguf(file);
  model::Shard s = model::Shard::whole(c);
  s.expert_begin = 2;
  s.expert_end = 5;
  model::ModelWeights w(file, c, s, {});
  const auto& layer = w.layer(0);
  ASSERT_EQ(layer.expert_down.size(), 8u);
  for (int e = 0; e < 8; ++e) EXPECT_EQ(layer.expert_down[static_cast<size_t>(e)].rows() > 0, e >= 2 && e < 5) << e;
}

// The bytes each way of combining an expert split's outputs moves, by hand: the all-reduce as
// comm moves it (ring: each rank sends 2 (n - 1) / n of the vector; direct: the whole vector to
// each of the n - 1 others), the all-to-all as the touched rows sent to their owners plus the
// all-gather of every owner's rows ((n - 1) x the vector over all links).
TEST(ExpertCombine, MovesFewerBytesPastTheDirectThreshold) {
  using parallel::ExpertCombine;
  // 2 ranks, 256 rows of 2048 floats (8192 bytes): the vector is 2 MiB, past the 1 MiB direct
  // threshold, so the ring: 2 x 1 x 2 MiB. Rank 0's experts touch 120 of rank 1's 128 rows,
  // rank 1's 125 of rank 0's: 245 rows of 8192 bytes, then 2 MiB gathered.
  auto b = parallel::expert_combine_bytes(std::vector<int64_t>{128, 120, 125, 128}, 256, 8192, 2);
  EXPECT_FALSE(b.all_reduce_direct);
  EXPECT_EQ(b.all_reduce, 4194304u);
  EXPECT_EQ(b.all_to_all, 245u * 8192 + 2097152);  // 4104192
  EXPECT_EQ(parallel::choose_expert_combine(b), ExpertCombine::AllToAll);
  // Every row touched everywhere (shared experts): the scatter is a reduce-scatter, a tie, and a
  // tie keeps the all-reduce.
  b = parallel::expert_combine_bytes(std::vector<int64_t>{128, 128, 128, 128}, 256, 8192, 2);
  EXPECT_EQ(b.all_to_all, 4194304u);
  EXPECT_EQ(parallel::choose_expert_combine(b), ExpertCombine::AllReduce);
  // 3 ranks, 600 rows of 1024 bytes: 614400 bytes, 2 x 614400 > 1 MiB, so the ring moves
  // 2 x 2 x 614400 = 2457600. Each rank touches 150 of each other owner's 200 rows: 6 x 150
  // rows of 1024 bytes, then 2 x 614400 gathered = 2150400.
  std::vector<int64_t> touched(9, 150);
  b = parallel::expert_combine_bytes(touched, 600, 1024, 3);
  EXPECT_EQ(b.all_reduce, 2457600u);
  EXPECT_EQ(b.all_to_all, 2150400u);
  EXPECT_EQ(parallel::choose_expert_combine(b), ExpertCombine::AllToAll);
  std::fill(touched.begin(), touched.end(), 200);
  EXPECT_EQ(parallel::expert_combine_bytes(touched, 600, 1024, 3).all_to_all, 2457600u);
  // A decode-sized step: 12 rows of 256 bytes on 3 ranks is exchanged directly (3 x 2 x 3072 =
  // 18432 bytes, one message latency); the all-to-all would move 12288 but take two, so the
  // all-reduce stays.
  b = parallel::expert_combine_bytes(std::vector<int64_t>(9, 4), 12, 256, 3);
  EXPECT_TRUE(b.all_reduce_direct);
  EXPECT_EQ(b.all_reduce, 18432u);
  EXPECT_EQ(b.all_to_all, 12288u);
  EXPECT_EQ(parallel::choose_expert_combine(b), ExpertCombine::AllReduce);
  // One rank moves nothing.
  b = parallel::expert_combine_bytes(std::vector<int64_t>{5}, 5, 64, 1);
  EXPECT_EQ(b.all_reduce + b.all_to_all, 0u);
  EXPECT_EQ(parallel::parse_expert_combine("all-to-all"), ExpertCombine::AllToAll);
  EXPECT_NE(error_of([] { parallel::parse_expert_combine("alltoall"); })
                .find("unknown expert combine 'alltoall'; known: auto, all-reduce, all-to-all"),
            std::string::npos);
}

TEST(ExpertStats, RecordsAddsUpAndRoundTrips) {
  const auto c = moe_config();
  const std::string path = ::testing::TempDir() + "/expert-stats-" + std::to_string(getpid()) + ".json";
  std::remove(path.c_str());
  parallel::ExpertStats stats(c);
  stats.add_file(path);  // absent: nothing to add
  const int32_t a[] = {3, 1}, b[] = {3, 0}, d[] = {7, 6};
  stats.record(0, a);
  stats.record(0, b);
  stats.record(1, d);
  EXPECT_EQ(stats.tokens(), 2);
  stats.save(path);
  parallel::ExpertStats again(c);
  again.add_file(path);
  again.add_file(path);  // a second run adds to the first
  EXPECT_EQ(again.counts()[0], (std::vector<double>{2, 2, 0, 4, 0, 0, 0, 0}));
  EXPECT_EQ(again.counts()[1], (std::vector<double>{0, 0, 0, 0, 0, 0, 2, 2}));
  EXPECT_EQ(parallel::read_expert_counts(path), stats.counts());
  // Recorded for another model: named, with both shapes.
  EXPECT_NE(error_of([&] { parallel::ExpertStats(moe_config(3)).add_file(path); })
                .find("recorded for 2 layers of 8 experts; this model has 3 layers of 8"),
            std::string::npos);
  // Not a statistics file: named.
  std::ofstream(path) << "{\"counts\": [[1, -2]]}";
  EXPECT_NE(error_of([&] { parallel::read_expert_counts(path); }).find("count 1 of layer 0 is not a non-negative number"),
            std::string::npos);
  std::ofstream(path) << "[1, 2";
  EXPECT_NE(error_of([&] { parallel::read_expert_counts(path); }).find("not an expert statistics file"),
            std::string::npos);
  std::remove(path.c_str());
  auto dense = c;
  dense.n_expert = 0;
  EXPECT_NE(error_of([&] { parallel::ExpertStats{dense}; }).find("need a mixture of experts"), std::string::npos);
}

}  // namespace
}  // namespace orchard

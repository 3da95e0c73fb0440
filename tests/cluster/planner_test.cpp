// Pins the planner's decisions on a table of scenarios, and the cost model's arithmetic on
// figures worked out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <nlohmann/json.hpp>

#include "cluster/hardware_catalog.h"
#include "cluster/planner.h"
#include "core/error.h"
#include "model/model_files.h"

namespace orchard::cluster {
namespace {

using parallel::Strategy;

struct Scenario {
  const char* name;
  const char* model;  // preset "shape:type"
  std::vector<std::pair<const char*, double>> machines;  // chip, memory GB
  double latency_us, gbps;
  int32_t context;
  Strategy expected;
  int expected_world;
};

PlanRequest request_for(const Scenario& s) {
  PlanRequest r;
  r.model = ModelFacts::from_preset(s.model);
  int i = 0;
  for (const auto& [chip, memory] : s.machines)
    r.machines.push_back(machine_from_chip(HardwareCatalog::builtin().chip(chip), memory, "mac" + std::to_string(i++)));
  r.default_link = {s.latency_us, s.gbps};
  r.work.context = s.context;
  r.link_source = "what-if";
  return r;
}

const std::vector<Scenario>& scenarios() {
  static const std::vector<Scenario> table = {
      {"8B fits one machine; TCP all-reduces cost more than they save", "llama-8b:q4_k_m", {{"M4 Max", 64}, {"M4 Max", 64}}, 300, 10, 8192, Strategy::Single, 1},
      {"8B on 2 M4 Max, RDMA", "llama-8b:q4_k_m", {{"M4 Max", 64}, {"M4 Max", 64}}, 50, 80, 8192, Strategy::Tensor, 2},
      {"8B on 4 M4 Pro, TB5 RDMA", "llama-8b:q4_k_m", {{"M4 Pro", 64}, {"M4 Pro", 64}, {"M4 Pro", 64}, {"M4 Pro", 64}}, 50, 80, 8192, Strategy::Tensor, 4},
      {"tinyllama on 2 M1, TCP", "tinyllama-1.1b:q4_0", {{"M1", 16}, {"M1", 16}}, 300, 10, 2048, Strategy::Single, 1},
      {"70B Q8 on 2 M4 Max, RDMA", "llama-70b:q8_0", {{"M4 Max", 128}, {"M4 Max", 128}}, 50, 80, 8192, Strategy::Tensor, 2},
      {"70B Q4 on 2 M2 Ultra 64 GB, RDMA-class", "llama-70b:q4_k_m", {{"M2 Ultra", 64}, {"M2 Ultra", 64}}, 50, 80, 32768, Strategy::Tensor, 2},
      {"70B Q4 on 2 M2 Ultra 64 GB, TCP", "llama-70b:q4_k_m", {{"M2 Ultra", 64}, {"M2 Ultra", 64}}, 300, 10, 32768, Strategy::Pipeline, 2},
      {"70B Q4 on 2 M4 Pro 48 GB, TB5 RDMA", "llama-70b:q4_k_m", {{"M4 Pro", 48}, {"M4 Pro", 48}}, 50, 80, 8192, Strategy::Tensor, 2},
      {"70B Q8 on 4 M4 Pro 48 GB, TB5 RDMA", "llama-70b:q8_0", {{"M4 Pro", 48}, {"M4 Pro", 48}, {"M4 Pro", 48}, {"M4 Pro", 48}}, 50, 80, 8192, Strategy::Tensor, 4},
      {"70B Q8 on 4 M4 Pro 48 GB, 2 ms links", "llama-70b:q8_0", {{"M4 Pro", 48}, {"M4 Pro", 48}, {"M4 Pro", 48}, {"M4 Pro", 48}}, 2000, 10, 8192, Strategy::Pipeline, 3},
      {"70B Q8 on 4 M4 Pro 48 GB, 500 µs links", "llama-70b:q8_0", {{"M4 Pro", 48}, {"M4 Pro", 48}, {"M4 Pro", 48}, {"M4 Pro", 48}}, 500, 10, 8192, Strategy::Tensor, 4},
      // The page's four Mac Studios running Kimi K2: 577 GB at 4.5 bits does not fit one.
      {"Kimi K2 Q4 on 4 M3 Ultra 512 GB, TB5 RDMA", "kimi-k2:q4_0", {{"M3 Ultra", 512}, {"M3 Ultra", 512}, {"M3 Ultra", 512}, {"M3 Ultra", 512}}, 10, 80, 8192, Strategy::Tensor, 4},
      {"Kimi K2 Q4 on 4 M3 Ultra 512 GB, TCP", "kimi-k2:q4_0", {{"M3 Ultra", 512}, {"M3 Ultra", 512}, {"M3 Ultra", 512}, {"M3 Ultra", 512}}, 300, 10, 8192, Strategy::Pipeline, 2},
  };
  return table;
}

TEST(Planner, ScenarioTable) {
  std::string table = "\n";
  for (const Scenario& s : scenarios()) {
    SCOPED_TRACE(s.name);
    const Plan plan = make_plan(request_for(s));
    table += fmt::format("{:<48} {:<9} tp{} pp{} gen {:6.1f} tok/s (single {:5.1f}) all-reduce {:5.1f} ms\n", s.name,
                         parallel::strategy_name(plan.strategy), plan.predicted.layout.tp, plan.predicted.layout.pp,
                         plan.predicted.gen_tok_s, plan.single_gen_tok_s, plan.predicted.allreduce_ms);
    EXPECT_EQ(parallel::strategy_name(plan.strategy), parallel::strategy_name(s.expected)) << plan.explanation;
    EXPECT_EQ(plan.predicted.layout.world(), s.expected_world) << plan.explanation;
    EXPECT_FALSE(plan.explanation.empty());
  }
  std::cout << table;
}

// Kimi K2's published size: about 1.03 T parameters, 32 B of them used per token (Moonshot's
// card: 1 T total, 32 B activated); hand-computed from its config: 1026.4 G and 31.7 G without
// the embedding table, of which a token reads one row.
TEST(Planner, MixtureOfExpertsPresetsKnowTotalAndActiveParameters) {
  const ModelFacts kimi = ModelFacts::from_preset("kimi-k2:f16");
  const double layers = kimi.config.n_layers;
  const double total = layers * (kimi.attn_params + kimi.ffn_params) + kimi.output_params + kimi.embedding_bytes / 2;
  const double active = layers * (kimi.attn_params + kimi.ffn_params * kimi.ffn_active_fraction) + kimi.output_params;
  EXPECT_NEAR(total / 1e9, 1026.4, 1.0);
  EXPECT_NEAR(active / 1e9, 31.7, 0.1);
  EXPECT_NEAR(kimi.total_bytes() / 1e9, 2 * 1026.4, 2.0);
  // Its latent KV cache: 512 + 64 key and 512 value floats per layer and position.
  EXPECT_EQ(kimi.config.kv_cache_floats(kimi.config.n_kv_heads), 2 * 512 + 64);
}

TEST(Planner, TensorOnRdmaIsAtLeast1_8TimesOneMachine) {
  const Plan plan = make_plan(request_for(scenarios()[4]));
  ASSERT_EQ(plan.strategy, Strategy::Tensor);
  ASSERT_GT(plan.single_gen_tok_s, 0);
  EXPECT_GE(plan.predicted.gen_tok_s / plan.single_gen_tok_s, 1.8) << plan.explanation;
}

// A plan restricted to splits of a model that fits one machine says so, instead of claiming
// the model does not fit.
TEST(Planner, ARestrictedPlanDoesNotClaimTheModelDoesNotFit) {
  PlanRequest r = request_for(scenarios()[0]);  // 8B on 2 M4 Max 64 GB: fits one
  r.world = 2;
  const Plan plan = make_plan(r);
  EXPECT_EQ(plan.predicted.layout.world(), 2);
  EXPECT_EQ(plan.explanation.find("does not fit one machine"), std::string::npos) << plan.explanation;
  EXPECT_NE(plan.explanation.find("would fit one machine"), std::string::npos) << plan.explanation;
  // Unrestricted, a model too big for one machine is still said to be.
  const Plan big = make_plan(request_for(scenarios()[5]));  // 70B Q4 on 2 × 64 GB
  EXPECT_NE(big.explanation.find("does not fit one machine"), std::string::npos) << big.explanation;
}

TEST(Planner, PipelineOnTcpExplainsTheAllReduceTime) {
  const Plan plan = make_plan(request_for(scenarios()[6]));
  ASSERT_EQ(plan.strategy, Strategy::Pipeline);
  // 80 layers × 2 all-reduces × (300 µs + 32 KiB at 10 Gb/s) = 52 ms.
  EXPECT_NE(plan.explanation.find("would spend 52."), std::string::npos) << plan.explanation;
  EXPECT_NE(plan.explanation.find("does not fit one machine"), std::string::npos) << plan.explanation;
}

TEST(Planner, RefusesWithTheNumbers) {
  Scenario s{"", "llama-70b:q8_0", {{"M4", 16}, {"M4", 24}}, 50, 80, 8192, Strategy::Single, 1};
  try {
    make_plan(request_for(s));
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("[cluster] plan refused"), std::string::npos) << m;
    EXPECT_NE(m.find("30.0 GB usable of 40 GB"), std::string::npos) << m;
    EXPECT_NE(m.find("mac0 12.0 of 16 GB"), std::string::npos) << m;
  }
}

TEST(Planner, WhatIfLatencyFlipsTheChoice) {
  Scenario s = scenarios()[5];
  std::vector<std::string> picks;
  for (double latency : {10.0, 50.0, 300.0, 1000.0}) {
    s.latency_us = latency;
    picks.push_back(parallel::strategy_name(make_plan(request_for(s)).strategy));
  }
  EXPECT_EQ(picks, (std::vector<std::string>{"tensor", "tensor", "pipeline", "pipeline"}));
}

TEST(Planner, UnequalMachinesGetProportionalLayers) {
  PlanRequest r;
  r.model = ModelFacts::from_preset("llama-70b:q4_k_m");
  r.machines = {machine_from_chip(HardwareCatalog::builtin().chip("M4 Pro"), 24, "small"),
                machine_from_chip(HardwareCatalog::builtin().chip("M4 Pro"), 48, "big")};
  r.default_link = {1000, 10};
  const Plan plan = make_plan(r);
  ASSERT_EQ(plan.strategy, Strategy::Pipeline) << plan.explanation;
  const auto& ranks = plan.predicted.ranks;
  // Split by memory: the 64 GB machine holds most layers, each within its usable memory.
  const int small = plan.hosts[0] == "small" ? 0 : 1;
  EXPECT_LT(ranks[static_cast<size_t>(small)].shard.n_layers(), ranks[static_cast<size_t>(1 - small)].shard.n_layers());
  for (const RankCost& rc : ranks) EXPECT_TRUE(rc.fits());
}

TEST(Planner, PrefersFewerMachinesWhenTheGainIsUnder5Percent) {
  // tinyllama on two M1: at 150 µs a tensor split is ~3% faster than one machine.
  Scenario s{"", "tinyllama-1.1b:q4_0", {{"M1", 16}, {"M1", 16}}, 150, 80, 2048, Strategy::Single, 1};
  const Plan plan = make_plan(request_for(s));
  EXPECT_EQ(plan.strategy, Strategy::Single) << plan.explanation;
  EXPECT_NE(plan.explanation.find("so fewer machines are used"), std::string::npos) << plan.explanation;
  s.latency_us = 50;
  EXPECT_EQ(make_plan(request_for(s)).strategy, Strategy::Tensor);
}

TEST(Planner, HybridKeepsTensorGroupsOnTheFastCables) {
  // Two pairs of Macs, each pair joined by Thunderbolt 5, the pairs by a 2 ms network.
  PlanRequest r;
  r.model = ModelFacts::from_preset("llama-70b:q8_0");
  for (int i = 0; i < 4; ++i)
    r.machines.push_back(machine_from_chip(HardwareCatalog::builtin().chip("M4 Pro"), 48, "mac" + std::to_string(i)));
  r.links.assign(4, std::vector<LinkSpec>(4, LinkSpec{2000, 1}));
  r.links[0][1] = r.links[1][0] = r.links[2][3] = r.links[3][2] = LinkSpec{50, 80};
  const Plan plan = make_plan(r);
  EXPECT_EQ(plan.strategy, Strategy::Hybrid) << plan.explanation;
  EXPECT_EQ(plan.predicted.layout.tp, 2);
  EXPECT_EQ(plan.predicted.link.latency_us, 50);
  EXPECT_EQ(plan.predicted.stage_link.latency_us, 2000);
}

TEST(Planner, JsonHasTheDocumentedFields) {
  const nlohmann::json j = plan_to_json(make_plan(request_for(scenarios()[4])));
  EXPECT_EQ(j["strategy"], "tensor");
  EXPECT_EQ(j["tp"], 2);
  EXPECT_EQ(j["pp"], 1);
  ASSERT_EQ(j["assignment"].size(), 2u);
  EXPECT_EQ(j["assignment"][0]["heads"], nlohmann::json({0, 32}));
  EXPECT_EQ(j["assignment"][1]["heads"], nlohmann::json({32, 64}));
  EXPECT_TRUE(j["predicted"]["gen_tok_s"].is_number());
  EXPECT_TRUE(j["predicted"]["prompt_tok_s"].is_number());
  EXPECT_TRUE(j["explanation"].is_string());
}

TEST(CostModel, HandWorkedTwoRankFigures) {
  // tinyllama at 4.5 bits on two identical 10 GB/s machines, 100 µs links, 1 Gb/s.
  const ModelFacts m = ModelFacts::from_preset("tinyllama-1.1b:q4_0");
  const MachineSpec machine{"x", 16, 10, 100};
  Workload w;
  w.position = 0;
  w.prompt_tokens = 512;
  const LinkSpec link{100, 1};
  const Prediction single = predict(m, parallel::Layout::make(Strategy::Single, 1), {machine}, {}, w);
  const double layer = (m.attn_bytes + m.ffn_bytes);
  EXPECT_NEAR(single.gen_ms, (22 * layer + m.output_bytes) / 10e9 * 1e3, 1e-9);

  const Prediction tensor = predict(m, parallel::Layout::make(Strategy::Tensor, 2), {machine, machine}, link, w);
  // 44 all-reduces of 8 KiB: 100 µs + 8192 × 8 bits / 1 Gb/s = 165.536 µs each.
  EXPECT_NEAR(tensor.allreduce_ms, 44 * 0.165536, 1e-9);
  // Logits: one ring step of half the 128000-byte vector.
  EXPECT_NEAR(tensor.gen_comm_ms - tensor.allreduce_ms, 0.1 + 64000 * 8 / 1e9 * 1e3, 1e-9);
  EXPECT_EQ(tensor.messages_per_token, 45);

  const Prediction pipe = predict(m, parallel::Layout::make(Strategy::Pipeline, 2), {machine, machine}, link, w);
  EXPECT_NEAR(pipe.gen_compute_ms, single.gen_ms - m.output_bytes * 0 / 1e9, 1e-9);
  // Hidden state (8 KiB) once, logits (128000 bytes, <= 256 KiB) broadcast once.
  EXPECT_NEAR(pipe.gen_comm_ms, 2 * 0.1 + (8192 + 128000) * 8 / 1e9 * 1e3, 1e-9);
}

// Two ranks sharing one machine's memory: each gets half of what both stream together, but a
// pipeline's stages take turns in a decode step, each streaming alone at the solo rate (one
// core of this 2-core host: 23.4 tok/s alone, 34.6 with both cores, not 46.8), while a tensor
// split's ranks stream at once, at their shares. Hand-worked from the same bytes as above.
TEST(CostModel, APipelineStageDecodesAtItsSoloBandwidth) {
  const ModelFacts m = ModelFacts::from_preset("tinyllama-1.1b:q4_0");
  Workload w;
  w.position = 0;
  const MachineSpec shared{"x", 16, 10, 100, {}, 15};
  const double layer = m.attn_bytes + m.ffn_bytes;
  const Prediction single = predict(m, parallel::Layout::make(Strategy::Single, 1), {shared}, {}, w);
  EXPECT_NEAR(single.gen_compute_ms, (22 * layer + m.output_bytes) / 15e9 * 1e3, 1e-9);
  const Prediction pipe = predict(m, parallel::Layout::make(Strategy::Pipeline, 2), {shared, shared}, {}, w);
  EXPECT_NEAR(pipe.gen_compute_ms, (22 * layer + m.output_bytes) / 15e9 * 1e3, 1e-9);
  // Tensor: each rank reads half of every layer and of the head, at its 10 GB/s share.
  const Prediction tensor = predict(m, parallel::Layout::make(Strategy::Tensor, 2), {shared, shared}, {}, w);
  const Prediction tensor_alone =
      predict(m, parallel::Layout::make(Strategy::Tensor, 2), {MachineSpec{"x", 16, 10, 100}, MachineSpec{"x", 16, 10, 100}}, {}, w);
  EXPECT_DOUBLE_EQ(tensor.gen_compute_ms, tensor_alone.gen_compute_ms);
  EXPECT_NEAR(tensor.gen_compute_ms, single.gen_compute_ms * 15 / 10 / 2, 0.02 * single.gen_compute_ms);
  // Without a solo figure a rank reads at memory_bw_gbs alone too.
  EXPECT_DOUBLE_EQ(MachineSpec({"x", 16, 10, 100}).solo_bw_gbs(), 10);
}

TEST(CostModel, KvCacheIsSizedByItsElementType) {
  // tinyllama: 22 layers, 4 KV heads of 64 → 512 key and value elements per position and layer.
  const ModelFacts m = ModelFacts::from_preset("tinyllama-1.1b:q4_0");
  const MachineSpec machine{"x", 16, 10, 100};
  Workload w;
  w.context = 2048;
  w.position = 1024;
  const auto cost = [&](model::KvType type) {
    w.cache_type = type;
    return predict(m, parallel::Layout::make(Strategy::Single, 1), {machine}, {}, w);
  };
  const Prediction f32 = cost(model::KvType::F32), f16 = cost(model::KvType::F16), q8 = cost(model::KvType::Q8_0);
  EXPECT_DOUBLE_EQ(f32.ranks[0].kv_bytes, 22.0 * 512 * 4 * 2048);
  EXPECT_DOUBLE_EQ(f16.ranks[0].kv_bytes, 22.0 * 512 * 2 * 2048);
  EXPECT_DOUBLE_EQ(q8.ranks[0].kv_bytes, 22.0 * 512 * 34 / 32 * 2048);
  // A decode step reads the cache up to its position: F16 saves half of F32's share of the time.
  EXPECT_NEAR(f32.gen_ms - f16.gen_ms, 22.0 * 512 * 2 * 1024 / 10e9 * 1e3, 1e-9);
  EXPECT_EQ(Workload{}.cache_type, model::KvType::F16);  // as run's and serve's --cache-type
}

TEST(CostModel, SlidingLayersKeepARingOfTheirWindow) {
  // gpt-oss-120b: 36 layers of 8 KV heads of 64, the even ones sliding over 128 positions. An F16
  // position of a layer is 2 × 8 × 64 × 2 = 2048 bytes. At a context of 8192 in chunks of 512,
  // a sliding layer keeps a ring of 128 + 512 - 1 = 639 positions, each twice (1278 slots).
  const ModelFacts m = ModelFacts::from_preset("gpt-oss-120b:q4_0");
  const MachineSpec machine{"x", 512, 10, 100};
  Workload w;
  w.context = 8192;
  w.chunk = 512;
  const auto cost = [&](int32_t position) {
    w.position = position;
    return predict(m, parallel::Layout::make(Strategy::Single, 1), {machine}, {}, w);
  };
  const Prediction at2k = cost(2048), at4k = cost(4096);
  EXPECT_DOUBLE_EQ(at4k.ranks[0].kv_bytes, 2048.0 * (18 * 8192 + 18 * 1278));
  // A decode step reads its window in sliding layers, whatever the position: from 2048 to 4096
  // only the 18 full layers read 2048 positions more.
  EXPECT_NEAR(at4k.gen_ms - at2k.gen_ms, 18.0 * 2048 * 2048 / 10e9 * 1e3, 1e-9);
  // A context too short for a ring to pay (639 > 1024 / 2): every layer keeps every position.
  w.context = 1024;
  EXPECT_DOUBLE_EQ(cost(512).ranks[0].kv_bytes, 2048.0 * 36 * 1024);
}

TEST(Catalog, EmbeddedCatalogKnowsTheRdmaChips) {
  const HardwareCatalog& c = HardwareCatalog::builtin();
  for (const char* name : {"M4 Pro", "M4 Max", "M3 Ultra", "M5 Pro", "M5 Max"}) EXPECT_TRUE(c.chip(name).rdma_tb5) << name;
  for (const char* name : {"M1", "M2 Ultra", "M3 Max", "M4", "M5"}) EXPECT_FALSE(c.chip(name).rdma_tb5) << name;
  EXPECT_EQ(c.chip("M4").thunderbolt, 4);
  EXPECT_EQ(c.chip("m1 max").memory_bandwidth_gbs, 400);
  ASSERT_NE(c.match_brand("Apple M4 Max"), nullptr);
  EXPECT_EQ(c.match_brand("Apple M4 Max")->name, "M4 Max");
  EXPECT_EQ(c.match_brand("Apple M4")->name, "M4");
  EXPECT_EQ(c.match_brand("AMD EPYC 9R14 96-Core Processor"), nullptr);
  EXPECT_THROW(c.chip("M9 Hyper"), Error);
}

TEST(Catalog, RejectsInconsistentEntries) {
  EXPECT_THROW(HardwareCatalog::parse("{}"), FormatError);
  EXPECT_THROW(HardwareCatalog::parse(R"({"chips": [{"name": "X", "family": "M9", "tier": "max", "performance_cores": 1,
      "efficiency_cores": 1, "gpu_cores": [1, 2], "memory_bandwidth_gbs": 1, "memory_options_gb": [8],
      "thunderbolt": 4, "rdma_tb5": true}]})"),
               FormatError);
}

}  // namespace
}  // namespace orchard::cluster

namespace orchard::cluster {
namespace {

// A mixture of experts needs memory for all its experts but reads only the chosen ones per
// token: the facts count the active share, and generation is predicted from it.
TEST(CostModel, MixtureOfExpertsDecodesAtItsActiveBytes) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("qwen3moe", "tiny", "q8_0"));
  ModelFacts moe = ModelFacts::from_gguf(file);
  // By hand from the tensor table: per layer, the FFN is ffn_norm, the F32 router and three
  // expert stacks, of which a token reads expert_used_count / expert_count.
  const auto bytes = [&](const char* name) { return static_cast<double>(file.tensor(name).size_bytes); };
  const double stacks = bytes("blk.0.ffn_gate_exps.weight") + bytes("blk.0.ffn_up_exps.weight") +
                        bytes("blk.0.ffn_down_exps.weight");
  const double rest = bytes("blk.0.ffn_norm.weight") + bytes("blk.0.ffn_gate_inp.weight");
  EXPECT_NEAR(moe.ffn_bytes, stacks + rest, 1);
  EXPECT_NEAR(moe.ffn_active_fraction, (rest + stacks * 2 / 8) / (rest + stacks), 1e-9);

  ModelFacts dense_reading = moe;
  dense_reading.ffn_active_fraction = 1;
  const MachineSpec mac = machine_from_chip(HardwareCatalog::builtin().chip("M4 Max"), 64, "mac");
  const parallel::Layout one = parallel::Layout::make(parallel::Strategy::Single, 1);
  Workload work;
  work.position = 0;  // weights only
  const RankCost active = predict(moe, one, {mac}, LinkSpec{}, work).ranks[0];
  const RankCost all = predict(dense_reading, one, {mac}, LinkSpec{}, work).ranks[0];
  EXPECT_EQ(active.weight_bytes, all.weight_bytes);  // memory: every expert
  const double layer_all = moe.attn_bytes + moe.ffn_bytes;
  const double layer_active = moe.attn_bytes + moe.ffn_bytes * moe.ffn_active_fraction;
  const double layers = moe.config.n_layers, out = moe.output_bytes;
  EXPECT_NEAR(active.gen_ms / all.gen_ms, (layers * layer_active + out) / (layers * layer_all + out), 1e-9);
}

// An expert split holds half the experts of each layer on each of two ranks (and half the
// attention, as a tensor split); a decode step waits for the rank that holds more of the token's
// chosen experts, a prompt spreads over both. The links carry what a tensor split's do.
TEST(CostModel, ExpertSplitHandWorked) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("qwen3moe", "tiny", "q8_0"));
  const ModelFacts moe = ModelFacts::from_gguf(file);
  const MachineSpec machine{"x", 16, 10, 100};
  Workload work;
  work.position = 0;
  work.context = 256;
  const LinkSpec link{100, 1};
  const auto expert = predict(moe, parallel::Layout::make(Strategy::Expert, 2), {machine, machine}, link, work);
  const auto tensor = predict(moe, parallel::Layout::make(Strategy::Tensor, 2), {machine, machine}, link, work);
  const auto pipe = predict(moe, parallel::Layout::make(Strategy::Pipeline, 2), {machine, machine}, link, work);
  const RankCost& r = expert.ranks[0];
  EXPECT_EQ(r.shard.experts_of(0), (std::pair<int32_t, int32_t>{0, 4}));
  // Memory: half the attention (2 of 4 heads, 1 of 2 KV heads), half the FFN, half the head.
  const double layers = moe.config.n_layers;
  EXPECT_NEAR(r.weight_bytes, layers * (moe.attn_bytes + moe.ffn_bytes) / 2 + moe.output_bytes / 2 + moe.embedding_bytes,
              1);
  EXPECT_NEAR(r.weight_bytes, tensor.ranks[0].weight_bytes, 1);
  // 2 of 8 experts chosen, 4 held by each: both on one rank with probability 2 × C(4,2) / C(8,2)
  // = 12/28, else one each; the busier rank reads (2 × 12 + 1 × 16) / 28 of the 2 chosen
  // experts' bytes.
  const double busy = (2 * 12 + 1 * 16) / 28.0 / 2;
  EXPECT_NEAR(r.expert_balance, busy * 2, 1e-12);
  const double read = layers * (moe.attn_bytes / 2 + moe.ffn_bytes * moe.ffn_active_fraction * busy) + moe.output_bytes / 2;
  EXPECT_NEAR(expert.gen_compute_ms, read / 10e9 * 1e3, 1e-9);
  EXPECT_GT(expert.gen_compute_ms, tensor.gen_compute_ms);
  // Bytes on the wire per token: 8 sums of a 1 KiB row exchanged both ways, then half the
  // logits each way, as a tensor split; a pipeline sends one row and the logits.
  const double logits = 4.0 * moe.config.vocab_size;
  EXPECT_DOUBLE_EQ(expert.wire_bytes_per_token, 8 * 2 * 1024.0 + logits);
  EXPECT_DOUBLE_EQ(tensor.wire_bytes_per_token, expert.wire_bytes_per_token);
  EXPECT_DOUBLE_EQ(pipe.wire_bytes_per_token, 1024.0 + logits);
  EXPECT_EQ(expert.messages_per_token, tensor.messages_per_token);
}

// A pipeline's prompt chunks (32 positions here: eight per stage) multiply at the rate the
// probe measured for 32 tokens, not the 64-token dense rate, and its last stage computes the
// output head once per forward pass, after the last chunk (the engine skips it for the
// others): a one-row product, at the one-token rate or its bytes at the bandwidth.
TEST(CostModel, PipelineChunksRunAtTheirTokenRateAndTheHeadOnce) {
  const ModelFacts m = ModelFacts::from_preset("tinyllama-1.1b:q4_0");
  MachineSpec machine{"x", 16, 1e6, 100};
  machine.expert_efficiency = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 1};
  Workload w;
  w.position = 0;
  w.context = 512;
  w.prompt_tokens = 256;
  w.chunk = 256;
  const Prediction pipe = predict(m, parallel::Layout::make(Strategy::Pipeline, 2), {machine, machine}, LinkSpec{}, w);
  const double layer_params = m.attn_params + m.ffn_params;
  // 11 of 22 layers per stage, 32 positions per chunk at 0.6 of 100 GFLOP/s.
  const double stage_ms = 2.0 * 32 * 11 * layer_params / 60e9 * 1e3;
  for (const RankCost& r : pipe.ranks)
    EXPECT_NEAR(r.prompt_chunk_ms - r.prompt_repeated_ms - r.prompt_attention_ms, stage_ms, 1e-9);
  EXPECT_EQ(pipe.ranks[0].prompt_head_ms, 0);
  // 2 × 2048 × 32000 FLOPs at 0.1 of the rate; its 36.9 MB at 1e6 GB/s are nothing beside it.
  const double head_ms = 2.0 * 2048 * 32000 / 10e9 * 1e3;
  EXPECT_NEAR(pipe.ranks[1].prompt_head_ms, head_ms, 1e-9);
  // 8 chunks through 2 equal stages: 9 chunk times (fill, then one chunk leaves per stage
  // time), then the head once; the links cost nothing here, the logits broadcast neither.
  const double chunk_ms = pipe.ranks[0].prompt_chunk_ms;
  EXPECT_NEAR(pipe.prompt_ms, 9 * chunk_ms + head_ms, 1e-9);
  // One rank takes the whole prompt in one pass of 256 (at the 64-token rate: the curve is
  // flat beyond its points) and the head once too.
  const Prediction one = predict(m, parallel::Layout::make(Strategy::Single, 1), {machine}, LinkSpec{}, w);
  EXPECT_NEAR(one.ranks[0].prompt_chunk_ms - one.ranks[0].prompt_repeated_ms - one.ranks[0].prompt_attention_ms,
              2.0 * 256 * 22 * layer_params / 100e9 * 1e3, 1e-9);
  EXPECT_NEAR(one.prompt_ms, one.ranks[0].prompt_chunk_ms + head_ms, 1e-9);
  // A prompt of two passes (-b 128) computes the head twice.
  w.chunk = 128;
  const Prediction two = predict(m, parallel::Layout::make(Strategy::Single, 1), {machine}, LinkSpec{}, w);
  EXPECT_NEAR(two.prompt_ms, 2 * (two.ranks[0].prompt_chunk_ms + head_ms), 1e-9);
}

// The busiest member's expected share of a token's choices, against a count over every choice
// of `used` among the experts (an independent enumeration): the i_m choices only member m
// holds are its own, the replicated ones fill the lighter members.
double enumerated_busiest(const std::vector<int32_t>& only, int32_t shared, int32_t used) {
  std::vector<int32_t> owner;  // per expert: its member, or -1 when everyone holds it
  for (size_t m = 0; m < only.size(); ++m)
    for (int32_t e = 0; e < only[m]; ++e) owner.push_back(static_cast<int32_t>(m));
  for (int32_t e = 0; e < shared; ++e) owner.push_back(-1);
  const auto n = static_cast<int32_t>(owner.size());
  double total = 0, count = 0;
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) != used) continue;
    std::vector<int32_t> load(only.size(), 0);
    int32_t free = 0;
    for (int32_t e = 0; e < n; ++e)
      if (mask >> e & 1u) owner[static_cast<size_t>(e)] < 0 ? ++free : ++load[static_cast<size_t>(owner[static_cast<size_t>(e)])];
    for (; free > 0; --free) ++*std::min_element(load.begin(), load.end());
    total += *std::max_element(load.begin(), load.end());
    ++count;
  }
  return total / count;
}

TEST(CostModel, ExpectedBusiestChoicesCountsEveryDraw) {
  for (const auto& [only, shared, used] : std::vector<std::tuple<std::vector<int32_t>, int32_t, int32_t>>{
           {{4, 4}, 0, 2}, {{8, 8}, 0, 4}, {{6, 6}, 4, 4}, {{3, 3, 3}, 3, 4}, {{5, 2, 4}, 1, 3}, {{2, 2, 2, 2}, 0, 8}})
    EXPECT_NEAR(expected_busiest_choices(only, shared, used), enumerated_busiest(only, shared, used), 1e-12)
        << only.size() << " members, " << shared << " shared, " << used << " used";
  // moe-3b's 4 of 32 on 2 ranks: the busier rank computes 1.35× the mean share without
  // replicas, 1.04× with 16 of them (docs/parallel.md), 1 with every expert on both.
  EXPECT_NEAR(expected_busiest_choices({16, 16}, 0, 4) / 2, 1.3504, 1e-4);
  EXPECT_NEAR(expected_busiest_choices({8, 8}, 16, 4) / 2, 1.0413, 1e-4);
  EXPECT_DOUBLE_EQ(expected_busiest_choices({0, 0}, 32, 4) / 2, 1.0);
}

// The planner replicates experts when memory allows and the balance they buy is worth it, and
// says how many and why; without room beside the model it replicates none.
TEST(Planner, ReplicatesExpertsWhenItPays) {
  PlanRequest r;
  r.model = ModelFacts::from_preset("qwen3-30b-a3b:q4_k_m");
  const MachineSpec roomy{"a", 128, 100, 2000};
  r.machines = {roomy, roomy};
  r.default_link = {10, 80};
  r.work.context = 4096;
  r.only = Strategy::Expert;
  const Plan plan = make_plan(r);
  const int32_t replicas = plan.predicted.layout.expert_replicas;
  EXPECT_GT(replicas, 0) << plan.explanation;
  EXPECT_LT(plan.predicted.ranks[0].expert_balance, 1.2);
  parallel::Layout plain = plan.predicted.layout;
  plain.expert_replicas = 0;
  const Prediction without = predict(r.model, plain, {roomy, roomy}, r.default_link, r.work);
  EXPECT_NEAR(without.ranks[0].expert_balance, expected_busiest_choices({64, 64}, 0, 8) / 4, 1e-9);
  EXPECT_GT(plan.predicted.gen_tok_s, without.gen_tok_s * kReplicasGain);
  EXPECT_NE(plan.explanation.find(fmt::format("Replicas: {} experts of each layer", replicas)), std::string::npos)
      << plan.explanation;
  EXPECT_EQ(plan_to_json(plan)["expert_replicas"], replicas);
  EXPECT_NE(format_plan(plan).find(fmt::format("{} replicated experts", replicas)), std::string::npos);
  // Half the model's memory each and hardly more: no room for replicas.
  const double tight_gb = (without.ranks[0].need_bytes() + 0.2e9) / kUsableMemoryFraction / 1e9;
  r.machines = {MachineSpec{"a", tight_gb, 100, 2000}, MachineSpec{"b", tight_gb, 100, 2000}};
  const Plan tight = make_plan(r);
  EXPECT_EQ(tight.predicted.layout.expert_replicas, 0) << tight.explanation;
  EXPECT_NE(tight.explanation.find("No replicated experts"), std::string::npos) << tight.explanation;
}

// Four machines in two pods of fast cables, listed interleaved, the pods joined by a slow
// network: for a mixture of experts the plan is a hybrid of expert groups inside the pods and
// pipeline stages across them.
TEST(Planner, HybridPutsExpertGroupsInsidePodsOfFastLinks) {
  PlanRequest r;
  r.model = ModelFacts::from_preset("qwen3-235b-a22b:q4_k_m");
  for (int i = 0; i < 4; ++i)
    r.machines.push_back(machine_from_chip(HardwareCatalog::builtin().chip("M3 Ultra"), 96, "mac" + std::to_string(i)));
  r.links.assign(4, std::vector<LinkSpec>(4, LinkSpec{3000, 1}));
  r.links[0][2] = r.links[2][0] = r.links[1][3] = r.links[3][1] = LinkSpec{10, 80};
  r.world = 4;
  const Plan plan = make_plan(r);
  EXPECT_EQ(plan.strategy, Strategy::Hybrid) << plan.explanation;
  EXPECT_TRUE(plan.predicted.layout.splits_experts(r.model.config));
  EXPECT_EQ(plan.predicted.layout.tp, 2);
  EXPECT_EQ(plan.predicted.link.latency_us, 10);
  EXPECT_EQ(plan.predicted.stage_link.latency_us, 3000);
  // Each stage's group is one pod.
  const auto& m = plan.machine_indices;
  EXPECT_EQ(r.links[m[0]][m[1]].latency_us, 10);
  EXPECT_EQ(r.links[m[2]][m[3]].latency_us, 10);
  EXPECT_NE(plan.explanation.find("pipeline stages × 2 expert-parallel ranks"), std::string::npos) << plan.explanation;
  EXPECT_FALSE(plan.predicted.ranks[0].shard.expert_holders.empty());
  // A dense model's hybrid keeps tensor groups.
  r.model = ModelFacts::from_preset("llama-70b:q8_0");
  const Plan dense = make_plan(r);
  if (dense.strategy == Strategy::Hybrid) {
    EXPECT_NE(dense.explanation.find("tensor ranks"), std::string::npos) << dense.explanation;
  }
  EXPECT_TRUE(dense.predicted.ranks[0].shard.expert_holders.empty());
}

// The planner weighs an expert split among the others and says why in words: chosen, how the
// experts are held and what the all-reduces cost; not chosen, what it would have given.
TEST(Planner, ConsidersAndExplainsAnExpertSplit) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("qwen3moe", "tiny", "q8_0"));
  PlanRequest r;
  r.model = ModelFacts::from_gguf(file);
  r.machines = {MachineSpec{"a", 16, 10, 100}, MachineSpec{"b", 16, 10, 100}};
  r.default_link = {50, 10};
  r.work.context = 256;
  r.work.chunk = 64;
  r.world = 2;
  const Plan any = make_plan(r);
  bool considered = false;
  for (const Prediction& p : any.considered) considered = considered || p.layout.strategy == Strategy::Expert;
  EXPECT_TRUE(considered);
  EXPECT_NE(any.explanation.find("uses 2 of 8 experts per layer"), std::string::npos) << any.explanation;
  if (any.strategy != Strategy::Expert) {
    EXPECT_NE(any.explanation.find("An expert split over 2 machines"), std::string::npos) << any.explanation;
  }

  r.only = Strategy::Expert;
  const Plan plan = make_plan(r);
  EXPECT_EQ(plan.strategy, Strategy::Expert);
  EXPECT_GT(plan.predicted.gen_tok_s, 0);
  EXPECT_GT(plan.predicted.prompt_tok_s, 0);
  EXPECT_NE(plan.explanation.find("Chosen: an expert split over 2 machines"), std::string::npos) << plan.explanation;
  const int32_t replicas = plan.predicted.layout.expert_replicas;
  EXPECT_NE(plan.explanation.find(fmt::format("holds whole experts ({} of 8 on the first", 4 + replicas / 2)),
            std::string::npos)
      << plan.explanation;
  const nlohmann::json j = plan_to_json(plan);
  EXPECT_EQ(j["expert_replicas"], replicas);
  EXPECT_EQ(j["assignment"][1]["experts"], nlohmann::json({4, 8}));
  EXPECT_GT(j["predicted"]["wire_bytes_per_token"].get<double>(), 0);
}

}  // namespace
}  // namespace orchard::cluster

namespace orchard::cluster {
namespace {

// A prompt multiplies each expert only by the tokens routed to it (chunk × used / experts):
// those products are charged at the rate the machine's probe measured for that many tokens,
// the rest of the chunk at the dense rate.
TEST(CostModel, PromptChargesExpertProductsAtTheirMeasuredRate) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("qwen3moe", "tiny", "q8_0"));
  const ModelFacts moe = ModelFacts::from_gguf(file);
  // By hand from the tensor table: all experts' elements of a layer (every layer has them).
  double stacks = 0;
  for (const char* name : {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight"})
    stacks += static_cast<double>(file.tensor(name).elements());
  EXPECT_NEAR(moe.expert_params, stacks, 1);
  // Unlimited bandwidth, so the chunk is compute-bound; 1, 2, ... 64 tokens at these fractions
  // (64, where the dense rate is measured, at 1 as the probe gives it).
  MachineSpec measured{"x", 16, 1e6, 100};
  measured.expert_efficiency = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 1};
  const MachineSpec dense{"x", 16, 1e6, 100};
  Workload work;
  work.position = 0;
  work.context = 256;
  work.prompt_tokens = 64;
  work.chunk = 64;
  const auto one = parallel::Layout::make(Strategy::Single, 1);
  const RankCost curved = predict(moe, one, {measured}, LinkSpec{}, work).ranks[0];
  const RankCost flat = predict(moe, one, {dense}, LinkSpec{}, work).ranks[0];
  // What every row repeats per layer: 12.5 float passes over its 4·d bytes at the bandwidth
  // (1e6 GB/s: nearly free) and the router's 2·d·E FLOPs at the one-token rate (0.1 of the
  // dense rate with the curve).
  const double layers = moe.config.n_layers, d = moe.config.n_embd, router = 2 * d * moe.config.n_expert;
  const double passes_ms = 64 * layers * 12.5 * 4 * d / 1e15 * 1e3;
  EXPECT_NEAR(flat.prompt_repeated_ms, passes_ms + 64 * layers * router / 100e9 * 1e3, 1e-9);
  EXPECT_NEAR(curved.prompt_repeated_ms, passes_ms + 64 * layers * router / 10e9 * 1e3, 1e-9);
  const double with_curve = curved.prompt_chunk_ms - curved.prompt_repeated_ms - curved.prompt_attention_ms;
  const double without = flat.prompt_chunk_ms - flat.prompt_repeated_ms - flat.prompt_attention_ms;
  // 64 tokens × 2 of 8 experts: 16 tokens per expert, efficiency 0.5: those FLOPs take twice
  // as long. FLOPs of the experts: 2 × 16 tokens × every expert's parameters, per layer.
  const double expert_ms = 2.0 * 16 * layers * stacks / 100e9 * 1e3;
  EXPECT_NEAR(with_curve - without, expert_ms * (1 / 0.5 - 1), 1e-9);
  // Every FLOP of the chunk at the dense rate without a curve; the head's one row apart, at the
  // one-token rate (0.1 of it with the curve).
  const double flops = 2.0 * 64 * layers * (moe.attn_params + moe.ffn_params * moe.ffn_active_fraction);
  EXPECT_NEAR(without, flops / 100e9 * 1e3, 1e-9);
  EXPECT_NEAR(flat.prompt_head_ms, 2.0 * moe.output_params / 100e9 * 1e3, 1e-9);
  EXPECT_NEAR(curved.prompt_head_ms, 2.0 * moe.output_params / 10e9 * 1e3, 1e-9);
  // An expert split holds half the experts; the chunk's 128 choices fall binomially on the two,
  // and each layer waits for the busier: sqrt(2/π) standard deviations (sqrt(128 / 4)) above
  // 64 of them. Its share of those FLOPs, at the same rate.
  const auto split = predict(moe, parallel::Layout::make(Strategy::Expert, 2), {measured, measured}, LinkSpec{}, work);
  const auto split_dense = predict(moe, parallel::Layout::make(Strategy::Expert, 2), {dense, dense}, LinkSpec{}, work);
  const double busier = (64 + std::sqrt(2 / M_PI) * std::sqrt(128 * 0.25)) / 128;
  EXPECT_NEAR(split.ranks[0].prompt_expert_balance, busier / 0.5, 1e-12);
  EXPECT_NEAR(split.ranks[0].prompt_chunk_ms - split.ranks[0].prompt_repeated_ms -
                  (split_dense.ranks[0].prompt_chunk_ms - split_dense.ranks[0].prompt_repeated_ms),
              expert_ms * busier, 1e-9);
  EXPECT_DOUBLE_EQ(split.ranks[0].prompt_attention_ms, split_dense.ranks[0].prompt_attention_ms);
  // With a partner the sums' 8 passes more per row and layer.
  EXPECT_NEAR(split_dense.ranks[0].prompt_repeated_ms - flat.prompt_repeated_ms, 64 * layers * 8 * 4 * d / 1e15 * 1e3,
              1e-9);
  // Between the points, linear in log2 of the tokens; beyond them, flat.
  EXPECT_NEAR(expert_efficiency(measured, 24), 0.5 + 0.1 * std::log2(1.5), 1e-12);
  EXPECT_DOUBLE_EQ(expert_efficiency(measured, 0.5), 0.1);
  EXPECT_DOUBLE_EQ(expert_efficiency(measured, 512), 1.0);
  EXPECT_DOUBLE_EQ(expert_efficiency(dense, 16), 1.0);
  // A shape: Mixtral's 8 experts of 3 × 4096 × 14336 per layer, beside its router.
  const ModelFacts mixtral = ModelFacts::from_preset("mixtral-8x7b:q4_0");
  EXPECT_DOUBLE_EQ(mixtral.expert_params, 8 * 3.0 * 4096 * 14336);
  EXPECT_DOUBLE_EQ(mixtral.ffn_params, mixtral.expert_params + 4096.0 * 8);
}

// A prompt's attention: every row reads the keys and values of its position and those before
// it (a sliding layer: its window's), 2 multiply-adds per key, dimension and query head each
// for the scores and the values, at the rate the probe measured for it.
TEST(CostModel, PromptAttentionIsChargedPerKeyAtItsMeasuredRate) {
  EXPECT_DOUBLE_EQ(mean_prompt_keys(256, 0), 128.5);
  EXPECT_DOUBLE_EQ(mean_prompt_keys(256, 512), 128.5);
  // 10 rows through a window of 4: 1 + 2 + 3 + 4, then 6 rows of 4.
  EXPECT_DOUBLE_EQ(mean_prompt_keys(10, 4), 3.4);
  EXPECT_DOUBLE_EQ(mean_prompt_keys(0, 0), 0);
  const ModelFacts m = ModelFacts::from_preset("tinyllama-1.1b:q4_0");
  // 32 heads of 64: 2 × 32 × (64 + 64).
  EXPECT_DOUBLE_EQ(attention_flops_per_key(m.config, 32), 8192);
  // Kimi K2's latent attention: 64 heads scoring a latent of 512 + 64 rotated dimensions and
  // summing values of 512: 2 × 64 × 1088.
  EXPECT_DOUBLE_EQ(attention_flops_per_key(ModelFacts::from_preset("kimi-k2:q4_0").config, 64), 139264);

  MachineSpec machine{"x", 16, 1e6, 100};
  machine.attention_efficiency = 0.25;
  Workload w;
  w.position = 0;
  w.context = 512;
  w.prompt_tokens = 256;
  w.chunk = 256;
  // One rank: 256 rows × 22 layers × 128.5 keys × 8192 FLOPs at 25 GFLOP/s = 237.15 ms.
  const Prediction one = predict(m, parallel::Layout::make(Strategy::Single, 1), {machine}, LinkSpec{}, w);
  EXPECT_NEAR(one.ranks[0].prompt_attention_ms, 256 * 22 * 128.5 * 8192 / 25e9 * 1e3, 1e-9);
  EXPECT_NEAR(one.ranks[0].prompt_attention_ms, 237.15, 0.01);
  // Not measured: at the matmul rate, a quarter of the time.
  const MachineSpec unmeasured{"x", 16, 1e6, 100};
  EXPECT_NEAR(predict(m, parallel::Layout::make(Strategy::Single, 1), {unmeasured}, LinkSpec{}, w).ranks[0].prompt_attention_ms,
              237.15 / 4, 0.01);
  // A tensor split holds half the heads.
  const Prediction tensor = predict(m, parallel::Layout::make(Strategy::Tensor, 2), {machine, machine}, LinkSpec{}, w);
  for (const RankCost& r : tensor.ranks) EXPECT_NEAR(r.prompt_attention_ms, 237.15 / 2, 0.01);
  // A pipeline's chunks of 32 through 11 layers each, at the prompt's mean number of keys.
  const Prediction pipe = predict(m, parallel::Layout::make(Strategy::Pipeline, 2), {machine, machine}, LinkSpec{}, w);
  for (const RankCost& r : pipe.ranks) EXPECT_NEAR(r.prompt_attention_ms, 32 * 11 * 128.5 * 8192 / 25e9 * 1e3, 1e-9);
  // gpt-oss: every other layer (the even ones) sees a window of 128: 18 layers at 128.5 keys,
  // 18 at (128 × 129 / 2 + 128 × 128) / 256 = 96.25; 64 heads of 64.
  const ModelFacts oss = ModelFacts::from_preset("gpt-oss-120b:q4_0");
  EXPECT_NEAR(predict(oss, parallel::Layout::make(Strategy::Single, 1), {machine}, LinkSpec{}, w).ranks[0].prompt_attention_ms,
              256 * (18 * 128.5 + 18 * 96.25) * (2 * 64 * 128) / 25e9 * 1e3, 1e-9);
  machine.attention_efficiency = 0;
  EXPECT_THROW(predict(m, parallel::Layout::make(Strategy::Single, 1), {machine}, LinkSpec{}, w), Error);
}

// The probe times products of the model's weight types, each at its share of a prompt token's
// multiply-adds: a file's by its tensor table, a preset's by its type.
TEST(CostModel, PromptTypesWeighEachTypeByItsMultiplyAdds) {
  // tiny qwen3moe Q4_K_M: 4 layers of q, o [256 × 256], k, v [128 × 256] and 8 experts of 3 ×
  // 256 × 512, 2 chosen; layers 2 and 3 keep attn_v and ffn_down_exps in Q6_K (llama.cpp's
  // more-bits layers). Per layer 196,608 attention and 786,432 active expert multiply-adds;
  // in Q6_K 32,768 + 262,144 in two of the four layers: 589,824 / 3,932,160 = 0.15.
  const ModelFacts tiny =
      ModelFacts::from_gguf(model::gguf::Reader::open(testing::synthetic_model("qwen3moe", "tiny", "q4_k_m")));
  ASSERT_EQ(tiny.prompt_types.size(), 2u);
  double q6 = 0, total = 0;
  for (const TypeShare& t : tiny.prompt_types) {
    total += t.share;
    if (t.type == core::TensorType::Q6_K) q6 = t.share;
  }
  EXPECT_NEAR(total, 1, 1e-12);
  EXPECT_NEAR(q6, 0.15, 1e-12);
  const ModelFacts q8 = ModelFacts::from_gguf(model::gguf::Reader::open(testing::synthetic_model("qwen3moe", "tiny", "q8_0")));
  ASSERT_EQ(q8.prompt_types.size(), 1u);
  EXPECT_EQ(q8.prompt_types[0].type, core::TensorType::Q8_0);
  EXPECT_DOUBLE_EQ(q8.prompt_types[0].share, 1);
  // llama-8b:q4_k_m: half of v [1024 × 4096] and of the FFN's down [4096 × 14336] in Q6_K, of
  // 4096 × (2 × 4096 + 2 × 1024) + 3 × 4096 × 14336 multiply-adds.
  const ModelFacts llama = ModelFacts::from_preset("llama-8b:q4_k_m");
  ASSERT_EQ(llama.prompt_types.size(), 2u);
  EXPECT_EQ(llama.prompt_types[1].type, core::TensorType::Q6_K);
  EXPECT_NEAR(llama.prompt_types[1].share, 0.5 * (4194304.0 + 58720256) / (41943040.0 + 176160768), 1e-12);
  EXPECT_EQ(ModelFacts::from_preset("llama-8b:q8_0").prompt_types[0].type, core::TensorType::Q8_0);
}

}  // namespace
}  // namespace orchard::cluster

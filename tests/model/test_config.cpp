// Hyper-parameters of mixture-of-experts models read from GGUF metadata, and the clear errors
// for what Orchard cannot run: each names the key or tensor and what was expected.
#include <gtest/gtest.h>

#include <functional>

#include "core/error.h"
#include "model/architecture.h"
#include "model/config.h"
#include "model/gguf/writer.h"
#include "model/model_files.h"
#include "model/weights.h"

namespace orchard {
namespace {

using model::gguf::Value;

// A header-only model (metadata and an F32 embedding) of architecture `arch`, edited by `edit`.
std::vector<uint8_t> header(const std::string& arch, const std::function<void(model::gguf::Writer&)>& edit) {
  model::gguf::Writer w;
  const std::string p = arch + ".";
  w.set("general.architecture", Value::string(arch));
  w.set(p + "embedding_length", Value::u32(64));
  w.set(p + "block_count", Value::u32(2));
  w.set(p + "attention.head_count", Value::u32(4));
  w.set(p + "attention.head_count_kv", Value::u32(2));
  edit(w);
  w.add_tensor("token_embd.weight", core::TensorType::F32, {64, 16}, std::vector<uint8_t>(64 * 16 * 4));
  return w.to_bytes();
}

void set_experts(model::gguf::Writer& w, const std::string& p, uint32_t count, uint32_t used) {
  w.set(p + "expert_count", Value::u32(count));
  w.set(p + "expert_used_count", Value::u32(used));
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    auto file = model::gguf::Reader::parse(bytes, "m.gguf");
    model::ModelConfig::from_gguf(file);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MoeConfig, Qwen3MoeReadsItsExperts) {
  const auto bytes = header("qwen3moe", [](auto& w) {
    set_experts(w, "qwen3moe.", 8, 2);
    w.set("qwen3moe.expert_feed_forward_length", Value::u32(32));
  });
  auto file = model::gguf::Reader::parse(bytes, "m.gguf");
  const auto c = model::ModelConfig::from_gguf(file);
  EXPECT_EQ(c.arch, model::find_architecture("qwen3moe"));
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_EQ(c.n_ff_exp, 32);
  EXPECT_EQ(c.n_ff, 32);  // no dense layer: the dense width may be absent
  EXPECT_TRUE(c.moe_layer(0) && c.moe_layer(1));
  EXPECT_EQ(c.rope_ordering, model::RopeOrdering::NeoX);
}

TEST(MoeConfig, MixtralIsLlamaWithExpertsOfTheFeedForwardWidth) {
  const auto bytes = header("llama", [](auto& w) {
    w.set("llama.feed_forward_length", Value::u32(96));
    set_experts(w, "llama.", 8, 2);
  });
  auto file = model::gguf::Reader::parse(bytes, "m.gguf");
  const auto c = model::ModelConfig::from_gguf(file);
  EXPECT_EQ(c.n_expert, 8);
  EXPECT_EQ(c.n_ff_exp, 96);
  EXPECT_TRUE(c.moe_layer(0));
  // The same architecture without experts stays dense.
  auto dense_bytes = header("llama", [](auto& w) { w.set("llama.feed_forward_length", Value::u32(96)); });
  auto dense_file = model::gguf::Reader::parse(dense_bytes, "m.gguf");
  const auto dense = model::ModelConfig::from_gguf(dense_file);
  EXPECT_EQ(dense.n_expert, 0);
  EXPECT_FALSE(dense.moe_layer(0));
}

TEST(MoeConfig, ErrorsNameTheKey) {

  EXPECT_NE(error_of(header("qwen3moe", [](auto&) {})).find("qwen3moe.expert_count"), std::string::npos);
  EXPECT_NE(error_of(header("qwen3moe",
                            [](auto& w) {
                              set_experts(w, "qwen3moe.", 4, 5);
                              w.set("qwen3moe.expert_feed_forward_length", Value::u32(32));
                            }))
                .find("expert_used_count 5 is more than expert_count 4"),
            std::string::npos);
  EXPECT_NE(error_of(header("qwen3moe", [](auto& w) { set_experts(w, "qwen3moe.", 4, 2); }))
                .find("qwen3moe.expert_feed_forward_length"),
            std::string::npos);
  EXPECT_NE(error_of(header("qwen3moe",
                            [](auto& w) {
                              set_experts(w, "qwen3moe.", 4, 2);
                              w.set("qwen3moe.expert_feed_forward_length", Value::u32(32));
                              w.set("qwen3moe.expert_gating_func", Value::u32(2));
                            }))
                .find("expert_gating_func = 2 is not supported; supported: 1 (softmax)"),
            std::string::npos);
  EXPECT_NE(error_of(header("qwen3moe",
                            [](auto& w) {
                              set_experts(w, "qwen3moe.", 4, 2);
                              w.set("qwen3moe.expert_feed_forward_length", Value::u32(32));
                              w.set("qwen3moe.expert_shared_count", Value::u32(1));
                            }))
                .find("shared experts are not supported yet"),
            std::string::npos);
  const std::string unknown = error_of(header("mamba", [](auto&) {}));
  EXPECT_NE(unknown.find("architecture 'mamba' is not supported; supported: llama, qwen2, qwen3, qwen3moe"),
            std::string::npos)
      << unknown;
}

// An expert stack whose shape disagrees with the metadata is refused naming the tensor and both
// shapes.
TEST(MoeConfig, ExpertStackOfTheWrongShapeIsNamed) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("qwen3moe", "tiny", "f32"));
  auto config = model::ModelConfig::from_gguf(file);
  config.n_expert = 4;  // the file holds 8
  try {
    model::ModelWeights weights(file, config, model::Shard::whole(config), {});
    FAIL() << "loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'blk.0.ffn_gate_inp.weight' has shape [256, 8], expected [256, 4]"),
              std::string::npos)
        << e.what();
  }
}

// The table drives the byte ranges a rank is sent: a tensor split of a MoE model sends each
// rank its rows of every expert, less than the whole stacks.
TEST(MoeConfig, ShardByteRangesCoverEachExpertsRows) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("qwen3moe", "tiny", "f32"));
  const auto config = model::ModelConfig::from_gguf(file);
  model::Shard half = model::Shard::whole(config);
  half.expert_ff_end = config.n_ff_exp / 2;
  uint64_t whole_bytes = 0, half_bytes = 0;
  for (const auto& r : model::shard_byte_ranges(file, config, model::Shard::whole(config))) whole_bytes += r.size;
  for (const auto& r : model::shard_byte_ranges(file, config, half)) half_bytes += r.size;
  const auto& gate = file.tensor("blk.0.ffn_gate_exps.weight");
  // gate and up lose half their rows in each of the 4 layers; down (split by columns) is sent whole.
  EXPECT_EQ(whole_bytes - half_bytes, 4 * gate.size_bytes);
}

}  // namespace
}  // namespace orchard

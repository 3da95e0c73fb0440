// Hyper-parameters of mixture-of-experts models read from GGUF metadata, and the clear errors
// for what Orchard cannot run: each names the key or tensor and what was expected.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "core/error.h"
#include "model/architecture.h"
#include "model/config.h"
#include "model/gguf/writer.h"
#include "model/model_files.h"
#include "model/tokenizer/tokenizer.h"
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
                              w.set("qwen3moe.expert_gating_func", Value::u32(7));
                            }))
                .find("expert_gating_func = 7 is not supported; supported: 1 (softmax), 2 (sigmoid)"),
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
  EXPECT_NE(unknown.find("architecture 'mamba' is not supported; supported: llama, qwen2, qwen3, qwen3moe, deepseek2, gpt-oss"),
            std::string::npos)
      << unknown;
}

void gpt_oss_keys(model::gguf::Writer& w) {
  set_experts(w, "gpt-oss.", 4, 2);
  w.set("gpt-oss.expert_feed_forward_length", Value::u32(32));
  w.set("gpt-oss.attention.key_length", Value::u32(8));
  w.set("gpt-oss.attention.sliding_window", Value::u32(128));
}

model::ModelConfig config_of(const std::vector<uint8_t>& bytes) {
  auto file = model::gguf::Reader::parse(bytes, "m.gguf");
  return model::ModelConfig::from_gguf(file);
}

// gpt-oss: every layer a mixture of experts with the clamped SwiGLU; the even layers slide
// (llama.cpp's pattern of period 2) unless the file sets another period (0: all of them).
TEST(GptOssConfig, ReadsItsHyperParameters) {
  const auto c = config_of(header("gpt-oss", gpt_oss_keys));
  EXPECT_EQ(c.arch, model::find_architecture("gpt-oss"));
  EXPECT_EQ(c.n_expert, 4);
  EXPECT_EQ(c.n_expert_used, 2);
  EXPECT_EQ(c.n_ff_exp, 32);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope_ordering, model::RopeOrdering::NeoX);
  EXPECT_EQ(c.ffn_activation, model::FfnActivation::ClampedSwiGlu);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_TRUE(c.sliding_layer(0) && c.sliding_layer(2));
  EXPECT_FALSE(c.sliding_layer(1) || c.sliding_layer(3));
  EXPECT_TRUE(c.moe_layer(0) && c.moe_layer(1));

  const auto period3 = config_of(header("gpt-oss", [](auto& w) {
    gpt_oss_keys(w);
    w.set("gpt-oss.attention.sliding_window_pattern", Value::u32(3));
  }));
  EXPECT_TRUE(period3.sliding_layer(0) && period3.sliding_layer(1) && period3.sliding_layer(3));
  EXPECT_FALSE(period3.sliding_layer(2) || period3.sliding_layer(5));
  const auto all = config_of(header("gpt-oss", [](auto& w) {
    gpt_oss_keys(w);
    w.set("gpt-oss.attention.sliding_window_pattern", Value::u32(0));
  }));
  EXPECT_TRUE(all.sliding_layer(0) && all.sliding_layer(1));

  // The cache Forward makes: a sliding layer keeps its window plus a batch (128 + 64 - 1 = 191
  // positions), each twice, once that is at most half the context; the others every position.
  EXPECT_EQ(c.sliding_ring(4096, 64), 191);
  EXPECT_EQ(c.kv_slots(0, 4096, 64), 382);
  EXPECT_EQ(c.kv_slots(1, 4096, 64), 4096);
  EXPECT_EQ(c.sliding_ring(382, 64), 191);
  EXPECT_EQ(c.sliding_ring(381, 64), 0);  // 191 > 381 / 2: a ring would not be smaller
  EXPECT_EQ(c.kv_slots(0, 381, 64), 381);

  // Other architectures have neither.
  const auto qwen = config_of(header("qwen3moe", [](auto& w) {
    set_experts(w, "qwen3moe.", 4, 2);
    w.set("qwen3moe.expert_feed_forward_length", Value::u32(32));
    w.set("qwen3moe.attention.sliding_window", Value::u32(128));
  }));
  EXPECT_EQ(qwen.ffn_activation, model::FfnActivation::SwiGlu);
  EXPECT_FALSE(qwen.sliding_layer(0));
}

// llama.cpp's expert_gating_func 3 (softmax over the chosen experts' logits) is the softmax
// renormalized over the chosen, whatever expert_weights_norm says.
TEST(GptOssConfig, SoftmaxOfTheChosenRenormalizes) {
  const auto c = config_of(header("gpt-oss", [](auto& w) {
    gpt_oss_keys(w);
    w.set("gpt-oss.expert_weights_norm", Value::boolean(false));
    w.set("gpt-oss.expert_gating_func", Value::u32(3));
  }));
  EXPECT_TRUE(c.expert_weights_norm);
}

TEST(GptOssConfig, ErrorsNameTheKey) {
  const std::string no_window = error_of(header("gpt-oss", [](auto& w) {
    set_experts(w, "gpt-oss.", 4, 2);
    w.set("gpt-oss.expert_feed_forward_length", Value::u32(32));
  }));
  EXPECT_NE(no_window.find("gpt-oss.attention.sliding_window"), std::string::npos) << no_window;
  const std::string no_experts =
      error_of(header("gpt-oss", [](auto& w) { w.set("gpt-oss.attention.sliding_window", Value::u32(128)); }));
  EXPECT_NE(no_experts.find("gpt-oss.expert_count"), std::string::npos) << no_experts;
  const std::string zero_window = error_of(header("gpt-oss", [](auto& w) {
    gpt_oss_keys(w);
    w.set("gpt-oss.attention.sliding_window", Value::u32(0));
  }));
  EXPECT_NE(zero_window.find("gpt-oss.attention.sliding_window = 0 is out of range"), std::string::npos) << zero_window;
  // Some architectures give the pattern as one flag per layer; gpt-oss's is a period.
  const std::string flags = error_of(header("gpt-oss", [](auto& w) {
    gpt_oss_keys(w);
    w.set("gpt-oss.attention.sliding_window_pattern", Value::array(model::gguf::ValueType::BOOL, {}));
  }));
  EXPECT_NE(flags.find("gpt-oss.attention.sliding_window_pattern"), std::string::npos) << flags;
}

// A copy of `path` with tensor `name` given `shape` (zero bytes) or, with an empty shape, left out.
std::vector<uint8_t> with_tensor(const std::string& path, const std::string& name, std::vector<int64_t> shape) {
  auto file = model::gguf::Reader::open(path);
  model::gguf::Writer w;
  for (const auto& [key, value] : file.metadata())
    if (key != "general.alignment") w.set(key, value);
  for (const auto& t : file.tensors()) {
    if (t.name != name) {
      w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.size_bytes));
    } else if (!shape.empty()) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      w.add_tensor(t.name, t.type, shape, std::vector<uint8_t>(static_cast<size_t>(n) * 4));
    }
  }
  return w.to_bytes();
}

std::string load_error(const std::vector<uint8_t>& bytes) {
  try {
    auto file = model::gguf::Reader::parse(bytes, "m.gguf");
    const auto config = model::ModelConfig::from_gguf(file);
    model::ModelWeights weights(file, config, model::Shard::whole(config), {});
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(no error)";
}

// The gpt-oss tensors are checked like the others: a sink per head, a bias per expert.
TEST(GptOssConfig, TensorsOfTheWrongShapeOrMissingAreNamed) {
  const std::string path = testing::synthetic_model("gpt-oss", "tiny", "f32");
  EXPECT_EQ(load_error(with_tensor(path, "", {})), "(no error)");
  const std::string sinks = load_error(with_tensor(path, "blk.1.attn_sinks.weight", {8}));
  EXPECT_NE(sinks.find("tensor 'blk.1.attn_sinks.weight' has shape [8], expected [4]"), std::string::npos) << sinks;
  const std::string bias = load_error(with_tensor(path, "blk.2.ffn_down_exps.bias", {256, 4}));
  EXPECT_NE(bias.find("tensor 'blk.2.ffn_down_exps.bias' has shape [256, 4], expected [256, 8]"), std::string::npos)
      << bias;
  const std::string missing = load_error(with_tensor(path, "blk.0.attn_output.bias", {}));
  EXPECT_NE(missing.find("blk.0.attn_output.bias"), std::string::npos) << missing;
}

// make-model's gpt-oss files carry o200k's pre-tokenizer, as the published ones do, and it loads:
// o200k splits "HelloWorld DON'T" into "Hello", "World", " DON'T", so tokens end at bytes 5 and 10.
TEST(GptOssConfig, SyntheticFilesUseTheGpt4oPreTokenizer) {
  const auto file = model::gguf::Reader::open(testing::synthetic_model("gpt-oss", "tiny", "f32"));
  const model::Tokenizer t = model::Tokenizer::from_gguf(file);
  EXPECT_EQ(t.pre_tokenizer(), "gpt-4o");
  const std::string text = "HelloWorld DON'T";
  size_t end = 0;
  std::vector<size_t> ends;
  for (model::TokenId id : t.encode(text, false, false)) ends.push_back(end += t.token_bytes(id).size());
  EXPECT_EQ(end, text.size());
  EXPECT_NE(std::find(ends.begin(), ends.end(), 5u), ends.end());
  EXPECT_NE(std::find(ends.begin(), ends.end(), 10u), ends.end());
  EXPECT_EQ(t.decode(t.encode(text, false, false)), text);
}

// A tensor split sends a rank the whole of every vector (sinks and biases are read whole and cut
// after conversion), inside the file.
TEST(GptOssConfig, ShardByteRangesSendVectorsWhole) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("gpt-oss", "tiny", "f32"));
  const auto config = model::ModelConfig::from_gguf(file);
  model::Shard half = model::Shard::whole(config);
  half.head_begin = config.n_heads / 2;
  half.kv_head_begin = config.n_kv_heads / 2;
  half.expert_ff_begin = config.n_ff_exp / 2;
  const auto ranges = model::shard_byte_ranges(file, config, half);
  for (const auto& r : ranges) EXPECT_LE(r.offset + r.size, file.file_size());
  for (const char* name : {"blk.0.attn_sinks.weight", "blk.0.attn_q.bias", "blk.0.ffn_gate_exps.bias"}) {
    const auto& t = file.tensor(name);
    const uint64_t at = file.data_offset() + t.offset;
    bool whole = false;
    for (const auto& r : ranges) whole |= r.offset == at && r.size == t.size_bytes;
    EXPECT_TRUE(whole) << name;
  }
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
  const auto& down = file.tensor("blk.0.ffn_down_exps.weight");
  // In each of the 4 layers gate and up lose half their rows, and down (split by columns) half of
  // every row: only each row's slice is sent.
  EXPECT_EQ(whole_bytes - half_bytes, 4 * gate.size_bytes + 4 * down.size_bytes / 2);
}

// deepseek2's keys as make-model writes them (V3's kind): latent attention, shared experts,
// sigmoid and group-limited routing, YaRN with mscale_all_dim 1.
TEST(Deepseek2Config, ReadsLatentAttentionRoutingAndYarn) {
  auto file = model::gguf::Reader::open(testing::synthetic_model("deepseek2", "tiny", "f32"));
  const auto c = model::ModelConfig::from_gguf(file);
  EXPECT_TRUE(c.latent_attention());
  EXPECT_EQ(c.q_lora_rank, 256);
  EXPECT_EQ(c.kv_lora_rank, 256);
  EXPECT_EQ(c.head_dim, 96);  // key_length_mla: 64 without RoPE + 32 with
  EXPECT_EQ(c.rope_dims, 32);
  EXPECT_EQ(c.value_head_dim, 64);
  EXPECT_EQ(c.n_kv_heads, c.n_heads);  // each head decompresses its own keys and values
  EXPECT_EQ(c.n_dense_leading, 1);
  EXPECT_FALSE(c.moe_layer(0));
  EXPECT_TRUE(c.moe_layer(1));
  EXPECT_EQ(c.n_expert_shared, 1);
  EXPECT_EQ(c.expert_gating, model::ExpertGating::Sigmoid);
  EXPECT_EQ(c.n_expert_groups, 4);
  EXPECT_EQ(c.n_expert_groups_used, 2);
  EXPECT_FLOAT_EQ(c.expert_weights_scale, 2.5f);
  EXPECT_TRUE(c.expert_weights_norm);
  EXPECT_TRUE(c.rope_yarn);
  EXPECT_FLOAT_EQ(c.rope_freq_scale, 0.25f);
  EXPECT_EQ(c.yarn_original_context, 128);
  EXPECT_FLOAT_EQ(c.yarn_log_multiplier, 1.0f);  // the file's 0.1 / 0.1
  EXPECT_FLOAT_EQ(c.rope_mscale, 1.0f);          // (0.1·1·ln 4 + 1) / (0.1·1·ln 4 + 1)
  // (1 + 0.1 · 1 · ln 4)² / √96 = 1.1386294² / 9.7979590
  EXPECT_NEAR(c.attention_scale, 0.1323203, 1e-6);
  // The V2-Lite kind: a plain query projection, softmax, and weights as the router gives them.
  auto lite_file = model::gguf::Reader::open(testing::synthetic_model("deepseek2-lite", "tiny", "f32"));
  const auto lite = model::ModelConfig::from_gguf(lite_file);
  EXPECT_EQ(lite.q_lora_rank, 0);
  EXPECT_EQ(lite.expert_gating, model::ExpertGating::Softmax);
  EXPECT_EQ(lite.n_expert_shared, 2);
  EXPECT_EQ(lite.n_expert_groups, 0);
  EXPECT_FALSE(lite.rope_yarn);
  EXPECT_NEAR(lite.attention_scale, 1 / std::sqrt(96.0), 1e-7);
  EXPECT_FALSE(lite.joined_kv_b);
  // Older files: the heads' widths as key/value_length, the up-projections joined in attn_kv_b.
  auto joined_file = model::gguf::Reader::open(testing::synthetic_model("deepseek2-kvb", "tiny", "f32"));
  const auto joined = model::ModelConfig::from_gguf(joined_file);
  EXPECT_TRUE(joined.joined_kv_b);
  EXPECT_EQ(joined.head_dim, 96);
  EXPECT_EQ(joined.value_head_dim, 64);
}

// A valid deepseek2 header (64 wide, 4 heads, 8 experts) for the error cases to break, less
// the keys in `skip`.
void deepseek2_keys(model::gguf::Writer& w, const std::vector<std::string>& skip) {
  auto put = [&](const std::string& key, uint32_t v) {
    if (std::find(skip.begin(), skip.end(), key) == skip.end()) w.set("deepseek2." + key, Value::u32(v));
  };
  put("expert_count", 8);
  put("expert_used_count", 2);
  put("expert_feed_forward_length", 32);
  put("feed_forward_length", 96);
  put("leading_dense_block_count", 1);
  put("expert_shared_count", 1);
  put("attention.kv_lora_rank", 32);
  put("attention.q_lora_rank", 0);
  put("rope.dimension_count", 8);
  put("attention.key_length_mla", 24);
  put("attention.value_length_mla", 16);
  put("attention.key_length", 40);
  put("attention.value_length", 32);
}

TEST(Deepseek2Config, ErrorsNameTheKey) {
  auto with = [](const std::function<void(model::gguf::Writer&)>& edit, const std::vector<std::string>& skip = {}) {
    return error_of(header("deepseek2", [&](auto& w) {
      deepseek2_keys(w, skip);
      edit(w);
    }));
  };
  auto nothing = [](model::gguf::Writer&) {};
  EXPECT_EQ(with(nothing), "(no error)");
  for (const char* key : {"attention.kv_lora_rank", "expert_shared_count", "rope.dimension_count",
                          "attention.value_length_mla", "expert_feed_forward_length"}) {
    const std::string message = with(nothing, {key});
    EXPECT_NE(message.find(std::string("missing key 'deepseek2.") + key + "'"), std::string::npos) << message;
  }
  // Without the *_mla keys, key_length and value_length are the heads' own (older files).
  EXPECT_EQ(with(
                [](auto& w) {
                  w.set("deepseek2.attention.key_length", Value::u32(24));
                  w.set("deepseek2.attention.value_length", Value::u32(16));
                },
                {"attention.key_length_mla", "attention.value_length_mla"}),
            "(no error)");
  std::string m = with([](auto& w) { w.set("deepseek2.attention.key_length", Value::u32(24)); });
  EXPECT_NE(m.find("attention.key_length 24 and value_length 32 do not describe the latent of kv_lora_rank 32 and 8 "
                   "rope dimensions (expected 40 and 32)"),
            std::string::npos)
      << m;
  m = with([](auto& w) {
    w.set("deepseek2.rope.dimension_count", Value::u32(24));
    w.set("deepseek2.attention.key_length", Value::u32(56));
  });
  EXPECT_NE(m.find("rope.dimension_count 24 must be even and less than the key head size 24"), std::string::npos) << m;
  m = with([](auto& w) { w.set("deepseek2.expert_gating_func", Value::u32(9)); });
  EXPECT_NE(m.find("expert_gating_func = 9 is not supported; supported: 1 (softmax), 2 (sigmoid)"), std::string::npos)
      << m;
  m = with([](auto& w) {
    w.set("deepseek2.expert_group_count", Value::u32(3));
    w.set("deepseek2.expert_group_used_count", Value::u32(1));
  });
  EXPECT_NE(m.find("8 experts in deepseek2.expert_group_count 3 groups, 1 of them used, cannot give "
                   "expert_used_count 2"),
            std::string::npos)
      << m;
  m = with([](auto& w) { w.set("deepseek2.expert_group_count", Value::u32(4)); });
  EXPECT_NE(m.find("missing key 'deepseek2.expert_group_used_count'"), std::string::npos) << m;
  m = with([](auto& w) {
    w.set("deepseek2.rope.scaling.type", Value::string("yarn"));
    w.set("deepseek2.rope.scaling.factor", Value::f32(0.5f));
  });
  EXPECT_NE(m.find("deepseek2.rope.scaling.factor = 0.5 for yarn, expected at least 1"), std::string::npos) << m;
}

// YaRN on any architecture: llama.cpp's magnitude 1 + 0.1·ln(factor), betas from the file or
// 32 and 1, the original context from the file or the trained one.
TEST(YarnConfig, ReadsScalingKeys) {
  const auto bytes = header("llama", [](auto& w) {
    w.set("llama.feed_forward_length", Value::u32(96));
    w.set("llama.context_length", Value::u32(4096));
    w.set("llama.rope.scaling.type", Value::string("yarn"));
    w.set("llama.rope.scaling.factor", Value::f32(8.0f));
    w.set("llama.rope.scaling.yarn_beta_fast", Value::f32(16.0f));
  });
  auto file = model::gguf::Reader::parse(bytes, "m.gguf");
  const auto c = model::ModelConfig::from_gguf(file);
  EXPECT_TRUE(c.rope_yarn);
  EXPECT_FLOAT_EQ(c.rope_freq_scale, 0.125f);
  EXPECT_EQ(c.yarn_original_context, 4096);
  EXPECT_FLOAT_EQ(c.yarn_beta_fast, 16.0f);
  EXPECT_FLOAT_EQ(c.yarn_beta_slow, 1.0f);
  EXPECT_NEAR(c.rope_mscale, 1.2079442, 1e-6);
  EXPECT_EQ(c.attention_scale, 0.0f);  // the usual 1/√head_dim
  const std::string m = error_of(header("llama", [](auto& w) {
    w.set("llama.feed_forward_length", Value::u32(96));
    w.set("llama.rope.scaling.type", Value::string("longrope"));
  }));
  EXPECT_NE(m.find("rope scaling 'longrope' is not supported; supported: none, linear, yarn"), std::string::npos) << m;
}

}  // namespace
}  // namespace orchard

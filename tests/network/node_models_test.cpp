// What a node registers about its models: beside a file's bytes, the built-in engine reports the
// weight bytes a decode step reads, which the coordinator's placement ranks speed by. The
// reference is the model code's own count of what a decode step reads
// (ModelWeights::bytes_per_token), an independent walk over the bound weights.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "model/config.h"
#include "model/gguf/reader.h"
#include "model/model_files.h"
#include "model/weights.h"
#include "network/node_agent.h"

namespace orchard::network {
namespace {

namespace fs = std::filesystem;

TEST(NodeModels, TheBuiltinEngineReportsTheBytesADecodeStepReads) {
  const fs::path dir = fs::temp_directory_path() / ("orchard-node-models-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_symlink(testing::synthetic_model("qwen3moe", "tiny", "f32"), dir / "moe.gguf");
  fs::create_symlink(testing::synthetic_model("llama", "tiny", "f32"), dir / "dense.gguf");
  const nlohmann::json models = make_builtin_engine(dir.string(), 1, 512)->models();
  ASSERT_EQ(models.size(), 2u) << models.dump();
  for (const auto& m : models) {
    const std::string name = m["name"];
    const auto file = model::gguf::Reader::open((dir / (name + ".gguf")).string());
    const auto config = model::ModelConfig::from_gguf(file);
    const model::ModelWeights weights(file, config, model::Shard::whole(config), {});
    const double reads = static_cast<double>(weights.bytes_per_token());
    const auto active = m.at("active_bytes_per_token").get<int64_t>();
    const auto bytes = m.at("bytes").get<int64_t>();
    // The two counts differ only by the norms and biases, which ModelWeights leaves out.
    EXPECT_NEAR(static_cast<double>(active), reads, reads * 0.01) << name;
    EXPECT_LT(active, bytes) << name;  // the embedding table is not read whole
    // The KV cache its engine keeps: keys and values of every KV head in every layer, F16.
    EXPECT_EQ(m.at("kv_bytes_per_token").get<int64_t>(), int64_t{config.n_layers} * 2 * config.n_kv_heads * config.head_dim * 2) << name;
    if (name == "moe") {
      // Only n_expert_used of n_expert experts are read.
      ASSERT_GT(config.n_expert, config.n_expert_used);
      EXPECT_LT(static_cast<double>(active), 0.8 * static_cast<double>(bytes)) << "experts " << config.n_expert;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace orchard::network

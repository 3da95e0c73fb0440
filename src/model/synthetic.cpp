#include "model/synthetic.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "model/architecture.h"
#include "model/corpus_fit.h"
#include "model/gguf/writer.h"
#include "model/tokenizer/vocab_builder.h"

namespace orchard::model {
namespace {

using core::TensorType;

struct Shape {
  std::string_view name;
  int32_t n_embd, n_layers, n_heads, n_kv_heads, n_ff, vocab, context;
  float rope_theta;
  int32_t head_dim;                           // 0: n_embd / n_heads
  int32_t n_expert, n_expert_used, n_ff_exp;  // 0: a shape for dense models only
  bool dense = true;                          // false: for mixtures of experts only
  int32_t sliding_window = 128;               // gpt-oss's sliding layers (its real window: 128)
};

constexpr Shape kShapes[] = {
    // Experts 512 wide: a 2-way tensor split keeps whole 256-element quantization blocks.
    // Windows shorter than the tests' prompts, so that they matter.
    {"tiny", 256, 4, 4, 2, 768, 1024, 512, 10000.0f, 0, 8, 2, 512, true, 5},
    {"small", 512, 4, 8, 2, 1536, 4096, 2048, 10000.0f, 0, 16, 4, 256, true, 8},
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f, 0, 0, 0, 0},
    {"llama-8b", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f, 0, 0, 0, 0},
    // Qwen3-30B-A3B's layer (128-wide heads, 768-wide experts) with 16 layers and 32 experts of
    // which 4 are active: about 3B parameters, 0.5B active, to benchmark MoE on one machine.
    {"moe-3b", 2048, 16, 32, 4, 6144, 151936, 4096, 1000000.0f, 128, 32, 4, 768, false},
};

// The architectures make-model writes: general.architecture, and whether it has experts.
struct SyntheticArch {
  std::string_view name, file_arch;
  bool experts;
};

constexpr SyntheticArch kArchs[] = {
    {"llama", "llama", false},      {"qwen2", "qwen2", false},         {"qwen3", "qwen3", false},
    {"qwen3moe", "qwen3moe", true}, {"mixtral", "llama", true},        {"deepseek2", "deepseek2", true},
    {"deepseek2-lite", "deepseek2", true}, {"deepseek2-kvb", "deepseek2", true}, {"gpt-oss", "gpt-oss", true},
};

// deepseek2's latent attention and routing. "deepseek2" is V3's kind (query latent, sigmoid
// scores with a selection bias, group-limited choice, YaRN with mscale_all_dim 1);
// "deepseek2-lite" is V2-Lite's (a plain query projection, softmax, two shared experts, no
// YaRN); "deepseek2-kvb" is V3's kind as older conversions wrote it (the heads' up-projections
// joined in attn_kv_b, their widths as key_length/value_length). Widths keep whole
// 256-element quantization blocks where llama.cpp's files have them.
struct LatentShape {
  std::string_view arch, shape;
  int32_t q_lora, kv_lora, nope, rope, value, shared, dense_leading;
  bool sigmoid;
  int32_t groups, groups_used;
  float weights_scale, yarn_factor;
  int32_t yarn_original_context;
  bool joined_kv_b;
};

constexpr LatentShape kLatentShapes[] = {
    {"deepseek2", "tiny", 256, 256, 64, 32, 64, 1, 1, true, 4, 2, 2.5f, 4.0f, 128, false},
    {"deepseek2-lite", "tiny", 0, 256, 64, 32, 64, 2, 1, false, 0, 0, 1.0f, 0.0f, 0, false},
    {"deepseek2-kvb", "tiny", 256, 256, 64, 32, 64, 1, 1, true, 4, 2, 2.5f, 4.0f, 128, true},
    // V3's attention widths and routing kind on the moe-3b layer (32 heads, 32 experts in 8
    // groups), to benchmark latent attention on one machine.
    {"deepseek2", "moe-3b", 1536, 512, 128, 64, 128, 1, 1, true, 8, 4, 2.5f, 40.0f, 4096, false},
};

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

uint64_t hash_name(uint64_t seed, std::string_view name) {
  uint64_t h = mix(seed + 0x9E3779B97F4A7C15ull);
  for (unsigned char ch : name) h = mix(h ^ ch);
  return h;
}

// Uniform in [center - spread, center + spread]: as good as a normal for keeping activations
// sane and much cheaper for billions of weights.
void fill_row(float* out, int64_t n, uint64_t stream, float center, float spread) {
  uint64_t state = stream;
  for (int64_t i = 0; i < n; ++i) {
    state += 0x9E3779B97F4A7C15ull;
    double u = static_cast<double>(mix(state) >> 11) * 0x1.0p-53;  // [0, 1)
    out[i] = center + spread * static_cast<float>(2.0 * u - 1.0);
  }
}

class ModelBuilder {
 public:
  ModelBuilder(const SyntheticModelSpec& spec, core::ThreadPool& pool, gguf::Writer& writer,
               const std::function<void(size_t, size_t)>& on_progress)
      : spec_(spec), pool_(pool), writer_(writer), on_progress_(on_progress) {}

  // A [rows, cols] matrix (or a stack of `count` of them) with entries of standard deviation
  // `stddev`.
  void matrix(const std::string& name, TensorType type, int64_t rows, int64_t cols, float stddev, int64_t count = 1) {
    const float spread = stddev * std::sqrt(3.0f);
    // Rows narrower than the type's blocks (latent attention's per-head attn_k_b) fall back to
    // Q8_0, or F32, as llama-quantize falls back for them.
    if (cols % core::type_traits(type).block_elements != 0) type = cols % 32 == 0 ? TensorType::Q8_0 : TensorType::F32;
    const uint64_t stream = hash_name(spec_.seed, name);
    quantized(name, type, rows, cols, count, [=](int64_t r, float* row) {
      fill_row(row, cols, mix(stream + static_cast<uint64_t>(r)), 0.0f, spread);
    });
  }

  // A [rows, cols] matrix of the given values (row-major).
  void matrix_values(const std::string& name, TensorType type, int64_t rows, int64_t cols,
                     std::vector<float> values) {
    auto shared = std::make_shared<const std::vector<float>>(std::move(values));
    quantized(name, type, rows, cols, 1, [shared, cols](int64_t r, float* row) {
      std::copy_n(shared->data() + r * cols, cols, row);
    });
  }

  // F32 values as given.
  void vector_values(const std::string& name, const std::vector<float>& values) {
    std::vector<uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    writer_.add_tensor(name, TensorType::F32, {static_cast<int64_t>(values.size())}, std::move(bytes));
  }

  // A vector around `center` (norm weights near 1, biases near 0), always F32; `shape` when it
  // holds several (one bias per expert).
  void vector(const std::string& name, int64_t n, float center, float spread, std::vector<int64_t> shape = {}) {
    std::vector<float> values(static_cast<size_t>(n));
    fill_row(values.data(), n, hash_name(spec_.seed, name), center, spread);
    std::vector<uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    writer_.add_tensor(name, TensorType::F32, shape.empty() ? std::vector<int64_t>{n} : std::move(shape),
                       std::move(bytes));
  }

 private:
  // Adds the matrix, its rows made by fill(row index, row) and quantized when the file is written.
  void quantized(const std::string& name, TensorType type, int64_t rows, int64_t cols, int64_t count,
                 std::function<void(int64_t, float*)> fill) {
    ++matrices_;
    std::vector<int64_t> shape = {cols, rows};
    if (count > 1) shape.push_back(count);
    rows *= count;
    writer_.add_tensor_lazy(name, type, shape, [=, this, fill = std::move(fill)] {
      const size_t row_size = core::row_bytes(type, cols);
      std::vector<uint8_t> bytes(row_size * static_cast<size_t>(rows));
      pool_.parallel_for(rows, [&](int64_t r, int) {
        thread_local std::vector<float> values;
        values.resize(static_cast<size_t>(cols));
        fill(r, values.data());
        core::quantize_row_reference(type, values.data(), bytes.data() + row_size * static_cast<size_t>(r), cols);
      });
      if (on_progress_) on_progress_(++matrices_done_, matrices_);
      return bytes;
    });
  }

  const SyntheticModelSpec& spec_;
  core::ThreadPool& pool_;
  gguf::Writer& writer_;
  const std::function<void(size_t, size_t)>& on_progress_;
  size_t matrices_ = 0;  // matrices to write; their bytes are made during Writer::write
  size_t matrices_done_ = 0;
};

// A file type as llama-quantize writes it: general.file_type (llama_ftype) and the tensor types
// of its mix (output head; projections; the attn_v/ffn_down of layers that get more bits).
// The K-quant mixes follow llama.cpp's _M rules in outline: Q6_K for the output, one step up
// for the more-bits tensors.
struct FileType {
  std::string_view name;
  uint32_t code;
  TensorType embedding, output, matrix, more_bits;
};

constexpr FileType kFileTypes[] = {
    {"f32", 0, TensorType::F32, TensorType::F32, TensorType::F32, TensorType::F32},
    {"f16", 1, TensorType::F16, TensorType::F16, TensorType::F16, TensorType::F16},
    {"bf16", 32, TensorType::BF16, TensorType::BF16, TensorType::BF16, TensorType::BF16},
    {"q8_0", 7, TensorType::Q8_0, TensorType::Q8_0, TensorType::Q8_0, TensorType::Q8_0},
    {"q4_0", 2, TensorType::Q4_0, TensorType::Q4_0, TensorType::Q4_0, TensorType::Q4_0},
    {"q4_1", 3, TensorType::Q4_1, TensorType::Q4_1, TensorType::Q4_1, TensorType::Q4_1},
    {"q5_0", 8, TensorType::Q5_0, TensorType::Q5_0, TensorType::Q5_0, TensorType::Q5_0},
    {"q5_1", 9, TensorType::Q5_1, TensorType::Q5_1, TensorType::Q5_1, TensorType::Q5_1},
    {"q2_k", 10, TensorType::Q2_K, TensorType::Q6_K, TensorType::Q2_K, TensorType::Q3_K},
    {"q3_k_m", 12, TensorType::Q3_K, TensorType::Q6_K, TensorType::Q3_K, TensorType::Q4_K},
    {"q4_k_m", 15, TensorType::Q4_K, TensorType::Q6_K, TensorType::Q4_K, TensorType::Q6_K},
    {"q5_k_m", 17, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q5_K, TensorType::Q6_K},
    {"iq4_nl", 25, TensorType::IQ4_NL, TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_NL},
    {"iq4_xs", 30, TensorType::IQ4_XS, TensorType::Q6_K, TensorType::IQ4_XS, TensorType::IQ4_XS},
    // gpt-oss's files: MXFP4 weights (experts in llama.cpp's MXFP4_MOE), Q8_0 embedding and head.
    {"mxfp4", 38, TensorType::Q8_0, TensorType::Q8_0, TensorType::MXFP4, TensorType::MXFP4},
};

// llama.cpp's "use_more_bits": the first and last eighth of the layers, and every third between.
bool uses_more_bits(int32_t layer, int32_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

}  // namespace

std::string synthetic_shapes() {
  std::string out;
  for (const auto& s : kShapes) out += (out.empty() ? "" : ", ") + std::string(s.name);
  return out;
}

std::string synthetic_types() {
  std::string out;
  for (const auto& t : kFileTypes) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

std::string synthetic_architectures() {
  std::string out;
  for (const auto& a : kArchs) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

void write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path,
                           const std::function<void(size_t, size_t)>& on_progress) {
  const Shape* shape = nullptr;
  for (const auto& s : kShapes)
    if (s.name == spec.shape) shape = &s;
  if (!shape) throw Error(error_message("make-model", "unknown shape '{}'; known: {}", spec.shape, synthetic_shapes()));
  const FileType* file_type = nullptr;
  for (const auto& t : kFileTypes)
    if (t.name == spec.type) file_type = &t;
  if (!file_type) throw Error(error_message("make-model", "unknown type '{}'; known: {}", spec.type, synthetic_types()));
  const SyntheticArch* arch = nullptr;
  for (const auto& a : kArchs)
    if (a.name == spec.arch) arch = &a;
  if (!arch)
    throw Error(error_message("make-model", "unknown architecture '{}'; known: {}", spec.arch,
                              synthetic_architectures()));
  const Shape& s = *shape;
  const LatentShape* latent = nullptr;
  for (const auto& l : kLatentShapes)
    if (l.arch == spec.arch && l.shape == spec.shape) latent = &l;
  if (arch->file_arch == "deepseek2" && !latent) {
    std::vector<std::string_view> shapes;
    for (const auto& l : kLatentShapes)
      if (l.arch == spec.arch) shapes.push_back(l.shape);
    throw Error(error_message("make-model", "{} is made in shape {}, not '{}'", spec.arch, fmt::join(shapes, " or "),
                              s.name));
  }
  if (arch->experts && s.n_expert == 0)
    throw Error(error_message("make-model", "shape '{}' has no experts; {} takes tiny, small or moe-3b", s.name,
                              spec.arch));
  if (!arch->experts && !s.dense)
    throw Error(error_message("make-model", "shape '{}' is a mixture of experts; {} has none (try qwen3moe or mixtral)",
                              s.name, spec.arch));

  // The model's hyper-parameters as the loader will read them back; the architecture's tensor
  // table (architecture.h) then says which tensors to write.
  ModelConfig c;
  c.arch = find_architecture(arch->file_arch);
  c.arch_name = std::string(arch->file_arch);
  c.n_embd = s.n_embd;
  c.n_layers = s.n_layers;
  c.n_heads = s.n_heads;
  c.n_kv_heads = s.n_kv_heads;
  c.head_dim = s.head_dim ? s.head_dim : s.n_embd / s.n_heads;
  c.rope_dims = c.head_dim;
  c.n_ff = s.n_ff;
  c.vocab_size = s.vocab;
  if (arch->experts) {
    c.n_expert = s.n_expert;
    c.n_expert_used = s.n_expert_used;
    c.n_ff_exp = s.n_ff_exp;
  }
  if (latent) {
    c.head_dim = latent->nope + latent->rope;
    c.rope_dims = latent->rope;
    c.value_head_dim = latent->value;
    c.q_lora_rank = latent->q_lora;
    c.kv_lora_rank = latent->kv_lora;
    c.n_expert_shared = latent->shared;
    c.n_dense_leading = latent->dense_leading;
    c.joined_kv_b = latent->joined_kv_b;
  }
  const bool llama = c.arch_name == "llama", gpt_oss = c.arch_name == "gpt-oss", qwen = !llama && !gpt_oss;
  const bool qwen3 = c.arch_name == "qwen3" || c.arch_name == "qwen3moe";
  // Small dense qwen models tie the output to the embedding; llama and the MoE models keep their own.
  const bool tied = qwen && !arch->experts;
  const std::string a = c.arch_name + ".";

  gguf::Writer writer;
  writer.set("general.architecture", gguf::Value::string(c.arch_name));
  writer.set("general.name", gguf::Value::string("orchard-synthetic-" + spec.arch + "-" + spec.shape));
  writer.set("general.file_type", gguf::Value::u32(file_type->code));
  if (spec.type != "f32" && spec.type != "f16" && spec.type != "bf16")
    writer.set("general.quantization_version", gguf::Value::u32(2));
  auto u32 = [](int32_t v) { return gguf::Value::u32(static_cast<uint32_t>(v)); };
  writer.set(a + "context_length", u32(s.context));
  writer.set(a + "embedding_length", u32(c.n_embd));
  writer.set(a + "block_count", u32(c.n_layers));
  // Mixtral files give the experts' width as feed_forward_length, as the real ones do.
  if (llama && c.n_expert > 0) c.n_ff = c.n_ff_exp;
  writer.set(a + "feed_forward_length", u32(c.n_ff));
  writer.set(a + "attention.head_count", u32(c.n_heads));
  writer.set(a + "attention.head_count_kv", u32(c.n_kv_heads));
  writer.set(a + "attention.layer_norm_rms_epsilon", gguf::Value::f32(qwen ? 1e-6f : 1e-5f));
  writer.set(a + "rope.freq_base", gguf::Value::f32(s.rope_theta));
  writer.set(a + "rope.dimension_count", u32(c.rope_dims));
  if (qwen3 || gpt_oss) {
    writer.set(a + "attention.key_length", u32(c.head_dim));
    writer.set(a + "attention.value_length", u32(c.head_dim));
  }
  if (gpt_oss) writer.set(a + "attention.sliding_window", u32(s.sliding_window));
  if (c.n_expert > 0) {
    writer.set(a + "expert_count", u32(c.n_expert));
    writer.set(a + "expert_used_count", u32(c.n_expert_used));
    if (!llama) writer.set(a + "expert_feed_forward_length", u32(c.n_ff_exp));
  }
  if (latent) {
    const LatentShape& l = *latent;
    // As llama.cpp's converter writes them since attn_kv_b was split: the cache's one KV head
    // (the latent and the rotated part) as key/value_length, the heads' own widths as *_mla.
    // Before, the heads' widths as key/value_length and as many KV heads as heads.
    writer.set(a + "attention.q_lora_rank", u32(l.q_lora));
    writer.set(a + "attention.kv_lora_rank", u32(l.kv_lora));
    if (l.joined_kv_b) {
      writer.set(a + "attention.head_count_kv", u32(c.n_heads));
      writer.set(a + "attention.key_length", u32(c.head_dim));
      writer.set(a + "attention.value_length", u32(l.value));
    } else {
      writer.set(a + "attention.head_count_kv", u32(1));
      writer.set(a + "attention.key_length", u32(l.kv_lora + l.rope));
      writer.set(a + "attention.value_length", u32(l.kv_lora));
      writer.set(a + "attention.key_length_mla", u32(c.head_dim));
      writer.set(a + "attention.value_length_mla", u32(l.value));
    }
    writer.set(a + "leading_dense_block_count", u32(l.dense_leading));
    writer.set(a + "expert_shared_count", u32(l.shared));
    writer.set(a + "expert_weights_scale", gguf::Value::f32(l.weights_scale));
    writer.set(a + "expert_weights_norm", gguf::Value::boolean(l.sigmoid));
    writer.set(a + "expert_gating_func", u32(l.sigmoid ? 2 : 1));
    if (l.groups > 0) {
      writer.set(a + "expert_group_count", u32(l.groups));
      writer.set(a + "expert_group_used_count", u32(l.groups_used));
    }
    if (l.yarn_factor > 0) {
      writer.set(a + "rope.scaling.type", gguf::Value::string("yarn"));
      writer.set(a + "rope.scaling.factor", gguf::Value::f32(l.yarn_factor));
      writer.set(a + "rope.scaling.original_context_length", u32(l.yarn_original_context));
      writer.set(a + "rope.scaling.yarn_log_multiplier", gguf::Value::f32(0.1f));
    }
  }
  if (spec.rope_yarn_factor > 0) {
    writer.set(a + "rope.scaling.type", gguf::Value::string("yarn"));
    writer.set(a + "rope.scaling.factor", gguf::Value::f32(spec.rope_yarn_factor));
    writer.set(a + "rope.scaling.original_context_length", u32(s.context / 4));
  }
  if (spec.rope_linear_factor > 0) {
    writer.set(a + "rope.scaling.type", gguf::Value::string("linear"));
    writer.set(a + "rope.scaling.factor", gguf::Value::f32(spec.rope_linear_factor));
  }
  writer.set(a + "vocab_size", u32(c.vocab_size));
  VocabStyle style = gpt_oss                    ? VocabStyle::Gpt4oBpe
                     : qwen                       ? VocabStyle::Qwen2Bpe
                     : spec.shape == "llama-8b"   ? VocabStyle::Llama3Bpe
                                                  : VocabStyle::SentencePiece;
  write_vocab(writer, style, c.vocab_size);
  writer.set("orchard.synthetic", gguf::Value::boolean(true));
  std::map<std::string, std::vector<float>> fitted;
  if (spec.fit_corpus) {
    c.context_length = s.context;
    c.rope_theta = s.rope_theta;
    c.rope_ordering = c.arch->rope;
    fitted = fit_corpus_weights(c, Tokenizer::from_vocab(build_vocab(style, c.vocab_size)), spec.seed);
    writer.set("orchard.synthetic.note",
               gguf::Value::string("a small synthetic model: its weights are written from Orchard's built-in "
                                   "corpus (which token follows which), so it strings together phrases in "
                                   "the corpus's style; it was not trained and understands nothing"));
  } else {
    writer.set("orchard.synthetic.note",
               gguf::Value::string("a synthetic model with random weights (orchard make-model): its text is "
                                   "random tokens; make one with --fit-corpus for text in words"));
  }

  core::ThreadPool pool(spec.threads);
  ModelBuilder b(spec, pool, writer, on_progress);
  FileType types = *file_type;
  // gpt-oss was trained with MXFP4 experts, and its published MXFP4 files (ggml-org's) keep
  // everything else in BF16.
  const bool float_outside_experts = gpt_oss && types.matrix == TensorType::MXFP4;
  if (float_outside_experts) types.embedding = types.output = TensorType::BF16;
  // The type the file type's mix gives a tensor of the embedding, output or matrix roles.
  auto mix_type = [&](const TensorSpec& t, int32_t layer) {
    if (t.role == TensorRole::Embedding) return types.embedding;
    if (t.role == TensorRole::Output) return types.output;
    const TensorType type =
        t.role == TensorRole::MoreBits && uses_more_bits(layer, c.n_layers) ? types.more_bits : types.matrix;
    return float_outside_experts && t.experts() == 1 ? TensorType::BF16 : type;
  };
  for_each_tensor(c, [&](const TensorSpec& t, int32_t layer) {
    if (auto f = fitted.find(t.name); f != fitted.end()) {
      if (t.role == TensorRole::Norm) return b.vector_values(t.name, f->second);
      return b.matrix_values(t.name, mix_type(t, layer), t.rows(), t.cols(), std::move(f->second));
    }
    const float in_std = 1.0f / std::sqrt(static_cast<float>(t.cols()));
    switch (t.role) {
      case TensorRole::Embedding: b.matrix(t.name, mix_type(t, layer), t.rows(), t.cols(), 1.0f); break;
      // Logits of a few units' spread, so sampling has real choices and greedy a clear winner.
      case TensorRole::Output:
        if (!tied) b.matrix(t.name, mix_type(t, layer), t.rows(), t.cols(), 3.0f * in_std);
        break;
      case TensorRole::Matrix:
      case TensorRole::MoreBits:
        b.matrix(t.name, mix_type(t, layer), t.rows(), t.cols(), in_std, t.experts());
        break;
      // Router logits of about unit spread: tokens choose different experts.
      case TensorRole::Router: b.matrix(t.name, TensorType::F32, t.rows(), t.cols(), in_std); break;
      case TensorRole::Norm: b.vector(t.name, t.cols(), 1.0f, 0.1f); break;
      case TensorRole::Bias: b.vector(t.name, t.cols() * t.rows(), 0.0f, 0.2f, t.shape); break;
      // About the scores' spread: some heads give the sink a large share, others little.
      case TensorRole::Sinks: b.vector(t.name, t.cols(), 0.0f, 2.0f); break;
      case TensorRole::RopeFactors:
        if (spec.rope_freq_factors) b.vector(t.name, t.cols(), 2.0f, 1.0f);
        break;
    }
  });
  writer.write(path);
}

}  // namespace orchard::model

#include "model/synthetic.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "model/gguf/writer.h"
#include "model/tokenizer/vocab_builder.h"

namespace orchard::model {
namespace {

using core::TensorType;

struct Shape {
  std::string_view name;
  int32_t n_embd, n_layers, n_heads, n_kv_heads, n_ff, vocab, context;
  float rope_theta;
};

constexpr Shape kShapes[] = {
    {"tiny", 256, 4, 4, 2, 768, 1024, 512, 10000.0f},
    {"small", 512, 4, 8, 2, 1536, 4096, 2048, 10000.0f},
    {"tinyllama-1.1b", 2048, 22, 32, 4, 5632, 32000, 2048, 10000.0f},
    {"llama-8b", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f},
};

constexpr std::string_view kTypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_k_m"};

// llama_ftype codes for general.file_type.
uint32_t file_type_code(std::string_view type) {
  if (type == "f32") return 0;
  if (type == "f16") return 1;
  if (type == "q4_0") return 2;
  if (type == "q8_0") return 7;
  if (type == "q4_k_m") return 15;
  return 32;  // bf16
}

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

  // A [rows, cols] matrix with entries of standard deviation `stddev`.
  void matrix(const std::string& name, TensorType type, int64_t rows, int64_t cols, float stddev) {
    const float spread = stddev * std::sqrt(3.0f);
    const uint64_t stream = hash_name(spec_.seed, name);
    ++matrices_;
    writer_.add_tensor_lazy(name, type, {cols, rows}, [=, this] {
      const size_t row_size = core::row_bytes(type, cols);
      std::vector<uint8_t> bytes(row_size * static_cast<size_t>(rows));
      pool_.parallel_for(rows, [&](int64_t r, int) {
        thread_local std::vector<float> values;
        values.resize(static_cast<size_t>(cols));
        fill_row(values.data(), cols, mix(stream + static_cast<uint64_t>(r)), 0.0f, spread);
        core::quantize_row_reference(type, values.data(), bytes.data() + row_size * static_cast<size_t>(r), cols);
      });
      if (on_progress_) on_progress_(++matrices_done_, matrices_);
      return bytes;
    });
  }

  // A vector around `center` (norm weights near 1, biases near 0), always F32.
  void vector(const std::string& name, int64_t n, float center, float spread) {
    std::vector<float> values(static_cast<size_t>(n));
    fill_row(values.data(), n, hash_name(spec_.seed, name), center, spread);
    std::vector<uint8_t> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    writer_.add_tensor(name, TensorType::F32, {n}, std::move(bytes));
  }

 private:
  const SyntheticModelSpec& spec_;
  core::ThreadPool& pool_;
  gguf::Writer& writer_;
  const std::function<void(size_t, size_t)>& on_progress_;
  size_t matrices_ = 0;  // matrices to write; their bytes are made during Writer::write
  size_t matrices_done_ = 0;
};

struct TypePlan {
  TensorType embedding, output, matrix, more_bits;
};

TypePlan plan_types(std::string_view type) {
  if (type == "f32") return {TensorType::F32, TensorType::F32, TensorType::F32, TensorType::F32};
  if (type == "f16") return {TensorType::F16, TensorType::F16, TensorType::F16, TensorType::F16};
  if (type == "bf16") return {TensorType::BF16, TensorType::BF16, TensorType::BF16, TensorType::BF16};
  if (type == "q8_0") return {TensorType::Q8_0, TensorType::Q8_0, TensorType::Q8_0, TensorType::Q8_0};
  if (type == "q4_0") return {TensorType::Q4_0, TensorType::Q4_0, TensorType::Q4_0, TensorType::Q4_0};
  // Q4_K_M as llama.cpp mixes it: Q6_K for the output and for attn_v/ffn_down of the layers
  // that matter most, Q4_K elsewhere.
  return {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q4_K, TensorType::Q6_K};
}

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
  for (auto t : kTypes) out += (out.empty() ? "" : ", ") + std::string(t);
  return out;
}

void write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path,
                           const std::function<void(size_t, size_t)>& on_progress) {
  const Shape* shape = nullptr;
  for (const auto& s : kShapes)
    if (s.name == spec.shape) shape = &s;
  if (!shape) throw Error(error_message("make-model", "unknown shape '{}'; known: {}", spec.shape, synthetic_shapes()));
  bool known_type = false;
  for (auto t : kTypes) known_type |= t == spec.type;
  if (!known_type) throw Error(error_message("make-model", "unknown type '{}'; known: {}", spec.type, synthetic_types()));
  const bool llama = spec.arch == "llama", qwen2 = spec.arch == "qwen2", qwen3 = spec.arch == "qwen3";
  if (!llama && !qwen2 && !qwen3)
    throw Error(error_message("make-model", "unknown architecture '{}'; known: llama, qwen2, qwen3", spec.arch));

  const Shape& s = *shape;
  const int32_t head_dim = s.n_embd / s.n_heads;
  const int32_t q_dim = s.n_heads * head_dim, kv_dim = s.n_kv_heads * head_dim;
  const std::string a = spec.arch + ".";
  // Small qwen models tie the output to the embedding; llama keeps its own.
  const bool tied = !llama;

  gguf::Writer writer;
  writer.set("general.architecture", gguf::Value::string(spec.arch));
  writer.set("general.name", gguf::Value::string("orchard-synthetic-" + spec.arch + "-" + spec.shape));
  writer.set("general.file_type", gguf::Value::u32(file_type_code(spec.type)));
  if (spec.type != "f32" && spec.type != "f16" && spec.type != "bf16")
    writer.set("general.quantization_version", gguf::Value::u32(2));
  writer.set(a + "context_length", gguf::Value::u32(static_cast<uint32_t>(s.context)));
  writer.set(a + "embedding_length", gguf::Value::u32(static_cast<uint32_t>(s.n_embd)));
  writer.set(a + "block_count", gguf::Value::u32(static_cast<uint32_t>(s.n_layers)));
  writer.set(a + "feed_forward_length", gguf::Value::u32(static_cast<uint32_t>(s.n_ff)));
  writer.set(a + "attention.head_count", gguf::Value::u32(static_cast<uint32_t>(s.n_heads)));
  writer.set(a + "attention.head_count_kv", gguf::Value::u32(static_cast<uint32_t>(s.n_kv_heads)));
  writer.set(a + "attention.layer_norm_rms_epsilon", gguf::Value::f32(qwen2 || qwen3 ? 1e-6f : 1e-5f));
  writer.set(a + "rope.freq_base", gguf::Value::f32(s.rope_theta));
  writer.set(a + "rope.dimension_count", gguf::Value::u32(static_cast<uint32_t>(head_dim)));
  if (qwen3) {
    writer.set(a + "attention.key_length", gguf::Value::u32(static_cast<uint32_t>(head_dim)));
    writer.set(a + "attention.value_length", gguf::Value::u32(static_cast<uint32_t>(head_dim)));
  }
  if (spec.rope_linear_factor > 0) {
    writer.set(a + "rope.scaling.type", gguf::Value::string("linear"));
    writer.set(a + "rope.scaling.factor", gguf::Value::f32(spec.rope_linear_factor));
  }
  writer.set(a + "vocab_size", gguf::Value::u32(static_cast<uint32_t>(s.vocab)));
  VocabStyle style = qwen2 || qwen3           ? VocabStyle::Qwen2Bpe
                     : spec.shape == "llama-8b" ? VocabStyle::Llama3Bpe
                                                : VocabStyle::SentencePiece;
  write_vocab(writer, style, s.vocab);

  core::ThreadPool pool(spec.threads);
  ModelBuilder b(spec, pool, writer, on_progress);
  const TypePlan types = plan_types(spec.type);
  const float in_std = 1.0f / std::sqrt(static_cast<float>(s.n_embd));

  b.matrix("token_embd.weight", types.embedding, s.vocab, s.n_embd, 1.0f);
  if (spec.rope_freq_factors) b.vector("rope_freqs.weight", head_dim / 2, 2.0f, 1.0f);
  for (int32_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const TensorType more = uses_more_bits(l, s.n_layers) ? types.more_bits : types.matrix;
    b.vector(p + "attn_norm.weight", s.n_embd, 1.0f, 0.1f);
    b.matrix(p + "attn_q.weight", types.matrix, q_dim, s.n_embd, in_std);
    b.matrix(p + "attn_k.weight", types.matrix, kv_dim, s.n_embd, in_std);
    b.matrix(p + "attn_v.weight", more, kv_dim, s.n_embd, in_std);
    if (qwen2) {
      b.vector(p + "attn_q.bias", q_dim, 0.0f, 0.2f);
      b.vector(p + "attn_k.bias", kv_dim, 0.0f, 0.2f);
      b.vector(p + "attn_v.bias", kv_dim, 0.0f, 0.2f);
    }
    if (qwen3) {
      b.vector(p + "attn_q_norm.weight", head_dim, 1.0f, 0.1f);
      b.vector(p + "attn_k_norm.weight", head_dim, 1.0f, 0.1f);
    }
    b.matrix(p + "attn_output.weight", types.matrix, s.n_embd, q_dim, 1.0f / std::sqrt(static_cast<float>(q_dim)));
    b.vector(p + "ffn_norm.weight", s.n_embd, 1.0f, 0.1f);
    b.matrix(p + "ffn_gate.weight", types.matrix, s.n_ff, s.n_embd, in_std);
    b.matrix(p + "ffn_up.weight", types.matrix, s.n_ff, s.n_embd, in_std);
    b.matrix(p + "ffn_down.weight", more, s.n_embd, s.n_ff, 1.0f / std::sqrt(static_cast<float>(s.n_ff)));
  }
  b.vector("output_norm.weight", s.n_embd, 1.0f, 0.1f);
  // Logits of a few units' spread, so sampling has real choices and greedy a clear winner.
  if (!tied) b.matrix("output.weight", types.output, s.vocab, s.n_embd, 3.0f * in_std);
  writer.write(path);
}

}  // namespace orchard::model

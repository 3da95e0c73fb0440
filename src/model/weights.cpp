#include "model/weights.h"

#include <fmt/ranges.h>

#include <cstring>

#include "core/error.h"
#include "core/quant.h"

namespace orchard::model {
namespace {

using core::TensorType;
using gguf::TensorInfo;

const TensorInfo& require(const gguf::Reader& file, const std::string& name, std::vector<int64_t> shape) {
  const TensorInfo& t = file.tensor(name);
  if (t.shape != shape)
    throw FormatError(error_message("model", "{}: tensor '{}' has shape [{}], expected [{}]", file.path(), name,
                                    fmt::join(t.shape, ", "), fmt::join(shape, ", ")));
  return t;
}

std::vector<float> to_floats(const gguf::Reader& file, const TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.elements()));
  if (t.type != TensorType::F32 && t.type != TensorType::F16 && t.type != TensorType::BF16)
    throw FormatError(error_message("model", "{}: tensor '{}' is {}, expected f32, f16 or bf16", file.path(), t.name,
                                    core::type_name(t.type)));
  core::dequantize_row_reference(t.type, t.data, out.data(), t.elements());
  return out;
}

std::vector<float> slice(const std::vector<float>& v, size_t begin, size_t end) {
  return std::vector<float>(v.begin() + static_cast<ptrdiff_t>(begin), v.begin() + static_cast<ptrdiff_t>(end));
}

}  // namespace

class WeightBinder {
 public:
  WeightBinder(const gguf::Reader& file, const LoadOptions& options, std::vector<std::vector<uint8_t>>& owned)
      : file_(file), options_(options), owned_(owned) {}

  // Rows [row_begin, row_end) of a [rows, cols] matrix: contiguous bytes, no copy needed.
  core::WeightMatrix rows(const std::string& name, int64_t rows, int64_t cols, int64_t row_begin, int64_t row_end) {
    const TensorInfo& t = require(file_, name, {cols, rows});
    size_t stride = core::row_bytes(t.type, cols);
    return core::WeightMatrix::prepare(t.type, t.data + stride * static_cast<size_t>(row_begin), row_end - row_begin,
                                       cols, options_.allow_repack, &arena_);
  }

  // Columns [col_begin, col_end) of every row, gathered into a compact copy. A split that falls
  // inside a quantization block (e.g. two 64-wide heads of a Q4_K matrix, whose blocks hold 256)
  // cannot keep the blocks, so that slice is dequantized to F32: the same weight values, at the
  // cost of memory and of float (not 8-bit) activations for this one product.
  core::WeightMatrix columns(const std::string& name, int64_t rows, int64_t cols, int64_t col_begin, int64_t col_end) {
    if (col_begin == 0 && col_end == cols) return this->rows(name, rows, cols, 0, rows);
    const TensorInfo& t = require(file_, name, {cols, rows});
    const int64_t block = core::type_traits(t.type).block_elements;
    const int64_t width = col_end - col_begin;
    const size_t stride = core::row_bytes(t.type, cols);
    auto& buffer = owned_.emplace_back();
    if (col_begin % block == 0 && col_end % block == 0) {
      const size_t offset = core::row_bytes(t.type, col_begin), bytes = core::row_bytes(t.type, width);
      buffer.resize(bytes * static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(buffer.data() + bytes * static_cast<size_t>(r), t.data + stride * static_cast<size_t>(r) + offset,
                    bytes);
      return core::WeightMatrix::prepare(t.type, buffer.data(), rows, width, options_.allow_repack, &arena_);
    }
    buffer.resize(sizeof(float) * static_cast<size_t>(width * rows));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      core::dequantize_row_reference(t.type, t.data + stride * static_cast<size_t>(r), row.data(), cols);
      std::memcpy(buffer.data() + sizeof(float) * static_cast<size_t>(width * r), row.data() + col_begin,
                  sizeof(float) * static_cast<size_t>(width));
    }
    return core::WeightMatrix::prepare(core::TensorType::F32, buffer.data(), rows, width, options_.allow_repack,
                                       &arena_);
  }

  std::vector<float> vector(const std::string& name, int64_t n) { return to_floats(file_, require(file_, name, {n})); }

 private:
  const gguf::Reader& file_;
  const LoadOptions& options_;
  std::vector<std::vector<uint8_t>>& owned_;
  core::CopyArena arena_;  // the model's repacked copies side by side (each keeps its block alive)
};

ModelWeights::ModelWeights(const gguf::Reader& file, const ModelConfig& config, const Shard& shard,
                           const LoadOptions& options)
    : config_(config), shard_(shard) {
  ORCHARD_CHECK(shard.layer_begin >= 0 && shard.layer_end <= config.n_layers && shard.layer_begin <= shard.layer_end,
                "layer range {}..{} of {}", shard.layer_begin, shard.layer_end, config.n_layers);
  WeightBinder bind(file, options, owned_slices_);
  const int64_t d = config.n_embd, hd = config.head_dim, vocab = config.vocab_size;
  const size_t total = static_cast<size_t>(shard.n_layers()) + 2;
  size_t done = 0;
  auto progress = [&] {
    if (options.on_progress) options.on_progress(++done, total);
  };

  if (shard.has_embedding) {
    const TensorInfo& t = require(file, "token_embd.weight", {d, vocab});
    token_embd_ = core::WeightMatrix::view(t.type, t.data, vocab, d);
  }
  if (config.has_rope_freq_factors)
    rope_freq_factors_ = bind.vector("rope_freqs.weight", config.rope_dims / 2);
  progress();

  const int64_t q0 = shard.head_begin * hd, q1 = shard.head_end * hd;
  const int64_t kv0 = shard.kv_head_begin * hd, kv1 = shard.kv_head_end * hd;
  layers_.reserve(static_cast<size_t>(shard.n_layers()));
  for (int32_t l = shard.layer_begin; l < shard.layer_end; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    LayerWeights& w = layers_.emplace_back();
    w.attn_norm = bind.vector(p + "attn_norm.weight", d);
    w.wq = bind.rows(p + "attn_q.weight", config.q_dim(), d, q0, q1);
    w.wk = bind.rows(p + "attn_k.weight", config.kv_dim(), d, kv0, kv1);
    w.wv = bind.rows(p + "attn_v.weight", config.kv_dim(), d, kv0, kv1);
    w.wo = bind.columns(p + "attn_output.weight", d, config.q_dim(), q0, q1);
    if (config.has_qkv_bias) {
      w.bq = slice(bind.vector(p + "attn_q.bias", config.q_dim()), q0, q1);
      w.bk = slice(bind.vector(p + "attn_k.bias", config.kv_dim()), kv0, kv1);
      w.bv = slice(bind.vector(p + "attn_v.bias", config.kv_dim()), kv0, kv1);
    }
    if (config.has_qk_norm) {
      w.q_norm = bind.vector(p + "attn_q_norm.weight", hd);
      w.k_norm = bind.vector(p + "attn_k_norm.weight", hd);
    }
    w.ffn_norm = bind.vector(p + "ffn_norm.weight", d);
    w.w_gate = bind.rows(p + "ffn_gate.weight", config.n_ff, d, shard.ff_begin, shard.ff_end);
    w.w_up = bind.rows(p + "ffn_up.weight", config.n_ff, d, shard.ff_begin, shard.ff_end);
    w.w_down = bind.columns(p + "ffn_down.weight", d, config.n_ff, shard.ff_begin, shard.ff_end);
    progress();
  }

  if (shard.has_output) {
    output_norm_ = bind.vector("output_norm.weight", d);
    const std::string name = config.tied_output ? "token_embd.weight" : "output.weight";
    output_ = bind.rows(name, vocab, d, shard.vocab_begin, shard.vocab_end);
  }
  progress();
}

void ModelWeights::embed(int32_t token, float* dst) const {
  ORCHARD_CHECK(token >= 0 && token < config_.vocab_size, "token id {} outside the vocabulary of {}", token,
                config_.vocab_size);
  token_embd_.dequantize_row(token, dst);
}

size_t ModelWeights::bytes_per_token() const {
  size_t total = 0;
  for (const auto& w : layers_)
    total += w.wq.bytes() + w.wk.bytes() + w.wv.bytes() + w.wo.bytes() + w.w_gate.bytes() + w.w_up.bytes() +
             w.w_down.bytes();
  if (shard_.has_output) total += output_.bytes();
  return total;
}

}  // namespace orchard::model

namespace orchard::model {

std::vector<ByteRange> shard_byte_ranges(const gguf::Reader& file, const ModelConfig& config, const Shard& shard) {
  std::vector<ByteRange> ranges;
  auto whole = [&](const std::string& name) {
    if (const TensorInfo* t = file.find_tensor(name))
      ranges.push_back({file.data_offset() + t->offset, t->size_bytes});
  };
  auto rows = [&](const std::string& name, int64_t begin, int64_t end) {
    const TensorInfo& t = file.tensor(name);
    const uint64_t stride = core::row_bytes(t.type, t.shape[0]);
    ranges.push_back({file.data_offset() + t.offset + stride * static_cast<uint64_t>(begin),
                      stride * static_cast<uint64_t>(end - begin)});
  };
  // Mirrors ModelWeights' constructor: a rank given only these bytes computes what a rank with
  // the whole file computes (tests/parallel checks it).
  if (shard.has_embedding) whole("token_embd.weight");
  whole("rope_freqs.weight");
  const int64_t hd = config.head_dim;
  for (int32_t l = shard.layer_begin; l < shard.layer_end; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    for (const char* name : {"attn_norm.weight", "attn_output.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias",
                             "attn_q_norm.weight", "attn_k_norm.weight", "ffn_norm.weight", "ffn_down.weight"})
      whole(p + name);
    rows(p + "attn_q.weight", shard.head_begin * hd, shard.head_end * hd);
    rows(p + "attn_k.weight", shard.kv_head_begin * hd, shard.kv_head_end * hd);
    rows(p + "attn_v.weight", shard.kv_head_begin * hd, shard.kv_head_end * hd);
    rows(p + "ffn_gate.weight", shard.ff_begin, shard.ff_end);
    rows(p + "ffn_up.weight", shard.ff_begin, shard.ff_end);
  }
  if (shard.has_output) {
    whole("output_norm.weight");
    rows(config.tied_output ? "token_embd.weight" : "output.weight", shard.vocab_begin, shard.vocab_end);
  }
  return ranges;
}

}  // namespace orchard::model

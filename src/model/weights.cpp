#include "model/weights.h"

#include <fmt/ranges.h>

#include <cstring>
#include <tuple>
#include <variant>

#include "core/error.h"
#include "core/quant.h"
#include "model/architecture.h"

namespace orchard::model {
namespace {

using core::TensorType;
using gguf::TensorInfo;

// The tensor `spec` names, its shape checked; nullptr when it is optional and absent.
const TensorInfo* find_checked(const gguf::Reader& file, const TensorSpec& spec) {
  const TensorInfo* t = spec.required ? &file.tensor(spec.name) : file.find_tensor(spec.name);
  if (t && t->shape != spec.shape)
    throw FormatError(error_message("model", "{}: tensor '{}' has shape [{}], expected [{}]", file.path(), spec.name,
                                    fmt::join(t->shape, ", "), fmt::join(spec.shape, ", ")));
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

struct Range {
  int64_t begin, end;
};

// The part of `axis` that `shard` holds.
Range axis_range(const ModelConfig& c, const Shard& s, ShardAxis axis) {
  const int64_t hd = c.head_dim;
  switch (axis) {
    case ShardAxis::QueryDims: return {s.head_begin * hd, s.head_end * hd};
    case ShardAxis::QueryHeads: return {s.head_begin, s.head_end};
    case ShardAxis::KvDims: return {s.kv_head_begin * hd, s.kv_head_end * hd};
    case ShardAxis::FfRows: return {s.ff_begin, s.ff_end};
    case ShardAxis::ExpertRows: return {s.expert_ff_begin, s.expert_ff_end};
    case ShardAxis::Vocab: return {s.vocab_begin, s.vocab_end};
    case ShardAxis::ValueDims:
      return {int64_t{s.head_begin} * c.value_head_dim, int64_t{s.head_end} * c.value_head_dim};
    case ShardAxis::SharedRows: return {s.shared_ff_begin, s.shared_ff_end};
  }
  ORCHARD_CHECK(false, "unknown shard axis");
  return {};
}

// Bytes from one matrix of a stack ({cols, rows, experts}) to the next.
size_t matrix_bytes(const TensorInfo& t) {
  return core::row_bytes(t.type, t.shape[0]) * static_cast<size_t>(t.shape.size() > 1 ? t.shape[1] : 1);
}

// Whether this shard holds entry `e` of a stack: an expert stack's experts held here, every
// entry of another stack (deepseek2's per-head attn_k_b / attn_v_b).
bool holds_entry(const TensorSpec& spec, const Shard& shard, int32_t layer, int64_t e) {
  return spec.axis != ShardAxis::ExpertRows || shard.holds_expert(layer, static_cast<int32_t>(e));
}

template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
// Clang before 17 (Apple's included) deduces no aggregate template arguments without it.
template <typename... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

class WeightBinder {
 public:
  WeightBinder(const LoadOptions& options, std::vector<std::vector<uint8_t>>& owned)
      : options_(options), owned_(owned) {}

  // Matrix `index` of tensor t (0 unless t is a stack of experts), as `split` divides it. An
  // expert's copy is made on first use (`on_first_use`): experts never chosen are never read.
  core::WeightMatrix matrix(const TensorInfo& t, int64_t index, Split split, Range range, bool on_first_use = false) {
    const uint8_t* data = t.data + matrix_bytes(t) * static_cast<size_t>(index);
    const int64_t rows = t.shape.size() > 1 ? t.shape[1] : 1, cols = t.shape[0];
    switch (split) {
      case Split::Whole: return this->rows(t.type, data, cols, 0, rows, on_first_use);
      case Split::Rows: return this->rows(t.type, data, cols, range.begin, range.end, on_first_use);
      case Split::Columns: return columns(t.type, data, rows, cols, range, on_first_use);
    }
    ORCHARD_CHECK(false, "unknown split");
    return {};
  }

  // Older deepseek2 files join every head's key and value up-projections in attn_kv_b
  // ([heads × (nope + value), kv_lora_rank]); the absorbed form takes each head's key part
  // transposed (attn_k_b: [kv_lora_rank, nope]) and its value part as it is (attn_v_b). The
  // transposed copies are F32 from float files and Q8_0 from quantized ones (whose blocks run
  // along the other axis, so they are quantized again).
  void split_joined_kv_b(const TensorInfo& t, const ModelConfig& c, LayerWeights& w) {
    const int64_t latent = c.kv_lora_rank, nope = c.head_dim - c.rope_dims, value = c.value_head_dim;
    const bool float_file = t.type == TensorType::F32 || t.type == TensorType::F16 || t.type == TensorType::BF16;
    const TensorType k_type = float_file || nope % 32 != 0 ? TensorType::F32 : TensorType::Q8_0;
    const size_t stride = core::row_bytes(t.type, latent), k_row = core::row_bytes(k_type, nope);
    std::vector<float> row(static_cast<size_t>(latent)), transposed(static_cast<size_t>(latent * nope));
    for (int64_t h = 0; h < c.n_heads; ++h) {
      const int64_t first = h * (nope + value);
      for (int64_t d = 0; d < nope; ++d) {
        core::dequantize_row_reference(t.type, t.data + stride * static_cast<size_t>(first + d), row.data(), latent);
        for (int64_t r = 0; r < latent; ++r) transposed[static_cast<size_t>(r * nope + d)] = row[static_cast<size_t>(r)];
      }
      auto& buffer = owned_.emplace_back(k_row * static_cast<size_t>(latent));
      for (int64_t r = 0; r < latent; ++r)
        core::quantize_row_reference(k_type, &transposed[static_cast<size_t>(r * nope)],
                                     buffer.data() + k_row * static_cast<size_t>(r), nope);
      w.k_b.push_back(core::WeightMatrix::prepare(k_type, buffer.data(), latent, nope, options_.allow_repack, &arena_));
      w.v_b.push_back(rows(t.type, t.data, latent, first + nope, first + nope + value));
    }
  }

 private:
  // Rows [row_begin, row_end) of a matrix: contiguous bytes, no copy needed.
  core::WeightMatrix rows(TensorType type, const uint8_t* data, int64_t cols, int64_t row_begin, int64_t row_end,
                          bool on_first_use = false) {
    const uint8_t* first = data + core::row_bytes(type, cols) * static_cast<size_t>(row_begin);
    if (on_first_use)
      return core::WeightMatrix::prepare_on_first_use(type, first, row_end - row_begin, cols, options_.allow_repack,
                                                      &arena_);
    return core::WeightMatrix::prepare(type, first, row_end - row_begin, cols, options_.allow_repack, &arena_);
  }

  // Columns [range) of every row, gathered into a compact copy. A split that falls inside a
  // quantization block (e.g. two 64-wide heads of a Q4_K matrix, whose blocks hold 256) cannot
  // keep the blocks, so that slice is dequantized to F32: the same weight values, at the cost of
  // memory and of float (not 8-bit) activations for this one product.
  // Only whole rows are made on first use: a slice's copy is gathered here.
  core::WeightMatrix columns(TensorType type, const uint8_t* data, int64_t rows, int64_t cols, Range range,
                             bool on_first_use) {
    if (range.begin == 0 && range.end == cols) return this->rows(type, data, cols, 0, rows, on_first_use);
    const int64_t block = core::type_traits(type).block_elements;
    const int64_t width = range.end - range.begin;
    const size_t stride = core::row_bytes(type, cols);
    auto& buffer = owned_.emplace_back();
    if (range.begin % block == 0 && range.end % block == 0) {
      const size_t offset = core::row_bytes(type, range.begin), bytes = core::row_bytes(type, width);
      buffer.resize(bytes * static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(buffer.data() + bytes * static_cast<size_t>(r), data + stride * static_cast<size_t>(r) + offset,
                    bytes);
      return keep_unless_repacked(
          core::WeightMatrix::prepare(type, buffer.data(), rows, width, options_.allow_repack, &arena_));
    }
    buffer.resize(sizeof(float) * static_cast<size_t>(width * rows));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      core::dequantize_row_reference(type, data + stride * static_cast<size_t>(r), row.data(), cols);
      std::memcpy(buffer.data() + sizeof(float) * static_cast<size_t>(width * r), row.data() + range.begin,
                  sizeof(float) * static_cast<size_t>(width));
    }
    return keep_unless_repacked(core::WeightMatrix::prepare(core::TensorType::F32, buffer.data(), rows, width,
                                                            options_.allow_repack, &arena_));
  }

  // A gathered slice that was repacked lives on in its interleaved copy: the gathered bytes
  // (the last of owned_) are no longer read, so they go, and a tensor rank's column slices
  // take their memory once, not twice. A slice left as a view keeps them.
  core::WeightMatrix keep_unless_repacked(core::WeightMatrix matrix) {
    if (matrix.repacked()) owned_.pop_back();
    return matrix;
  }

  const LoadOptions& options_;
  std::vector<std::vector<uint8_t>>& owned_;
  core::CopyArena arena_;  // the model's repacked copies side by side (each keeps its block alive)
};

ModelWeights::ModelWeights(const gguf::Reader& file, const ModelConfig& config, const Shard& shard,
                           const LoadOptions& options)
    : config_(config), shard_(shard) {
  ORCHARD_CHECK(config.arch != nullptr, "a config without an architecture");
  ORCHARD_CHECK(shard.layer_begin >= 0 && shard.layer_end <= config.n_layers && shard.layer_begin <= shard.layer_end,
                "layer range {}..{} of {}", shard.layer_begin, shard.layer_end, config.n_layers);
  WeightBinder bind(options, owned_slices_);
  const size_t total = static_cast<size_t>(shard.n_layers()) + 2;
  size_t done = 0;
  auto progress = [&] {
    if (options.on_progress) options.on_progress(++done, total);
  };
  // A vector, or a small matrix's rows end to end, each row cut to the shard's range.
  auto floats = [&](const TensorInfo& t, const TensorSpec& spec) {
    std::vector<float> all = to_floats(file, t);
    if (spec.split == Split::Whole) return all;
    const Range r = axis_range(config, shard, spec.axis);
    const auto cols = static_cast<size_t>(spec.cols());
    std::vector<float> part;
    part.reserve(all.size() / cols * static_cast<size_t>(r.end - r.begin));
    for (size_t row = 0; row < all.size(); row += cols)
      part.insert(part.end(), all.begin() + static_cast<ptrdiff_t>(row + r.begin),
                  all.begin() + static_cast<ptrdiff_t>(row + r.end));
    return part;
  };

  // The model-wide tensors, bound by name: model_tensors lists embedding, RoPE factors, output
  // norm, output head.
  const std::vector<TensorSpec> global = model_tensors(config);
  const TensorInfo* embedding = find_checked(file, global[0]);
  if (shard.has_embedding) token_embd_ = core::WeightMatrix::view(embedding->type, embedding->data, config.vocab_size,
                                                                  config.n_embd);
  if (const TensorInfo* t = find_checked(file, global[1])) rope_freq_factors_ = floats(*t, global[1]);
  progress();

  layers_.reserve(static_cast<size_t>(shard.n_layers()));
  for (int32_t l = shard.layer_begin; l < shard.layer_end; ++l) {
    LayerWeights& w = layers_.emplace_back();
    for (const TensorSpec& spec : config.arch->layer_tensors(config, l)) {
      const TensorInfo* t = find_checked(file, spec);
      if (!t) continue;
      const Range range = axis_range(config, shard, spec.axis);
      std::visit(Overloaded{
                     [](std::monostate) {},
                     [&](core::WeightMatrix LayerWeights::*m) { w.*m = bind.matrix(*t, 0, spec.split, range); },
                     [&](std::vector<float> LayerWeights::*v) { w.*v = floats(*t, spec); },
                     [&](std::vector<core::WeightMatrix> LayerWeights::*stack) {
                       // Indexed by expert (or head); experts another rank holds stay empty.
                       // Every head is read on every step; an expert only once chosen.
                       auto& matrices = w.*stack;
                       matrices.resize(static_cast<size_t>(spec.experts()));
                       const bool experts = spec.axis == ShardAxis::ExpertRows;
                       for (int64_t e = 0; e < spec.experts(); ++e)
                         if (holds_entry(spec, shard, l, e))
                           matrices[static_cast<size_t>(e)] = bind.matrix(*t, e, spec.split, range, experts);
                     },
                 },
                 spec.slot);
    }
    if (config.joined_kv_b) bind.split_joined_kv_b(file.tensor(fmt::format("blk.{}.attn_kv_b.weight", l)), config, w);
    progress();
  }

  if (shard.has_output) {
    output_norm_ = floats(*find_checked(file, global[2]), global[2]);
    const TensorInfo* head = find_checked(file, global[3]);
    output_ = bind.matrix(head ? *head : *embedding, 0, Split::Rows, axis_range(config, shard, ShardAxis::Vocab));
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
  for (const auto& w : layers_) {
    total += w.wq.bytes() + w.wk.bytes() + w.wv.bytes() + w.wo.bytes() + w.w_gate.bytes() + w.w_up.bytes() +
             w.w_down.bytes() + w.router.size() * sizeof(float);
    total += w.wq_a.bytes() + w.wkv_a.bytes() + w.shared_gate.bytes() + w.shared_up.bytes() + w.shared_down.bytes();
    for (const auto* heads : {&w.k_b, &w.v_b})
      for (int32_t h = shard_.head_begin; h < shard_.head_end && !heads->empty(); ++h)
        total += (*heads)[static_cast<size_t>(h)].bytes();
    size_t experts = 0;
    for (const auto* stack : {&w.expert_gate, &w.expert_up, &w.expert_down})
      for (const auto& m : *stack) experts += m.bytes();
    if (w.has_experts()) total += experts / static_cast<size_t>(config_.n_expert) * config_.n_expert_used;
  }
  if (shard_.has_output) total += output_.bytes();
  return total;
}

std::vector<ByteRange> shard_byte_ranges(const gguf::Reader& file, const ModelConfig& config, const Shard& shard) {
  std::vector<ByteRange> ranges;
  // Mirrors ModelWeights' constructor: a rank given only these bytes computes what a rank with
  // the whole file computes (tests/parallel checks it).
  auto add = [&](const TensorSpec& spec, const TensorInfo& t, Split split, int32_t layer = -1) {
    const uint64_t base = file.data_offset() + t.offset;
    // Vectors are read whole and cut after conversion to floats (a split one's range is of its
    // elements, not of rows of bytes).
    if (std::holds_alternative<std::vector<float> LayerWeights::*>(spec.slot)) {
      ranges.push_back({base, t.size_bytes});
      return;
    }
    // A stack of experts: only the experts held here (an expert split's, each run of them).
    const bool stack = std::holds_alternative<std::vector<core::WeightMatrix> LayerWeights::*>(spec.slot);
    auto held = [&](int64_t e) { return !stack || holds_entry(spec, shard, layer, e); };
    const uint64_t stride = core::row_bytes(t.type, t.shape[0]);
    if (split == Split::Columns) {
      // The binder gathers each row's slice of the columns when the slice is whole blocks
      // (WeightBinder::columns), so only those bytes are needed; a slice inside a block is
      // dequantized from whole rows.
      const Range r = axis_range(config, shard, spec.axis);
      const int64_t block = core::type_traits(t.type).block_elements, rows = t.shape.size() > 1 ? t.shape[1] : 1;
      if ((r.begin > 0 || r.end < t.shape[0]) && r.begin % block == 0 && r.end % block == 0) {
        const uint64_t skip = core::row_bytes(t.type, r.begin), bytes = core::row_bytes(t.type, r.end - r.begin);
        for (int64_t e = 0; e < spec.experts(); ++e)
          if (held(e))
            for (int64_t row = 0; row < rows; ++row)
              ranges.push_back({base + matrix_bytes(t) * static_cast<uint64_t>(e) + stride * static_cast<uint64_t>(row) + skip,
                                bytes});
        return;
      }
    }
    if (split != Split::Rows) {
      if (spec.experts() == 1) {
        ranges.push_back({base, t.size_bytes});
        return;
      }
      for (int64_t first = 0; first < spec.experts();) {
        if (!held(first)) {
          ++first;
          continue;
        }
        int64_t last = first + 1;
        while (last < spec.experts() && held(last)) ++last;
        ranges.push_back({base + matrix_bytes(t) * static_cast<uint64_t>(first),
                          matrix_bytes(t) * static_cast<uint64_t>(last - first)});
        first = last;
      }
      return;
    }
    const Range r = axis_range(config, shard, spec.axis);
    for (int64_t e = 0; e < spec.experts(); ++e)
      if (held(e))
        ranges.push_back({base + matrix_bytes(t) * static_cast<uint64_t>(e) + stride * static_cast<uint64_t>(r.begin),
                          stride * static_cast<uint64_t>(r.end - r.begin)});
  };
  const std::vector<TensorSpec> global = model_tensors(config);
  const TensorInfo* embedding = find_checked(file, global[0]);
  if (shard.has_embedding) add(global[0], *embedding, Split::Whole);
  if (const TensorInfo* t = find_checked(file, global[1])) add(global[1], *t, Split::Whole);
  for (int32_t l = shard.layer_begin; l < shard.layer_end; ++l)
    for (const TensorSpec& spec : config.arch->layer_tensors(config, l))
      if (const TensorInfo* t = find_checked(file, spec)) add(spec, *t, spec.split, l);
  if (shard.has_output) {
    add(global[2], *find_checked(file, global[2]), Split::Whole);
    const TensorInfo* head = find_checked(file, global[3]);
    add(global[3], head ? *head : *embedding, Split::Rows);
  }
  return ranges;
}

}  // namespace orchard::model

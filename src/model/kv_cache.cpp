#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "core/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ORCHARD_X86_F16C 1
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace orchard::model {
namespace {

// Elements of a head's key converted at a time before they are scattered to its rows.
constexpr int32_t kMaxConvertedKey = 256;

// out[i] = float_to_half(x[i]). The hardware conversions round to nearest even, as
// core::float_to_half does, and quiet a NaN the same way (sign, all-ones exponent, the
// quiet bit and the payload's top bits): a decode step stores every layer's key and value,
// and the scalar conversion was a visible part of the work its main thread does alone.
#ifdef ORCHARD_X86_F16C
const bool kHasF16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");

__attribute__((target("avx,f16c"))) void floats_to_halves_f16c(const float* x, core::Half* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = core::float_to_half(x[i]);
}
#endif

void floats_to_halves(const float* x, core::Half* out, int64_t n) {
#ifdef ORCHARD_X86_F16C
  if (kHasF16c) return floats_to_halves_f16c(x, out, n);
#endif
  int64_t i = 0;
#if defined(__aarch64__)
  for (; i + 4 <= n; i += 4) vst1_u16(out + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
#endif
  for (; i < n; ++i) out[i] = core::float_to_half(x[i]);
}

}  // namespace

std::string_view kv_type_name(KvType type) {
  switch (type) {
    case KvType::F32: return "f32";
    case KvType::F16: return "f16";
    case KvType::Q8_0: return "q8_0";
  }
  return "f32";
}

KvType parse_kv_type(std::string_view name) {
  for (KvType type : {KvType::F32, KvType::F16, KvType::Q8_0})
    if (name == kv_type_name(type)) return type;
  throw Error(error_message("model", "KV cache type '{}': expected f32, f16 or q8_0", name));
}

KvCache::KvCache(int32_t n_layers, int32_t n_ctx, int32_t n_kv_heads, int32_t key_dim, int32_t value_dim, KvType type,
                 std::vector<int32_t> ring)
    : n_layers_(n_layers), n_ctx_(n_ctx), n_kv_heads_(n_kv_heads), key_dim_(key_dim), value_dim_(value_dim), type_(type) {
  ORCHARD_CHECK(n_layers >= 0 && n_ctx > 0 && n_kv_heads > 0 && key_dim > 0 && value_dim > 0,
                "KV cache of {} layers, {} positions, {} heads of {}/{}", n_layers, n_ctx, n_kv_heads, key_dim, value_dim);
  ORCHARD_CHECK(ring.empty() || static_cast<int32_t>(ring.size()) == n_layers, "{} rings for {} layers", ring.size(),
                n_layers);
  if (type == KvType::Q8_0 && (key_dim % kKvQ8Block != 0 || value_dim % kKvQ8Block != 0))
    throw Error(error_message("model",
                              "a q8_0 KV cache quantizes heads in blocks of {}; this model's keys are {} wide and its "
                              "values {}: use --cache-type f16",
                              kKvQ8Block, key_dim, value_dim));
  layers_.resize(static_cast<size_t>(n_layers));
  size_t slots = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& layer = layers_[l];
    layer.ring = ring.empty() ? 0 : ring[l];
    ORCHARD_CHECK(layer.ring >= 0 && layer.ring <= n_ctx / 2, "a ring of {} positions in a context of {}", layer.ring,
                  n_ctx);
    layer.slots = layer.ring > 0 ? 2 * layer.ring : n_ctx;
    layer.capacity = (layer.slots + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
    layer.first_key = slots * n_kv_heads * key_dim;
    layer.first_value = slots * n_kv_heads * value_dim;
    slots += static_cast<size_t>(layer.capacity);
  }
  const size_t keys = slots * n_kv_heads * key_dim;
  const size_t values = slots * n_kv_heads * value_dim;
  keys_ = reserve(keys * element_bytes());
  values_ = reserve(values * element_bytes());
  if (type == KvType::Q8_0) {
    key_scales_ = reserve(keys / kKvQ8Block * sizeof(core::Half));
    value_scales_ = reserve(values / kKvQ8Block * sizeof(core::Half));
  }
}

KvCache::Buffer KvCache::reserve(size_t bytes) {
  // An anonymous mapping: zeroed pages mapped on first touch, so only the positions used become
  // resident, and page-aligned, so every 64-byte row of keys or values is one cache line. (calloc
  // gave the same pages 16 bytes in, and then each such row straddled two lines.)
  const size_t length = std::max<size_t>(bytes, 1);
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return Buffer(static_cast<uint8_t*>(p), Unmap{length});
}

void KvCache::Unmap::operator()(uint8_t* p) const { ::munmap(p, bytes); }

size_t KvCache::element_bytes() const {
  switch (type_) {
    case KvType::F32: return sizeof(float);
    case KvType::F16: return sizeof(core::Half);
    case KvType::Q8_0: return sizeof(int8_t);
  }
  return sizeof(float);
}

double kv_value_bytes(KvType type) {
  switch (type) {
    case KvType::F32: return sizeof(float);
    case KvType::F16: return sizeof(core::Half);
    case KvType::Q8_0: return sizeof(int8_t) + static_cast<double>(sizeof(core::Half)) / kKvQ8Block;
  }
  return sizeof(float);
}

size_t KvCache::bytes_per_slot() const {
  const size_t elements = static_cast<size_t>(n_kv_heads_) * (key_dim_ + value_dim_);
  // Exact: a Q8_0 cache's widths are multiples of its block.
  return static_cast<size_t>(static_cast<double>(elements) * kv_value_bytes(type_));
}

size_t KvCache::bytes_per_position() const {
  size_t full = 0;
  for (const Layer& l : layers_) full += l.ring == 0 ? 1 : 0;
  return full * bytes_per_slot();
}

size_t KvCache::bytes() const {
  size_t slots = 0;
  for (const Layer& l : layers_) slots += static_cast<size_t>(l.capacity);
  return slots * bytes_per_slot();
}

const core::Half* KvCache::key_scales(int32_t layer, int32_t kv_head) const {
  if (type_ != KvType::Q8_0) return nullptr;
  return reinterpret_cast<const core::Half*>(key_scales_.get()) + key_offset(layer, kv_head) / kKvQ8Block;
}

const core::Half* KvCache::value_scales(int32_t layer, int32_t kv_head) const {
  if (type_ != KvType::Q8_0) return nullptr;
  return reinterpret_cast<const core::Half*>(value_scales_.get()) + value_offset(layer, kv_head) / kKvQ8Block;
}

void KvCache::store_heads(int32_t layer, int32_t pos, int32_t head_begin, int32_t head_end, const float* k,
                          const float* v) {
  ORCHARD_CHECK(head_begin >= 0 && head_begin <= head_end && head_end <= n_kv_heads_, "KV heads {}..{} of {}", head_begin,
                head_end, n_kv_heads_);
  const int32_t r = ring(layer);
  if (r == 0) return store_slot(layer, pos, head_begin, head_end, k, v);
  store_slot(layer, pos % r, head_begin, head_end, k, v);
  store_slot(layer, pos % r + r, head_begin, head_end, k, v);
}

void KvCache::store_slot(int32_t layer, int32_t index, int32_t head_begin, int32_t head_end, const float* k,
                         const float* v) {
  for (int32_t h = head_begin; h < head_end; ++h) {
    const float* key = k + static_cast<size_t>(h) * key_dim_;
    const float* value = v + static_cast<size_t>(h) * value_dim_;
    const size_t key_base = key_offset(layer, h);
    const size_t value_row = value_offset(layer, h) + static_cast<size_t>(index) * value_dim_;
    switch (type_) {
      case KvType::F32: {
        auto* keys = reinterpret_cast<float*>(keys_.get()) + key_base;
        for (int32_t d = 0; d < key_dim_; ++d) keys[key_element(key_dim_, d, index)] = key[d];
        std::memcpy(reinterpret_cast<float*>(values_.get()) + value_row, value, static_cast<size_t>(value_dim_) * sizeof(float));
        break;
      }
      case KvType::F16: {
        auto* keys = reinterpret_cast<core::Half*>(keys_.get()) + key_base;
        // A head's key is converted as one run, then scattered down its block's rows.
        core::Half converted[kMaxConvertedKey];
        for (int32_t d0 = 0; d0 < key_dim_; d0 += kMaxConvertedKey) {
          const int32_t count = std::min(kMaxConvertedKey, key_dim_ - d0);
          floats_to_halves(key + d0, converted, count);
          for (int32_t d = 0; d < count; ++d) keys[key_element(key_dim_, d0 + d, index)] = converted[d];
        }
        floats_to_halves(value, reinterpret_cast<core::Half*>(values_.get()) + value_row, value_dim_);
        break;
      }
      case KvType::Q8_0: {
        // GGUF's Q8_0 blocks (the reference quantizer), taken apart into codes and scales.
        core::BlockQ8_0 block;
        auto* keys = reinterpret_cast<int8_t*>(keys_.get()) + key_base;
        auto* key_scales = reinterpret_cast<core::Half*>(key_scales_.get()) + key_base / kKvQ8Block;
        for (int32_t d0 = 0; d0 < key_dim_; d0 += kKvQ8Block) {
          core::quantize_row_reference(core::TensorType::Q8_0, key + d0, &block, kKvQ8Block);
          for (int32_t i = 0; i < kKvQ8Block; ++i) keys[key_element(key_dim_, d0 + i, index)] = block.qs[i];
          key_scales[key_element(key_dim_ / kKvQ8Block, d0 / kKvQ8Block, index)] = block.d;
        }
        auto* values = reinterpret_cast<int8_t*>(values_.get()) + value_row;
        auto* value_scales = reinterpret_cast<core::Half*>(value_scales_.get()) + value_row / kKvQ8Block;
        for (int32_t i = 0; i < value_dim_; i += kKvQ8Block) {
          core::quantize_row_reference(core::TensorType::Q8_0, value + i, &block, kKvQ8Block);
          std::memcpy(values + i, block.qs, kKvQ8Block);
          value_scales[i / kKvQ8Block] = block.d;
        }
        break;
      }
    }
  }
}

void KvCache::copy_prefix(const KvCache& from, int32_t n) {
  ORCHARD_CHECK(from.n_layers_ == n_layers_ && from.n_ctx_ == n_ctx_ && from.n_kv_heads_ == n_kv_heads_ &&
                    from.key_dim_ == key_dim_ && from.value_dim_ == value_dim_ && from.type_ == type_,
                "copying between KV caches of different shapes");
  for (int32_t l = 0; l < n_layers_; ++l)
    ORCHARD_CHECK(from.ring(l) == ring(l), "copying between KV caches of different rings");
  ORCHARD_CHECK(n >= 0 && n <= n_ctx_, "copying {} positions of {}", n, n_ctx_);
  if (&from == this || n == 0) return;
  const size_t e = element_bytes(), h = sizeof(core::Half);
  const bool scaled = type_ == KvType::Q8_0;
  auto copy = [](uint8_t* to, const uint8_t* source, size_t at, size_t bytes) { std::memcpy(to + at, source + at, bytes); };
  for (int32_t l = 0; l < n_layers_; ++l) {
    // A ring is copied whole; a full layer's first n positions, its keys in whole blocks (the
    // slots past n that come with them are never read as keys a row sees).
    const Layer& layer = layers_[static_cast<size_t>(l)];
    const size_t count = ring(l) > 0 ? static_cast<size_t>(layer.capacity) : static_cast<size_t>(n);
    const size_t key_slots = (count + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
    for (int32_t head = 0; head < n_kv_heads_; ++head) {
      const size_t keys_at = key_offset(l, head), values_at = value_offset(l, head);
      copy(keys_.get(), from.keys_.get(), keys_at * e, key_slots * key_dim_ * e);
      copy(values_.get(), from.values_.get(), values_at * e, count * value_dim_ * e);
      if (!scaled) continue;
      copy(key_scales_.get(), from.key_scales_.get(), keys_at / kKvQ8Block * h, key_slots * key_dim_ / kKvQ8Block * h);
      copy(value_scales_.get(), from.value_scales_.get(), values_at / kKvQ8Block * h, count * value_dim_ / kKvQ8Block * h);
    }
  }
}

}  // namespace orchard::model

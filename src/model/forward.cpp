#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "model/attention_amx.h"
#include "model/ops.h"

namespace orchard::model {

Forward::Forward(const ModelWeights& weights, int32_t n_ctx, int32_t max_batch, core::ThreadPool& pool,
                 PartialSums* partial, int32_t n_sequences, KvType cache_type)
    : weights_(weights), pool_(pool), partial_(partial), max_batch_(max_batch) {
  const ModelConfig& c = weights.config();
  const Shard& s = weights.shard();
  ORCHARD_CHECK(max_batch > 0 && n_ctx > 0, "batch {} and context {} must be positive", max_batch, n_ctx);
  ORCHARD_CHECK(n_sequences > 0, "{} sequences", n_sequences);
  if (s.splits_layers(c)) ORCHARD_CHECK(partial != nullptr, "a shard that splits layers needs PartialSums");
  caches_.reserve(static_cast<size_t>(n_sequences));
  ring_ = c.sliding_ring(n_ctx, max_batch);
  std::vector<int32_t> rings;
  if (ring_ > 0)
    for (int32_t l = s.layer_begin; l < s.layer_end; ++l) rings.push_back(c.sliding_layer(l) ? ring_ : 0);
  held_.resize(static_cast<size_t>(n_sequences));
  // Latent attention keeps one latent per position for all heads (every rank of a split keeps
  // it whole): keys [latent | rotated part], values the latent.
  for (int32_t i = 0; i < n_sequences; ++i) {
    if (c.latent_attention())
      caches_.emplace_back(s.n_layers(), n_ctx, 1, c.kv_lora_rank + c.rope_dims, c.kv_lora_rank, cache_type);
    else
      caches_.emplace_back(s.n_layers(), n_ctx, s.n_kv_heads(), c.head_dim, c.head_dim, cache_type, rings);
  }
  const auto batch = static_cast<size_t>(max_batch);
  const size_t hd = static_cast<size_t>(c.head_dim);
  row_sequence_.resize(batch);
  row_pos_.resize(batch);
  logit_rows_.resize(batch);
  residual_.resize(batch * c.n_embd);
  normed_.resize(batch * c.n_embd);
  q_.resize(batch * s.n_heads() * hd);
  if (!c.latent_attention()) {
    k_.resize(batch * s.n_kv_heads() * hd);
    v_.resize(batch * s.n_kv_heads() * hd);
  }
  attn_out_.resize(batch * s.n_heads() * std::max(hd, static_cast<size_t>(c.value_head_dim)));
  if (c.latent_attention()) {
    const size_t latent = static_cast<size_t>(c.kv_lora_rank), width = latent + static_cast<size_t>(c.rope_dims);
    q_a_.resize(batch * static_cast<size_t>(c.q_lora_rank));
    kv_a_.resize(batch * width);
    q_latent_.resize(batch * s.n_heads() * width);
    latent_out_.resize(batch * s.n_heads() * latent);
  }
  proj_.resize(batch * c.n_embd);
  const size_t ff_width = std::max({s.n_ff(), s.n_expert_ff() * std::max(c.n_expert_used, 1),
                                    s.n_shared_ff()});
  gate_.resize(batch * ff_width);
  up_.resize(batch * ff_width);
  if (c.n_expert > 0) {
    const auto used = static_cast<size_t>(c.n_expert_used);
    router_logits_.resize(batch * c.n_expert);
    router_choice_.resize(batch * static_cast<size_t>(c.n_expert + c.n_expert_groups));
    group_choice_.resize(batch * static_cast<size_t>(c.n_expert_groups));
    route_expert_.resize(batch * used);
    route_weight_.resize(batch * used);
    if (!s.expert_holders.empty()) route_member_.resize(batch * used);
    held_choices_.resize(used);
    expert_start_.resize(static_cast<size_t>(c.n_expert) + 1);
    expert_cursor_.resize(static_cast<size_t>(c.n_expert));
    expert_rows_.resize(batch * used);
    gathered_.resize(batch * c.n_embd);
    expert_out_.resize(batch * c.n_embd);
    slot_out_.resize(batch * used * c.n_embd);
  }
  block_start_.resize(batch + 1);
  key_counts_.resize(batch);
  first_keys_.resize(batch);
  if (ring_ > 0) {
    ring_first_.resize(batch);
    ring_keys_.resize(batch);
  }
  // Latent attention: every query head reads the one latent "KV head", a task's share at a time.
  const int32_t group = c.latent_attention() ? std::min(c.n_heads, kLatentHeadsPerTask) : c.n_heads / c.n_kv_heads;
  scores_per_thread_ = static_cast<size_t>(ops::attention_scratch_floats(kAttentionBlockRows, group, n_ctx));
  scores_.resize(static_cast<size_t>(pool.size()) * scores_per_thread_);
  rope_cos_.resize(batch * (c.rope_dims / 2));
  rope_sin_.resize(batch * (c.rope_dims / 2));
  // A batch has one logits row per step, and steps name distinct sequences.
  if (s.has_output) logits_.resize(static_cast<size_t>(std::min(n_sequences, max_batch)) * s.n_vocab());
}

const float* Forward::logits(int32_t i) const {
  if (i < 0) i = logits_rows_ - 1;
  ORCHARD_CHECK(i >= 0 && i < logits_rows_, "logits of row {} asked, {} computed", i, logits_rows_);
  return logits_.data() + static_cast<size_t>(i) * weights_.shard().n_vocab();
}

int32_t Forward::resumable(int32_t sequence, int32_t pos) const {
  if (ring_ == 0 || pos == 0) return pos;
  const Held& held = held_.at(static_cast<size_t>(sequence));
  // The window of position pos starts sliding_window - 1 before it.
  const int32_t first_needed = std::max(0, pos - weights_.config().sliding_window + 1);
  return pos <= held.end && first_needed >= held.begin ? pos : 0;
}

void Forward::hold(int32_t sequence, int32_t pos, int32_t n) {
  if (ring_ == 0) return;
  Held& held = held_[static_cast<size_t>(sequence)];
  if (pos == 0) held.begin = 0;
  held.end = pos + n;
  // Storing [pos, pos + n) overwrote the slots of the positions a ring before them.
  held.begin = std::max(held.begin, held.end - ring_);
}

void Forward::copy_prefix(int32_t from, int32_t to, int32_t n) {
  cache(to).copy_prefix(cache(from), n);
  if (ring_ == 0 || from == to) return;
  held_.at(static_cast<size_t>(to)) = held_.at(static_cast<size_t>(from));
  held_[static_cast<size_t>(to)].end = std::min(n, held_[static_cast<size_t>(to)].end);
}

void Forward::check_positions(int32_t sequence, int32_t pos, int32_t n) const {
  if (pos >= 0 && n <= n_ctx() - pos && resumable(sequence, pos) == pos) return;
  if (pos >= 0 && n <= n_ctx() - pos)
    throw Error(error_message("model",
                              "position {} of sequence {}: its sliding-window layers no longer hold the {} positions "
                              "before it (the sequence went on past them); evaluate it again from position 0",
                              pos, sequence, weights_.config().sliding_window - 1));
  if (n_sequences() == 1)
    throw Error(error_message("model", "positions {}..{} do not fit the context of {} tokens", pos, int64_t{pos} + n,
                              n_ctx()));
  throw Error(error_message("model", "positions {}..{} of sequence {} do not fit the context of {} tokens", pos,
                            int64_t{pos} + n, sequence, n_ctx()));
}

void Forward::check_tokens(std::span<const TokenId> tokens) const {
  const int32_t vocab = weights_.config().vocab_size;
  for (TokenId t : tokens)
    if (t < 0 || t >= vocab)
      throw Error(error_message("model", "token id {} is outside the vocabulary of {}", t, vocab));
}

void Forward::place(int32_t sequence, std::span<const TokenId> tokens, int32_t pos, int32_t row, int32_t n) {
  const ModelConfig& c = weights_.config();
  const int32_t half = c.rope_dims / 2;
  const float* factors = weights_.rope_freq_factors().empty() ? nullptr : weights_.rope_freq_factors().data();
  for (int32_t t = 0; t < n; ++t) {
    const auto r = static_cast<size_t>(row + t);
    row_sequence_[r] = sequence;
    row_pos_[r] = pos + t;
    if (!tokens.empty()) weights_.embed(tokens[t], &residual_[r * c.n_embd]);
    ops::rope_angles(pos + t, c, factors, &rope_cos_[r * half], &rope_sin_[r * half]);
  }
}

void Forward::run(std::span<const TokenId> tokens, const float* hidden_in, int32_t n, int32_t pos, bool logits_for_all) {
  const ModelConfig& c = weights_.config();
  const Shard& s = weights_.shard();
  ORCHARD_CHECK(n > 0 && n <= max_batch_, "batch of {} positions, at most {}", n, max_batch_);
  check_positions(0, pos, n);
  if (s.has_embedding) {
    ORCHARD_CHECK(static_cast<int32_t>(tokens.size()) == n, "{} tokens for a batch of {}", tokens.size(), n);
    check_tokens(tokens);
    place(0, tokens, pos, 0, n);
  } else {
    ORCHARD_CHECK(hidden_in != nullptr, "a later pipeline stage needs hidden states");
    std::memcpy(residual_.data(), hidden_in, sizeof(float) * static_cast<size_t>(n) * c.n_embd);
    place(0, {}, pos, 0, n);
  }
  const int32_t n_logits = logits_for_all ? n : 1;
  for (int32_t i = 0; i < n_logits; ++i) logit_rows_[static_cast<size_t>(i)] = n - n_logits + i;
  hold(0, pos, n);
  run_rows(n, n_logits);
}

void Forward::run_batch(std::span<const SequenceStep> steps, const float* hidden_in, bool logits) {
  const bool embed = hidden_in == nullptr;
  ORCHARD_CHECK(!embed || weights_.shard().has_embedding, "a later pipeline stage needs hidden states");
  if (steps.empty()) throw Error(error_message("model", "a batch needs at least one step"));
  // Everything is checked before the first row is placed, so a refused batch changes nothing.
  int64_t rows = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const SequenceStep& step = steps[i];
    const auto n = static_cast<int32_t>(step.tokens.size());
    if (step.sequence < 0 || step.sequence >= n_sequences())
      throw Error(error_message("model", "step {} names sequence {}; this pass holds {}", i, step.sequence,
                                n_sequences()));
    for (size_t j = 0; j < i; ++j)
      if (steps[j].sequence == step.sequence)
        throw Error(error_message("model", "steps {} and {} both name sequence {}", j, i, step.sequence));
    if (n == 0) throw Error(error_message("model", "step {} (sequence {}) has no tokens", i, step.sequence));
    check_positions(step.sequence, step.pos, n);
    if (embed) check_tokens(step.tokens);
    rows += n;
  }
  if (rows > max_batch_)
    throw Error(error_message("model", "a batch of {} positions; this pass takes at most {}", rows, max_batch_));
  if (!embed)
    std::memcpy(residual_.data(), hidden_in, sizeof(float) * static_cast<size_t>(rows) * weights_.config().n_embd);
  int32_t row = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto n = static_cast<int32_t>(steps[i].tokens.size());
    place(steps[i].sequence, embed ? steps[i].tokens : std::span<const TokenId>{}, steps[i].pos, row, n);
    hold(steps[i].sequence, steps[i].pos, n);
    row += n;
    logit_rows_[i] = row - 1;
  }
  run_rows(row, logits ? static_cast<int32_t>(steps.size()) : 0);
}

void Forward::run_rows(int32_t n, int32_t n_logits) {
  const Shard& s = weights_.shard();
  for (int32_t layer = s.layer_begin; layer < s.layer_end; ++layer) {
    attention_block(layer, n);
    ffn_block(layer, n);
  }
  if (s.has_output && n_logits > 0) output_head(n_logits);
}

void Forward::attention_block(int32_t layer, int32_t n) {
  const ModelConfig& c = weights_.config();
  if (c.latent_attention()) return latent_attention_block(layer, n);
  const Shard& s = weights_.shard();
  const LayerWeights& w = weights_.layer(layer);
  const int32_t d = c.n_embd, hd = c.head_dim;
  const int32_t q_dim = s.n_heads() * hd, kv_dim = s.n_kv_heads() * hd;
  const int32_t local = layer - s.layer_begin;

  for_rows(n, [&](int32_t t) {
    ops::rms_norm(&residual_[static_cast<size_t>(t) * d], w.attn_norm.data(), &normed_[static_cast<size_t>(t) * d], d,
                  c.rms_eps);
  });
  const core::MatmulTarget qkv[] = {{&w.wq, q_.data()}, {&w.wk, k_.data()}, {&w.wv, v_.data()}};
  core::matmul_many(qkv, normed_.data(), n, pool_, scratch_);

  // Each row's heads are biased, normalized, rotated and stored in `parts` runs: a decode step
  // (one row) spreads them over the pool rather than leaving the other threads waiting. Every
  // head is computed on its own either way, so the results do not depend on the split.
  const int32_t half = c.rope_dims / 2, n_heads = s.n_heads(), n_kv = s.n_kv_heads();
  const int64_t parts = std::clamp<int64_t>((pool_.size() + n - 1) / n, 1, n_kv);
  auto finish_heads = [&](int32_t t, int64_t part) {
    const auto h0 = static_cast<int32_t>(n_heads * part / parts), h1 = static_cast<int32_t>(n_heads * (part + 1) / parts);
    const auto k0 = static_cast<int32_t>(n_kv * part / parts), k1 = static_cast<int32_t>(n_kv * (part + 1) / parts);
    float* q = &q_[static_cast<size_t>(t) * q_dim];
    float* k = &k_[static_cast<size_t>(t) * kv_dim];
    float* v = &v_[static_cast<size_t>(t) * kv_dim];
    if (!w.bq.empty()) {
      ops::add(q + h0 * hd, w.bq.data() + h0 * hd, (h1 - h0) * hd);
      ops::add(k + k0 * hd, w.bk.data() + k0 * hd, (k1 - k0) * hd);
      ops::add(v + k0 * hd, w.bv.data() + k0 * hd, (k1 - k0) * hd);
    }
    const float* cos = &rope_cos_[static_cast<size_t>(t) * half];
    const float* sin = &rope_sin_[static_cast<size_t>(t) * half];
    for (int32_t h = h0; h < h1; ++h) {
      if (!w.q_norm.empty()) ops::rms_norm(q + h * hd, w.q_norm.data(), q + h * hd, hd, c.rms_eps);
      ops::rope(q + h * hd, cos, sin, c.rope_dims, c.rope_ordering);
    }
    for (int32_t h = k0; h < k1; ++h) {
      if (!w.k_norm.empty()) ops::rms_norm(k + h * hd, w.k_norm.data(), k + h * hd, hd, c.rms_eps);
      ops::rope(k + h * hd, cos, sin, c.rope_dims, c.rope_ordering);
    }
    caches_[static_cast<size_t>(row_sequence_[t])].store_heads(local, row_pos_[t], k0, k1, k, v);
  };
  if (parts == 1)
    for_rows(n, [&](int32_t t) { finish_heads(t, 0); });
  else
    pool_.parallel_for(int64_t{n} * parts, [&](int64_t task, int) {
      finish_heads(static_cast<int32_t>(task / parts), task % parts);
    });

  // Every row's keys and values are stored before any row attends, so a row sees the earlier
  // positions of its own step.
  attend(local, n);
  core::matmul(w.wo, attn_out_.data(), n, proj_.data(), pool_, scratch_);
  if (partial_) partial_->all_reduce(proj_.data(), static_cast<int64_t>(n) * d);
  // After the sum, so that a split adds it once.
  if (!w.bo.empty())
    for_rows(n, [&](int32_t t) { ops::add(&proj_[static_cast<size_t>(t) * d], w.bo.data(), d); });
  add_to_residual(n);
}

int32_t Forward::attention_blocks(int32_t n, int32_t rows) {
  // Blocks of up to `rows` consecutive rows of one sequence: their query vectors read the same
  // keys and values, which attend_block loads once per tile of them.
  int32_t n_blocks = 0;
  for (int32_t t = 0; t < n; ++t) {
    if (t == 0 || row_sequence_[t] != row_sequence_[t - 1] ||
        t - block_start_[n_blocks - 1] == rows)
      block_start_[n_blocks++] = t;
    key_counts_[t] = row_pos_[t] + 1;
  }
  block_start_[n_blocks] = n;
  return n_blocks;
}

void Forward::attend(int32_t local, int32_t n) {
  const ModelConfig& c = weights_.config();
  const Shard& s = weights_.shard();
  const int32_t hd = c.head_dim;
  const int32_t q_dim = s.n_heads() * hd;
  const int32_t group = c.n_heads / c.n_kv_heads;  // query heads per key/value head
  const LayerWeights& w = weights_.layer(s.layer_begin + local);
  const bool sliding = c.sliding_layer(s.layer_begin + local);
  // Larger blocks where the scores scratch is not used (a ring holds a window plus a whole
  // batch, so any block of a batch's rows fits in it).
  ops::AttentionBlock shape;
  shape.n_rows = kAttentionBlockRows;
  shape.head_dim = hd;
  shape.type = caches_.front().type();
  shape.value_scale_stride = caches_.front().value_scale_stride();
  const int32_t n_blocks = attention_blocks(n, ops::attention_takes_wide_blocks(shape) ? kWideBlockRows : kAttentionBlockRows);
  if (sliding)
    for (int32_t t = 0; t < n; ++t) first_keys_[t] = std::max(0, row_pos_[t] + 1 - c.sliding_window);
  // A ring (every sequence's cache has the same): a block's keys are the `ring` slots from its
  // first visible position's, which hold positions from there on, so its rows' key ranges
  // become slot ranges by one shift.
  const int32_t ring = caches_.front().ring(local);
  if (ring > 0)
    for (int32_t block = 0; block < n_blocks; ++block) {
      const int32_t t0 = block_start_[block], shift = first_keys_[t0] - first_keys_[t0] % ring;
      for (int32_t t = t0; t < block_start_[block + 1]; ++t) {
        ring_first_[t] = first_keys_[t] - shift;
        ring_keys_[t] = key_counts_[t] - shift;
      }
    }
  // One task per (KV head, block), a KV head's blocks consecutive: the threads that take tasks
  // at once then write different rows of attn_out_ (two threads writing the same rows' heads
  // at once made a 16k prompt's attention ~1.2× slower). When that leaves threads idle (a
  // decode step has only as many tasks as KV heads), each KV head's query heads are spread over
  // `parts` tasks; every query head is computed on its own either way, so results are the same.
  const int64_t pairs = static_cast<int64_t>(s.n_kv_heads()) * n_blocks;
  const int64_t parts = std::clamp<int64_t>((pool_.size() + pairs - 1) / pairs, 1, group);
  pool_.parallel_for(pairs * parts, [&](int64_t task, int thread) {
    const int64_t part = task % parts, pair = task / parts;
    const int32_t kv = static_cast<int32_t>(pair / n_blocks);
    const int32_t block = static_cast<int32_t>(pair % n_blocks);
    // This rank's query heads that read KV head kv (a split may hold only some of them), then
    // this task's share of them.
    const int32_t kv_global = s.kv_head_begin + kv;
    const int32_t first = std::max(kv_global * group, s.head_begin) - s.head_begin;
    const int32_t last = std::min((kv_global + 1) * group, s.head_end) - s.head_begin;
    const auto h0 = static_cast<int32_t>(first + (last - first) * part / parts);
    const auto h1 = static_cast<int32_t>(first + (last - first) * (part + 1) / parts);
    if (h1 <= h0) return;
    const int32_t t0 = block_start_[block];
    const size_t offset = static_cast<size_t>(t0) * q_dim + static_cast<size_t>(h0) * hd;
    const KvCache& cache = caches_[static_cast<size_t>(row_sequence_[t0])];
    ops::AttentionBlock b;
    b.q = &q_[offset];
    b.out = &attn_out_[offset];
    b.row_stride = q_dim;
    b.n_rows = block_start_[block + 1] - t0;
    b.group = h1 - h0;
    b.head_dim = hd;
    b.n_keys = ring > 0 ? &ring_keys_[static_cast<size_t>(t0)] : &key_counts_[static_cast<size_t>(t0)];
    b.keys = cache.keys(local, kv);
    b.values = cache.values(local, kv);
    b.value_stride = cache.value_stride();
    b.type = cache.type();
    b.key_scales = cache.key_scales(local, kv);
    b.value_scales = cache.value_scales(local, kv);
    b.value_scale_stride = cache.value_scale_stride();
    b.scores = &scores_[static_cast<size_t>(thread) * scores_per_thread_];
    if (sliding) b.first_key = ring > 0 ? &ring_first_[static_cast<size_t>(t0)] : &first_keys_[static_cast<size_t>(t0)];
    if (!w.attn_sinks.empty()) b.sinks = &w.attn_sinks[static_cast<size_t>(h0)];
    // A block of more than kAttentionBlockRows rows (more than the scores scratch holds) takes
    // the path `shape` did: the same type and widths decide.
    ops::attend_block(b);
  });
}

void Forward::latent_attention_block(int32_t layer, int32_t n) {
  const ModelConfig& c = weights_.config();
  const Shard& s = weights_.shard();
  const LayerWeights& w = weights_.layer(layer);
  const int32_t d = c.n_embd, hd = c.head_dim, rope = c.rope_dims, nope = hd - rope;
  const int32_t latent = c.kv_lora_rank, width = latent + rope, heads = s.n_heads();
  const int32_t local = layer - s.layer_begin;

  for_rows(n, [&](int32_t t) {
    ops::rms_norm(&residual_[static_cast<size_t>(t) * d], w.attn_norm.data(), &normed_[static_cast<size_t>(t) * d], d,
                  c.rms_eps);
  });
  if (c.q_lora_rank > 0) {
    const core::MatmulTarget latents[] = {{&w.wq_a, q_a_.data()}, {&w.wkv_a, kv_a_.data()}};
    core::matmul_many(latents, normed_.data(), n, pool_, scratch_);
    for_rows(n, [&](int32_t t) {
      float* q_a = &q_a_[static_cast<size_t>(t) * c.q_lora_rank];
      ops::rms_norm(q_a, w.q_a_norm.data(), q_a, c.q_lora_rank, c.rms_eps);
    });
    core::matmul(w.wq, q_a_.data(), n, q_.data(), pool_, scratch_);
  } else {
    const core::MatmulTarget q_kv[] = {{&w.wq, q_.data()}, {&w.wkv_a, kv_a_.data()}};
    core::matmul_many(q_kv, normed_.data(), n, pool_, scratch_);
  }

  const int32_t half = rope / 2;
  for_rows(n, [&](int32_t t) {
    const float* cos = &rope_cos_[static_cast<size_t>(t) * half];
    const float* sin = &rope_sin_[static_cast<size_t>(t) * half];
    // The position's latent, normalized, then its rotated part: the cache's key is both, its
    // value the latent alone.
    float* kv = &kv_a_[static_cast<size_t>(t) * width];
    ops::rms_norm(kv, w.kv_a_norm.data(), kv, latent, c.rms_eps);
    ops::rope(kv + latent, cos, sin, rope, c.rope_ordering);
    caches_[static_cast<size_t>(row_sequence_[t])].store(local, row_pos_[t], kv, kv);
    // Each head's query in the key's layout: [latent part (below) | its rotated part].
    float* q = &q_[static_cast<size_t>(t) * heads * hd];
    float* q_latent = &q_latent_[static_cast<size_t>(t) * heads * width];
    for (int32_t h = 0; h < heads; ++h) {
      ops::rope(q + h * hd + nope, cos, sin, rope, c.rope_ordering);
      std::memcpy(q_latent + h * width + latent, q + h * hd + nope, sizeof(float) * static_cast<size_t>(rope));
    }
  });
  // A head's key is k_bᵀ · latent (k_b: [latent, nope]), so q_nope · key = (k_b · q_nope) · latent:
  // k_b takes each head's query into latent space, and attention reads the cached latents as
  // they are.
  const auto held = [&](const std::vector<core::WeightMatrix>& per_head) {
    return std::span(per_head).subspan(static_cast<size_t>(s.head_begin), static_cast<size_t>(heads));
  };
  core::matmul_heads(held(w.k_b), q_.data(), int64_t{heads} * hd, hd, n, q_latent_.data(), int64_t{heads} * width,
                     width, pool_, scratch_);
  attend_latent(local, n);
  // Σ p · (v_b · latent) = v_b · Σ p · latent: each head's latent output through its v_b.
  core::matmul_heads(held(w.v_b), latent_out_.data(), int64_t{heads} * latent, latent, n, attn_out_.data(),
                     int64_t{heads} * c.value_head_dim, c.value_head_dim, pool_, scratch_);
  core::matmul(w.wo, attn_out_.data(), n, proj_.data(), pool_, scratch_);
  if (partial_) partial_->all_reduce(proj_.data(), static_cast<int64_t>(n) * d);
  add_to_residual(n);
}

void Forward::attend_latent(int32_t local, int32_t n) {
  const ModelConfig& c = weights_.config();
  const int32_t heads = weights_.shard().n_heads(), latent = c.kv_lora_rank, width = latent + c.rope_dims;
  const int32_t n_blocks = attention_blocks(n);
  // Every head reads the one latent "KV head": a block's heads are spread over as many tasks as
  // keep the threads busy, and at most kLatentHeadsPerTask to a task, which bounds each
  // thread's scores (DeepSeek V3 has 128 heads).
  const int64_t parts = std::clamp<int64_t>(
      std::max<int64_t>((pool_.size() + n_blocks - 1) / n_blocks, (heads + kLatentHeadsPerTask - 1) / kLatentHeadsPerTask),
      1, heads);
  pool_.parallel_for(n_blocks * parts, [&](int64_t task, int thread) {
    const int64_t part = task % parts;
    const auto block = static_cast<int32_t>(task / parts);
    const auto h0 = static_cast<int32_t>(heads * part / parts), h1 = static_cast<int32_t>(heads * (part + 1) / parts);
    if (h1 <= h0) return;
    const int32_t t0 = block_start_[block];
    const KvCache& cache = caches_[static_cast<size_t>(row_sequence_[t0])];
    ops::AttentionBlock b;
    b.q = &q_latent_[static_cast<size_t>(t0) * heads * width + static_cast<size_t>(h0) * width];
    b.out = &latent_out_[static_cast<size_t>(t0) * heads * latent + static_cast<size_t>(h0) * latent];
    b.row_stride = static_cast<int64_t>(heads) * width;
    b.n_rows = block_start_[block + 1] - t0;
    b.group = h1 - h0;
    b.head_dim = width;
    b.latent = true;
    b.n_keys = &key_counts_[static_cast<size_t>(t0)];
    b.keys = cache.keys(local, 0);
    b.values = cache.values(local, 0);
    b.value_stride = cache.value_stride();
    b.type = cache.type();
    b.key_scales = cache.key_scales(local, 0);
    b.value_scales = cache.value_scales(local, 0);
    b.value_scale_stride = cache.value_scale_stride();
    b.scores = &scores_[static_cast<size_t>(thread) * scores_per_thread_];
    b.scale = c.attention_scale;
    b.value_dim = latent;
    b.out_row_stride = static_cast<int64_t>(heads) * latent;
    ops::attend_block(b);
  });
}

void Forward::ffn_block(int32_t layer, int32_t n) {
  const ModelConfig& c = weights_.config();
  const Shard& s = weights_.shard();
  const LayerWeights& w = weights_.layer(layer);
  const int32_t d = c.n_embd;
  for_rows(n, [&](int32_t t) {
    ops::rms_norm(&residual_[static_cast<size_t>(t) * d], w.ffn_norm.data(), &normed_[static_cast<size_t>(t) * d], d,
                  c.rms_eps);
  });
  if (w.has_experts()) return moe_block(layer, n);
  const core::MatmulTarget gate_up[] = {{&w.w_gate, gate_.data()}, {&w.w_up, up_.data()}};
  core::matmul_many(gate_up, normed_.data(), n, pool_, scratch_);
  const int32_t ff = s.n_ff();
  for_rows(n, [&](int32_t t) {
    const size_t row = static_cast<size_t>(t) * ff;
    activate(&gate_[row], &up_[row], ff);
  });
  core::matmul(w.w_down, gate_.data(), n, proj_.data(), pool_, scratch_);
  if (partial_) partial_->all_reduce(proj_.data(), static_cast<int64_t>(n) * d);
  add_to_residual(n);
}

void Forward::route(int32_t layer, const LayerWeights& w, int32_t n) {
  const ModelConfig& c = weights_.config();
  const int32_t n_expert = c.n_expert, used = c.n_expert_used;
  const int32_t d = c.n_embd;
  // The router's products are one dot product per (row, expert) (not a matmul, whose tiles
  // order sums by how many rows share them), so a row routes the same alone or in any batch.
  // They are split over the pool by those pairs, not by rows: a decode step's one row would
  // read the whole router (f32: 256 KB a layer in Qwen3-30B-A3B) on one thread.
  constexpr int64_t kDotsPerGrain = 4;
  pool_.parallel_shares(int64_t{n} * n_expert, kDotsPerGrain, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = i / n_expert, e = i % n_expert;
      router_logits_[static_cast<size_t>(i)] =
          ops::dot(&w.router[static_cast<size_t>(e) * d], &normed_[static_cast<size_t>(t) * d], d);
    }
  });
  for_rows(n, [&](int32_t t) {
    float* p = &router_logits_[static_cast<size_t>(t) * n_expert];
    if (!w.router_bias.empty()) ops::add(p, w.router_bias.data(), n_expert);
    if (c.expert_gating == ExpertGating::Sigmoid)
      for (int32_t e = 0; e < n_expert; ++e) p[e] = 1.0f / (1.0f + std::exp(-p[e]));
    else
      ops::softmax(p, n_expert);
    int32_t* chosen = &route_expert_[static_cast<size_t>(t) * used];
    float* weight = &route_weight_[static_cast<size_t>(t) * used];
    choose_experts(w, p, t, chosen);
    // The weights are the scores themselves, without the bias that helped choose.
    float sum = 0;
    for (int32_t i = 0; i < used; ++i) sum += weight[i] = p[chosen[i]];
    if (c.expert_weights_norm)
      for (int32_t i = 0; i < used; ++i) weight[i] /= sum;
    if (c.expert_weights_scale != 1.0f)
      for (int32_t i = 0; i < used; ++i) weight[i] *= c.expert_weights_scale;
  });
  if (routing_observer_)
    for (int32_t t = 0; t < n; ++t)
      routing_observer_(layer, row_sequence_[t], row_pos_[t],
                        std::span(&route_expert_[static_cast<size_t>(t) * used], static_cast<size_t>(used)));
}

void Forward::choose_experts(const LayerWeights& w, const float* scores, int32_t row, int32_t* chosen) {
  const ModelConfig& c = weights_.config();
  const int32_t n_expert = c.n_expert, groups = c.n_expert_groups;
  if (w.expert_bias.empty() && groups <= 1) return ops::top_k(scores, n_expert, c.n_expert_used, chosen);
  float* select = &router_choice_[static_cast<size_t>(row) * (n_expert + groups)];
  for (int32_t e = 0; e < n_expert; ++e) select[e] = scores[e] + (w.expert_bias.empty() ? 0.0f : w.expert_bias[e]);
  if (groups > 1) {
    // DeepSeek V3's group-limited choice: a group is worth the sum of its two best biased
    // scores; the experts outside the best n_expert_groups_used groups are out of the running.
    const int32_t per_group = n_expert / groups;
    float* worth = select + n_expert;
    for (int32_t g = 0; g < groups; ++g) {
      int32_t best[2];
      const int32_t count = std::min(2, per_group);
      ops::top_k(select + g * per_group, per_group, count, best);
      worth[g] = 0;
      for (int32_t i = 0; i < count; ++i) worth[g] += select[g * per_group + best[i]];
    }
    int32_t* kept = &group_choice_[static_cast<size_t>(row) * groups];
    ops::top_k(worth, groups, c.n_expert_groups_used, kept);
    for (int32_t g = 0; g < groups; ++g) {
      if (std::find(kept, kept + c.n_expert_groups_used, g) != kept + c.n_expert_groups_used) continue;
      std::fill_n(select + g * per_group, per_group, -std::numeric_limits<float>::infinity());
    }
  }
  ops::top_k(select, n_expert, c.n_expert_used, chosen);
}

void Forward::group_by_expert(int32_t n) {
  const int32_t n_expert = weights_.config().n_expert, used = weights_.config().n_expert_used;
  // A counting sort, so each expert's rows stay in order.
  std::fill(expert_start_.begin(), expert_start_.end(), 0);
  const int32_t slots = n * used;
  for (int32_t i = 0; i < slots; ++i) ++expert_start_[static_cast<size_t>(route_expert_[i]) + 1];
  for (int32_t e = 0; e < n_expert; ++e) expert_start_[e + 1] += expert_start_[e];
  expert_cursor_.assign(expert_start_.begin(), expert_start_.end() - 1);
  for (int32_t i = 0; i < slots; ++i) expert_rows_[static_cast<size_t>(expert_cursor_[route_expert_[i]]++)] = i;
}

void Forward::moe_block(int32_t layer, int32_t n) {
  const ModelConfig& c = weights_.config();
  const LayerWeights& w = weights_.layer(layer);
  const int32_t d = c.n_embd, ff = weights_.shard().n_expert_ff(), used = c.n_expert_used;
  route(layer, w, n);
  // An expert split sums only the choices it computes (of the experts it holds, those that
  // assign_experts gave it where an expert has several holders); combine_experts adds the
  // other ranks' parts.
  const Shard& shard = weights_.shard();
  const bool placed = !shard.expert_holders.empty();
  const auto slots_n = static_cast<size_t>(n) * static_cast<size_t>(used);
  if (placed)
    assign_experts(shard, layer, std::span(route_expert_.data(), slots_n), used, std::span(route_member_.data(), slots_n));
  const auto [held_begin, held_end] = shard.experts_of(layer);
  auto mine = [&](int32_t slot) {
    if (placed) return route_member_[static_cast<size_t>(slot)] == shard.expert_member;
    return route_expert_[static_cast<size_t>(slot)] >= held_begin && route_expert_[static_cast<size_t>(slot)] < held_end;
  };
  std::fill_n(proj_.begin(), static_cast<size_t>(n) * d, 0.0f);
  if (n == 1) {
    // A decode step: every chosen expert reads the same row, so their gate and up products run
    // as one pass over the pool, and their down products (each of its own row) as another: an
    // expert's matrices are small (under 1 MB in Qwen3-30B-A3B), so a pass per matrix would
    // wait for the slowest thread and restart the memory streams once per few hundred KB.
    int32_t* local = held_choices_.data();
    int32_t n_local = 0;
    for (int32_t i = 0; i < used; ++i)
      if (mine(i)) local[n_local++] = i;
    // matmul_many takes 16 matrices: 8 experts' gate and up, or 16 down projections.
    constexpr int32_t kGateUpPerPass = 8, kDownPerPass = 16;
    core::MatmulTarget targets[kDownPerPass];
    for (int32_t first = 0; first < n_local; first += kGateUpPerPass) {
      const int32_t count = std::min(kGateUpPerPass, n_local - first);
      for (int32_t i = 0; i < count; ++i) {
        const auto e = static_cast<size_t>(route_expert_[local[first + i]]);
        const size_t at = static_cast<size_t>(first + i) * ff;
        targets[2 * i] = {&w.expert_gate[e], &gate_[at]};
        targets[2 * i + 1] = {&w.expert_up[e], &up_[at]};
      }
      core::matmul_many(std::span(targets, static_cast<size_t>(2 * count)), normed_.data(), 1, pool_, scratch_);
    }
    if (!w.expert_gate_bias.empty())
      for (int32_t j = 0; j < n_local; ++j) {
        const size_t at = static_cast<size_t>(j) * ff, e = static_cast<size_t>(route_expert_[local[j]]);
        ops::add(&gate_[at], &w.expert_gate_bias[e * ff], ff);
        ops::add(&up_[at], &w.expert_up_bias[e * ff], ff);
      }
    // One expert's row per task: 4 × 768 values of SiLU took 6 µs on the main thread alone.
    pool_.parallel_for(n_local, [&](int64_t j, int) {
      const size_t at = static_cast<size_t>(j) * ff;
      activate(&gate_[at], &up_[at], ff);
    });
    for (int32_t first = 0; first < n_local; first += kDownPerPass) {
      const int32_t count = std::min(kDownPerPass, n_local - first);
      for (int32_t i = 0; i < count; ++i) {
        const int32_t j = first + i;
        targets[i] = {&w.expert_down[static_cast<size_t>(route_expert_[local[j]])], &slot_out_[static_cast<size_t>(j) * d],
                      &gate_[static_cast<size_t>(j) * ff]};
      }
      core::matmul_many(std::span(targets, static_cast<size_t>(count)), nullptr, 1, pool_, scratch_);
    }
    // Summed in the order the row chose its experts, as a prompt's rows sum theirs.
    for (int32_t j = 0; j < n_local; ++j)
      ops::add_scaled(proj_.data(), &slot_out_[static_cast<size_t>(j) * d], route_weight_[local[j]], d);
  } else {
    // A prompt (or a batch): one product per expert over the rows routed to it.
    group_by_expert(n);
    for (int32_t e = 0; e < c.n_expert; ++e) {
      const int32_t begin = expert_start_[e];
      // This rank's rows of expert e, moved to the front of its group (in order).
      int32_t* slots = &expert_rows_[static_cast<size_t>(begin)];
      int32_t rows = 0;
      for (int32_t j = 0; j < expert_start_[e + 1] - begin; ++j)
        if (mine(slots[j])) slots[rows++] = slots[j];
      if (rows == 0) continue;
      for (int32_t j = 0; j < rows; ++j)
        std::memcpy(&gathered_[static_cast<size_t>(j) * d], &normed_[static_cast<size_t>(slots[j] / used) * d],
                    sizeof(float) * static_cast<size_t>(d));
      const core::MatmulTarget gate_up[] = {{&w.expert_gate[static_cast<size_t>(e)], gate_.data()},
                                            {&w.expert_up[static_cast<size_t>(e)], up_.data()}};
      core::matmul_many(gate_up, gathered_.data(), rows, pool_, scratch_);
      for_rows(rows, [&](int32_t t) {
        const size_t row = static_cast<size_t>(t) * ff;
        if (!w.expert_gate_bias.empty()) {
          ops::add(&gate_[row], &w.expert_gate_bias[static_cast<size_t>(e) * ff], ff);
          ops::add(&up_[row], &w.expert_up_bias[static_cast<size_t>(e) * ff], ff);
        }
        activate(&gate_[row], &up_[row], ff);
      });
      core::matmul(w.expert_down[static_cast<size_t>(e)], gate_.data(), rows, expert_out_.data(), pool_, scratch_);
      for (int32_t j = 0; j < rows; ++j)
        std::memcpy(&slot_out_[static_cast<size_t>(slots[j]) * d], &expert_out_[static_cast<size_t>(j) * d],
                    sizeof(float) * static_cast<size_t>(d));
    }
    // Each row sums its experts in the order it chose them, as a decode step does, so a row's
    // result does not depend on the other rows of its batch.
    for_rows(n, [&](int32_t t) {
      for (int32_t i = 0; i < used; ++i) {
        const size_t slot = static_cast<size_t>(t) * used + static_cast<size_t>(i);
        if (mine(static_cast<int32_t>(slot)))
          ops::add_scaled(&proj_[static_cast<size_t>(t) * d], &slot_out_[slot * d], route_weight_[slot], d);
      }
    });
  }
  if (w.shared_gate.rows() > 0) {
    // The shared experts: one FFN every row visits, added to its chosen experts' sum.
    const int32_t shared = weights_.shard().n_shared_ff();
    const core::MatmulTarget gate_up[] = {{&w.shared_gate, gate_.data()}, {&w.shared_up, up_.data()}};
    core::matmul_many(gate_up, normed_.data(), n, pool_, scratch_);
    for_rows(n, [&](int32_t t) {
      const size_t row = static_cast<size_t>(t) * shared;
      ops::silu_mul(&gate_[row], &up_[row], shared);
    });
    core::matmul(w.shared_down, gate_.data(), n, expert_out_.data(), pool_, scratch_);
    for_rows(n, [&](int32_t t) {
      const size_t row = static_cast<size_t>(t) * d;
      ops::add(&proj_[row], &expert_out_[row], d);
    });
  }
  if (partial_)
    partial_->combine_experts(proj_.data(), n, d,
                              placed ? std::span<const int32_t>(route_member_.data(), slots_n) : std::span<const int32_t>());
  if (!w.expert_down_bias.empty()) add_expert_down_biases(w, n);
  add_to_residual(n);
}

void Forward::activate(float* gate, const float* up, int64_t n) const {
  if (weights_.config().ffn_activation == FfnActivation::ClampedSwiGlu)
    ops::swiglu_clamped(gate, up, n);
  else
    ops::silu_mul(gate, up, n);
}

void Forward::add_expert_down_biases(const LayerWeights& w, int32_t n) {
  const int32_t d = weights_.config().n_embd, used = weights_.config().n_expert_used;
  // Every rank holds the whole bias and the same routing, so each adds it to the summed product.
  for_rows(n, [&](int32_t t) {
    for (int32_t i = 0; i < used; ++i) {
      const size_t slot = static_cast<size_t>(t) * used + static_cast<size_t>(i);
      ops::add_scaled(&proj_[static_cast<size_t>(t) * d],
                      &w.expert_down_bias[static_cast<size_t>(route_expert_[slot]) * d], route_weight_[slot], d);
    }
  });
}

void Forward::add_to_residual(int32_t n) {
  const int32_t d = weights_.config().n_embd;
  for_rows(n, [&](int32_t t) {
    const size_t row = static_cast<size_t>(t) * d;
    ops::add(&residual_[row], &proj_[row], d);
  });
}

void Forward::output_head(int32_t n_logits) {
  const ModelConfig& c = weights_.config();
  const int32_t d = c.n_embd;
  logits_rows_ = n_logits;
  const size_t needed = static_cast<size_t>(logits_rows_) * weights_.shard().n_vocab();
  if (logits_.size() < needed) logits_.resize(needed);  // verification passes only
  for (int32_t i = 0; i < n_logits; ++i)
    ops::rms_norm(&residual_[static_cast<size_t>(logit_rows_[i]) * d], weights_.output_norm().data(),
                  &normed_[static_cast<size_t>(i) * d], d, c.rms_eps);
  core::matmul(weights_.output(), normed_.data(), logits_rows_, logits_.data(), pool_, scratch_);
}

}  // namespace orchard::model

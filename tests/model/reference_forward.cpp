#include "model/reference_forward.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/quant.h"

namespace orchard::testing {
namespace {

using Matrix = std::vector<std::vector<double>>;  // [rows][cols]

struct File {
  const model::gguf::Reader& r;
  std::string arch;

  int64_t num(const std::string& key, int64_t fallback = -1) const {
    const auto* v = r.find(arch + "." + key);
    return v ? v->as_int(key) : fallback;
  }
  double real(const std::string& key, double fallback) const {
    const auto* v = r.find(arch + "." + key);
    return v ? v->as_float(key) : fallback;
  }
  bool has(const std::string& name) const { return r.find_tensor(name) != nullptr; }

  // GGUF shape {cols, rows} -> rows of cols doubles; of a stack {cols, rows, n}, matrix `index`.
  Matrix matrix(const std::string& name, int64_t index = 0) const {
    const auto& t = r.tensor(name);
    int64_t cols = t.shape[0], rows = t.shape.size() > 1 ? t.shape[1] : 1;
    size_t row_size = core::row_bytes(t.type, cols);
    const uint8_t* data = t.data + row_size * static_cast<size_t>(rows * index);
    Matrix m(static_cast<size_t>(rows), std::vector<double>(static_cast<size_t>(cols)));
    std::vector<float> buf(static_cast<size_t>(cols));
    for (int64_t i = 0; i < rows; ++i) {
      core::dequantize_row_reference(t.type, data + row_size * static_cast<size_t>(i), buf.data(), cols);
      for (int64_t j = 0; j < cols; ++j) m[static_cast<size_t>(i)][static_cast<size_t>(j)] = buf[static_cast<size_t>(j)];
    }
    return m;
  }
  std::vector<double> vec(const std::string& name) const { return matrix(name)[0]; }
};

std::vector<double> matvec(const Matrix& w, const std::vector<double>& x) {
  std::vector<double> y(w.size(), 0.0);
  for (size_t i = 0; i < w.size(); ++i)
    for (size_t j = 0; j < x.size(); ++j) y[i] += w[i][j] * x[j];
  return y;
}

std::vector<double> rms_norm(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  double scale = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * scale * w[i];
  return y;
}

}  // namespace

std::vector<std::vector<double>> reference_logits(const model::gguf::Reader& reader, const std::vector<int32_t>& tokens,
                                                  ForcedRouting* forced) {
  File f{reader, reader.get("general.architecture").as_string("arch")};
  const bool neox = f.arch != "llama" && f.arch != "deepseek2";  // qwen2, qwen3, qwen3moe, gpt-oss rotate NeoX-style
  // gpt-oss: every other layer, from the first, sees only the last `window` positions
  // (llama.cpp's sliding-window pattern of period 2); the experts' weights are a softmax over
  // the chosen experts' router logits; their SwiGLU is clamped.
  const bool gpt_oss = f.arch == "gpt-oss";
  const int64_t window = gpt_oss ? f.num("attention.sliding_window") : 0;
  const int64_t window_period = f.num("attention.sliding_window_pattern", 2);
  const bool softmax_of_chosen = f.num("expert_gating_func", gpt_oss ? 3 : 1) == 3;
  const int64_t n_embd = f.num("embedding_length"), n_layers = f.num("block_count");
  const int64_t n_heads = f.num("attention.head_count"), n_kv = f.num("attention.head_count_kv", n_heads);
  const int64_t hd = f.num("attention.key_length", n_embd / n_heads);
  const int64_t rope_dims = f.num("rope.dimension_count", hd);
  const double eps = f.real("attention.layer_norm_rms_epsilon", 1e-5);
  const double theta = f.real("rope.freq_base", 10000.0);
  double pos_scale = 1.0;
  const auto* scaling = reader.find(f.arch + ".rope.scaling.type");
  const std::string scaling_type = scaling ? scaling->as_string("t") : "none";
  if (scaling_type == "linear") pos_scale = 1.0 / f.real("rope.scaling.factor", 1.0);
  // YaRN (the YaRN paper, with llama.cpp's choices): pair i keeps its frequency when it turns
  // more than beta_fast times over the original context, is divided by the factor below
  // beta_slow turns, and blends linearly in between; cos and sin are scaled by `magnitude`.
  const bool yarn = scaling_type == "yarn";
  const double yarn_factor = yarn ? f.real("rope.scaling.factor", 1.0) : 1.0;
  double ramp_low = 0, ramp_high = 0, magnitude = 1.0, log_multiplier = 0;
  if (yarn) {
    const double original = static_cast<double>(f.num("rope.scaling.original_context_length", f.num("context_length")));
    auto pair_turning = [&](double turns) {
      return static_cast<double>(rope_dims) * std::log(original / (turns * 2 * M_PI)) / (2 * std::log(theta));
    };
    ramp_low = std::max(0.0, std::floor(pair_turning(f.real("rope.scaling.yarn_beta_fast", 32.0))));
    ramp_high = std::min(static_cast<double>(rope_dims - 1), std::ceil(pair_turning(f.real("rope.scaling.yarn_beta_slow", 1.0))));
    auto mscale = [&](double m) { return yarn_factor <= 1 ? 1.0 : 0.1 * m * std::log(yarn_factor) + 1.0; };
    log_multiplier = f.real("rope.scaling.yarn_log_multiplier", 0.0) / 0.1;
    magnitude = mscale(1.0);
    if (log_multiplier != 0)
      magnitude = mscale(f.arch == "deepseek2" && log_multiplier != 1 ? log_multiplier : 1.0) / mscale(log_multiplier);
    magnitude *= f.real("rope.scaling.attn_factor", 1.0);
  }
  std::vector<double> freq_factors = f.has("rope_freqs.weight") ? f.vec("rope_freqs.weight") : std::vector<double>{};

  const Matrix embd = f.matrix("token_embd.weight");
  const size_t n = tokens.size();
  Matrix x(n);
  for (size_t t = 0; t < n; ++t) x[t] = embd[static_cast<size_t>(tokens[t])];

  // Rotates the rope_dims values of v from `base`.
  auto rotate = [&](std::vector<double>& v, int64_t base, size_t pos) {
    for (int64_t i = 0; i < rope_dims / 2; ++i) {
      double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rope_dims));
      if (!freq_factors.empty()) freq /= freq_factors[static_cast<size_t>(i)];
      double angle = static_cast<double>(pos) * pos_scale * freq;
      if (yarn) {
        const double keep = 1.0 - std::clamp((static_cast<double>(i) - ramp_low) / std::max(0.001, ramp_high - ramp_low), 0.0, 1.0);
        angle = static_cast<double>(pos) * freq * (keep + (1.0 - keep) / yarn_factor);
      }
      size_t a = static_cast<size_t>(base + (neox ? i : 2 * i));
      size_t b = static_cast<size_t>(base + (neox ? i + rope_dims / 2 : 2 * i + 1));
      double x0 = v[a], x1 = v[b];
      v[a] = magnitude * (x0 * std::cos(angle) - x1 * std::sin(angle));
      v[b] = magnitude * (x0 * std::sin(angle) + x1 * std::cos(angle));
    }
  };
  auto rope = [&](std::vector<double>& v, int64_t head, size_t pos) { rotate(v, head * hd, pos); };
  auto head_norm = [&](std::vector<double>& v, int64_t head, const std::vector<double>& w) {
    std::vector<double> part(v.begin() + head * hd, v.begin() + (head + 1) * hd);
    part = rms_norm(part, w, eps);
    std::copy(part.begin(), part.end(), v.begin() + head * hd);
  };

  // Multi-head latent attention (deepseek2), the plain way: every head's key and value are
  // decompressed from the position's latent, then ordinary attention over them.
  const bool latent_attention = f.arch == "deepseek2";
  auto mla = [&](const std::string& p) {
    const int64_t q_lora = f.num("attention.q_lora_rank", 0), kv_lora = f.num("attention.kv_lora_rank");
    const int64_t hk = f.num("attention.key_length_mla", f.num("attention.key_length"));
    const int64_t hv = f.num("attention.value_length_mla", f.num("attention.value_length"));
    const int64_t nope = hk - rope_dims;
    double score_scale = 1.0 / std::sqrt(static_cast<double>(hk));
    if (yarn) score_scale *= std::pow(magnitude * (1.0 + 0.1 * log_multiplier * std::log(yarn_factor)), 2);
    const auto attn_norm = f.vec(p + "attn_norm.weight");
    const Matrix kv_a = f.matrix(p + "attn_kv_a_mqa.weight"), wo = f.matrix(p + "attn_output.weight");
    const auto kv_a_norm = f.vec(p + "attn_kv_a_norm.weight");
    // Each head's [nope][kv_lora] key and [hv][kv_lora] value up-projection: attn_kv_b's rows
    // (older files), or attn_k_b transposed and attn_v_b.
    std::vector<Matrix> k_up, v_up;
    const bool joined = f.has(p + "attn_kv_b.weight");
    const Matrix kv_b = joined ? f.matrix(p + "attn_kv_b.weight") : Matrix{};
    for (int64_t hh = 0; hh < n_heads; ++hh) {
      if (joined) {
        const auto first = kv_b.begin() + hh * (nope + hv);
        k_up.emplace_back(first, first + nope);
        v_up.emplace_back(first + nope, first + nope + hv);
        continue;
      }
      const Matrix k_b = f.matrix(p + "attn_k_b.weight", hh);
      k_up.emplace_back(static_cast<size_t>(nope), std::vector<double>(static_cast<size_t>(kv_lora)));
      for (int64_t r = 0; r < kv_lora; ++r)
        for (int64_t d = 0; d < nope; ++d)
          k_up.back()[static_cast<size_t>(d)][static_cast<size_t>(r)] = k_b[static_cast<size_t>(r)][static_cast<size_t>(d)];
      v_up.push_back(f.matrix(p + "attn_v_b.weight", hh));
    }
    const Matrix wq = f.matrix(p + (q_lora > 0 ? "attn_q_b.weight" : "attn_q.weight"));
    const Matrix wq_a = q_lora > 0 ? f.matrix(p + "attn_q_a.weight") : Matrix{};
    const auto q_a_norm = q_lora > 0 ? f.vec(p + "attn_q_a_norm.weight") : std::vector<double>{};
    Matrix q(n), k(n), v(n);  // per position: heads × hk, heads × hk, heads × hv
    for (size_t t = 0; t < n; ++t) {
      auto h = rms_norm(x[t], attn_norm, eps);
      q[t] = matvec(wq, q_lora > 0 ? rms_norm(matvec(wq_a, h), q_a_norm, eps) : h);
      auto compressed = matvec(kv_a, h);
      std::vector<double> latent(compressed.begin(), compressed.begin() + kv_lora);
      latent = rms_norm(latent, kv_a_norm, eps);
      std::vector<double> k_pe(compressed.begin() + kv_lora, compressed.end());
      rotate(k_pe, 0, t);
      k[t].assign(static_cast<size_t>(n_heads * hk), 0.0);
      v[t].assign(static_cast<size_t>(n_heads * hv), 0.0);
      for (int64_t hh = 0; hh < n_heads; ++hh) {
        rotate(q[t], hh * hk + nope, t);
        const auto key = matvec(k_up[static_cast<size_t>(hh)], latent);
        std::copy(key.begin(), key.end(), k[t].begin() + hh * hk);
        for (int64_t d = 0; d < rope_dims; ++d) k[t][static_cast<size_t>(hh * hk + nope + d)] = k_pe[static_cast<size_t>(d)];
        const auto value = matvec(v_up[static_cast<size_t>(hh)], latent);
        std::copy(value.begin(), value.end(), v[t].begin() + hh * hv);
      }
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<double> out(static_cast<size_t>(n_heads * hv), 0.0);
      for (int64_t hh = 0; hh < n_heads; ++hh) {
        std::vector<double> sc(t + 1);
        double mx = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double dotp = 0;
          for (int64_t d = 0; d < hk; ++d) dotp += q[t][static_cast<size_t>(hh * hk + d)] * k[j][static_cast<size_t>(hh * hk + d)];
          sc[j] = dotp * score_scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double& e : sc) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j)
          for (int64_t d = 0; d < hv; ++d) out[static_cast<size_t>(hh * hv + d)] += sc[j] / sum * v[j][static_cast<size_t>(hh * hv + d)];
      }
      auto o = matvec(wo, out);
      for (size_t i = 0; i < o.size(); ++i) x[t][i] += o[i];
    }
  };

  // Standard multi-head attention with grouped KV heads (and gpt-oss's sinks and windows).
  auto attention = [&](const std::string& p, int64_t l) {
    const Matrix wq = f.matrix(p + "attn_q.weight"), wk = f.matrix(p + "attn_k.weight"),
                 wv = f.matrix(p + "attn_v.weight"), wo = f.matrix(p + "attn_output.weight");
    const auto attn_norm = f.vec(p + "attn_norm.weight");
    Matrix q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      auto h = rms_norm(x[t], attn_norm, eps);
      q[t] = matvec(wq, h);
      k[t] = matvec(wk, h);
      v[t] = matvec(wv, h);
      if (f.has(p + "attn_q.bias")) {
        auto bq = f.vec(p + "attn_q.bias"), bk = f.vec(p + "attn_k.bias"), bv = f.vec(p + "attn_v.bias");
        for (size_t i = 0; i < q[t].size(); ++i) q[t][i] += bq[i];
        for (size_t i = 0; i < k[t].size(); ++i) k[t][i] += bk[i], v[t][i] += bv[i];
      }
      for (int64_t hh = 0; hh < n_heads; ++hh) {
        if (f.has(p + "attn_q_norm.weight")) head_norm(q[t], hh, f.vec(p + "attn_q_norm.weight"));
        rope(q[t], hh, t);
      }
      for (int64_t hh = 0; hh < n_kv; ++hh) {
        if (f.has(p + "attn_k_norm.weight")) head_norm(k[t], hh, f.vec(p + "attn_k_norm.weight"));
        rope(k[t], hh, t);
      }
    }
    const bool sliding = window > 0 && (window_period == 0 || l % window_period < window_period - 1);
    const std::vector<double> sinks = f.has(p + "attn_sinks.weight") ? f.vec(p + "attn_sinks.weight") : std::vector<double>{};
    for (size_t t = 0; t < n; ++t) {
      std::vector<double> out(static_cast<size_t>(n_heads * hd), 0.0);
      const size_t first = sliding && t + 1 > static_cast<size_t>(window) ? t + 1 - static_cast<size_t>(window) : 0;
      for (int64_t hh = 0; hh < n_heads; ++hh) {
        const int64_t kvh = hh / (n_heads / n_kv);
        std::vector<double> s(t + 1, -INFINITY);
        double mx = sinks.empty() ? -1e300 : sinks[static_cast<size_t>(hh)];
        for (size_t j = first; j <= t; ++j) {
          double dotp = 0;
          for (int64_t d = 0; d < hd; ++d) dotp += q[t][static_cast<size_t>(hh * hd + d)] * k[j][static_cast<size_t>(kvh * hd + d)];
          s[j] = dotp / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[j]);
        }
        // A sink is one more logit in the denominator, with no value.
        double sum = sinks.empty() ? 0 : std::exp(sinks[static_cast<size_t>(hh)] - mx);
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = first; j <= t; ++j)
          for (int64_t d = 0; d < hd; ++d)
            out[static_cast<size_t>(hh * hd + d)] += s[j] / sum * v[j][static_cast<size_t>(kvh * hd + d)];
      }
      auto o = matvec(wo, out);
      if (f.has(p + "attn_output.bias")) {
        const auto bo = f.vec(p + "attn_output.bias");
        for (size_t i = 0; i < o.size(); ++i) o[i] += bo[i];
      }
      for (size_t i = 0; i < o.size(); ++i) x[t][i] += o[i];
    }
  };

  for (int64_t l = 0; l < n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    if (latent_attention)
      mla(p);
    else
      attention(p, l);
    const auto ffn_norm = f.vec(p + (f.has(p + "post_attention_norm.weight") ? "post_attention_norm.weight" : "ffn_norm.weight"));
    // SwiGLU: down · (silu(gate · h) ⊙ (up · h)); gpt-oss's: with biases, the gate clamped
    // above and the up to ±7, down · (g σ(1.702 g) ⊙ (u + 1)).
    auto swiglu = [&](const Matrix& gate, const Matrix& up, const Matrix& down, const std::vector<double>& h,
                      const double* gate_bias = nullptr, const double* up_bias = nullptr) {
      auto g = matvec(gate, h), u = matvec(up, h);
      for (size_t i = 0; i < g.size(); ++i) {
        if (gate_bias) g[i] += gate_bias[i], u[i] += up_bias[i];
        if (gpt_oss) {
          const double gc = std::min(g[i], 7.0), uc = std::clamp(u[i], -7.0, 7.0);
          g[i] = gc / (1.0 + std::exp(-1.702 * gc)) * (uc + 1.0);
        } else {
          g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
        }
      }
      return matvec(down, g);
    };
    if (f.has(p + "ffn_gate_inp.weight")) {
      // Mixture of experts: softmax over the router's logits, the k most probable experts,
      // their probabilities renormalized to sum to one (gpt-oss: a softmax over the chosen
      // experts' logits), the experts' outputs summed by them.
      const Matrix router = f.matrix(p + "ffn_gate_inp.weight");
      const auto n_expert = static_cast<int64_t>(router.size());
      const int64_t k = f.num("expert_used_count");
      // deepseek2 leaves the weights as they are unless told (as llama.cpp does).
      const bool renormalize = reader.find(f.arch + ".expert_weights_norm")
                                   ? reader.get(f.arch + ".expert_weights_norm").as_bool("norm")
                                   : f.arch != "deepseek2";
      const bool sigmoid = f.num("expert_gating_func", 1) == 2;
      const double weights_scale = f.real("expert_weights_scale", 0.0);
      const int64_t groups = f.num("expert_group_count", 0), groups_used = f.num("expert_group_used_count", 0);
      // Shared experts (deepseek2): an FFN every token visits, added to the chosen experts'.
      const bool has_shared = f.has(p + "ffn_gate_shexp.weight");
      const Matrix shared_gate = has_shared ? f.matrix(p + "ffn_gate_shexp.weight") : Matrix{},
                   shared_up = has_shared ? f.matrix(p + "ffn_up_shexp.weight") : Matrix{},
                   shared_down = has_shared ? f.matrix(p + "ffn_down_shexp.weight") : Matrix{};
      const std::vector<double> bias = f.has(p + "exp_probs_b.bias") ? f.vec(p + "exp_probs_b.bias")
                                                                      : std::vector<double>(router.size(), 0.0);
      std::vector<Matrix> gate, up, down;
      for (int64_t e = 0; e < n_expert; ++e) {
        gate.push_back(f.matrix(p + "ffn_gate_exps.weight", e));
        up.push_back(f.matrix(p + "ffn_up_exps.weight", e));
        down.push_back(f.matrix(p + "ffn_down_exps.weight", e));
      }
      // gpt-oss's biases: the router's, and per expert (a matrix row each) gate, up and down.
      const bool expert_biases = f.has(p + "ffn_gate_inp.bias");
      const std::vector<double> router_bias = expert_biases ? f.vec(p + "ffn_gate_inp.bias") : std::vector<double>{};
      const Matrix gate_bias = expert_biases ? f.matrix(p + "ffn_gate_exps.bias") : Matrix{},
                   up_bias = expert_biases ? f.matrix(p + "ffn_up_exps.bias") : Matrix{},
                   down_bias = expert_biases ? f.matrix(p + "ffn_down_exps.bias") : Matrix{};
      for (size_t t = 0; t < n; ++t) {
        auto h = rms_norm(x[t], ffn_norm, eps);
        auto logits = matvec(router, h);
        for (size_t e = 0; e < router_bias.size(); ++e) logits[e] += router_bias[e];
        const std::vector<double> raw = logits;
        if (sigmoid) {
          for (double& v : logits) v = 1.0 / (1.0 + std::exp(-v));
        } else {
          double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
          for (double& v : logits) sum += (v = std::exp(v - mx));
          for (double& v : logits) v /= sum;
        }
        // Choosing: the scores plus the selection bias; with groups (DeepSeek V3), only experts
        // of the groups_used groups whose two best biased scores sum highest.
        std::vector<double> biased(logits.size()), select(logits.size());
        for (size_t e = 0; e < logits.size(); ++e) select[e] = biased[e] = logits[e] + bias[e];
        auto descending = [](const std::vector<double>& by, int64_t count) {
          std::vector<int64_t> order(static_cast<size_t>(count));
          for (int64_t i = 0; i < count; ++i) order[static_cast<size_t>(i)] = i;
          std::stable_sort(order.begin(), order.end(),
                           [&](int64_t a, int64_t b) { return by[static_cast<size_t>(a)] > by[static_cast<size_t>(b)]; });
          return order;
        };
        const int64_t per = groups > 1 ? n_expert / groups : n_expert;
        std::vector<double> worth(static_cast<size_t>(std::max<int64_t>(groups, 1)));
        std::vector<int64_t> best_groups = {0};
        if (groups > 1) {
          for (int64_t g = 0; g < groups; ++g) {
            std::vector<double> members(biased.begin() + g * per, biased.begin() + (g + 1) * per);
            std::sort(members.rbegin(), members.rend());
            worth[static_cast<size_t>(g)] = members[0] + (per > 1 ? members[1] : 0.0);
          }
          best_groups = descending(worth, groups);
          best_groups.resize(static_cast<size_t>(groups_used));
          for (int64_t g = 0; g < groups; ++g)
            if (std::find(best_groups.begin(), best_groups.end(), g) == best_groups.end())
              for (int64_t e = g * per; e < (g + 1) * per; ++e) select[static_cast<size_t>(e)] = -1e300;
        }
        const auto order = descending(select, n_expert);
        std::vector<int64_t> chosen(order.begin(), order.begin() + k);
        if (forced) {
          const auto it = forced->experts.find({l, static_cast<int64_t>(t)});
          if (it != forced->experts.end()) {
            const double weakest_own = biased[static_cast<size_t>(chosen.back())];
            bool differs = false;
            for (int32_t e : it->second)
              if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) {
                differs = true;
                forced->worst_gap = std::max(forced->worst_gap, weakest_own - biased[static_cast<size_t>(e)]);
                // An expert of a group the reference left out: how close the groups were.
                if (std::find(best_groups.begin(), best_groups.end(), e / per) == best_groups.end())
                  forced->worst_gap = std::max(forced->worst_gap, worth[static_cast<size_t>(best_groups.back())] -
                                                                      worth[static_cast<size_t>(e / per)]);
              }
            forced->differing += differs;
            chosen.assign(it->second.begin(), it->second.end());
          }
        }
        double chosen_sum = 0, chosen_exp_sum = 0;
        for (int64_t e : chosen) chosen_sum += logits[static_cast<size_t>(e)];
        for (int64_t e : chosen) chosen_exp_sum += std::exp(raw[static_cast<size_t>(e)] - raw[static_cast<size_t>(chosen[0])]);
        for (int64_t chosen_e : chosen) {
          const auto e = static_cast<size_t>(chosen_e);
          double weight = softmax_of_chosen
                              ? std::exp(raw[e] - raw[static_cast<size_t>(chosen[0])]) / chosen_exp_sum
                              : renormalize ? logits[e] / chosen_sum
                                            : logits[e];
          if (weights_scale != 0) weight *= weights_scale;
          auto out = expert_biases ? swiglu(gate[e], up[e], down[e], h, gate_bias[e].data(), up_bias[e].data())
                                   : swiglu(gate[e], up[e], down[e], h);
          if (expert_biases)
            for (size_t j = 0; j < out.size(); ++j) out[j] += down_bias[e][j];
          for (size_t j = 0; j < out.size(); ++j) x[t][j] += weight * out[j];
        }
        if (!shared_gate.empty()) {
          const auto shared = swiglu(shared_gate, shared_up, shared_down, h);
          for (size_t j = 0; j < shared.size(); ++j) x[t][j] += shared[j];
        }
      }
    } else {
      const Matrix gate = f.matrix(p + "ffn_gate.weight"), up = f.matrix(p + "ffn_up.weight"),
                   down = f.matrix(p + "ffn_down.weight");
      for (size_t t = 0; t < n; ++t) {
        auto d = swiglu(gate, up, down, rms_norm(x[t], ffn_norm, eps));
        for (size_t i = 0; i < d.size(); ++i) x[t][i] += d[i];
      }
    }
  }
  const auto out_norm = f.vec("output_norm.weight");
  const Matrix out = f.has("output.weight") ? f.matrix("output.weight") : embd;
  std::vector<std::vector<double>> logits(n);
  for (size_t t = 0; t < n; ++t) logits[t] = matvec(out, rms_norm(x[t], out_norm, eps));
  return logits;
}

}  // namespace orchard::testing

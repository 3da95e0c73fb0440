#pragma once
// --cache-type on run, serve and bench: the KV cache's elements (model/kv_cache.h), and the line
// each prints at load saying what the cache costs.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <string>

#include "model/forward.h"

namespace orchard::app {

// F16 by default: its log-probabilities agree with F32's at r ≥ 0.999 (tests/model/test_kv_cache)
// for half the memory and half the bytes attention reads per token.
inline void add_cache_type_flag(CLI::App* cmd, model::KvType& type) {
  type = model::KvType::F16;
  cmd->add_option_function<std::string>(
         "--cache-type", [&type](const std::string& name) { type = model::parse_kv_type(name); },
         "KV cache elements: f32 | f16 | q8_0 (Q8_0: 8-bit blocks of 32 per head, about half of f16)")
      ->default_str("f16")
      ->check(CLI::IsMember({"f32", "f16", "q8_0"}));
}

// "KV cache: f16, 44.0 KiB per position, 88.0 MiB for 2048 positions × 1 slot(s)" (this rank's
// layers and heads; pages become resident as positions fill).
inline std::string describe_kv_cache(const model::Forward& forward, int32_t slots) {
  const model::KvCache& cache = forward.cache(0);
  const double per_position = static_cast<double>(cache.bytes_per_position());
  return fmt::format("KV cache: {}, {:.1f} KiB per position, {:.1f} MiB for {} positions × {} slot(s)",
                     model::kv_type_name(cache.type()), per_position / 1024,
                     per_position * cache.n_ctx() * slots / (1024.0 * 1024.0), cache.n_ctx(), slots);
}

}  // namespace orchard::app

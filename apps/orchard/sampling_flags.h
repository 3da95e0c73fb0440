#pragma once
// The sampling flags `run` and `chat` share (llama.cpp's names), with their ranges.
#include <CLI/CLI.hpp>

#include "apps/orchard/flag_ranges.h"
#include "model/sampler.h"

namespace orchard::app {

// --temp, --top-k, --top-p, --min-p, --repeat-penalty into `sampling`; returns the --seed option
// (whether it was given decides between a fixed and a drawn seed).
inline CLI::Option* add_sampling_flags(CLI::App* cmd, model::SamplerOptions& sampling, const std::string& seed_help) {
  cmd->add_option("--temp", sampling.temperature, "Temperature (0: greedy)")->capture_default_str()->check(at_least(0));
  cmd->add_option("--top-k", sampling.top_k, "Top-k (0: off)")->capture_default_str()->check(at_least(0));
  cmd->add_option("--top-p", sampling.top_p, "Top-p (1: off)")->capture_default_str()->check(between(0, 1));
  cmd->add_option("--min-p", sampling.min_p, "Min-p (0: off)")->capture_default_str()->check(between(0, 1));
  cmd->add_option("--repeat-penalty", sampling.repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str()
      ->check(above(0));
  return cmd->add_option("--seed", sampling.seed, seed_help);
}

}  // namespace orchard::app

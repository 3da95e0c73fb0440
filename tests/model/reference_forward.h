#pragma once
// A deliberately naive float64 forward pass, written from the architectures' definitions and
// sharing nothing with the engine but the GGUF reader and the reference dequantizer: the
// independent answer the engine's logits are checked against.
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "model/gguf/reader.h"

namespace orchard::testing {

// Expert choices for the reference to follow instead of its own, by (layer, position). With
// quantized activations the engine's router sees slightly different inputs, and where two
// experts are nearly tied it may choose the other one: the reference then computes what the
// engine chose and says how close that choice was to its own.
struct ForcedRouting {
  std::map<std::pair<int64_t, int64_t>, std::vector<int32_t>> experts;
  // Out: choices that differ from the reference's own, and the largest gap, in router
  // probability (plus selection bias), between its own weakest chosen expert and a forced
  // expert it did not choose, or, with groups of experts, between the worth of its weakest
  // chosen group and the forced expert's group.
  int64_t differing = 0;
  double worst_gap = 0;
};

// Logits [tokens.size()][vocab] for every position of `tokens`, computed from scratch.
std::vector<std::vector<double>> reference_logits(const model::gguf::Reader& file, const std::vector<int32_t>& tokens,
                                                  ForcedRouting* forced = nullptr);

}  // namespace orchard::testing

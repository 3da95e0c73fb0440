#pragma once
// A deliberately naive float64 forward pass, written from the architectures' definitions and
// sharing nothing with the engine but the GGUF reader and the reference dequantizer: the
// independent answer the engine's logits are checked against.
#include <cstdint>
#include <vector>

#include "model/gguf/reader.h"

namespace orchard::testing {

// Logits [tokens.size()][vocab] for every position of `tokens`, computed from scratch.
std::vector<std::vector<double>> reference_logits(const model::gguf::Reader& file, const std::vector<int32_t>& tokens);

}  // namespace orchard::testing

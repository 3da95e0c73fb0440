#pragma once
// Synthetic models for tests, written once per test process into a temporary folder.
#include <string>

#include "model/synthetic.h"

namespace orchard::testing {

// Path of a model with these properties, writing it on first use.
std::string synthetic_model(const std::string& arch, const std::string& shape, const std::string& type,
                            float rope_linear_factor = 0, bool rope_freq_factors = false,
                            float rope_yarn_factor = 0);

}  // namespace orchard::testing

#pragma once
// The text Orchard's built-in vocabularies are learned from (corpus.cpp): original prose, mostly
// English with passages in other languages and scripts, so learned tokens cover common words
// and the byte-level alphabets get exercised.
#include <string_view>

namespace orchard::model {

std::string_view training_corpus();

}  // namespace orchard::model

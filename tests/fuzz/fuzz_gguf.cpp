// libFuzzer target for the GGUF reader: any input must parse or throw FormatError; anything
// else (another exception, a crash, an ASan report, a huge allocation) is a bug.
//   build: CC=clang CXX=clang++ cmake -DORCHARD_WITH_FUZZ=ON ...; ninja fuzz_gguf
//   run:   ./fuzz_gguf -max_total_time=120 -rss_limit_mb=2048 corpus/
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "model/gguf/reader.h"

namespace {

using orchard::model::gguf::Array;
using orchard::model::gguf::Reader;
using orchard::model::gguf::Value;

// Reads every byte a successful parse points at, so an out-of-bounds pointer is caught by ASan.
uint64_t walk(const Value& value) {
  uint64_t sum = static_cast<uint64_t>(value.type);
  if (const auto* s = std::get_if<std::string>(&value.data))
    for (char c : *s) sum += static_cast<uint8_t>(c);
  if (const auto* a = std::get_if<Array>(&value.data))
    for (const Value& item : a->items) sum += walk(item);
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    Reader reader = Reader::parse({data, size}, "fuzz");
    uint64_t sum = 0;
    for (const auto& [key, value] : reader.metadata()) sum += key.size() + walk(value);
    for (const auto& info : reader.tensors())
      for (uint64_t i = 0; i < info.size_bytes; ++i) sum += info.data[i];
    // Keeps the reads from being optimized away.
    volatile uint64_t sink = sum;
    (void)sink;
  } catch (const orchard::FormatError&) {
    // Expected for malformed input.
  }
  return 0;
}

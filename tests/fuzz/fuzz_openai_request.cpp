// libFuzzer target for the OpenAI API's request parser (what `orchard serve` and the network
// coordinator read from strangers): any body must parse or throw ApiError (a 400 the client
// reads); another exception, a crash or an ASan report is a bug. A body that parses must also
// satisfy the documented bounds, so a value that slipped past a check is caught too.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/openai/schema.h"

namespace {

using orchard::serve::openai::ApiError;
using orchard::serve::openai::ApiRequest;
using orchard::serve::openai::Endpoint;

void check_bounds(const ApiRequest& r) {
  const bool ok = (!r.max_tokens || *r.max_tokens >= 1) && r.stop.size() <= 4 && r.sampling.temperature >= 0 &&
                  r.sampling.top_p >= 0 && r.sampling.top_p <= 1 && r.sampling.top_k >= 0;
  if (!ok) std::abort();
  for (const auto& s : r.stop)
    if (s.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (Endpoint endpoint : {Endpoint::ChatCompletions, Endpoint::Completions}) {
    try {
      check_bounds(orchard::serve::openai::parse_request(endpoint, body));
    } catch (const ApiError& e) {
      if (e.status() != 400) std::abort();
    }
  }
  return 0;
}

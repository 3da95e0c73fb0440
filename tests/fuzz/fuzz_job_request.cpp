// libFuzzer target for what a node agent reads out of a job the coordinator hands it (the
// request a stranger submitted, as JSON): any JSON value must give a prompt and generation
// options or throw orchard::Error (the job is handed back with the message); a JSON library
// exception escaping would end the agent. The same JSON is also read as a client's body at the
// coordinator's HTTP edge (Submission::from_json): a Submission or an ApiError 400.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/tokenizer/vocab_builder.h"
#include "network/coordinator.h"
#include "network/job_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const orchard::model::Tokenizer tokenizer =
      orchard::model::Tokenizer::from_vocab(orchard::model::build_vocab(orchard::model::VocabStyle::Qwen2Bpe, 600));
  nlohmann::json request = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) return 0;
  // The same JSON as a client's body at the coordinator's HTTP edge: a Submission or a 400.
  try {
    const auto submission = orchard::network::Submission::from_json(request);
    if (submission.request.to_json().is_null()) std::abort();
  } catch (const orchard::network::ApiError& e) {
    if (e.status() != 400) std::abort();
  }
  try {
    const auto job = orchard::network::JobRequest::from_json(request);
    const auto prompt = orchard::network::prompt_tokens(tokenizer, "qwen2", job);
    const auto options = orchard::network::generation_options(job, 4096, prompt.size());
    // What the coordinator stores reads back the same.
    if (orchard::network::JobRequest::from_json(job.to_json()).to_json() != job.to_json()) std::abort();
    if (options.max_tokens < 1 || options.max_tokens > 4096) std::abort();
  } catch (const orchard::Error&) {
    // The agent hands such a job back, naming why.
  }
  return 0;
}

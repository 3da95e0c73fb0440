// Not part of the build: bench/agreement/agree.sh compiles it against a llama.cpp build the user
// names (LLAMA_CPP_DIR), to read llama.cpp's logits for the same token ids Orchard ran.
//   llama_logits MODEL OUT id id ...   writes the last position's logits (raw float32) to OUT
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: llama_logits MODEL OUT token-id...\n");
    return 2;
  }
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) return 1;
  std::vector<llama_token> ids;
  for (int i = 3; i < argc; ++i) ids.push_back(std::atoi(argv[i]));
  llama_context_params params = llama_context_default_params();
  params.n_ctx = params.n_batch = static_cast<uint32_t>(ids.size() + 16);
  params.n_threads = params.n_threads_batch = 2;
  llama_context* ctx = llama_init_from_model(model, params);
  if (!ctx || llama_decode(ctx, llama_batch_get_one(ids.data(), static_cast<int32_t>(ids.size()))) != 0) return 1;
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  FILE* out = std::fopen(argv[2], "wb");
  if (!out || std::fwrite(llama_get_logits_ith(ctx, -1), sizeof(float), n_vocab, out) != static_cast<size_t>(n_vocab))
    return 1;
  std::fclose(out);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}

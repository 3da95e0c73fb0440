#pragma once
// Writes GGUF version 3 files that other GGUF readers (llama.cpp's gguf-py, ggml) load.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/gguf/gguf.h"

namespace orchard::model::gguf {

class Writer {
 public:
  explicit Writer(uint64_t alignment = kDefaultAlignment);

  // Keys are written in the order first set; setting a key again replaces its value.
  void set(const std::string& key, Value value);
  // `shape` in GGUF order (shape[0] innermost); `bytes` must be exactly the tensor's size for
  // `type` and is copied.
  void add_tensor(const std::string& name, core::TensorType type, std::vector<int64_t> shape,
                  std::vector<uint8_t> bytes);
  // Like add_tensor, but the bytes are made by `produce` while writing, one tensor at a time, so
  // a multi-GB model never sits in memory whole. `produce` must return the tensor's exact size.
  using Producer = std::function<std::vector<uint8_t>()>;
  void add_tensor_lazy(const std::string& name, core::TensorType type, std::vector<int64_t> shape,
                       Producer produce);

  // Writes to `path` atomically (temporary file, then rename). Throws Error on I/O failure.
  void write(const std::string& path) const;
  // The whole file as bytes (tests).
  std::vector<uint8_t> to_bytes() const;

 private:
  struct PendingTensor {
    std::string name;
    core::TensorType type;
    std::vector<int64_t> shape;
    Producer produce;
  };
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace orchard::model::gguf

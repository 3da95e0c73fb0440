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
  // `alignment` must be a power of two that fits a u32; one other than 32 is recorded as the
  // first key, general.alignment.
  explicit Writer(uint64_t alignment = kDefaultAlignment);

  // Keys are written in the order first set; setting a key again replaces its value in place.
  // Setting general.alignment (a u32 power of two) changes the alignment tensors are laid out
  // with. A Value whose data doesn't match its type is refused with InvariantError.
  void set(const std::string& key, Value value);
  // `shape` in GGUF order (shape[0] innermost), 1 to 4 positive dims, shape[0] a whole number
  // of blocks of `type`; `bytes` must be exactly the tensor's size for `type`. Names are unique.
  // Each of these is checked with InvariantError.
  void add_tensor(const std::string& name, core::TensorType type, std::vector<int64_t> shape,
                  std::vector<uint8_t> bytes);
  // Like add_tensor, but the bytes are made by `produce` while writing, one tensor at a time, so
  // a multi-GB model never sits in memory whole. `produce` must return the tensor's exact size.
  using Producer = std::function<std::vector<uint8_t>()>;
  void add_tensor_lazy(const std::string& name, core::TensorType type, std::vector<int64_t> shape,
                       Producer produce);

  // Writes to `path` atomically (a temporary file next to it, then rename): on any failure,
  // including a producer returning the wrong size (Error naming the tensor), `path` is left as
  // it was. Throws Error on I/O failure. Tensors are laid out in the order added, each at the
  // next multiple of the alignment, as ggml does.
  void write(const std::string& path) const;
  // The whole file as bytes (tests).
  std::vector<uint8_t> to_bytes() const;

 private:
  struct PendingTensor {
    std::string name;
    core::TensorType type;
    std::vector<int64_t> shape;
    uint64_t size_bytes;
    std::vector<uint8_t> bytes;  // add_tensor's copy; empty for lazy tensors
    Producer produce;            // lazy tensors only
  };
  // Streams the file to `put`, producing lazy tensors one at a time.
  void serialize(const std::function<void(const uint8_t*, size_t)>& put) const;
  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace orchard::model::gguf

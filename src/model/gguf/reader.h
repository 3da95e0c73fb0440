#pragma once
// Reads a GGUF file (versions 2 and 3, little-endian) by memory-mapping it. Every count, length
// and offset is checked against the file's size before use: a corrupt or truncated file gives a
// FormatError "[gguf] <path>: <what>, expected <...>" naming the key or tensor, never a crash or
// an out-of-bounds read, and no count is trusted for an allocation before the remaining bytes
// could hold that many items (so memory stays proportional to the file's size).
// Checked: magic, version, truncation anywhere, string lengths, counts, value and tensor type
// codes, bool bytes, array nesting (≤ kMaxArrayDepth), duplicate keys and tensor names,
// general.alignment (u32, power of two), 1 to 4 dims each > 0 with no element-count overflow,
// dim 0 a whole number of blocks, offsets aligned, tensor data inside the file, no overlaps.
// Tensor data is not touched until a caller reads it, so a process that uses a few tensors only
// pages in their bytes.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/gguf/gguf.h"

namespace orchard::model::gguf {

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // GGUF order: shape[0] is the innermost (contiguous) dimension
  core::TensorType type = core::TensorType::F32;
  uint64_t offset = 0;         // from the start of the data section; a multiple of the alignment
  uint64_t size_bytes = 0;     // row_bytes(type, shape[0]) * the other dims
  const uint8_t* data = nullptr;  // inside the mapping (or the parsed span): size_bytes readable

  int64_t elements() const;
};

class Reader {
 public:
  // Maps and parses `path`; throws FormatError ("[gguf] <path>: ...") on anything malformed and
  // Error when the file can't be opened.
  static Reader open(const std::string& path);
  // Parses bytes already in memory (tests, fuzzing); `bytes` must outlive the reader.
  static Reader parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;
  ~Reader();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return bytes_.size(); }
  uint64_t data_offset() const { return data_offset_; }
  // The whole file as mapped (header included): for sending parts of it to another machine.
  std::span<const uint8_t> bytes() const { return bytes_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* find(std::string_view key) const;  // nullptr when absent
  const Value& get(std::string_view key) const;   // FormatError "missing key" when absent

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;  // nullptr when absent
  const TensorInfo& tensor(std::string_view name) const;      // FormatError when absent

 private:
  Reader() = default;
  void parse_all();

  std::string path_;
  std::span<const uint8_t> bytes_;
  std::shared_ptr<void> mapping_;  // unmaps on destruction
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace orchard::model::gguf

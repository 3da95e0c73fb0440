#pragma once
// Builds GGUF bytes by hand, field by field, so tests can make files the Writer never would:
// version 2, bad counts, broken tensor infos.
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "model/gguf/gguf.h"

namespace orchard::model::gguf::test {

class Bytes {
 public:
  template <typename T>
  Bytes& put(T value) {
    size_t at = data_.size();
    data_.resize(at + sizeof(T));
    std::memcpy(data_.data() + at, &value, sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& type(ValueType t) { return put(static_cast<uint32_t>(t)); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    data_.insert(data_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& raw(std::string_view s) {
    data_.insert(data_.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    return u32(kMagic).u32(version).u64(tensors).u64(kvs);
  }
  // A tensor info: name, dims, ggml type code, data offset.
  Bytes& tensor(std::string_view name, std::vector<uint64_t> dims, uint32_t type_code, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type_code).u64(offset);
  }
  Bytes& pad_to(size_t alignment) {
    while (data_.size() % alignment) data_.push_back(0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    data_.resize(data_.size() + n, 0);
    return *this;
  }
  size_t size() const { return data_.size(); }
  const std::vector<uint8_t>& data() const { return data_; }

 private:
  std::vector<uint8_t> data_;
};

}  // namespace orchard::model::gguf::test

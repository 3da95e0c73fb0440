#include "model/gguf/writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace orchard::model::gguf {

static_assert(std::endian::native == std::endian::little, "the GGUF writer assumes a little-endian host");

namespace {

// Counts what it passes on, so padding can be computed from the position.
class Sink {
 public:
  explicit Sink(const std::function<void(const uint8_t*, size_t)>& put) : put_(put) {}

  void bytes(const void* data, size_t size) {
    put_(static_cast<const uint8_t*>(data), size);
    written_ += size;
  }
  template <typename T>
  void scalar(T value) {
    bytes(&value, sizeof value);
  }
  void string(std::string_view s) {
    scalar<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static constexpr uint8_t kZeros[256] = {};
    uint64_t pad = (alignment - written_ % alignment) % alignment;
    while (pad > 0) {
      size_t n = std::min<uint64_t>(pad, sizeof kZeros);
      bytes(kZeros, n);
      pad -= n;
    }
  }

 private:
  const std::function<void(const uint8_t*, size_t)>& put_;
  uint64_t written_ = 0;
};

bool fits(const Value& value) {
  auto in_range = [&](auto lo, auto hi) {
    if (const auto* u = std::get_if<uint64_t>(&value.data)) return *u <= static_cast<uint64_t>(hi);
    const auto* i = std::get_if<int64_t>(&value.data);
    return i && *i >= static_cast<int64_t>(lo) && *i <= static_cast<int64_t>(hi);
  };
  switch (value.type) {
    case ValueType::U8: return std::holds_alternative<uint64_t>(value.data) && in_range(0, UINT8_MAX);
    case ValueType::U16: return std::holds_alternative<uint64_t>(value.data) && in_range(0, UINT16_MAX);
    case ValueType::U32: return std::holds_alternative<uint64_t>(value.data) && in_range(0, UINT32_MAX);
    case ValueType::U64: return std::holds_alternative<uint64_t>(value.data);
    case ValueType::I8: return std::holds_alternative<int64_t>(value.data) && in_range(INT8_MIN, INT8_MAX);
    case ValueType::I16: return std::holds_alternative<int64_t>(value.data) && in_range(INT16_MIN, INT16_MAX);
    case ValueType::I32: return std::holds_alternative<int64_t>(value.data) && in_range(INT32_MIN, INT32_MAX);
    case ValueType::I64: return std::holds_alternative<int64_t>(value.data);
    case ValueType::F32: case ValueType::F64: return std::holds_alternative<double>(value.data);
    case ValueType::BOOL: return std::holds_alternative<bool>(value.data);
    case ValueType::STRING: return std::holds_alternative<std::string>(value.data);
    case ValueType::ARRAY: return std::holds_alternative<Array>(value.data);
  }
  return false;
}

// Checks the whole value tree up front so a bad value fails at set(), not halfway through a file.
void check_value(std::string_view key, const Value& value, int depth = 0) {
  ORCHARD_CHECK(fits(value), "gguf key '{}': value does not match or fit its type {}", key, value_type_name(value.type));
  if (const auto* array = std::get_if<Array>(&value.data)) {
    ORCHARD_CHECK(depth < kMaxArrayDepth, "gguf key '{}': arrays nested deeper than {}", key, kMaxArrayDepth);
    for (const Value& item : array->items) {
      ORCHARD_CHECK(item.type == array->element_type, "gguf key '{}': array of {} holds a {}", key,
                    value_type_name(array->element_type), value_type_name(item.type));
      check_value(key, item, depth + 1);
    }
  }
}

void write_value(Sink& sink, const Value& value) {
  switch (value.type) {
    case ValueType::U8: sink.scalar(static_cast<uint8_t>(std::get<uint64_t>(value.data))); break;
    case ValueType::U16: sink.scalar(static_cast<uint16_t>(std::get<uint64_t>(value.data))); break;
    case ValueType::U32: sink.scalar(static_cast<uint32_t>(std::get<uint64_t>(value.data))); break;
    case ValueType::U64: sink.scalar(std::get<uint64_t>(value.data)); break;
    case ValueType::I8: sink.scalar(static_cast<int8_t>(std::get<int64_t>(value.data))); break;
    case ValueType::I16: sink.scalar(static_cast<int16_t>(std::get<int64_t>(value.data))); break;
    case ValueType::I32: sink.scalar(static_cast<int32_t>(std::get<int64_t>(value.data))); break;
    case ValueType::I64: sink.scalar(std::get<int64_t>(value.data)); break;
    case ValueType::F32: sink.scalar(static_cast<float>(std::get<double>(value.data))); break;
    case ValueType::F64: sink.scalar(std::get<double>(value.data)); break;
    case ValueType::BOOL: sink.scalar<uint8_t>(std::get<bool>(value.data) ? 1 : 0); break;
    case ValueType::STRING: sink.string(std::get<std::string>(value.data)); break;
    case ValueType::ARRAY: {
      const Array& array = std::get<Array>(value.data);
      sink.scalar(static_cast<uint32_t>(array.element_type));
      sink.scalar<uint64_t>(array.items.size());
      for (const Value& item : array.items) write_value(sink, item);
      break;
    }
  }
}

uint64_t align_up(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

}  // namespace

Writer::Writer(uint64_t alignment) : alignment_(alignment) {
  ORCHARD_CHECK(std::has_single_bit(alignment) && alignment <= std::numeric_limits<uint32_t>::max(),
                "gguf alignment {} is not a power of two that fits a u32", alignment);
  if (alignment != kDefaultAlignment) set(std::string(kAlignmentKey), Value::u32(static_cast<uint32_t>(alignment)));
}

void Writer::set(const std::string& key, Value value) {
  check_value(key, value);
  if (key == kAlignmentKey) {
    ORCHARD_CHECK(value.type == ValueType::U32 && std::has_single_bit(std::get<uint64_t>(value.data)),
                  "gguf key '{}' must be a u32 power of two", key);
    alignment_ = std::get<uint64_t>(value.data);
  }
  auto it = std::find_if(metadata_.begin(), metadata_.end(), [&](const auto& kv) { return kv.first == key; });
  if (it != metadata_.end()) it->second = std::move(value);
  else metadata_.emplace_back(key, std::move(value));
}

void Writer::add_tensor(const std::string& name, core::TensorType type, std::vector<int64_t> shape,
                        std::vector<uint8_t> bytes) {
  add_tensor_lazy(name, type, std::move(shape), nullptr);
  PendingTensor& tensor = tensors_.back();
  ORCHARD_CHECK(bytes.size() == tensor.size_bytes, "gguf tensor '{}' given {} bytes, expected {}", name, bytes.size(),
                tensor.size_bytes);
  tensor.bytes = std::move(bytes);
}

void Writer::add_tensor_lazy(const std::string& name, core::TensorType type, std::vector<int64_t> shape,
                             Producer produce) {
  ORCHARD_CHECK(!shape.empty() && shape.size() <= kMaxDims, "gguf tensor '{}' has {} dims, expected 1 to {}", name,
                shape.size(), kMaxDims);
  int64_t rows = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    ORCHARD_CHECK(shape[d] > 0, "gguf tensor '{}' dimension {} is {}, expected positive", name, d, shape[d]);
    if (d > 0) ORCHARD_CHECK(!__builtin_mul_overflow(rows, shape[d], &rows), "gguf tensor '{}' is too large", name);
  }
  const core::TypeTraits& traits = core::type_traits(type);
  ORCHARD_CHECK(shape[0] % traits.block_elements == 0, "gguf tensor '{}' of type {}: dim 0 = {} is not a multiple of {}",
                name, traits.name, shape[0], traits.block_elements);
  uint64_t size_bytes = 0;
  ORCHARD_CHECK(!__builtin_mul_overflow(static_cast<uint64_t>(core::row_bytes(type, shape[0])),
                                        static_cast<uint64_t>(rows), &size_bytes),
                "gguf tensor '{}' is too large", name);
  ORCHARD_CHECK(std::none_of(tensors_.begin(), tensors_.end(), [&](const auto& t) { return t.name == name; }),
                "gguf tensor '{}' added twice", name);
  tensors_.push_back({name, type, std::move(shape), size_bytes, {}, std::move(produce)});
}

void Writer::serialize(const std::function<void(const uint8_t*, size_t)>& put) const {
  Sink sink(put);
  sink.scalar(kMagic);
  sink.scalar<uint32_t>(3);
  sink.scalar<uint64_t>(tensors_.size());
  sink.scalar<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    sink.string(key);
    sink.scalar(static_cast<uint32_t>(value.type));
    write_value(sink, value);
  }
  uint64_t offset = 0;
  for (const PendingTensor& tensor : tensors_) {
    sink.string(tensor.name);
    sink.scalar<uint32_t>(static_cast<uint32_t>(tensor.shape.size()));
    for (int64_t dim : tensor.shape) sink.scalar<uint64_t>(static_cast<uint64_t>(dim));
    sink.scalar(static_cast<uint32_t>(tensor.type));
    sink.scalar(offset);
    offset = align_up(offset + tensor.size_bytes, alignment_);
  }
  sink.pad_to(alignment_);
  for (const PendingTensor& tensor : tensors_) {
    if (!tensor.produce) {
      sink.bytes(tensor.bytes.data(), tensor.bytes.size());
    } else {
      std::vector<uint8_t> bytes = tensor.produce();
      if (bytes.size() != tensor.size_bytes)
        throw Error(error_message("gguf", "producer for tensor '{}' returned {} bytes, expected {}", tensor.name,
                                  bytes.size(), tensor.size_bytes));
      sink.bytes(bytes.data(), bytes.size());
    }
    sink.pad_to(alignment_);
  }
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out;
  serialize([&](const uint8_t* data, size_t size) { out.insert(out.end(), data, data + size); });
  return out;
}

void Writer::write(const std::string& path) const {
  // Unique per process and call; O_EXCL refuses to reuse a stale one. Created with 0666 so the
  // umask applies as for any file.
  static std::atomic<uint64_t> counter{0};
  std::string temp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter++);
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) throw Error(error_message("gguf", "{}: cannot create {}: {}", path, temp, std::strerror(errno)));
  try {
    serialize([&](const uint8_t* data, size_t size) {
      while (size > 0) {
        ssize_t n = ::write(fd, data, size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error(error_message("gguf", "{}: write failed: {}", temp, std::strerror(errno)));
        data += n;
        size -= static_cast<size_t>(n);
      }
    });
    // fsync before rename so a crash can't leave a renamed but incomplete file.
    if (::fsync(fd) != 0) throw Error(error_message("gguf", "{}: fsync failed: {}", temp, std::strerror(errno)));
    int closed = ::close(fd);
    fd = -1;
    if (closed != 0) throw Error(error_message("gguf", "{}: close failed: {}", temp, std::strerror(errno)));
    if (std::rename(temp.c_str(), path.c_str()) != 0)
      throw Error(error_message("gguf", "{}: cannot rename {} into place: {}", path, temp, std::strerror(errno)));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
}

}  // namespace orchard::model::gguf

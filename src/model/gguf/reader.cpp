#include "model/gguf/reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>

#include "core/error.h"

namespace orchard::model::gguf {
namespace {

// The format is little-endian and values are copied out with memcpy.
static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

constexpr uint32_t kMaxValueTypeCode = static_cast<uint32_t>(ValueType::F64);
// The smallest encodings, used to refuse counts the remaining bytes can't hold before any memory
// is reserved for them: a kv pair is at least an empty key, a type and a u8; a tensor info at
// least an empty name, n_dims, one dim, a type and an offset; an array at least its type and
// count.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
constexpr uint64_t kMinArrayBytes = 4 + 8;

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// Bytes one item of `type` needs at least on disk.
uint64_t min_encoded_bytes(ValueType type) {
  switch (type) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    case ValueType::STRING: return 8;
    case ValueType::ARRAY: return kMinArrayBytes;
  }
  return 1;
}

// Shows 4 magic bytes both as text (non-printables escaped) and as hex, since a wrong file is
// often recognisable by its magic ("GGML", "PK\x03\x04", "\x7fELF").
std::string describe_magic(std::span<const uint8_t> magic) {
  std::string text, hex;
  for (uint8_t b : magic) {
    if (b >= 0x20 && b < 0x7f) text += static_cast<char>(b);
    else text += fmt::format("\\x{:02x}", b);
    hex += fmt::format("{}{:02x}", hex.empty() ? "" : " ", b);
  }
  return fmt::format("'{}' ({})", text, hex);
}

// A bounds-checked cursor over the file; every read names the item it is reading so that a
// truncation says where it happened. Names are kept as views and only formatted on error, so
// a 150k-entry vocabulary costs no string building.
class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw FormatError(error_message("gguf", "{}: {}", path_, fmt::format(format, std::forward<Args>(args)...)));
  }

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  // What is being read: "the header", "key 'a.b'", "tensor info 'x'"; plus an array element
  // index when inside an array.
  void set_item(std::string_view kind, std::string_view name = {}) {
    item_kind_ = kind;
    item_name_ = name;
    item_number_.reset();
    element_.reset();
  }
  // For an item whose name isn't read yet: "key-value pair #3".
  void set_item(std::string_view kind, uint64_t number) {
    set_item(kind);
    item_number_ = number;
  }
  void set_element(std::optional<uint64_t> element) { element_ = element; }
  std::optional<uint64_t> element() const { return element_; }

  std::string item() const {
    std::string s(item_kind_);
    if (item_number_) s += fmt::format(" #{}", *item_number_);
    else if (!item_name_.empty()) s += fmt::format(" '{}'", item_name_);
    if (element_) s += fmt::format(" (array element {})", *element_);
    return s;
  }

  std::span<const uint8_t> take(uint64_t n, std::string_view field) {
    if (n > remaining())
      fail("truncated in the {} of {} at byte {}, expected {} more bytes but the file ends at byte {}", field, item(),
           pos_, n, bytes_.size());
    auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }

  template <typename T>
  T read(std::string_view field) {
    T value;
    std::memcpy(&value, take(sizeof(T), field).data(), sizeof(T));
    return value;
  }

  std::string_view read_string(std::string_view field) {
    uint64_t length = read<uint64_t>(field);
    if (length > remaining())
      fail("string length {} in the {} of {} at byte {} runs past the end of the file, expected at most {} bytes",
           length, field, item(), pos_ - 8, remaining());
    auto bytes = take(length, field);
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }

  // Refuses a count of items that can't fit in what is left of the file, before anything is
  // reserved for them.
  void check_count(uint64_t count, uint64_t min_item_bytes, std::string_view what) const {
    if (count > remaining() / min_item_bytes)
      fail("absurd {} {} in {}: only {} bytes remain, expected at most {} items of at least {} bytes each", what, count,
           item(), remaining(), remaining() / min_item_bytes, min_item_bytes);
  }

 private:
  std::span<const uint8_t> bytes_;
  const std::string& path_;
  uint64_t pos_ = 0;
  std::string_view item_kind_ = "the header";
  std::string_view item_name_;
  std::optional<uint64_t> item_number_;
  std::optional<uint64_t> element_;
};

ValueType read_value_type(Parser& p, std::string_view field) {
  uint32_t code = p.read<uint32_t>(field);
  if (code > kMaxValueTypeCode) p.fail("unknown value type {} in the {} of {}, expected 0..{}", code, field, p.item(), kMaxValueTypeCode);
  return static_cast<ValueType>(code);
}

Value read_value(Parser& p, ValueType type, int depth) {
  switch (type) {
    case ValueType::U8: return {type, uint64_t{p.read<uint8_t>("value")}};
    case ValueType::I8: return {type, int64_t{p.read<int8_t>("value")}};
    case ValueType::U16: return {type, uint64_t{p.read<uint16_t>("value")}};
    case ValueType::I16: return {type, int64_t{p.read<int16_t>("value")}};
    case ValueType::U32: return {type, uint64_t{p.read<uint32_t>("value")}};
    case ValueType::I32: return {type, int64_t{p.read<int32_t>("value")}};
    case ValueType::U64: return {type, p.read<uint64_t>("value")};
    case ValueType::I64: return {type, p.read<int64_t>("value")};
    case ValueType::F32: return {type, double{p.read<float>("value")}};
    case ValueType::F64: return {type, p.read<double>("value")};
    case ValueType::BOOL: {
      uint8_t byte = p.read<uint8_t>("value");
      if (byte > 1) p.fail("invalid bool byte 0x{:02x} in {} at byte {}, expected 0 or 1", byte, p.item(), p.pos() - 1);
      return {type, byte == 1};
    }
    case ValueType::STRING: return {type, std::string(p.read_string("value"))};
    case ValueType::ARRAY: {
      // Each level costs only 12 bytes on disk, so without a limit a small file could nest deep
      // enough to overflow the stack.
      if (depth >= kMaxArrayDepth)
        p.fail("arrays nested deeper than {} levels in {}, expected at most {}", kMaxArrayDepth, p.item(), kMaxArrayDepth);
      Array array;
      array.element_type = read_value_type(p, "array element type");
      uint64_t count = p.read<uint64_t>("array length");
      p.check_count(count, min_encoded_bytes(array.element_type), "array length");
      array.items.reserve(count);
      std::optional<uint64_t> outer = p.element();
      for (uint64_t i = 0; i < count; ++i) {
        p.set_element(i);
        array.items.push_back(read_value(p, array.element_type, depth + 1));
      }
      p.set_element(outer);
      return {type, std::move(array)};
    }
  }
  p.fail("unknown value type {} in {}", static_cast<uint32_t>(type), p.item());
}

// Wraps a file descriptor so every exit path closes it.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

int64_t TensorInfo::elements() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;
Reader::~Reader() = default;

Reader Reader::open(const std::string& path) {
  Fd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) throw Error(error_message("gguf", "{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) throw Error(error_message("gguf", "{}: cannot stat: {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(error_message("gguf", "{}: not a regular file", path));

  Reader reader;
  reader.path_ = path;
  auto size = static_cast<size_t>(st.st_size);
  // mmap refuses a zero length; an empty file then fails parsing as truncated like any other.
  if (size > 0) {
    void* base = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (base == MAP_FAILED) throw Error(error_message("gguf", "{}: cannot mmap {} bytes: {}", path, size, std::strerror(errno)));
    reader.mapping_ = std::shared_ptr<void>(base, [size](void* p) { ::munmap(p, size); });
    reader.bytes_ = {static_cast<const uint8_t*>(base), size};
  }
  reader.parse_all();
  return reader;
}

Reader Reader::parse(std::span<const uint8_t> bytes, std::string name) {
  Reader reader;
  reader.path_ = std::move(name);
  reader.bytes_ = bytes;
  reader.parse_all();
  return reader;
}

const Value* Reader::find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const Value& Reader::get(std::string_view key) const {
  if (const Value* value = find(key)) return *value;
  throw FormatError(error_message("gguf", "{}: missing key '{}', expected it in the metadata", path_, key));
}

const TensorInfo* Reader::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& Reader::tensor(std::string_view name) const {
  if (const TensorInfo* info = find_tensor(name)) return *info;
  throw FormatError(error_message("gguf", "{}: missing tensor '{}', expected it among the {} tensors", path_, name,
                                  tensors_.size()));
}

void Reader::parse_all() {
  Parser p(bytes_, path_);

  // Header.
  p.set_item("the header");
  auto magic = p.take(4, "magic");
  uint32_t magic_value;
  std::memcpy(&magic_value, magic.data(), 4);
  if (magic_value != kMagic) p.fail("bad magic {}, expected 'GGUF'", describe_magic(magic));
  version_ = p.read<uint32_t>("version");
  if (version_ == 1) p.fail("unsupported version 1 (GGUF v1 used 32-bit counts), expected version 2 or 3");
  if (version_ == 0x02000000 || version_ == 0x03000000)
    p.fail("unsupported big-endian GGUF (version field reads {:#x}), expected a little-endian version 2 or 3", version_);
  if (version_ != 2 && version_ != 3) p.fail("unsupported version {}, expected version 2 or 3", version_);
  uint64_t tensor_count = p.read<uint64_t>("tensor count");
  uint64_t kv_count = p.read<uint64_t>("metadata kv count");
  p.check_count(kv_count, kMinKvBytes, "metadata kv count");
  p.check_count(tensor_count, kMinTensorInfoBytes, "tensor count");

  // Metadata.
  metadata_.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    p.set_item("key-value pair", i);
    std::string_view key = p.read_string("key");
    p.set_item("key", key);
    if (metadata_index_.contains(key)) p.fail("duplicate key '{}', expected each key once", key);
    ValueType type = read_value_type(p, "value type");
    Value value = read_value(p, type, 0);
    metadata_index_.emplace(std::string(key), metadata_.size());
    metadata_.emplace_back(std::string(key), std::move(value));
  }

  if (const Value* alignment = find(kAlignmentKey)) {
    if (alignment->type != ValueType::U32)
      p.fail("key '{}' has type {}, expected u32", kAlignmentKey, value_type_name(alignment->type));
    alignment_ = std::get<uint64_t>(alignment->data);
    if (!std::has_single_bit(alignment_))
      p.fail("bad alignment {} in key '{}', expected a power of two", alignment_, kAlignmentKey);
  }

  // Tensor infos. The count is checked again now that the metadata's bytes are known.
  p.set_item("the tensor infos");
  p.check_count(tensor_count, kMinTensorInfoBytes, "tensor count");
  tensors_.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    p.set_item("tensor info", i);
    TensorInfo info;
    info.name = p.read_string("name");
    p.set_item("tensor", info.name);
    if (tensor_index_.contains(info.name)) p.fail("duplicate tensor name '{}', expected each name once", info.name);
    uint32_t n_dims = p.read<uint32_t>("dimension count");
    if (n_dims == 0 || n_dims > kMaxDims)
      p.fail("tensor '{}' has {} dimensions, expected 1 to {}", info.name, n_dims, kMaxDims);
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = p.read<uint64_t>("dimensions");
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        p.fail("tensor '{}' has dimension {} = {}, expected a positive size", info.name, d, static_cast<int64_t>(dim));
      if (__builtin_mul_overflow(elements, static_cast<int64_t>(dim), &elements))
        p.fail("tensor '{}' element count overflows at dimension {}, expected fewer than 2^63 elements", info.name, d);
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    uint32_t code = p.read<uint32_t>("type");
    auto type = core::tensor_type_from_code(code);
    if (!type)
      p.fail("tensor '{}' has unknown or unsupported type code {}, expected one of {}", info.name, code,
             core::supported_types_list());
    info.type = *type;
    const core::TypeTraits& traits = core::type_traits(info.type);
    if (info.shape[0] % traits.block_elements != 0)
      p.fail("tensor '{}' of type {} has {} elements in dimension 0, expected a multiple of the block size {}", info.name,
             traits.name, info.shape[0], traits.block_elements);
    uint64_t row = core::row_bytes(info.type, info.shape[0]);
    if (__builtin_mul_overflow(row, static_cast<uint64_t>(elements / info.shape[0]), &info.size_bytes))
      p.fail("tensor '{}' byte size overflows, expected fewer than 2^64 bytes", info.name);
    info.offset = p.read<uint64_t>("offset");
    if (info.offset % alignment_ != 0)
      p.fail("tensor '{}' data offset {} is misaligned, expected a multiple of the alignment {}", info.name, info.offset,
             alignment_);
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
  }

  // Data section: starts at the next multiple of the alignment (alignment ≤ 2^31, so no overflow).
  p.set_item("the data section");
  data_offset_ = (p.pos() + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t size = bytes_.size();
  if (!tensors_.empty() && data_offset_ > size)
    p.fail("truncated before the data section, expected it to start at byte {} but the file has {} bytes", data_offset_,
           size);
  for (TensorInfo& info : tensors_) {
    uint64_t available = data_offset_ <= size ? size - data_offset_ : 0;
    if (info.offset > available || info.size_bytes > available - info.offset) {
      // Computed in long double terms only for the message: offset + size may exceed 2^64.
      long double end = static_cast<long double>(data_offset_) + info.offset + info.size_bytes;
      p.fail("tensor '{}' data ends at byte {:.0f} ({:.2f} MiB) past the end of the file, expected at most {} bytes "
             "({:.2f} MiB)",
             info.name, end, end / (1024.0L * 1024.0L), size, mib(size));
    }
    info.data = bytes_.data() + data_offset_ + info.offset;
  }

  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const TensorInfo& info : tensors_) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    const TensorInfo& cur = *by_offset[i];
    if (prev.offset + prev.size_bytes > cur.offset)
      p.fail("tensors '{}' (data bytes {}..{}) and '{}' (from data byte {}) overlap, expected disjoint ranges", prev.name,
             prev.offset, prev.offset + prev.size_bytes, cur.name, cur.offset);
  }
}

}  // namespace orchard::model::gguf

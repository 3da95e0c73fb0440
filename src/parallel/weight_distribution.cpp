#include "parallel/weight_distribution.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/gguf/reader.h"
#include "model/weights.h"

namespace orchard::parallel {
namespace {

enum : uint32_t { kTagHeaderSize = 20, kTagHeader = 21, kTagRanges = 22, kTagBytes = 23, kTagDigest = 24 };
constexpr size_t kChunk = size_t{4} << 20;  // bytes per message: progress and memory stay smooth
constexpr int kDigestSamples = 64;
constexpr uint64_t kDigestSampleBytes = 64 << 10;
constexpr size_t kDigestHexChars = 32;

bool usable(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

void write_all(int fd, const uint8_t* data, size_t size, uint64_t offset, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n <= 0) throw Error(error_message("weights", "cannot write {}: {}", path, std::strerror(errno)));
    data += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
}

void serve_rank(comm::Group& group, int peer, const model::gguf::Reader& file, const std::string& digest) {
  const uint64_t sizes[2] = {file.file_size(), file.data_offset()};
  group.send(sizes, sizeof sizes, peer, kTagHeaderSize);
  group.send(digest.data(), kDigestHexChars, peer, kTagDigest);
  group.send(file.bytes().data(), file.data_offset(), peer, kTagHeader);
  uint64_t count = 0;
  group.recv(&count, sizeof count, peer, kTagRanges);
  std::vector<model::ByteRange> ranges(count);
  group.recv(ranges.data(), sizeof(model::ByteRange) * count, peer, kTagRanges);
  const uint8_t* base = file.bytes().data();
  // The ranges' bytes end to end, in messages of kChunk (the last one shorter): a tensor
  // split's column slices are a few hundred bytes per row, too small to be a message each.
  std::vector<uint8_t> chunk;
  chunk.reserve(kChunk);
  for (const auto& r : ranges) {
    if (r.offset > file.file_size() || r.size > file.file_size() - r.offset)
      throw Error(error_message("weights", "rank {} asked for bytes past the end of {}", peer, file.path()));
    for (uint64_t done = 0; done < r.size;) {
      const size_t n = std::min<uint64_t>(kChunk - chunk.size(), r.size - done);
      chunk.insert(chunk.end(), base + r.offset + done, base + r.offset + done + n);
      done += n;
      if (chunk.size() == kChunk) {
        group.send(chunk.data(), chunk.size(), peer, kTagBytes);
        chunk.clear();
      }
    }
  }
  if (!chunk.empty()) group.send(chunk.data(), chunk.size(), peer, kTagBytes);
}

// The ranges a cached copy holds, merged: sorted, touching ones joined.
std::vector<model::ByteRange> cached_ranges(const std::string& record) {
  std::vector<model::ByteRange> ranges;
  std::ifstream in(record);
  for (model::ByteRange r; in >> r.offset >> r.size;) ranges.push_back(r);
  std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::vector<model::ByteRange> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.offset <= merged.back().offset + merged.back().size)
      merged.back().size = std::max(merged.back().size, r.offset + r.size - merged.back().offset);
    else
      merged.push_back(r);
  }
  return merged;
}

bool covered(const std::vector<model::ByteRange>& merged, const model::ByteRange& r) {
  auto it = std::upper_bound(merged.begin(), merged.end(), r.offset, [](uint64_t o, const auto& m) { return o < m.offset; });
  if (it == merged.begin()) return r.size == 0;
  --it;
  return r.offset + r.size <= it->offset + it->size;
}

std::string receive_shard(comm::Group& group, const std::string& path, const Layout& layout,
                          const std::string& cache_dir, const std::function<void(size_t, size_t)>& on_progress,
                          const std::function<void(const std::string&)>& on_note) {
  uint64_t sizes[2] = {};
  group.recv(sizes, sizeof sizes, 0, kTagHeaderSize);
  std::string digest(kDigestHexChars, '\0');
  group.recv(digest.data(), digest.size(), 0, kTagDigest);
  if (digest.find_first_not_of("0123456789abcdef") != std::string::npos)
    throw FormatError(error_message("weights", "rank 0 sent a model digest that is not hex: '{}'", digest));
  std::vector<uint8_t> header(sizes[1]);
  group.recv(header.data(), header.size(), 0, kTagHeader);

  const std::filesystem::path folder = std::filesystem::path(cache_dir) / digest;
  std::filesystem::create_directories(folder);
  const std::string local = (folder / "model.gguf").string(), record = (folder / "ranges").string();
  // No O_TRUNC: ranks of one machine may share the cache and write the same bytes at once.
  const int fd = ::open(local.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) throw Error(error_message("weights", "cannot create {}: {}", local, std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  ::fstat(fd, &st);
  if (static_cast<uint64_t>(st.st_size) != sizes[0]) {
    // A new entry, or one whose file was replaced: what the record says is not in it.
    std::ofstream(record, std::ios::trunc);
    if (::ftruncate(fd, static_cast<off_t>(sizes[0])) != 0)
      throw Error(error_message("weights", "cannot size {} to {} bytes: {}", local, sizes[0], std::strerror(errno)));
  }
  write_all(fd, header.data(), header.size(), 0, local);

  // The header says what the model is, so this rank can tell which bytes its shard needs.
  auto sparse = model::gguf::Reader::open(local);
  const auto config = model::ModelConfig::from_gguf(sparse);
  layout.validate(config, group.size());  // before its shard is computed from it (expert statistics' shape)
  const auto needed = model::shard_byte_ranges(sparse, config, shard_for_rank(config, layout, group.rank()));
  const auto have = cached_ranges(record);
  std::vector<model::ByteRange> ranges;
  for (const auto& r : needed)
    if (!covered(have, r)) ranges.push_back(r);
  const uint64_t count = ranges.size();
  group.send(&count, sizeof count, 0, kTagRanges);
  group.send(ranges.data(), sizeof(model::ByteRange) * count, 0, kTagRanges);
  size_t total = 0, done = 0, shard = 0;
  for (const auto& r : ranges) total += r.size;
  for (const auto& r : needed) shard += r.size;
  // Rank 0 sends the ranges' bytes end to end in messages of kChunk (serve_rank).
  std::vector<uint8_t> chunk(kChunk);
  size_t held = 0, used = 0;  // bytes of the current message received, and written out
  for (const auto& r : ranges) {
    for (uint64_t at = 0; at < r.size;) {
      if (used == held) {
        held = std::min<size_t>(kChunk, total - done);
        used = 0;
        group.recv(chunk.data(), held, 0, kTagBytes);
      }
      const size_t n = std::min<uint64_t>(held - used, r.size - at);
      write_all(fd, chunk.data() + used, n, r.offset + at, local);
      used += n;
      at += n;
      done += n;
      if (on_progress && used == held) on_progress(done, total);
    }
  }
  if (!ranges.empty()) {
    // Recorded once written: a rank stopped mid-transfer leaves bytes the record does not claim.
    // One short append per range, which ranks sharing the cache may make at once.
    std::string lines;
    for (const auto& r : ranges) lines += std::to_string(r.offset) + " " + std::to_string(r.size) + "\n";
    const int out = ::open(record.c_str(), O_CREAT | O_WRONLY | O_APPEND, 0600);
    if (out < 0 || ::write(out, lines.data(), lines.size()) != static_cast<ssize_t>(lines.size()))
      throw Error(error_message("weights", "cannot record the received ranges in {}: {}", record, std::strerror(errno)));
    ::close(out);
  }
  if (on_note) {
    const std::string name = std::filesystem::path(path).filename().string();
    on_note(total == 0 ? fmt::format("[weights] rank {}: its shard of {} ({} bytes) is in the cache {}: nothing to receive",
                                     group.rank(), name, shard, folder.string())
                       : fmt::format("[weights] rank {}: received {} of its shard's {} bytes of {} into the cache {}",
                                     group.rank(), total, shard, name, folder.string()));
  }
  return local;
}

}  // namespace

std::string model_digest(const uint8_t* file, uint64_t file_size, uint64_t data_offset) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ORCHARD_CHECK(ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1, "no SHA-256 context");
  EVP_DigestUpdate(ctx, &file_size, sizeof file_size);
  EVP_DigestUpdate(ctx, file, data_offset);
  const uint64_t data = file_size - data_offset;
  const uint64_t block = std::min(kDigestSampleBytes, data);
  for (int i = 0; i < kDigestSamples && block > 0; ++i) {
    // Evenly spread, the first at the data's start and the last ending at the file's end.
    const uint64_t at = data_offset + (data - block) * static_cast<uint64_t>(i) / (kDigestSamples - 1);
    EVP_DigestUpdate(ctx, file + at, block);
  }
  unsigned char hash[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx, hash, &length);
  EVP_MD_CTX_free(ctx);
  std::string hex;
  for (size_t i = 0; i < kDigestHexChars / 2; ++i) hex += fmt::format("{:02x}", hash[i]);
  return hex;
}

std::string ensure_model_file(comm::Group& group, const std::string& path, const Layout& layout,
                              const std::string& cache_dir, const std::function<void(size_t, size_t)>& on_progress,
                              const std::function<void(const std::string&)>& on_note) {
  std::vector<uint8_t> has(static_cast<size_t>(group.size()));
  const uint8_t mine = usable(path) ? 1 : 0;
  group.all_gather(&mine, has.data(), 1);
  if (!has[0]) throw Error(error_message("weights", "rank 0 has no model file at {}: it must hold the model", path));
  if (group.rank() == 0) {
    bool anyone_needs = false;
    for (uint8_t h : has) anyone_needs |= h == 0;
    if (!anyone_needs) return path;
    auto file = model::gguf::Reader::open(path);
    const std::string digest = model_digest(file.bytes().data(), file.file_size(), file.data_offset());
    for (int r = 1; r < group.size(); ++r)
      if (!has[static_cast<size_t>(r)]) serve_rank(group, r, file, digest);
    return path;
  }
  if (mine) return path;
  return receive_shard(group, path, layout, cache_dir, on_progress, on_note);
}

}  // namespace orchard::parallel

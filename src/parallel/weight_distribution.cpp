#include "parallel/weight_distribution.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/gguf/reader.h"
#include "model/weights.h"

namespace orchard::parallel {
namespace {

enum : uint32_t { kTagHeaderSize = 20, kTagHeader = 21, kTagRanges = 22, kTagBytes = 23 };
constexpr size_t kChunk = size_t{4} << 20;  // bytes per message: progress and memory stay smooth

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

void serve_rank(comm::Group& group, int peer, const model::gguf::Reader& file) {
  const uint64_t sizes[2] = {file.file_size(), file.data_offset()};
  group.send(sizes, sizeof sizes, peer, kTagHeaderSize);
  group.send(file.bytes().data(), file.data_offset(), peer, kTagHeader);
  uint64_t count = 0;
  group.recv(&count, sizeof count, peer, kTagRanges);
  std::vector<model::ByteRange> ranges(count);
  group.recv(ranges.data(), sizeof(model::ByteRange) * count, peer, kTagRanges);
  const uint8_t* base = file.bytes().data();
  for (const auto& r : ranges) {
    if (r.offset + r.size > file.file_size())
      throw Error(error_message("weights", "rank {} asked for bytes past the end of {}", peer, file.path()));
    for (uint64_t done = 0; done < r.size; done += kChunk)
      group.send(base + r.offset + done, std::min<uint64_t>(kChunk, r.size - done), peer, kTagBytes);
  }
}

std::string receive_shard(comm::Group& group, const std::string& path, const Layout& layout,
                          const std::string& cache_dir, const std::function<void(size_t, size_t)>& on_progress) {
  uint64_t sizes[2] = {};
  group.recv(sizes, sizeof sizes, 0, kTagHeaderSize);
  std::vector<uint8_t> header(sizes[1]);
  group.recv(header.data(), header.size(), 0, kTagHeader);

  std::filesystem::create_directories(cache_dir);
  const std::string local = (std::filesystem::path(cache_dir) /
                             ("rank" + std::to_string(group.rank()) + "-" + std::filesystem::path(path).filename().string()))
                                .string();
  const int fd = ::open(local.c_str(), O_CREAT | O_TRUNC | O_RDWR, 0600);
  if (fd < 0) throw Error(error_message("weights", "cannot create {}: {}", local, std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::ftruncate(fd, static_cast<off_t>(sizes[0])) != 0)
    throw Error(error_message("weights", "cannot size {} to {} bytes: {}", local, sizes[0], std::strerror(errno)));
  write_all(fd, header.data(), header.size(), 0, local);

  // The header says what the model is, so this rank can tell which bytes its shard needs.
  auto sparse = model::gguf::Reader::open(local);
  const auto config = model::ModelConfig::from_gguf(sparse);
  layout.validate(config, group.size());  // before its shard is computed from it (expert statistics' shape)
  const auto ranges = model::shard_byte_ranges(sparse, config, shard_for_rank(config, layout, group.rank()));
  const uint64_t count = ranges.size();
  group.send(&count, sizeof count, 0, kTagRanges);
  group.send(ranges.data(), sizeof(model::ByteRange) * count, 0, kTagRanges);
  size_t total = 0, done = 0;
  for (const auto& r : ranges) total += r.size;
  std::vector<uint8_t> chunk(kChunk);
  for (const auto& r : ranges) {
    for (uint64_t at = 0; at < r.size; at += kChunk) {
      const size_t n = std::min<uint64_t>(kChunk, r.size - at);
      group.recv(chunk.data(), n, 0, kTagBytes);
      write_all(fd, chunk.data(), n, r.offset + at, local);
      done += n;
      if (on_progress) on_progress(done, total);
    }
  }
  return local;
}

}  // namespace

std::string ensure_model_file(comm::Group& group, const std::string& path, const Layout& layout,
                              const std::string& cache_dir, const std::function<void(size_t, size_t)>& on_progress) {
  std::vector<uint8_t> has(static_cast<size_t>(group.size()));
  const uint8_t mine = usable(path) ? 1 : 0;
  group.all_gather(&mine, has.data(), 1);
  if (!has[0]) throw Error(error_message("weights", "rank 0 has no model file at {}: it must hold the model", path));
  if (group.rank() == 0) {
    bool anyone_needs = false;
    for (uint8_t h : has) anyone_needs |= h == 0;
    if (!anyone_needs) return path;
    auto file = model::gguf::Reader::open(path);
    for (int r = 1; r < group.size(); ++r)
      if (!has[static_cast<size_t>(r)]) serve_rank(group, r, file);
    return path;
  }
  if (mine) return path;
  return receive_shard(group, path, layout, cache_dir, on_progress);
}

}  // namespace orchard::parallel
